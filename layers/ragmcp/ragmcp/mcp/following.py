"""A long tool's job followed to its end while the client watches: MCP progress notifications
(notifications/progress) for calls that carry a progressToken."""

from __future__ import annotations

from collections.abc import Callable

import anyio

from ragmcp.domain.errors import NotFound
from ragmcp.domain.models import Job
from ragmcp.mcp.caller import Reporter
from ragmcp.ports import JobStore

FINISHED = ("succeeded", "failed")
STEPS = {"queued": 0.0, "running": 1.0, "succeeded": 2.0, "failed": 2.0}


async def follow(
    jobs: JobStore,
    tenant: str,
    job_id: str,
    report: Reporter,
    measure: Callable[[Job], tuple[float, float | None, str]] | None = None,
    every: float = 0.25,
) -> Job:
    """Wait for a submitted job to end, reporting each advance: `measure` says how far a job is
    (done, total, message); by default its state: queued 0, running 1, finished 2 of 2. Progress
    only ever grows, as MCP asks, so a value no larger than the last is not sent again."""
    last = -1.0
    while True:
        job = await anyio.to_thread.run_sync(jobs.get, tenant, job_id)
        if job is None:
            raise NotFound(f"job {job_id} not found")
        done, total, message = measure(job) if measure else (STEPS[job.status], 2.0, job.status)
        if job.status in FINISHED and total is not None:
            done = total
        if done > last:
            await report(done, total, message)
            last = done
        if job.status in FINISHED:
            return job
        await anyio.sleep(every)

"""Running a job's work and recording what happened, for every task queue."""

from __future__ import annotations

import logging
from collections.abc import Callable

from ragmcp.domain.errors import RagError
from ragmcp.domain.models import Job, utcnow
from ragmcp.ports import JobStore

log = logging.getLogger(__name__)

Work = Callable[[], dict[str, int]]


def run_job(jobs: JobStore, job: Job, work: Work) -> Job:
    """queued -> running -> succeeded (with the work's counts) or failed (with a one-line reason)."""
    job.status = "running"
    job.updated_at = utcnow()
    jobs.put(job)
    try:
        job.counts = work()
        job.status, job.error = "succeeded", None
    except RagError as exc:
        job.status, job.error = "failed", exc.message
    except Exception as exc:  # a failed job must not stop the worker
        log.exception("job %s failed", job.job_id)
        job.status, job.error = "failed", f"internal error: {type(exc).__name__}"
    job.updated_at = utcnow()
    jobs.put(job)
    return job

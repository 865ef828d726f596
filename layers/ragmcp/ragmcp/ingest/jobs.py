"""Running a job's work and recording what happened, for every task queue."""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path

from ragmcp.domain.errors import RagError
from ragmcp.domain.models import Job, utcnow
from ragmcp.ports import JobStore

log = logging.getLogger(__name__)

Work = Callable[[], dict[str, int]]

SQLITE_FULL = 13


def out_of_space(exc: BaseException | None) -> bool:
    """Whether the error, or one it came from, is a full disk (or quota): a condition that passes,
    after which the same work succeeds; the work waits and is tried again, never failed for it."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if getattr(exc, "sqlite_errorcode", None) == SQLITE_FULL or "database or disk is full" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


ROOM_BYTES = 1 << 20
"""Less free space than this on a disk, and an error opening a database on it is taken for the full
disk it most likely is (SQLite says "disk I/O error" when it cannot make its -shm file)."""


def no_room(folder: Path) -> bool:
    """Whether the disk holding `folder` is full (or its free space unknown: False)."""
    try:
        disk = os.statvfs(folder)
    except OSError:
        return False
    return disk.f_bavail * disk.f_frsize < ROOM_BYTES


def run_job(jobs: JobStore, job: Job, work: Work) -> Job:
    """queued -> running -> succeeded (with the work's counts) or failed (with a one-line reason).
    A full disk is raised, not recorded as a failure: the queue runs the job again once there is room."""
    job.status = "running"
    job.updated_at = utcnow()
    jobs.put(job)
    try:
        job.counts = work()
        job.status, job.error = "succeeded", None
    except RagError as exc:
        job.status, job.error = "failed", exc.message
    except Exception as exc:  # a failed job must not stop the worker
        if out_of_space(exc):
            raise
        log.exception("job %s failed", job.job_id)
        job.status, job.error = "failed", f"internal error: {type(exc).__name__}"
    job.updated_at = utcnow()
    jobs.put(job)
    return job

"""Background jobs in process: one worker thread, jobs run in the order they were queued."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from ragmcp.domain.errors import RagError
from ragmcp.domain.models import Job, utcnow
from ragmcp.ports import JobStore

log = logging.getLogger(__name__)


class ThreadTaskQueue:
    def __init__(self, jobs: JobStore):
        self.jobs = jobs
        self._queue: queue.Queue[tuple[Job, Callable[[], dict[str, int]]]] = queue.Queue()
        self._worker = threading.Thread(target=self._run, name="task-queue", daemon=True)
        self._worker.start()

    def submit(self, job: Job, work: Callable[[], dict[str, int]]) -> Job:
        job.status = "queued"
        self.jobs.put(job)
        self._queue.put((job, work))
        return job

    def depth(self) -> int:
        return self._queue.qsize()

    def join(self) -> None:
        """Wait until every queued job has run (for the CLI and tests)."""
        self._queue.join()

    def _run(self) -> None:
        while True:
            job, work = self._queue.get()
            try:
                self._execute(job, work)
            finally:
                self._queue.task_done()

    def _execute(self, job: Job, work: Callable[[], dict[str, int]]) -> None:
        job.status = "running"
        job.updated_at = utcnow()
        self.jobs.put(job)
        try:
            job.counts = work()
            job.status = "succeeded"
        except RagError as exc:
            job.status, job.error = "failed", exc.message
        except Exception as exc:  # a failed job must not stop the worker
            log.exception("job %s failed", job.job_id)
            job.status, job.error = "failed", f"internal error: {type(exc).__name__}"
        job.updated_at = utcnow()
        self.jobs.put(job)

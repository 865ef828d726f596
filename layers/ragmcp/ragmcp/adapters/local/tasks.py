"""Background jobs in process: one worker thread, jobs run in the order they were queued."""

from __future__ import annotations

import queue
import threading

from ragmcp.domain.models import Job
from ragmcp.ingest.jobs import Work, run_job
from ragmcp.ports import JobStore


class ThreadTaskQueue:
    def __init__(self, jobs: JobStore):
        self.jobs = jobs
        self._queue: queue.Queue[tuple[Job, Work]] = queue.Queue()
        self._worker = threading.Thread(target=self._run, name="task-queue", daemon=True)
        self._worker.start()

    def submit(self, job: Job, work: Work) -> Job:
        job.status = "queued"
        self.jobs.put(job)
        self._queue.put((job, work))
        return job

    def depth(self) -> int:
        return self._queue.qsize()

    def problem(self) -> str | None:
        """None while the worker thread runs (/healthz asks)."""
        return None if self._worker.is_alive() else "task-queue stopped"

    def join(self) -> None:
        """Wait until every queued job has run (for the CLI and tests)."""
        self._queue.join()

    def _run(self) -> None:
        while True:
            job, work = self._queue.get()
            try:
                run_job(self.jobs, job, work)
            finally:
                self._queue.task_done()

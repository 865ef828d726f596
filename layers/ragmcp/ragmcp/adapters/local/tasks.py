"""Background jobs in process: one worker thread, jobs run in the order they were queued.

The thread starts with the first job: services built for a one-shot command (`doctor`, `keys`,
`audit verify`) or a look in a test start none, so nothing keeps them (and their database
connections) alive once they are dropped.

A job that meets a full disk waits and is run again (every few seconds, in order: the jobs
behind it wait too) until there is room; any other error that escapes a job is logged, and the
worker goes on with the next one."""

from __future__ import annotations

import logging
import queue
import threading

from ragmcp.domain.models import Job
from ragmcp.ingest.jobs import Work, out_of_space, run_job
from ragmcp.ports import JobStore

log = logging.getLogger(__name__)

FULL_DISK_RETRY_SECONDS = (1.0, 10.0)
"""A job that met a full disk is tried again after the first delay, doubling up to the second."""


class ThreadTaskQueue:
    def __init__(self, jobs: JobStore):
        self.jobs = jobs
        self._queue: queue.Queue[tuple[Job, Work]] = queue.Queue()
        self._waiting: str | None = None
        """Why the worker is waiting to run a job again (a full disk), or None."""
        self._worker = threading.Thread(target=self._run, name="task-queue", daemon=True)
        self._starting = threading.Lock()

    def submit(self, job: Job, work: Work) -> Job:
        job.status = "queued"
        self.jobs.put(job)
        self._queue.put((job, work))
        with self._starting:
            if self._worker.ident is None:
                self._worker.start()
        return job

    def depth(self) -> int:
        return self._queue.qsize()

    def problem(self) -> str | None:
        """None while the worker thread runs and is not held up (/healthz asks)."""
        if self._worker.ident is not None and not self._worker.is_alive():
            return "task-queue stopped"
        return self._waiting

    def join(self) -> None:
        """Wait until every queued job has run (for the CLI and tests)."""
        self._queue.join()

    def _run(self) -> None:
        while True:
            job, work = self._queue.get()
            try:
                self._run_until_recorded(job, work)
            finally:
                self._queue.task_done()

    def _run_until_recorded(self, job: Job, work: Work) -> None:
        delay, longest = FULL_DISK_RETRY_SECONDS
        while True:
            try:
                run_job(self.jobs, job, work)
                self._waiting = None
                return
            except Exception as exc:
                if not out_of_space(exc):
                    log.exception("job %s could not be run or recorded", job.job_id)
                    self._waiting = None
                    return
                self._waiting = f"task-queue waiting: the disk is full (job {job.job_id} is tried again)"
                log.warning("job %s: the disk is full; trying again in %.0f s", job.job_id, delay)
                threading.Event().wait(delay)
                delay = min(delay * 2, longest)

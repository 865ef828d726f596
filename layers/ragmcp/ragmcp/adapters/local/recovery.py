"""Crash recovery for the embedded server: jobs a dead process left `running` or `queued`.

Every process that runs jobs on a data directory (`ragmcp serve`, `ragmcp ingest`, `ragmcp
stdio`) holds a shared lock on `<data_dir>/ragmcp.lock` for its whole life. At start it first
tries the lock exclusively: if that succeeds no other process is alive, so any unfinished job
belongs to a dead one, and its file is ingested (or removed) again. The job records are the redo
list: a job becomes `interrupted` only once its file has been redone, so a process killed during
recovery leaves the same jobs for the next start. While another process runs, nothing is touched:
its jobs may be live.

Each job records the process that took it (SqliteJobStore's owner). The writer of `ragmcp serve
--workers N` redoes the unfinished jobs of a reader that died as soon as it sees the death
(`recover_dead_process`), without waiting for a restart.
"""

from __future__ import annotations

import fcntl
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from ragmcp.adapters.local.background import BackgroundWorker
from ragmcp.adapters.local.sqlite_stores import SqliteJobStore
from ragmcp.domain.models import Job, utcnow
from ragmcp.ingest.pipeline import IngestService
from ragmcp.ports import SourceStore

log = logging.getLogger(__name__)

LOCK_FILE = "ragmcp.lock"
WRITER_LOCK_FILE = "writer.lock"
REDO_TYPES = frozenset({"ingest", "note", "upload", "delete"})


@dataclass(frozen=True, slots=True)
class Redo:
    """A file whose job was interrupted: ingest it again (or remove it, when it is gone)."""

    tenant: str
    source: str
    path: str
    jobs: tuple[str, ...] = field(default=(), compare=False)
    """The ids of the unfinished jobs on this file (of `tenant`): marked interrupted once it is redone."""


class DataDirLock:
    """The shared lock of the processes working on one data directory (held until exit)."""

    def __init__(self, data_dir: Path):
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)

    def close(self) -> None:
        """Let the lock go (as the process's death does)."""
        os.close(self._fd)

    def acquire(self) -> bool:
        """Hold the lock (shared); True when this process was alone when it came."""
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            alone = True
        except BlockingIOError:
            alone = False
        if not alone:
            fcntl.flock(self._fd, fcntl.LOCK_SH)
        return alone

    def share(self) -> None:
        """From exclusive (recovery done) to shared: other processes may come."""
        fcntl.flock(self._fd, fcntl.LOCK_SH)


class WriterLock:
    """The lock `ragmcp serve` holds for its whole life as the data directory's one writer (it
    ingests, watches its folder, grows the vector graph): a second one is refused, never allowed
    to re-point a source at its own folder. The file holds the holder's pid, to name it."""

    def __init__(self, data_dir: Path):
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path = data_dir / WRITER_LOCK_FILE
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)

    def acquire(self) -> str | None:
        """Become the writer: None, or (when another process is) its pid as the file says it."""
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._fd, 32, 0).decode("ascii", "replace").strip()
            os.close(self._fd)
            return holder or "unknown"
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)
        return None

    def holder(self) -> str | None:
        """The pid of the `serve` that is the writer now, or None (without becoming the writer)."""
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return os.pread(self._fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        finally:
            os.close(self._fd)  # the lock, if taken, goes with it
        return None


def recover(jobs: SqliteJobStore, lock: DataDirLock) -> list[Redo]:
    """The files to redo, once each, of the unfinished jobs of dead processes (none while another
    process works on the data directory). The jobs stay as they are until `redo_all` has redone them."""
    if not lock.acquire():
        log.info("another ragmcp process works on this data directory: unfinished jobs left to it")
        return []
    try:
        redo = _redo_list(jobs, jobs.unfinished())
    finally:
        lock.share()
    if redo:
        log.warning("%d files' jobs were interrupted by a stop; they are ingested again", len(redo))
    return redo


def recover_dead_process(jobs: SqliteJobStore, pid: int) -> list[Redo]:
    """The files to redo of the unfinished jobs that process `pid`, now dead, took (a reader of
    `ragmcp serve --workers N` its writer saw die)."""
    redo = _redo_list(jobs, jobs.unfinished(dead_owner=pid))
    if redo:
        log.warning("process %d died with %d files' jobs unfinished; they are ingested again", pid, len(redo))
    return redo


def _redo_list(jobs: SqliteJobStore, unfinished: list[Job]) -> list[Redo]:
    """One Redo per file; a job with no file to redo is marked interrupted at once."""
    files: dict[tuple[str, str, str], list[str]] = {}
    for job in unfinished:
        if job.type in REDO_TYPES and job.source and job.target:
            files.setdefault((job.tenant, job.source, job.target), []).append(job.job_id)
        else:
            _interrupt(jobs, job)
    return [Redo(tenant, source, path, tuple(ids)) for (tenant, source, path), ids in files.items()]


def _interrupt(jobs: SqliteJobStore, job: Job) -> None:
    jobs.put(
        job.model_copy(
            update={
                "status": "interrupted",
                "error": f"interrupted: the process running it stopped while it was {job.status}",
                "updated_at": utcnow(),
            }
        )
    )


def redo_all(ingest: IngestService, sources: SourceStore, redo: list[Redo], jobs: SqliteJobStore) -> None:
    """Ingest each interrupted file again (one whose source is gone is skipped), then mark its
    jobs interrupted."""
    for item in redo:
        source = sources.get(item.tenant, item.source)
        if source is None:
            log.warning("interrupted job of %r: its source %r no longer exists", item.path, item.source)
        else:
            ingest.redo(source, item.path)
        for job_id in item.jobs:
            job = jobs.get(item.tenant, job_id)
            if job is not None and job.status in ("queued", "running"):
                _interrupt(jobs, job)


class RedoWorker(BackgroundWorker):
    """`ragmcp serve`: the interrupted files ingested again in the background."""

    name = "recovery"

    def __init__(self, ingest: IngestService, sources: SourceStore, redo: list[Redo], jobs: SqliteJobStore):
        self.ingest = ingest
        self.sources = sources
        self.redo = redo
        self.jobs = jobs
        super().__init__()

    def _run(self) -> None:
        redo_all(self.ingest, self.sources, self.redo, self.jobs)

"""Crash recovery for the embedded server: jobs a dead process left `running` or `queued`.

Every process that runs jobs on a data directory (`ragmcp serve`, `ragmcp ingest`, `ragmcp
stdio`) holds a shared lock on `<data_dir>/ragmcp.lock` for its whole life. At start it first
tries the lock exclusively: if that succeeds no other process is alive, so any unfinished job
belongs to a dead one. Those jobs become `interrupted` and their files are handed back to be
ingested (or removed) again. While another process runs, nothing is touched: its jobs may be live.
"""

from __future__ import annotations

import fcntl
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from ragmcp.adapters.local.background import BackgroundWorker
from ragmcp.adapters.local.sqlite_stores import SqliteJobStore
from ragmcp.domain.models import utcnow
from ragmcp.ingest.pipeline import IngestService
from ragmcp.ports import SourceStore

log = logging.getLogger(__name__)

LOCK_FILE = "ragmcp.lock"
REDO_TYPES = frozenset({"ingest", "note", "upload", "delete"})


@dataclass(frozen=True, slots=True)
class Redo:
    """A file whose job was interrupted: ingest it again (or remove it, when it is gone)."""

    tenant: str
    source: str
    path: str


class DataDirLock:
    """The shared lock of the processes working on one data directory (held until exit)."""

    def __init__(self, data_dir: Path):
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)

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


def recover(jobs: SqliteJobStore, lock: DataDirLock) -> list[Redo]:
    """Mark the unfinished jobs of dead processes `interrupted`; the files to redo, once each."""
    if not lock.acquire():
        log.info("another ragmcp process works on this data directory: unfinished jobs left to it")
        return []
    try:
        redo: dict[Redo, None] = {}
        for job in jobs.unfinished():
            interrupted = job.model_copy(
                update={
                    "status": "interrupted",
                    "error": f"interrupted: the process running it stopped while it was {job.status}",
                    "updated_at": utcnow(),
                }
            )
            jobs.put(interrupted)
            if job.type in REDO_TYPES and job.source and job.target:
                redo[Redo(job.tenant, job.source, job.target)] = None
        if redo:
            log.warning("%d jobs were interrupted by a stop; their files are queued again", len(redo))
        return list(redo)
    finally:
        lock.share()


def redo_all(ingest: IngestService, sources: SourceStore, redo: list[Redo]) -> None:
    """Ingest each interrupted file again; one whose source is gone is skipped."""
    for item in redo:
        source = sources.get(item.tenant, item.source)
        if source is None:
            log.warning("interrupted job of %r: its source %r no longer exists", item.path, item.source)
            continue
        ingest.redo(source, item.path)


class RedoWorker(BackgroundWorker):
    """`ragmcp serve`: the interrupted files ingested again in the background."""

    name = "recovery"

    def __init__(self, ingest: IngestService, sources: SourceStore, redo: list[Redo]):
        self.ingest = ingest
        self.sources = sources
        self.redo = redo
        super().__init__()

    def _run(self) -> None:
        redo_all(self.ingest, self.sources, self.redo)

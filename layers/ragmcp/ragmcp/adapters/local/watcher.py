"""The embedded drop folder: an initial sync, then every change ingested as it happens (the
changes made while the first sync runs included: the watch starts before it)."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from watchfiles import watch

from ragmcp.adapters.local.background import BackgroundWorker
from ragmcp.domain.models import Source
from ragmcp.ingest.jobs import out_of_space
from ragmcp.ingest.pipeline import SIDECAR_SUFFIX, IngestService, SyncReport, is_ingestible
from ragmcp.progress import Progress

log = logging.getLogger(__name__)

RETRY_SECONDS = 5
"""How long changes that met a full disk wait before they are tried again."""


@dataclass
class WatchState:
    """What /healthz reports of the folder: idle once the first sync is done and nothing is pending."""

    state: str = "starting"
    ingested: int = 0
    failed: int = 0
    deleted: int = 0
    held: int = 0
    sync: Progress = field(default_factory=lambda: Progress("files"))
    """The first sync of the folder, file by file: queued, done, failed, current, time left."""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def as_dict(self) -> dict[str, object]:
        with self.lock:
            counts = {
                "state": self.state,
                "ingested": self.ingested,
                "failed": self.failed,
                "deleted": self.deleted,
                "held": self.held,
            }
        return {**counts, "sync": self.sync.snapshot()}


class FolderWatcher(BackgroundWorker):
    name = "folder-watcher"

    def __init__(
        self, ingest: IngestService, source: Source, watch_changes: bool = True, allow_mass_delete: bool = False
    ):
        self.ingest = ingest
        self.source = source
        self.watch_changes = watch_changes
        self.allow_mass_delete = allow_mass_delete
        self.status = WatchState()
        super().__init__()

    def _run(self) -> None:
        root = Path(self.source.location).resolve()
        # The watch starts before the first sync, so what changes while the folder is read is seen:
        # the first step returns once the watch is set up, with whatever changed in that moment.
        changes = (
            watch(root, stop_event=self._stop, debounce=500, rust_timeout=1000, yield_on_timeout=True)
            if self.watch_changes
            else None
        )
        early = next(changes, set()) if changes is not None else set()
        self._set(state="syncing")
        report = self._first_sync()
        if report is None:
            return
        self._set(
            state="idle",
            ingested=report.ingested + report.updated,
            failed=report.failed,
            deleted=report.deleted,
            held=report.held,
        )
        log.info("folder synced: %s", report.line())
        if changes is None:
            return
        pending: set[str] = set()
        """Changed files not applied for want of disk space: tried again every few seconds."""
        retry_at = 0.0
        for batch in itertools.chain([early], changes):
            if not root.is_dir():  # unmounted or removed: keep every document, and say so in /healthz
                raise RuntimeError(f"the watched folder {root} vanished; its documents are kept")
            paths = {r for _, p in batch if (r := self._relative(root, p)) is not None}
            if pending and time.monotonic() >= retry_at:
                paths |= pending
                pending = set()
            if not paths:
                continue
            self._set(state="ingesting")
            try:
                self._apply(sorted(paths))
            except Exception as exc:  # one bad batch must never end the watch
                if out_of_space(exc):
                    log.warning("folder watcher: the disk is full; %d changed files wait for room", len(paths))
                    pending |= paths
                    retry_at = time.monotonic() + RETRY_SECONDS
                else:
                    log.exception("folder watcher: changes to %d files not applied", len(paths))
                    self._bump("failed")
            self._set(state="waiting for disk space" if pending else "idle")
        if not self._stop.is_set():
            raise RuntimeError(f"watching {root} ended")

    def _first_sync(self) -> SyncReport | None:
        """The folder's first sync, tried again while the disk is full; None when asked to stop."""
        while True:
            try:
                return self.ingest.sync(self.source, self.status.sync, allow_mass_delete=self.allow_mass_delete)
            except Exception as exc:
                if not out_of_space(exc):
                    raise
                self._set(state="waiting for disk space")
                log.warning("folder watcher: the disk is full; the first sync is tried again in %d s", RETRY_SECONDS)
                if self._stop.wait(RETRY_SECONDS):
                    return None
                self._set(state="syncing")

    @staticmethod
    def _relative(root: Path, changed: str) -> str | None:
        path = Path(changed)
        rel = path.relative_to(root).as_posix() if path.is_relative_to(root) else None
        if rel and rel.endswith(SIDECAR_SUFFIX):
            rel = rel[: -len(SIDECAR_SUFFIX)]
        return rel if rel and is_ingestible(rel) else None

    def _apply(self, paths: list[str]) -> None:
        """One batch of changes: files that are there are ingested; the documents of those that
        vanished are removed together, or held when they are too many (see remove_vanished)."""
        vanished = []
        for path in paths:
            if self._present(path):
                job = self.ingest.ingest(self.source, path)
                if job is not None:
                    self._bump("ingested" if job.status == "succeeded" else "failed")
            elif self.ingest.documents.by_path(self.source.tenant, self.source.source_id, path):
                vanished.append(path)
        removed, held = self.ingest.remove_vanished(self.source, vanished, allow=self.allow_mass_delete)
        with self.status.lock:
            self.status.deleted += len(removed)
            self.status.held += len(held)

    def _present(self, path: str) -> bool:
        """Whether the file is there; True when that cannot be told (its folder cannot be read:
        its ingest then fails with the reason, and its documents are kept)."""
        try:
            return (Path(self.source.location) / path).is_file()
        except OSError:
            return True

    def _set(self, **values: object) -> None:
        with self.status.lock:
            for key, value in values.items():
                setattr(self.status, key, value)

    def _bump(self, counter: str) -> None:
        with self.status.lock:
            setattr(self.status, counter, getattr(self.status, counter) + 1)

"""The embedded drop folder: an initial sync, then every change ingested as it happens (the
changes made while the first sync runs included: the watch starts before it).

A changed file is indexed once it has stopped changing, never half-written. The folder itself is
checked every second: when it vanishes (unmounted, removed, renamed away) every document is kept
and /healthz says so (503) until it is back; when another folder took its place (`mv`, `mkdir`),
or it is back, it is watched again and synced."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISDIR

from watchfiles import Change, watch

from ragmcp.adapters.local.background import BackgroundWorker
from ragmcp.domain.models import Source
from ragmcp.ingest.jobs import out_of_space
from ragmcp.ingest.pipeline import SIDECAR_SUFFIX, IngestService, SyncReport, is_ingestible
from ragmcp.ports import SourceStore
from ragmcp.progress import Progress

log = logging.getLogger(__name__)

RETRY_SECONDS = 5
"""How long changes that met a full disk wait before they are tried again."""
SETTLE_SECONDS = 1.0
"""How long a changed file must keep its size and modification time before it is indexed."""


def _identity(root: Path) -> tuple[int, int] | None:
    """The folder's device and inode, or None when there is no folder there."""
    try:
        stat = root.stat()
    except OSError:
        return None
    return (stat.st_dev, stat.st_ino) if S_ISDIR(stat.st_mode) else None


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
        self,
        ingest: IngestService,
        source: Source,
        watch_changes: bool = True,
        allow_mass_delete: bool = False,
        on_synced: Callable[[], None] | None = None,
        sync: Progress | None = None,
    ):
        """`on_synced`: called after each sync of the whole folder (`serve` says `ready: ...`); `sync`:
        where the first sync's progress goes (the services' first_sync), a fresh one when None."""
        self.ingest = ingest
        self.on_synced = on_synced
        self.source = source
        self.watch_changes = watch_changes
        self.allow_mass_delete = allow_mass_delete
        self.status = WatchState(sync=sync) if sync is not None else WatchState()
        self._missing: str | None = None
        """Why the folder is not watched now (it vanished), or None."""
        super().__init__()

    def problem(self) -> str | None:
        return super().problem() or self._missing

    def health(self, sources: SourceStore) -> dict[str, object]:
        """What /healthz says of the folder: its state and counts, and the deletions it holds."""
        body = self.status.as_dict()
        source = sources.get(self.source.tenant, self.source.source_id)
        held = source.held_deletions if source else ()
        body["held_deletions"] = {
            "count": len(held),
            "paths": list(held[:20]),
            "reason": source.held_reason if source and held else None,
        }
        return body

    def _run(self) -> None:
        root = Path(self.source.location).resolve()
        # The watch starts before the first sync, so what changes while the folder is read is seen:
        # the first step returns once the watch is set up, with whatever changed in that moment.
        changes = self._watch(root) if self.watch_changes else None
        early = next(changes, set()) if changes is not None else set()
        while True:
            identity = _identity(root)
            self._set(state="syncing")
            report = self._sync()
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
            if self.on_synced is not None:
                self.on_synced()
            if changes is None:
                return
            self._follow(root, identity, itertools.chain([early], changes))
            changes.close()
            if self._stop.is_set():
                return
            # The folder vanished (unmounted, removed, renamed away) or another took its place: every
            # document is kept until it is back, then it is watched and synced again.
            if not self._wait_for(root):
                return
            changes = self._watch(root)
            early = next(changes, set())

    def _watch(self, root: Path) -> Generator[set[tuple[Change, str]], None, None]:
        """The folder's changes: a batch when something changed, an empty one every second."""
        return watch(root, stop_event=self._stop, debounce=500, rust_timeout=1000, yield_on_timeout=True)

    def _follow(self, root: Path, identity: tuple[int, int] | None, batches: Iterable[set[tuple[Change, str]]]) -> None:
        """Apply the changes until asked to stop, or until the folder is no longer the one watched.
        A changed file is applied once it has stopped changing (same size and modification time
        for SETTLE_SECONDS): a file still being written is never indexed half-written."""
        pending: set[str] = set()
        """Changed files not applied for want of disk space: tried again every few seconds."""
        retry_at = 0.0
        settling: dict[str, tuple[tuple[int, int], float]] = {}
        """Changed files waiting to stop changing: their (size, mtime) and since when it has held."""
        for batch in batches:
            if _identity(root) != identity:
                return
            paths = {r for _, p in batch if (r := self._relative(root, p)) is not None} | settling.keys()
            if pending and time.monotonic() >= retry_at:
                paths |= pending
                pending = set()
            paths = self._settled(paths, settling)
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

    def _settled(self, paths: set[str], settling: dict[str, tuple[tuple[int, int], float]]) -> set[str]:
        """The paths ready to apply: gone or unreadable ones at once, the others once unchanged for
        SETTLE_SECONDS; the rest are left in `settling`."""
        now = time.monotonic()
        ready = set()
        for path in paths:
            try:
                stat = (Path(self.source.location) / path).stat()
                stamp = (stat.st_size, stat.st_mtime_ns)
            except OSError:
                settling.pop(path, None)
                ready.add(path)
                continue
            seen = settling.get(path)
            if seen is None or seen[0] != stamp:
                settling[path] = (stamp, now)
            elif now - seen[1] >= SETTLE_SECONDS:
                del settling[path]
                ready.add(path)
        return ready

    def _wait_for(self, root: Path) -> bool:
        """Wait (saying so in /healthz) until the folder is there again; False when asked to stop."""
        self._missing = f"{self.name}: the watched folder {root} vanished; its documents are kept"
        self._set(state="folder missing")
        log.warning("%s; watching for it to come back", self._missing)
        while not _identity(root):
            if self._stop.wait(1.0):
                return False
        self._missing = None
        log.info("the watched folder %s is back: syncing it again", root)
        return True

    def _sync(self) -> SyncReport | None:
        """A sync of the folder, tried again while the disk is full; None when asked to stop."""
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

"""The embedded janitor: removes expired upload sessions and their parts, every few seconds."""

from __future__ import annotations

import logging
import threading

from ragmcp.ingest.uploads import UploadService

log = logging.getLogger(__name__)


class Janitor:
    def __init__(self, uploads: UploadService, interval_seconds: float):
        self.uploads = uploads
        self.interval = interval_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="janitor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            removed = self.uploads.sweep()
            if removed:
                log.info("removed %d expired upload sessions", removed)

"""The embedded janitor: removes expired upload sessions and their parts, every few seconds."""

from __future__ import annotations

import logging

from ragmcp.adapters.local.background import BackgroundWorker
from ragmcp.ingest.uploads import UploadService

log = logging.getLogger(__name__)


class Janitor(BackgroundWorker):
    name = "janitor"

    def __init__(self, uploads: UploadService, interval_seconds: float):
        self.uploads = uploads
        self.interval = interval_seconds
        super().__init__()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            removed = self.uploads.sweep()
            if removed:
                log.info("removed %d expired upload sessions", removed)

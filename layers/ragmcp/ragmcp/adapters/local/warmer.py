"""Warms the embedded index once at start, so a restarted server's first searches are as fast as
later ones: `ragmcp serve` starts it beside the vector graph's worker, and /healthz says `warm`
"warming" until it is done ("ready", with what it loaded and how long it took)."""

from __future__ import annotations

from ragmcp.adapters.local.background import BackgroundWorker
from ragmcp.adapters.local.sqlite_index import SqliteSearchIndex, WarmReport


class IndexWarmer(BackgroundWorker):
    name = "index-warmer"

    def __init__(self, index: SqliteSearchIndex):
        super().__init__()
        self.index = index
        self.report: WarmReport | None = None

    def status(self) -> dict[str, object]:
        report = self.report
        return {"state": "warming"} if report is None else {"state": "ready", **report.model_dump()}

    def _run(self) -> None:
        self.report = self.index.warm(self._stop)
        self._stop.wait()

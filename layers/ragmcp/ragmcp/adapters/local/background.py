"""A daemon thread with a stop flag: the shape of the embedded server's background workers.

A worker whose work ends with an exception is dead: `failure` says why, and /healthz answers
503 with that reason instead of a cheerful "ok" over a server that no longer ingests. A worker
whose work returned has finished (a one-off recovery, a folder synced once with --no-watch): that
is no problem.
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod

from ragmcp.ingest.pipeline import one_line
from ragmcp.threadnames import name_native_thread

log = logging.getLogger(__name__)


class BackgroundWorker(ABC):
    name = "worker"

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._guarded, name=self.name, daemon=True)
        self.failure: str | None = None
        """Why the worker died (one line), or None while it runs or after it stopped as asked."""
        self.finished = False
        """Its work returned (without an exception)."""

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def problem(self) -> str | None:
        """None while the worker is healthy; else why it is not."""
        if self.failure is not None:
            return f"{self.name} died: {self.failure}"
        if (
            self._thread.ident is not None
            and not self._thread.is_alive()
            and not (self._stop.is_set() or self.finished)
        ):
            return f"{self.name} stopped"
        return None

    def _guarded(self) -> None:
        name_native_thread()
        try:
            self._run()
            self.finished = True
        except Exception as exc:
            self.failure = one_line(f"{type(exc).__name__}: {exc}")
            log.exception("%s died", self.name)

    @abstractmethod
    def _run(self) -> None:
        """The thread's work: it returns when `self._stop` is set, or when it is done."""

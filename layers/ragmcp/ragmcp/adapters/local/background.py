"""A daemon thread with a stop flag: the shape of the embedded server's background workers."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod


class BackgroundWorker(ABC):
    name = "worker"

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    @abstractmethod
    def _run(self) -> None:
        """The thread's work; it returns when `self._stop` is set."""

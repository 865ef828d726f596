"""Progress of a long run (a folder's sync, an evaluation, a benchmark): how many items are
queued, done and failed, which one is being worked on, and an estimate of the time left.

`/healthz` shows a sync's snapshot; the command line shows a bar on a terminal and, when its
output goes to a file or a pipe, one line every few seconds.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TextIO

LINE_EVERY_SECONDS = 5.0


@dataclass
class Progress:
    """Thread-safe counters; `listeners` hear every change (a bar, a line printer)."""

    label: str = "items"
    total: int = 0
    done: int = 0
    failed: int = 0
    current: str | None = None
    started: float | None = None
    finished: float | None = None
    listeners: list[Callable[[Progress], None]] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def begin(self, total: int) -> None:
        with self._lock:
            self.total, self.done, self.failed, self.current = total, 0, 0, None
            self.started, self.finished = time.monotonic(), None
        self._tell()

    def working_on(self, item: str) -> None:
        with self._lock:
            self.current = item
        self._tell()

    def advance(self, failed: bool = False) -> None:
        with self._lock:
            self.done += 1
            self.failed += failed
            self.current = None
        self._tell()

    def end(self) -> None:
        with self._lock:
            self.current, self.finished = None, time.monotonic()
        self._tell()

    @property
    def running(self) -> bool:
        return self.started is not None and self.finished is None

    def seconds_left(self) -> float | None:
        """The time left at the rate so far; None before the first item is done."""
        if self.started is None or self.done == 0:
            return None
        elapsed = (self.finished or time.monotonic()) - self.started
        return max(self.total - self.done, 0) * elapsed / self.done

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            left = self.seconds_left()
            return {
                "state": "running" if self.running else ("done" if self.finished else "waiting"),
                "total": self.total,
                "queued": max(self.total - self.done, 0),
                "done": self.done,
                "failed": self.failed,
                "current": self.current,
                "seconds_left": None if left is None else round(left, 1),
            }

    def line(self) -> str:
        s = self.snapshot()
        elapsed = (self.finished or time.monotonic()) - self.started if self.started else 0.0
        failed = f", {s['failed']} failed" if s["failed"] else ""
        left = "" if s["seconds_left"] is None or not self.running else f", about {s['seconds_left']:.0f} s left"
        now = f", now {s['current']}" if s["current"] else ""
        return f"{self.label}: {s['done']}/{s['total']}{failed} in {elapsed:.0f} s{left}{now}"

    def _tell(self) -> None:
        for listener in self.listeners:
            listener(self)


def filling_warning(progress: Progress | None) -> str | None:
    """What a search says while the server's first sync of its folder runs (None once it is done)."""
    if progress is None or not progress.running:
        return None
    s = progress.snapshot()
    return (
        f"The index is still filling: the first sync of the document folder has done {s['done']} of "
        f"{s['total']} files, so results may be incomplete."
    )


@contextmanager
def shown(progress: Progress, stream: TextIO | None = None, every: float = LINE_EVERY_SECONDS) -> Iterator[Progress]:
    """Show `progress` while the block runs: a tqdm bar on a terminal; otherwise one line every
    `every` seconds (also while one slow item is worked on) and a last one at the end."""
    stream = stream or sys.stderr
    if stream.isatty():
        from tqdm import tqdm

        with tqdm(total=0, unit=progress.label, file=stream, dynamic_ncols=True) as bar:

            def draw(p: Progress) -> None:
                bar.total, bar.n = p.total, p.done
                bar.set_postfix_str(p.current or "", refresh=True)

            progress.listeners.append(draw)
            try:
                yield progress
            finally:
                progress.listeners.remove(draw)
        return
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(every):
            print(progress.line(), file=stream, flush=True)

    ticker = threading.Thread(target=tick, name="progress-line", daemon=True)
    ticker.start()
    try:
        yield progress
    finally:
        stop.set()
        ticker.join()
        print(progress.line(), file=stream, flush=True)


def announce(progress: Progress, say: Callable[[str], None], every: float = LINE_EVERY_SECONDS) -> threading.Thread:
    """A server's first sync, told through `say` while it runs: its count every `every` seconds, so
    the terminal shows the folder being read before the `ready:` line."""
    ended = threading.Event()

    def heard(p: Progress) -> None:
        if p.finished is not None:
            ended.set()

    def run() -> None:
        progress.listeners.append(heard)
        if progress.finished is not None:
            ended.set()
        while not ended.wait(every):
            if progress.running:
                say(f"first sync: {progress.line()}")
        progress.listeners.remove(heard)

    thread = threading.Thread(target=run, name="announce", daemon=True)
    thread.start()
    return thread

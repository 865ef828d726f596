"""The reader processes of `ragmcp serve --workers N`: N-1 processes answering requests on the
writer's listening socket, started and kept running by the writer.

The writer (the process `ragmcp serve` started) alone ingests, watches the folder, sweeps uploads
and grows the vector graph; readers answer MCP requests from the same database and files. Each
reader is a fresh interpreter (multiprocessing's spawn: no threads or ONNX sessions inherited
half-alive from a fork) given the settings and the socket; the kernel hands each new connection to
one of the processes waiting on it. Readers start once the folder's first sync has ended, so
every answer given while the index is still filling comes from the process that knows how far it
is. A reader that dies unasked (killed, out of memory) is started again; one that exits cleanly
was asked to, and is not. The writes a dead reader had accepted and not yet indexed are handed to
`on_death` (the writer redoes them: adapters/local/recovery.py).
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import socket
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from ragmcp.adapters.local.background import BackgroundWorker
from ragmcp.progress import Progress

log = logging.getLogger(__name__)

RESTART_AFTER_SECONDS = 5.0
"""A reader that died is started again no sooner than this after its last start."""

Reader = Callable[[socket.socket, int, int, Any], Any]
"""A reader's main: (the listening socket, its number from 1, the writer's pid, the shared array
of accept turns: ragmcp.web.connections.AcceptTurns)."""


WRITER_STATE_FILE = "writer-state.json"
WRITER_STATE_SECONDS = 1.0
"""How often the writer publishes its state for the readers' /healthz."""
WRITER_STATE_STALE_SECONDS = 15.0


class WriterState(BackgroundWorker):
    """The writer's state (its folder's sync, held deletions, readers, problems), written every
    second to a file in the data directory, so a reader's /healthz answers what the writer's would."""

    name = "writer-state"

    def __init__(self, path: Path, snapshot: Callable[[], dict[str, Any]]):
        super().__init__()
        self.path = path
        self.snapshot = snapshot

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.publish()
            except Exception:  # a full disk, say: the readers then say the state is stale
                log.exception("writer state not published")
            self._stop.wait(WRITER_STATE_SECONDS)

    def publish(self) -> None:
        body = json.dumps({**self.snapshot(), "pid": os.getpid(), "at": time.time()})
        scratch = self.path.with_name(self.path.name + ".tmp")
        with os.fdopen(os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as handle:
            handle.write(body)
        os.replace(scratch, self.path)


def read_writer_state(path: Path) -> dict[str, Any]:
    """The writer's state as it last published it; a problem when it is missing or stale."""
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return {"problems": [f"its state cannot be read ({type(exc).__name__})"]}
    age = time.time() - float(state.get("at", 0))
    if age > WRITER_STATE_STALE_SECONDS:
        state.setdefault("problems", []).append(f"its state was last published {age:.0f} s ago")
    return state


class ReaderPool(BackgroundWorker):
    name = "reader-pool"

    def __init__(
        self,
        main: Reader,
        listener: socket.socket,
        readers: int,
        after: Progress | None = None,
        on_death: Callable[[int], None] | None = None,
    ):
        super().__init__()
        self.main = main
        self.listener = listener
        self.readers = readers
        self.after = after
        """The first sync the readers wait for, or None."""
        self.on_death = on_death
        """Called with the pid of each reader that died unasked, once, as soon as it is seen."""
        self._mourned: set[int] = set()
        self._context = multiprocessing.get_context("spawn")
        self.turns = self._context.Array("q", readers + 2, lock=False)
        """The accept turns of the writer (0) and the readers, so connections spread evenly: the
        connections accepted, then a flag each process sets while it accepts (AcceptTurns)."""
        self._processes: dict[int, BaseProcess] = {}
        self._started: dict[int, float] = {}
        self.restarts = 0

    def status(self) -> dict[str, object]:
        processes = dict(self._processes)
        return {
            "readers": self.readers,
            "running": [p.pid for p in processes.values() if p.is_alive()],
            "restarts": self.restarts,
            "state": "waiting for the first sync" if not processes else "started",
        }

    def stop(self) -> None:
        super().stop()
        for process in self._processes.values():
            if process.is_alive():
                process.terminate()
        deadline = time.monotonic() + 15
        for process in self._processes.values():
            process.join(timeout=max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                log.warning("reader %s did not stop in time; killing it", process.pid)
                process.kill()
                process.join(timeout=5)

    def _run(self) -> None:
        while self.after is not None and not self.after.finished and not self._stop.is_set():
            self._stop.wait(0.5)
        for number in range(1, self.readers + 1):
            if not self._stop.is_set():
                self._start(number)
        while not self._stop.wait(1.0):
            for number, process in list(self._processes.items()):
                if process.is_alive() or process.exitcode == 0:
                    continue
                if self.on_death is not None and process.pid is not None and process.pid not in self._mourned:
                    self._mourned.add(process.pid)
                    self.turns[1 + number] = 0  # connections wait on no dead process's turn
                    self.on_death(process.pid)
                if time.monotonic() - self._started[number] < RESTART_AFTER_SECONDS:
                    continue
                code = process.exitcode
                log.warning("reader %d (pid %s) died with exit code %s; starting it again", number, process.pid, code)
                self.restarts += 1
                self._start(number)

    def _start(self, number: int) -> None:
        process = self._context.Process(
            target=self.main,
            args=(self.listener, number, os.getpid(), self.turns),
            name=f"ragmcp-reader-{number}",
            daemon=True,
        )
        process.start()
        self._processes[number] = process
        self._started[number] = time.monotonic()
        log.info("reader %d serving as pid %s", number, process.pid)

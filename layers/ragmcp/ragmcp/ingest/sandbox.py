"""Files parsed in child processes under CPU-time, memory and wall-clock limits.

A parser is third-party code reading untrusted bytes: a sheet that declares a billion cells, a
zip that inflates a thousandfold, a PDF of scans to OCR. `ParseSandbox` runs each parse in a worker
process (a fresh interpreter: no server threads, memory, open files or environment inherited, so
no key or credential) whose address space is capped (RLIMIT_AS) and whose CPU time is capped per
file (RLIMIT_CPU, raised by the file's allowance before each one); the server waits at most
`timeout_seconds` for the answer and reads it as documents and plain values only. A worker over
a limit is killed, or dies of it, and the file fails with the reason; the next file gets a fresh
worker. A worker is reused for the next file otherwise, and replaced once its peak
resident size passes half its memory limit (the allocator keeps a parser's high-water mark), so the
server's own memory stays flat whatever the files hold. An idle worker does not linger: one idle for
`idle_seconds` is not used again, and one idle for twice as long leaves by itself, so a sandbox that
nobody closes (a command's, a test's) holds no process for long. The format budgets (characters, cells,
pages, ...: `ragmcp.ingest.limits`) are checked inside the worker, while reading.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from ragmcp.domain.errors import ParseFailure
from ragmcp.domain.models import Source
from ragmcp.ingest.limits import ParseLimits, over
from ragmcp.ingest.parsed import Block, ParsedDocument

STARTUP_SECONDS = 120.0
"""How long a new worker may take to load the parsers, before its first file's time starts."""


@dataclass(frozen=True, slots=True)
class ProcessLimits:
    memory_mb: int = 2048
    """Address space of a worker (RLIMIT_AS), its libraries included."""
    cpu_seconds: int = 120
    """CPU time one file may take (RLIMIT_CPU)."""
    timeout_seconds: float = 300.0
    """Wall-clock time the server waits for one file's parse."""
    idle_seconds: float = 60.0
    """A worker idle this long is stopped instead of reused; it leaves by itself after twice as long."""


_PASSED_ENV = frozenset({"PATH", "HOME", "LANG", "TMPDIR", "TZ", "OMP_NUM_THREADS", "XDG_CACHE_HOME"})
"""The only environment a worker gets (with the LC_* variables): no key, secret or credential of
the server reaches the process that reads untrusted bytes."""


class _SafeUnpickler(pickle.Unpickler):
    """Reads a worker's answer: documents and blocks, plain values, nothing else. A worker that a
    hostile file took over cannot make the server build any other object (pickle's own advice)."""

    def find_class(self, module: str, name: str) -> Any:
        if module == ParsedDocument.__module__ and name in (ParsedDocument.__name__, Block.__name__):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"a parse worker answered with {module}.{name}")


def _answer(conn: Connection) -> Any:
    return _SafeUnpickler(io.BytesIO(conn.recv_bytes())).load()


class _Worker:
    """One child process (`python -m ragmcp.ingest.sandbox`, this interpreter, this sys.path) and
    the server's end of the socket it answers on."""

    def __init__(self, limits: ProcessLimits) -> None:
        ours, theirs = socket.socketpair()
        env = {name: value for name, value in os.environ.items() if name in _PASSED_ENV or name.startswith("LC_")}
        env.update(PYTHONPATH=os.pathsep.join(p for p in sys.path if p), MALLOC_ARENA_MAX="2")
        command = [sys.executable, "-m", __name__, str(theirs.fileno()), str(limits.memory_mb), str(limits.cpu_seconds)]
        command.append(str(2 * limits.idle_seconds))
        with theirs:
            self.process = subprocess.Popen(command, pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL)
        self.conn = Connection(ours.detach())
        self.ready = False
        """Whether it said it has loaded the parsers (a file's time starts then)."""
        self.idle_since = time.monotonic()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.close()
        if self.process.poll() is None:
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5)


class ParseSandbox:
    """Parses files in worker processes, `workers` at most at once (more callers wait their turn)."""

    def __init__(self, limits: ParseLimits, process: ProcessLimits, workers: int = 1) -> None:
        self.limits = limits
        self.process = process
        self._slots = threading.BoundedSemaphore(workers)
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []

    def __call__(self, data: bytes, file_name: str, source: Source, *, ocr: bool = True) -> list[ParsedDocument]:
        """`parsers.parse` with the source's settings, in a worker; a ParseFailure with the reason
        when the file is over a limit, the worker dies or the parser fails."""
        with self._slots:
            worker = self._take()
            keep = False
            try:
                outcome, keep = self._run(worker, (data, file_name, source, ocr, self.limits))
            finally:
                if keep:
                    worker.idle_since = time.monotonic()
                    with self._lock:
                        self._idle.append(worker)
                else:
                    worker.stop()
        if isinstance(outcome, str):
            raise ParseFailure(outcome)
        return outcome

    def close(self) -> None:
        with self._lock:
            idle = self._idle[:]
            self._idle.clear()
        _stop_all(idle)

    def _take(self) -> _Worker:
        """An idle worker that has not been idle for too long (the others are stopped), or a new one."""
        now = time.monotonic()
        with self._lock:
            stale = [w for w in self._idle if now - w.idle_since >= self.process.idle_seconds]
            self._idle[:] = [w for w in self._idle if w not in stale]
            worker = self._idle.pop() if self._idle else None
        _stop_all(stale)
        return worker or _Worker(self.process)

    def _run(self, worker: _Worker, request: tuple[Any, ...]) -> tuple[list[ParsedDocument] | str, bool]:
        """The documents, or the reason the file failed; and whether the worker may parse again."""
        limits = self.process
        try:
            if not worker.ready:
                worker.ready = worker.conn.poll(STARTUP_SECONDS) and _answer(worker.conn) == "ready"
                if not worker.ready:
                    return f"the parser process did not start within {STARTUP_SECONDS:g} s", False
            worker.conn.send(request)
            if not worker.conn.poll(limits.timeout_seconds):
                seconds = f"{limits.timeout_seconds:g}"
                return over(f"parsing took longer than {seconds} s", "PARSE_TIMEOUT_SECONDS", seconds).message, False
            outcome, value, peak = _answer(worker.conn)
        except (EOFError, OSError):
            return self._death(worker), False
        except (pickle.UnpicklingError, ValueError, TypeError) as exc:
            return f"the parser's answer could not be read ({exc})", False
        if outcome == "memory":
            what = f"parsing needed more than {limits.memory_mb} MB of memory"
            return over(what, "PARSE_MEMORY_MB", limits.memory_mb).message, False
        return value, peak * 2 < limits.memory_mb * 1024 * 1024

    def _death(self, worker: _Worker) -> str:
        """Why the worker ended without an answer."""
        try:
            code: int | None = worker.process.wait(5)
        except subprocess.TimeoutExpired:
            code = None
        limits = self.process
        if code == -signal.SIGXCPU:
            what = f"parsing took more than {limits.cpu_seconds} s of CPU"
            return over(what, "PARSE_CPU_SECONDS", limits.cpu_seconds).message
        if code == -signal.SIGKILL:
            return "the parser was killed (by the system: out of memory?)"
        if code is not None and code < 0:
            return f"the parser crashed (signal {signal.Signals(-code).name})"
        return f"the parser exited without an answer (exit code {code})"


def _stop_all(workers: list[_Worker]) -> None:
    for worker in workers:
        worker.stop()
    workers.clear()


def _serve(conn: Connection, memory_bytes: int, cpu_seconds: int, idle_seconds: float) -> None:
    """A worker's loop: limit this process, then parse each request until the pipe closes or no
    request comes for `idle_seconds`."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    from ragmcp.ingest.ocr import page_ocr
    from ragmcp.ingest.parsers import parse

    conn.send("ready")
    while True:
        try:
            if not conn.poll(idle_seconds):
                return
            data, file_name, source, ocr, limits = conn.recv()
        except EOFError:
            return
        used = resource.getrusage(resource.RUSAGE_SELF)
        allowance = int(used.ru_utime + used.ru_stime) + 1 + cpu_seconds
        resource.setrlimit(resource.RLIMIT_CPU, (allowance, resource.RLIM_INFINITY))
        try:
            documents = parse(
                data,
                file_name,
                pk_column=source.pk_column,
                text_columns=source.text_columns,
                column_shown=source.shows_column,
                ocr=page_ocr() if ocr else None,
                limits=limits,
            )
            reply: tuple[str, Any] = ("ok", documents)
        except ParseFailure as failure:
            reply = ("failed", failure.message)
        except MemoryError:
            reply = ("memory", None)
        del data
        conn.send((*reply, _peak_bytes()))
        if reply[0] == "memory":
            return


def _peak_bytes() -> int:
    """This worker's own resident high-water mark. Not ru_maxrss: Linux carries the parent's resident
    size at fork into the child's ru_maxrss across exec, so a worker of a server holding 1 GB would
    look 1 GB big however little it parsed, and be replaced after every file."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


if __name__ == "__main__":
    _serve(Connection(int(sys.argv[1])), int(sys.argv[2]) * 1024 * 1024, int(sys.argv[3]), float(sys.argv[4]))

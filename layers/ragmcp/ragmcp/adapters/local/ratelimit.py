"""The embedded rate limiter, per API key: requests a minute, synthesis calls a minute, concurrent requests.

A sliding one-minute window of request times per key and kind; a request over any limit is
refused without being counted, so a client that backs off gets its quota back on time.

The windows and the requests in flight are kept in a SQLite file of their own in the data
directory (`ratelimits.db`, 0600), so that every process serving the directory counts against one
set of limits, and ingest's long write transactions in ragmcp.db never hold a request up. Each
acquire is one BEGIN IMMEDIATE transaction: two processes cannot both take the last unit.

WAL with synchronous=NORMAL: a commit is not fsynced (only a checkpoint is), and the file stays
consistent after a power loss, which at worst forgets the last moment's counts. The windows are
not stored data: they describe the last minute and are worth nothing after a restart.

Windows are kept on the monotonic clock (CLOCK_MONOTONIC, one clock for every process of the
machine): a wall clock stepped back or forward never locks a key out or frees it early. Only the
reset header is turned into wall-clock seconds. The monotonic clock starts again at a reboot: a
window entry from the future is another boot's and is cleared.

A key is stored as the SHA-256 of its id (any text: a bound parameter of 32 bytes). Window entries
older than a minute are deleted by the next acquire, so the file holds at most a minute of
requests. A concurrency slot is a row naming the process that holds it (pid and start time): the
slots of a process that has died (or whose pid another process now has) are cleared when they
would decide a refusal, and all of them when a limiter opens the file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ragmcp.security.models import WINDOW_SECONDS, RateDecision, RateLimits

SCHEMA = """
CREATE TABLE IF NOT EXISTS hits(
    key BLOB NOT NULL,
    at REAL NOT NULL,
    synthesis INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS hits_key ON hits(key, at, synthesis);
CREATE INDEX IF NOT EXISTS hits_at ON hits(at);

CREATE TABLE IF NOT EXISTS slots(
    key BLOB NOT NULL,
    pid INTEGER NOT NULL,
    process TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS slots_key ON slots(key, pid, process);
"""

WINDOWS = """
SELECT COUNT(*), MIN(at), COALESCE(SUM(synthesis), 0), MIN(CASE WHEN synthesis THEN at END)
FROM hits WHERE key = ? AND at > ?"""

FUTURE_SECONDS = 5.0
"""A window entry this far ahead of the clock was counted in another boot."""

HOLDERS = "SELECT DISTINCT pid, process FROM slots WHERE ?1 IS NULL OR key = ?1"

RELEASE = "DELETE FROM slots WHERE rowid = (SELECT rowid FROM slots WHERE key = ? AND pid = ? AND process = ? LIMIT 1)"


@dataclass(frozen=True, slots=True)
class Window:
    """A key's requests of one kind in the last minute: how many, and when the oldest came."""

    count: int
    oldest: float | None


def decide(
    limits: RateLimits, synthesis: bool, now: float, requests: Window, synth: Window, active: Callable[[], int]
) -> RateDecision:
    """One more request: refused over any limit (the first one found, in this order), else allowed,
    and then the caller counts it. `active` (the key's requests in flight) is asked only when the
    windows allow the request."""
    reset = math.ceil((now if requests.oldest is None else requests.oldest) + WINDOW_SECONDS)
    reason = None
    if requests.count >= limits.per_minute:
        reason = f"more than {limits.per_minute} requests a minute"
    elif synthesis and synth.count >= limits.synthesis_per_minute:
        reason = f"more than {limits.synthesis_per_minute} synthesis calls a minute"
        reset = math.ceil((now if synth.oldest is None else synth.oldest) + WINDOW_SECONDS)
    elif active() >= limits.concurrent:
        reason = f"more than {limits.concurrent} concurrent requests"
    counted = requests.count + (reason is None)
    return RateDecision(reason is None, limits.per_minute, max(0, limits.per_minute - counted), reset, reason)


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


_PROC = Path("/proc/self/stat").exists()
_BOOT = _boot_id()


def process_identity(pid: int) -> str | None:
    """Which process has `pid` now: its start time (clock ticks since boot) and the boot's id, so that
    the pid taken by another process, or after a reboot, names another identity; None when no live
    process has it (a zombie, dead and not yet reaped, is none). Without /proc (not Linux): "" for
    any live pid, and a reused pid is not seen."""
    if not _PROC:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return ""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may hold spaces and parentheses
    if fields[0] in ("Z", "X"):
        return None
    return f"{_BOOT}:{fields[19]}"


@dataclass
class _Process:
    """This process's connection to the file (never used by a forked child) and its identity."""

    pid: int
    identity: str
    conn: sqlite3.Connection
    lock: threading.Lock


class SqliteRateLimiter:
    """The embedded limiter: one SQLite file shared by every process serving the data directory.
    The AWS deployment keeps the same limits in DynamoDB (adapters/aws/dynamodb.py)."""

    def __init__(
        self,
        path: Path,
        clock: Callable[[], float] | None = None,
        busy_timeout: float = 10.0,
        wall: Callable[[], float] | None = None,
    ):
        """`clock`: the windows' clock (default: monotonic); `wall`: the reset header's (default: the
        wall clock, or `clock` when one is given alone, as tests do)."""
        self.path = path
        self._clock = clock or time.monotonic
        self._wall = wall or clock or time.time
        self._busy_timeout = busy_timeout
        self._processes: dict[int, _Process] = {}
        if not path.exists():
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        here = self._here()
        with here.lock:
            here.conn.executescript(SCHEMA)
            with _transaction(here.conn):
                self._clear_dead(here, None)
                here.conn.execute("DELETE FROM hits WHERE at > ?", (self._clock() + FUTURE_SECONDS,))

    def acquire(self, key_id: str, limits: RateLimits, synthesis: bool) -> RateDecision:
        """Count one request and hold one concurrency slot, if every limit allows it."""
        now = self._clock()
        key = _key(key_id)
        here = self._here()
        with here.lock, _transaction(here.conn) as conn:
            conn.execute("DELETE FROM hits WHERE at <= ? OR at > ?", (now - WINDOW_SECONDS, now + FUTURE_SECONDS))
            count, oldest, synth_count, synth_oldest = conn.execute(WINDOWS, (key, now - WINDOW_SECONDS)).fetchone()
            decision = decide(
                limits,
                synthesis,
                now,
                Window(count, oldest),
                Window(synth_count, synth_oldest),
                lambda: self._active(here, key, limits.concurrent),
            )
            # The window's end, from the windows' clock to wall-clock seconds.
            reset = math.ceil(round(self._wall() + (decision.reset_epoch - now), 6))
            decision = dataclasses.replace(decision, reset_epoch=reset)
            if decision.allowed:
                conn.execute("INSERT INTO hits(key, at, synthesis) VALUES (?, ?, ?)", (key, now, int(synthesis)))
                conn.execute("INSERT INTO slots(key, pid, process) VALUES (?, ?, ?)", (key, here.pid, here.identity))
        return decision

    def release(self, key_id: str) -> None:
        here = self._here()
        with here.lock:
            here.conn.execute(RELEASE, (_key(key_id), here.pid, here.identity))

    def _active(self, here: _Process, key: bytes, limit: int) -> int:
        """The key's slots held by live processes; the dead holders' slots are cleared when they count."""
        held = here.conn.execute("SELECT COUNT(*) FROM slots WHERE key = ?", (key,)).fetchone()[0]
        if held >= limit and self._clear_dead(here, key):
            held = here.conn.execute("SELECT COUNT(*) FROM slots WHERE key = ?", (key,)).fetchone()[0]
        return held

    def _clear_dead(self, here: _Process, key: bytes | None) -> int:
        """Delete every slot of each holder (of the key's slots, or of any) that is no longer alive."""
        holders = here.conn.execute(HOLDERS, (key,)).fetchall()
        dead = [(pid, process) for pid, process in holders if process_identity(pid) != process]
        for pid, process in dead:
            here.conn.execute("DELETE FROM slots WHERE pid = ? AND process = ?", (pid, process))
        return len(dead)

    def _here(self) -> _Process:
        """This process's connection: a child forked from a process that had one opens its own."""
        pid = os.getpid()
        here = self._processes.get(pid)
        if here is None:
            identity = process_identity(pid)
            assert identity is not None, "this process is alive"
            conn = sqlite3.connect(
                str(self.path), isolation_level=None, check_same_thread=False, timeout=self._busy_timeout
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            here = self._processes.setdefault(pid, _Process(pid, identity, conn, threading.Lock()))
        return here


def _key(key_id: str) -> bytes:
    return hashlib.sha256(key_id.encode("utf-8", "surrogatepass")).digest()


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")

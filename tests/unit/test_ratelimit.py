"""The embedded rate limiter on a real SQLite file, shared by real OS processes (forked), and the
tests' in-memory fake of the port held to the same behaviour."""

from __future__ import annotations

import math
import multiprocessing
import sqlite3
import stat
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ragmcp.adapters.local.ratelimit import SqliteRateLimiter, process_identity
from ragmcp.security.models import RateLimits
from ragmcp.security.ports import RateLimiter
from tests.fakes import MemoryRateLimiter

T0 = 1_800_000_000.0
FORK = multiprocessing.get_context("fork")


class Clock:
    def __init__(self, now: float = T0):
        self.now = now

    def __call__(self) -> float:
        return self.now


Make = Callable[[Clock], RateLimiter]


@pytest.fixture(params=["sqlite", "memory"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Make:
    if request.param == "sqlite":
        return lambda clock: SqliteRateLimiter(tmp_path / "ratelimits.db", clock=clock)
    return lambda clock: MemoryRateLimiter(clock=clock)


def rows(path: Path, table: str) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]


def test_the_limiter_holds_5_concurrent_slots_per_key(make: Make) -> None:
    limiter = make(Clock())
    limits = RateLimits()
    held = [limiter.acquire("k1", limits, synthesis=False) for _ in range(5)]
    assert all(d.allowed for d in held) and [d.remaining for d in held] == [59, 58, 57, 56, 55]
    sixth = limiter.acquire("k1", limits, synthesis=False)
    assert not sixth.allowed and sixth.reason == "more than 5 concurrent requests" and sixth.remaining == 55
    assert limiter.acquire("k2", limits, synthesis=False).allowed  # another key has its own slots
    limiter.release("k1")
    again = limiter.acquire("k1", limits, synthesis=False)
    assert again.allowed and again.remaining == 54


def test_a_refused_request_is_not_counted_and_the_window_slides(make: Make) -> None:
    clock = Clock()
    limiter = make(clock)
    limits = RateLimits(per_minute=3, synthesis_per_minute=1, concurrent=100)
    reset = math.ceil(T0 + 60)
    first = limiter.acquire("k", limits, synthesis=True)
    assert (first.allowed, first.limit, first.remaining, first.reset_epoch) == (True, 3, 2, reset)
    clock.now = T0 + 10.5
    refused = limiter.acquire("k", limits, synthesis=True)
    assert not refused.allowed and refused.reason == "more than 1 synthesis calls a minute"
    assert (refused.remaining, refused.reset_epoch) == (2, reset)
    assert [limiter.acquire("k", limits, synthesis=False).remaining for _ in range(2)] == [1, 0]
    full = limiter.acquire("k", limits, synthesis=False)
    assert not full.allowed and full.reason == "more than 3 requests a minute" and full.remaining == 0
    assert full.reset_epoch == reset
    clock.now = T0 + 60  # the first request leaves the window; the refused ones never entered it
    synth = limiter.acquire("k", limits, synthesis=True)
    assert synth.allowed and synth.remaining == 0 and synth.reset_epoch == math.ceil(T0 + 10.5 + 60)
    clock.now = T0 + 200
    assert limiter.acquire("k", limits, synthesis=True).remaining == 2


def test_the_file_is_private_in_wal_mode_and_keeps_a_minute_of_requests(tmp_path: Path) -> None:
    path = tmp_path / "data" / "ratelimits.db"
    clock = Clock()
    limiter = SqliteRateLimiter(path, clock=clock)
    for n in range(200):
        assert limiter.acquire(f"key {n}", RateLimits(), synthesis=n % 2 == 0).allowed
        limiter.release(f"key {n}")
    assert rows(path, "hits") == 200 and rows(path, "slots") == 0
    clock.now = T0 + 60
    assert limiter.acquire("key 0", RateLimits(), synthesis=False).remaining == 59
    assert rows(path, "hits") == 1  # every other key's window was pruned, not only this one's
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in path.parent.iterdir())


HOSTILE = [
    "' OR 1=1; DROP TABLE hits; --",
    'k"); DELETE FROM slots; --',
    "ключ 🔑 \u202e\u200b مفتاح",
    "x" * 10_240,
    "lone \ud800 surrogate",
    "",
]


def test_hostile_key_ids_are_counted_apart_and_harm_nothing(tmp_path: Path) -> None:
    path = tmp_path / "ratelimits.db"
    limiter = SqliteRateLimiter(path, clock=Clock())
    limits = RateLimits(per_minute=2, concurrent=1)
    for key in HOSTILE:
        assert limiter.acquire(key, limits, synthesis=True).allowed, key[:40]
        assert limiter.acquire(key, limits, synthesis=False).reason == "more than 1 concurrent requests"
        limiter.release(key)
        assert limiter.acquire(key, limits, synthesis=False).remaining == 0
        assert limiter.acquire(key, limits, synthesis=False).reason == "more than 2 requests a minute"
    assert rows(path, "hits") == 2 * len(HOSTILE) and rows(path, "slots") == len(HOSTILE)
    assert limiter.acquire("x" * 10_239, limits, synthesis=False).remaining == 1  # a near-twin is another key


def test_a_long_write_transaction_in_the_index_database_does_not_hold_a_request_up(tmp_path: Path) -> None:
    index = sqlite3.connect(tmp_path / "ragmcp.db", isolation_level=None)
    index.execute("PRAGMA journal_mode=WAL")
    index.execute("CREATE TABLE chunks(text TEXT)")
    index.execute("BEGIN IMMEDIATE")
    index.execute("INSERT INTO chunks VALUES ('an ingest that has not committed')")
    try:
        limiter = SqliteRateLimiter(tmp_path / "ratelimits.db", busy_timeout=0.0)
        assert limiter.acquire("k", RateLimits(), synthesis=False).allowed
    finally:
        index.execute("ROLLBACK")
        index.close()


def _hammer(limiter: SqliteRateLimiter | Path, key: str, limits: RateLimits, attempts: int, release: bool,
            start, finish, results) -> None:  # fmt: skip
    """In a child process: `attempts` acquires (a millisecond apart, so that the two children's
    interleave) once both are ready, the allowed count on `results`, and (holding whatever slots
    it kept) alive until `finish`."""
    own = limiter if isinstance(limiter, SqliteRateLimiter) else SqliteRateLimiter(limiter)
    start.wait(30)
    allowed = 0
    for _ in range(attempts):
        if own.acquire(key, limits, synthesis=False).allowed:
            allowed += 1
            if release:
                own.release(key)
        time.sleep(0.001)
    results.put(allowed)
    finish.wait(30)


def _race(target: SqliteRateLimiter | Path, key: str, limits: RateLimits, attempts: int, release: bool) -> list[int]:
    start, finish, results = FORK.Barrier(2), FORK.Event(), FORK.Queue()
    args = (target, key, limits, attempts, release, start, finish, results)
    children = [FORK.Process(target=_hammer, args=args) for _ in range(2)]
    for child in children:
        child.start()
    try:
        counts = [results.get(timeout=60) for _ in children]
    finally:
        finish.set()
        for child in children:
            child.join(30)
    assert [child.exitcode for child in children] == [0, 0]
    return counts


def test_the_per_minute_limit_holds_across_two_processes(tmp_path: Path) -> None:
    limiter = SqliteRateLimiter(tmp_path / "ratelimits.db")  # each forked child opens its own connection
    limits = RateLimits(per_minute=40, concurrent=10_000)
    counts = _race(limiter, "shared key", limits, attempts=60, release=True)
    assert sum(counts) == 40, counts
    refused = limiter.acquire("shared key", limits, synthesis=False)
    assert not refused.allowed and refused.reason == "more than 40 requests a minute"


def test_the_concurrent_limit_holds_across_two_processes_and_leaves_with_them(tmp_path: Path) -> None:
    path = tmp_path / "ratelimits.db"
    limits = RateLimits(per_minute=1_000, concurrent=7)
    counts = _race(path, "shared key", limits, attempts=10, release=False)
    assert sum(counts) == 7, counts
    assert rows(path, "slots") == 7  # the children exited holding them
    mine = SqliteRateLimiter(path)  # opening the file clears the slots of processes that are gone
    assert rows(path, "slots") == 0
    assert all(mine.acquire("shared key", limits, synthesis=False).allowed for _ in range(7))


def _hold(path: Path, key: str, slots: int, held) -> None:
    limiter = SqliteRateLimiter(path)
    for _ in range(slots):
        assert limiter.acquire(key, RateLimits(concurrent=slots), synthesis=False).allowed
    held.set()
    time.sleep(120)


def test_a_killed_process_does_not_hold_its_slots(tmp_path: Path) -> None:
    path = tmp_path / "ratelimits.db"
    mine = SqliteRateLimiter(path)
    limits = RateLimits(concurrent=2)
    held = FORK.Event()
    child = FORK.Process(target=_hold, args=(path, "k", 2, held))
    child.start()
    try:
        assert held.wait(30)
        refused = mine.acquire("k", limits, synthesis=False)
        assert not refused.allowed and refused.reason == "more than 2 concurrent requests"
        child.kill()
        deadline = time.monotonic() + 10
        while process_identity(child.pid) is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        # Dead and not yet reaped (a zombie): its slots no longer count.
        assert mine.acquire("k", limits, synthesis=False).allowed
        assert rows(path, "slots") == 1
    finally:
        child.kill()
        child.join(30)


def test_slots_left_under_this_pid_by_an_earlier_process_do_not_count(tmp_path: Path) -> None:
    path = tmp_path / "ratelimits.db"
    limiter = SqliteRateLimiter(path)
    limits = RateLimits(concurrent=2)
    assert all(limiter.acquire("k", limits, synthesis=False).allowed for _ in range(2))
    assert not limiter.acquire("k", limits, synthesis=False).allowed
    with sqlite3.connect(path) as conn:  # as if a process before us had had our pid (another start, or boot)
        conn.execute("UPDATE slots SET process = 'another-boot:12345'")
    assert limiter.acquire("k", limits, synthesis=False).allowed
    assert rows(path, "slots") == 1


def test_windows_follow_a_monotonic_clock_not_the_wall_clock(tmp_path: Path) -> None:
    """A wall clock stepped back an hour (NTP, an operator) must not lock a key out for that hour;
    the reset header still says wall-clock seconds."""
    assert SqliteRateLimiter(tmp_path / "default.db")._clock is time.monotonic
    mono, wall = Clock(5_000.0), Clock(T0)
    limiter = SqliteRateLimiter(tmp_path / "ratelimits.db", clock=mono, wall=wall)
    limits = RateLimits(per_minute=2)
    for _ in range(2):
        assert limiter.acquire("k", limits, synthesis=False).allowed
        limiter.release("k")
    refused = limiter.acquire("k", limits, synthesis=False)
    assert not refused.allowed and refused.reset_epoch == math.ceil(T0 + 60)
    wall.now -= 3600  # the wall clock steps back an hour
    mono.now += 61  # while a minute passes
    assert limiter.acquire("k", limits, synthesis=False).allowed


def test_window_entries_from_another_boot_are_cleared(tmp_path: Path) -> None:
    path = tmp_path / "ratelimits.db"
    before = SqliteRateLimiter(path, clock=Clock(90_000.0))  # the last boot had run a day
    limits = RateLimits(per_minute=1)
    assert before.acquire("k", limits, synthesis=False).allowed
    after = SqliteRateLimiter(path, clock=Clock(30.0))  # rebooted: the monotonic clock starts again
    assert after.acquire("k", limits, synthesis=False).allowed

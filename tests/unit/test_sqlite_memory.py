"""SQLite's memory in a process with many connections (issue 31: each thread of a server process reads
through its own connection; at 1M chunks every one of them filled its own 64 MB page cache and mapped
the first 256 MB of the database, counted again in the resident memory by each mapping). The page
caches of all a process's connections together stay within one process-wide budget, and database
pages are read through the OS page cache rather than mapped once per connection."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ragmcp.adapters.local.database import SQLITE_HEAP_BYTES, Database

pytestmark = pytest.mark.slow  # writes and reads a 48 MB database five times over


def _resident_mb() -> int:
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(status["VmRSS"].split()[0]) // 1024


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads Linux's /proc")
def test_connections_on_many_threads_share_one_cache_budget(tmp_path):
    db = Database(tmp_path / "t.db")
    with db.write() as conn:
        conn.execute("CREATE TABLE blobs(id INTEGER PRIMARY KEY, data BLOB)")
        conn.executemany("INSERT INTO blobs(data) VALUES (randomblob(16000))", [()] * 3000)  # 48 MB
    threads, scanned, release = 5, threading.Barrier(6, timeout=60), threading.Event()

    def scan() -> None:
        db.conn().execute("SELECT sum(length(data)) FROM blobs").fetchone()  # every page, on this thread's connection
        scanned.wait()
        release.wait(60)

    before = _resident_mb()
    workers = [threading.Thread(target=scan) for _ in range(threads)]
    for worker in workers:
        worker.start()
    try:
        scanned.wait()  # five connections alive, each having read the whole file
        grown = _resident_mb() - before
    finally:
        release.set()
        for worker in workers:
            worker.join()
    # Five private caches (or mappings) of the whole file would be 240 MB; one budget holds them.
    assert grown <= SQLITE_HEAP_BYTES // 2**20 + 24, grown

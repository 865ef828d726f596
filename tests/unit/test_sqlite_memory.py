"""SQLite's memory in a process with many connections (issue 31: each thread of a server process reads
through its own connection; at 1M chunks every one of them filled its own 64 MB page cache). The page
caches of all a process's connections together stay within one process-wide budget. The page caches
are the process's own (anonymous) memory; the database's mapped pages are the OS page cache's, held
once however many connections map them, so the test counts anonymous memory."""


from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ragmcp.adapters.local import database
from ragmcp.adapters.local.database import SQLITE_HEAP_BYTES, Database

pytestmark = pytest.mark.slow  # writes and reads a 48 MB database five times over


def _anonymous_mb() -> int:
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(status["RssAnon"].split()[0]) // 1024


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads Linux's /proc")
def test_connections_on_many_threads_share_one_cache_budget(tmp_path, monkeypatch):
    monkeypatch.setattr(database, "MMAP_BYTES", 0)  # as the pages of a database larger than the mapping
    db = Database(tmp_path / "t.db")
    with db.write() as conn:
        conn.execute("CREATE TABLE blobs(id INTEGER PRIMARY KEY, data BLOB)")
        # 48 MB in rows of one page each: the caches hold them (overflow pages are read past the caches)
        conn.executemany("INSERT INTO blobs(data) VALUES (randomblob(1000))", [()] * 48_000)
    threads, scanned, release = 5, threading.Barrier(6, timeout=60), threading.Event()

    def scan() -> None:
        db.conn().execute("SELECT sum(length(hex(data))) FROM blobs").fetchone()  # every page, on this thread
        scanned.wait()
        release.wait(60)

    before = _anonymous_mb()
    workers = [threading.Thread(target=scan) for _ in range(threads)]
    for worker in workers:
        worker.start()
    try:
        scanned.wait()  # five connections alive, each having read the whole file
        grown = _anonymous_mb() - before
    finally:
        release.set()
        for worker in workers:
            worker.join()
    # Five private caches of the whole file would be 240 MB; one budget holds them.
    assert grown <= SQLITE_HEAP_BYTES // 2**20 + 24, grown

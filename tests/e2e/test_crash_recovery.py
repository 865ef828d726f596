"""`kill -9` of `ragmcp serve` and `ragmcp ingest` at random points of a 100-file ingest.

Each round starts one of them (alternately) on the same data directory, waits until it has
finished a random number of files, then kills it with SIGKILL. Between rounds some files get a
new version, one is removed and one added, so there is always work to interrupt. After the
last kill `ragmcp ingest` runs to the end (the restart), and the data directory must hold:
every file indexed (its current version) or failed, exactly once; no document in the index
without its record or the other way round, none with a missing chunk; as many full-text rows
as chunks; SQLite's integrity check and FTS5's own check passing; no job left queued or
running, and the jobs the kills cut short marked interrupted.

Bounded: small generated files, KILLS rounds, each at most ROUND_LIMIT seconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlean

from tests.conftest import free_port

pytestmark = pytest.mark.e2e

FILES = 100
BROKEN = 3
KILLS = 12
ROUND_LIMIT = 90.0
WORDS = (
    "anchor basalt cobalt delta ember fjord garnet harbor indigo juniper kelp lagoon marble nectar "
    "obsidian pewter quartz rivet saffron tundra umber velvet walnut xenon yarrow zephyr"
).split()


def text_for(rng: random.Random, name: str, version: int) -> str:
    words = " ".join(rng.choice(WORDS) for _ in range(40))
    return f"# {name} version {version}\n\nThe {name} record, version {version}: {words}.\n"


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("RAGMCP_")}


def cli(data_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "ragmcp.cli", "--data-dir", str(data_dir), *args]


def finished_jobs(db: Path) -> int:
    """Jobs a running process has finished so far (0 while the database is not there yet)."""
    if not db.exists():
        return 0
    try:
        conn = sqlean.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
        try:
            return conn.execute("SELECT count(*) FROM jobs WHERE status IN ('succeeded', 'failed')").fetchone()[0]
        finally:
            conn.close()
    except sqlean.DatabaseError:
        return 0


def run_and_kill(command: list[str], db: Path, rng: random.Random, log: Path) -> bool:
    """Start the command, let it finish 1-6 more files (or run ROUND_LIMIT), SIGKILL it; whether
    the kill came before it ended by itself."""
    before = finished_jobs(db)
    wanted = before + rng.randint(1, 6)
    with log.open("ab") as sink:
        process = subprocess.Popen(command, env=env(), stdout=sink, stderr=sink)
    deadline = time.monotonic() + ROUND_LIMIT
    while process.poll() is None and time.monotonic() < deadline and finished_jobs(db) < wanted:
        time.sleep(0.02)
    time.sleep(rng.uniform(0, 0.3))
    killed = process.poll() is None
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    return killed


def sha(data: bytes) -> str:
    return hashlib.sha256(data + b"\0").hexdigest()


def test_sigkill_at_random_points_of_an_ingest_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    rng = random.Random(1515)
    docs, data_dir = tmp_path / "docs", tmp_path / "data"
    docs.mkdir()
    versions: dict[str, int] = {}
    for n in range(FILES):
        name = f"record-{n:03d}.md"
        versions[name] = 1
        (docs / name).write_text(text_for(rng, name, 1))
    broken = [f"broken-{n}.docx" for n in range(BROKEN)]
    for name in broken:
        (docs / name).write_bytes(b"PK\x03\x04 not a zip" + rng.randbytes(200))
    db, log = data_dir / "ragmcp.db", tmp_path / "runs.log"

    kills = 0
    for round_ in range(KILLS):
        if round_ % 2 == 0:
            command = cli(data_dir, "ingest", str(docs))
        else:
            command = cli(data_dir, "serve", "--open", "--no-watch", "--docs", str(docs), "--port", str(free_port()))
        kills += run_and_kill(command, db, rng, log)
        for name in rng.sample(sorted(versions), 6):  # new versions: work for the next round
            versions[name] += 1
            (docs / name).write_text(text_for(rng, name, versions[name]))
        if round_ % 3 == 2:
            gone = rng.choice(sorted(versions))
            (docs / gone).unlink()
            del versions[gone]
            added = f"record-new-{round_:02d}.md"
            versions[added] = 1
            (docs / added).write_text(text_for(rng, added, 1))
    assert kills >= 10, log.read_text()[-3000:]

    restart = subprocess.run(cli(data_dir, "ingest", str(docs)), env=env(), capture_output=True, text=True, timeout=300)
    assert restart.returncode == 0, restart.stderr[-3000:]
    assert restart.stdout.strip().endswith(f"{BROKEN} failed"), restart.stdout

    conn = sqlean.connect(str(db))
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")  # raises if FTS is off
        chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        assert conn.execute("SELECT count(*) FROM chunks_fts_docsize").fetchone()[0] == chunks

        statuses = dict(conn.execute("SELECT status, count(*) FROM jobs GROUP BY status").fetchall())
        assert statuses.get("running", 0) == 0 and statuses.get("queued", 0) == 0, statuses
        assert statuses.get("interrupted", 0) >= 1, statuses

        records = {
            (tenant, doc_id): json.loads(doc_json)
            for tenant, doc_id, doc_json in conn.execute("SELECT tenant, doc_id, doc_json FROM documents")
        }
        indexed = {
            (tenant, doc_id): (row, json.loads(doc_json))
            for row, tenant, doc_id, doc_json in conn.execute("SELECT id, tenant, doc_id, doc_json FROM idx_docs")
        }
        assert set(records) == set(indexed), "index entries and document records differ"
        for key, (row, doc) in indexed.items():
            stored = conn.execute("SELECT count(*) FROM chunks WHERE doc = ?", (row,)).fetchone()[0]
            assert stored == doc["chunk_count"] == records[key]["chunk_count"] >= 1, key

        by_path: dict[str, list[dict]] = {}
        for doc in records.values():
            by_path.setdefault(doc["path"], []).append(doc)
        assert set(by_path) == set(versions), "a file is missing, or a removed one stayed"
        for name, version in versions.items():
            [doc] = by_path[name]  # exactly once
            assert doc["content_hash"] == sha((docs / name).read_bytes()), (name, version)
            assert not doc["stale"]
        for name in broken:
            last = conn.execute(
                "SELECT status FROM jobs WHERE json_extract(job_json, '$.target') = ? ORDER BY created_at DESC LIMIT 1",
                (name,),
            ).fetchone()
            assert last == ("failed",) and name not in by_path
        numbers = [n for (n,) in conn.execute("SELECT number FROM doc_numbers WHERE tenant = 'default'")]
        assert len(numbers) == len(set(numbers))
    finally:
        conn.close()

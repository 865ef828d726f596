"""Crash recovery and document numbers on the embedded database.

Jobs a dead process left running are marked interrupted and their files redone, but only when
no other process works on the data directory; a document and its index entry are written in one
transaction; documents are numbered at random, once (a number says nothing of how many there are).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from contextlib import nullcontext
from pathlib import Path

import pytest

from ragmcp.adapters.local.database import Database
from ragmcp.adapters.local.recovery import DataDirLock, recover, recover_dead_process, redo_all
from ragmcp.adapters.local.sqlite_stores import SqliteDocumentStore, SqliteJobStore
from ragmcp.bootstrap import build_services
from ragmcp.domain.models import DOCUMENT_NUMBERS, Job
from ragmcp.settings import Settings


def reader_pid(services, job_id: str) -> int:
    """The pid of the process that recorded the job."""
    row = services.database.conn().execute("SELECT owner FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
    return int(row[0].split(":")[0])


def running(tenant: str, target: str, status: str = "running", kind: str = "ingest") -> Job:
    return Job(job_id=f"{tenant}-{target}", tenant=tenant, type=kind, status=status, target=target, source="docs")


def test_unfinished_jobs_of_a_dead_process_are_interrupted_and_redone(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nAlpha particles are helium nuclei.\n")
    services = build_services(Settings(data_dir=tmp_path / "data"))
    services.register_folder("default", "docs", str(docs))
    jobs = SqliteJobStore(services.database)
    for job in (running("default", "a.md"), running("other", "b.md", "queued"), running("default", "z.md", "failed")):
        jobs.put(job)

    redo = recover(jobs, DataDirLock(tmp_path / "data"))
    assert [(r.tenant, r.source, r.path) for r in redo] == [("default", "docs", "a.md"), ("other", "docs", "b.md")]
    assert len(jobs.unfinished()) == 2  # marked once redone: a kill before then leaves them to find again

    redo_all(services.ingest, services.sources, redo, jobs)  # tenant "other" has no source "docs": skipped
    interrupted = jobs.get("default", "default-a.md")
    assert interrupted.status == "interrupted" and "stopped while it was running" in interrupted.error
    assert jobs.get("other", "other-b.md").status == "interrupted"
    assert jobs.get("default", "default-z.md").status == "failed"
    assert jobs.unfinished() == []
    [doc] = services.documents.by_path("default", "docs", "a.md")
    assert doc.chunk_count == 1 and not doc.stale


def test_nothing_is_recovered_while_another_process_works_on_the_data_directory(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    jobs = SqliteJobStore(Database(data_dir / "ragmcp.db"))
    jobs.put(running("default", "a.md"))
    other = DataDirLock(data_dir)  # another process's lock: a separate open file, shared
    assert other.acquire() is True
    other.share()
    assert recover(jobs, DataDirLock(data_dir)) == []
    assert jobs.get("default", "default-a.md").status == "running"


def test_a_failed_write_leaves_neither_the_index_entry_nor_the_document(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nAlpha particles are helium nuclei.\n")
    services = build_services(Settings(data_dir=tmp_path / "data"))
    source = services.register_folder("default", "docs", str(docs))

    def refuse(doc: object) -> None:
        raise OSError("disk full")

    store_put = services.documents.put
    services.ingest.documents.put = refuse  # the write after the index's, in the same transaction
    job = services.ingest.ingest(source, "a.md")
    assert job is not None and job.status == "failed" and "OSError" in job.error
    services.ingest.documents.put = store_put
    conn = services.database.conn()
    assert conn.execute("SELECT count(*) FROM idx_docs").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM chunks").fetchone()[0] == 0
    assert services.documents.list("default") == []


def test_document_numbers_are_drawn_at_random_and_kept(tmp_path: Path) -> None:
    """A number says nothing of how many documents the tenant (or another) holds: drawn at random,
    once, never two alike in a tenant."""
    store = SqliteDocumentStore(Database(tmp_path / "ragmcp.db"))
    order = ["acme", "globex", "acme", "globex", "globex", "acme", "initech"] * 5
    numbers = [store.number_for(tenant, f"docs:{i}.md") for i, tenant in enumerate(order)]
    assert all(1 <= n <= DOCUMENT_NUMBERS for n in numbers)
    for tenant in set(order):
        mine = [n for n, t in zip(numbers, order, strict=True) if t == tenant]
        assert len(set(mine)) == len(mine)
    assert max(numbers) > 1000 * len(numbers)  # not 1, 2, 3 ...
    assert [store.number_for(tenant, f"docs:{i}.md") for i, tenant in enumerate(order)] == numbers  # assigned once


def test_a_database_with_one_shared_counter_keeps_its_numbers(tmp_path: Path) -> None:
    path = tmp_path / "ragmcp.db"
    db = Database(path)
    with db.write() as conn:
        conn.execute("DROP TABLE doc_numbers")
        conn.execute(
            "CREATE TABLE doc_numbers(number INTEGER PRIMARY KEY AUTOINCREMENT, tenant TEXT NOT NULL,"
            " doc_id TEXT NOT NULL, UNIQUE(tenant, doc_id))"
        )
        conn.executemany(
            "INSERT INTO doc_numbers(tenant, doc_id) VALUES (?, ?)",
            [("acme", "docs:a"), ("globex", "docs:b"), ("acme", "docs:c")],
        )
    migrated = SqliteDocumentStore(Database(path))
    kept = [("acme", "docs:a"), ("globex", "docs:b"), ("acme", "docs:c")]
    assert [migrated.number_for(tenant, doc_id) for tenant, doc_id in kept] == [1, 2, 3]
    assert migrated.number_for("globex", "docs:new") not in (2, 3)  # a new one is drawn, not counted
    assert not migrated.db.autoincrement("doc_numbers")


@pytest.mark.parametrize("nested_fails", [False, True])
def test_a_write_inside_a_write_commits_or_rolls_back_with_it(tmp_path: Path, nested_fails: bool) -> None:
    db = Database(tmp_path / "ragmcp.db")
    with pytest.raises(RuntimeError) if nested_fails else nullcontext(), db.write() as outer:
        outer.execute("INSERT INTO meta(key, value) VALUES ('outer', '1')")
        with db.write() as inner:
            inner.execute("INSERT INTO meta(key, value) VALUES ('inner', '1')")
            if nested_fails:
                raise RuntimeError("inner write failed")
    found = {k for (k,) in db.conn().execute("SELECT key FROM meta WHERE key IN ('outer', 'inner')")}
    assert found == (set() if nested_fails else {"outer", "inner"})


def test_a_second_kill_before_the_redo_runs_loses_nothing(tmp_path: Path) -> None:
    """The redo list is the job records themselves: a process killed after recovery found the
    unfinished jobs and before it redid them leaves them for the next start to find again."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nAlpha particles are helium nuclei.\n")
    data_dir = tmp_path / "data"
    services = build_services(Settings(data_dir=data_dir))
    services.register_folder("default", "docs", str(docs))
    jobs = SqliteJobStore(services.database)
    jobs.put(running("default", "a.md"))

    first = DataDirLock(data_dir)
    assert [r.path for r in recover(jobs, first)] == ["a.md"]
    first.close()  # killed before the redo ran: its lock goes with it

    redo = recover(jobs, DataDirLock(data_dir))
    assert [r.path for r in redo] == ["a.md"]
    redo_all(services.ingest, services.sources, redo, jobs)
    assert jobs.unfinished() == []
    assert jobs.get("default", "default-a.md").status == "interrupted"
    [doc] = services.documents.by_path("default", "docs", "a.md")
    assert doc.chunk_count == 1


KILLED_READER = """
import os, signal, sys
from ragmcp.bootstrap import build_services
from ragmcp.domain.models import Job, Principal
from ragmcp.ingest.dropfolder import NOTES
from ragmcp.settings import Settings

services = build_services(Settings(data_dir=sys.argv[1]), reader=True)
principal = Principal(tenant="default")
services.drop.put(principal, NOTES, "n1.md", b"# Note\\n\\nThe heron stood still in the reeds.\\n", [], kind="note")
job = Job(job_id="reader-note", tenant="default", type="note", target="n1.md", source=NOTES)
job.status = "queued"
services.jobs.put(job)
os.kill(os.getpid(), signal.SIGKILL)  # accepted, not yet run: the reader dies here
"""


def test_writes_a_killed_reader_took_are_redone_while_the_writer_runs(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    services = build_services(Settings(data_dir=data_dir))
    writer = DataDirLock(data_dir)
    assert writer.acquire() is True and recover(services.jobs, writer) == []
    reader = subprocess.run([sys.executable, "-c", KILLED_READER, str(data_dir)], capture_output=True, timeout=120)
    assert reader.returncode == -signal.SIGKILL, reader.stderr.decode()[-2000:]
    assert services.jobs.get("default", "reader-note").status == "queued"

    redo = recover_dead_process(services.jobs, reader_pid(services, "reader-note"))
    assert [(r.source, r.path) for r in redo] == [("notes", "n1.md")]
    redo_all(services.ingest, services.sources, redo, services.jobs)
    assert services.jobs.get("default", "reader-note").status == "interrupted"
    [note] = services.documents.by_path("default", "notes", "n1.md")
    assert note.kind == "note" and note.chunk_count == 1

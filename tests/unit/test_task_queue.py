"""The in-process task queue (adapters/local/tasks.py)."""

from __future__ import annotations

import gc
import os
import threading
import weakref
from pathlib import Path

from ragmcp.adapters.local.database import Database
from ragmcp.adapters.local.sqlite_stores import SqliteJobStore
from ragmcp.adapters.local.tasks import ThreadTaskQueue
from ragmcp.domain.models import Job


def open_files_under(folder: Path) -> list[str]:
    names = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            names.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
    return [n for n in names if n.startswith(str(folder))]


def test_a_queue_that_ran_nothing_holds_no_thread_and_lets_its_database_go(tmp_path: Path) -> None:
    """Services built for a one-shot command (`doctor`, `keys`, a check in a test) and dropped kept
    a task-queue thread, and through it their database connections, for the life of the process:
    the operator's-year soak ran out of file descriptors after ~1,100 steps."""
    before = set(threading.enumerate())
    db = Database(tmp_path / "ragmcp.db")
    db.conn().execute("SELECT 1").fetchall()
    queue = ThreadTaskQueue(SqliteJobStore(db))
    assert queue.problem() is None  # a worker not started yet is not a stopped one
    gone = weakref.ref(queue)
    del queue, db
    gc.collect()
    assert gone() is None, "the task queue outlived its last reference"
    assert [t.name for t in threading.enumerate() if t not in before] == []
    assert open_files_under(tmp_path) == []


def test_the_worker_starts_with_the_first_job_and_runs_it(tmp_path: Path) -> None:
    queue = ThreadTaskQueue(SqliteJobStore(Database(tmp_path / "ragmcp.db")))
    ran = threading.Event()
    queue.submit(Job(job_id="j1", tenant="default", type="note"), lambda: {"ran": ran.set() is None})
    queue.join()
    assert ran.is_set()
    assert queue.jobs.get("default", "j1").status == "succeeded"
    assert queue.problem() is None

"""bench scale names the server's processes (a writer and its readers) and splits their CPU a request."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from ragmcp_bench import machine
from ragmcp_bench.bench_scale import Observed, ScaleResult, Served, _per_request, summary, thread_kinds

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")


SPAWNS_TWO = """
import multiprocessing, time
if __name__ == "__main__":
    spawn = multiprocessing.get_context("spawn")  # as serve --workers N starts its readers
    readers = [spawn.Process(target=time.sleep, args=(30,)) for _ in range(2)]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join()
"""


def test_a_process_tree_is_a_writer_and_numbered_readers() -> None:
    """The readers are the spawned processes; multiprocessing's resource tracker, which spawning also
    starts, is a helper (bench scale once listed it as an idle "reader-1")."""
    parent = subprocess.Popen([sys.executable, "-c", SPAWNS_TWO])
    try:
        served = Served("http://127.0.0.1:1/mcp", parent.pid)
        expected = ["helper-1", "reader-1", "reader-2"]

        def children(names: dict[int, str]) -> list[str]:
            return sorted(name for pid, name in names.items() if pid != parent.pid)

        # A child forked but not yet exec'd still shows its parent's command line (not a spawned
        # reader's): wait until every child has started, as a server's readers have when bench scale
        # names them (under load that took longer than the three children's fork).
        deadline = time.monotonic() + 30
        while children(names := served.process_names()) != expected and time.monotonic() < deadline:
            time.sleep(0.05)
        assert names[parent.pid] == "writer"
        assert children(names) == expected
        spent = machine.split(machine.snapshot(names), machine.snapshot(names), names)
        assert set(spent) == {"writer", "reader-1", "reader-2", "helper-1"}
    finally:
        parent.kill()
        parent.wait()
    alone = subprocess.Popen(["sleep", "30"])
    try:
        assert Served("http://127.0.0.1:1/mcp", alone.pid).process_names() == {alone.pid: "server"}
    finally:
        alone.kill()
        alone.wait()


def test_cpu_seconds_become_ms_a_request() -> None:
    spent = {
        "writer": {
            "pid": 1,
            "cpu_s": 2.0,
            "roles": {machine.REQUESTS: 1.0, machine.EMBEDDING: 0.5, machine.BACKGROUND: 0.25},
            "threads": {"python": 1.0, "embed_0": 0.5, "graph-follower": 0.25},
            "ended_threads_s": 0.25,
        }
    }
    writer = _per_request(spent, 100)["writer"]
    assert writer["cpu_ms"] == 20.0 and writer["ended_threads_ms"] == 2.5
    assert writer["roles"] == {machine.REQUESTS: 10.0, machine.EMBEDDING: 5.0, machine.BACKGROUND: 2.5}
    assert writer["threads"]["graph-follower"] == 2.5


def test_a_pool_s_numbered_threads_add_up_to_one_kind() -> None:
    kinds = thread_kinds({"main": 3.0, "search_0": 1.0, "search_1": 2.5, "embed_0": 10.0, "embed_1": 9.0, "tool": 4.0})
    assert kinds == {"embed": 19.0, "tool": 4.0, "search": 3.5, "main": 3.0}
    assert list(kinds) == ["embed", "tool", "search", "main"]


def test_the_summary_says_each_process_s_cpu_by_kind_of_thread() -> None:
    window = machine.Window({"start": [0.5, 0.5, 0.5], "end": [0.6, 0.5, 0.5]}, 0.5, 1.0, 0.0, 0.0, 0.15, True)
    threads = {"main": 4.0, "tool": 4.5, "search_0": 8.0, "search_1": 7.0, "embed_0": 10.0, "embed_1": 9.5}
    reader = {"cpu_ms": 43.5, "roles": {machine.REQUESTS: 23.5, machine.EMBEDDING: 19.5, machine.BACKGROUND: 0.0}}
    idle = {"cpu_ms": 0.0, "roles": {machine.REQUESTS: 0.0, machine.EMBEDDING: 0.0, machine.BACKGROUND: 0.0}}
    processes = {
        "reader-1": {**reader, "threads": threads, "ended_threads_ms": 0.5},
        "reader-2": {**idle, "threads": {}, "ended_threads_ms": 0.0},
    }
    result = ScaleResult(corpus={"dataset": "scifact", "chunks": 10, "documents": 5}, machine={})
    result.observed["1"] = Observed(window, processes)
    text = summary(result)
    assert "| 1 | reader-1 | embed 19.5, search 15.0, tool 4.5, main 4.0, ended threads 0.5 |" in text
    assert "| 1 | reader-2 | ended threads 0.0 |" in text

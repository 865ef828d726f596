"""ragmcp_bench.machine on this very process: threads named through ragmcp.threadnames are seen by
their kernel name, their CPU lands on their role, and a run is marked busy past its stated share."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

from ragmcp.threadnames import name_native_thread
from ragmcp_bench import machine

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")


def _spin(name: str, seconds: float, started: threading.Event, tids: dict[str, int]) -> None:
    name_native_thread()
    tids[name] = threading.get_native_id()
    started.set()
    until = time.thread_time() + seconds
    total = 0
    deadline = time.monotonic() + 20
    while time.thread_time() < until and time.monotonic() < deadline:
        total += sum(range(1000))


def test_named_threads_cpu_lands_on_their_role() -> None:
    tids: dict[str, int] = {}
    before = machine.snapshot([os.getpid()])
    for name in ("embed_0", "task-queue"):
        started = threading.Event()
        thread = threading.Thread(target=_spin, args=(name, 0.1, started, tids), name=name)
        thread.start()
        started.wait(5)
        comm = Path(f"/proc/{os.getpid()}/task/{tids[name]}/comm").read_text().strip()
        assert comm == name
        thread.join()
    after = machine.snapshot([os.getpid()])
    spent = machine.split(before, after, {os.getpid(): "writer"})["writer"]
    # Both threads ended before the second snapshot: their CPU is the process's, not a live thread's.
    assert spent["cpu_s"] >= 0.15
    assert spent["ended_threads_s"] >= 0.1
    assert spent["pid"] == os.getpid()


def test_live_threads_split_by_role() -> None:
    tids: dict[str, int] = {}
    stop = threading.Event()

    used: dict[str, float] = {}

    def work(name: str) -> None:
        name_native_thread()
        tids[name] = threading.get_native_id()
        while not stop.is_set():
            sum(range(1000))
            used[name] = time.thread_time()

    threads = [threading.Thread(target=work, args=(n,), name=n, daemon=True) for n in ("embed_1", "graph-follower")]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 30  # each thread starts and spends 0.1 s of CPU, however busy the machine
        while len(tids) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(tids) == 2, f"only {sorted(tids)} started within 30 s"
        before = machine.snapshot([os.getpid()])
        start = dict(used)
        while time.monotonic() < deadline and any(used.get(n, 0) - start.get(n, 0) < 0.1 for n in tids):
            time.sleep(0.02)
        after = machine.snapshot([os.getpid()])
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    spent = machine.split(before, after, {})[str(os.getpid())]
    assert spent["threads"]["embed_1"] >= 0.08 and spent["threads"]["graph-follower"] >= 0.08
    assert spent["roles"][machine.EMBEDDING] >= spent["threads"]["embed_1"]
    assert spent["roles"][machine.BACKGROUND] >= spent["threads"]["graph-follower"]


def test_roles_by_name() -> None:
    assert machine.thread_role("python", 10, 10, "python") == machine.REQUESTS  # the event loop
    assert machine.thread_role("python", 11, 10, "python") == machine.REQUESTS  # an unnamed worker thread
    assert machine.thread_role("search_3", 12, 10, "python") == machine.REQUESTS
    assert machine.thread_role("embed_0", 13, 10, "python") == machine.EMBEDDING
    assert machine.thread_role("tool", 15, 10, "python") == machine.REQUESTS  # a tool body's (mcp/offloop.py)
    assert machine.thread_role("writer-watch", 14, 10, "python") == machine.BACKGROUND


def test_window_marks_a_busy_machine() -> None:
    watch = machine.Watch(max_other_share=0.0)
    deadline = time.process_time() + 0.1
    while time.process_time() < deadline:
        sum(range(1000))
    # Claim none of this process's CPU as measured: all of it is "other", so the run is busy.
    window = watch.stop(measured_cpu_s=0.0)
    assert window.other_share is not None and window.other_share > 0
    assert window.quiet is False
    assert len(window.load_average["start"]) == 3
    warning = machine.busy_warning({"c=1": window})
    assert warning is not None and "MACHINE BUSY" in warning and "c=1" in warning
    relaxed_watch = machine.Watch(max_other_share=1.0)
    time.sleep(0.05)
    relaxed = relaxed_watch.stop(measured_cpu_s=0.0)
    assert relaxed.quiet is True and machine.busy_warning({"c=1": relaxed}) is None


def test_cpu_names_its_flags() -> None:
    found = machine.cpu()
    assert found["cpus"] == os.cpu_count()
    assert set(found["flags"]) <= set(machine.FLAGS)


def test_runs_are_cut_by_length_and_padding_counted() -> None:
    from ragmcp.adapters.local.onnx_embedder import cut_runs
    from ragmcp_bench.embed_bench import padding

    lengths = [10, 200, 12, 190, 11, 205, 9, 180]
    runs = cut_runs(lengths, batch_size=4, workers=1)
    assert runs == [[6, 0], [4, 2], [7, 3], [1, 5]]  # two a run: at least four runs for the worker
    # Padded to each run's longest: 10+10 + 12+12 + 190+190 + 205+205 tokens for 817 real ones.
    assert padding(lengths, 4, 1) == round(834 / 817 - 1, 4)
    assert padding([50] * 8, 4, 1) == 0.0


def test_the_event_loop_s_thread_is_told_apart_from_unnamed_workers() -> None:
    """The first thread (the server's event loop) is `main`; anyio's workers keep the process's name."""
    before = {10: machine.ProcessSnapshot(10, "python", 0, {10: ("python", 0), 11: ("python", 0), 12: ("tool", 0)})}
    after = {10: machine.ProcessSnapshot(10, "python", 60, {10: ("python", 30), 11: ("python", 10), 12: ("tool", 20)})}
    spent = machine.split(before, after, {10: "server"})["server"]
    assert spent["threads"] == {
        machine.MAIN: 30 / machine.CLOCK_TICKS,
        "python": 10 / machine.CLOCK_TICKS,
        "tool": 20 / machine.CLOCK_TICKS,
    }
    assert spent["roles"][machine.REQUESTS] == 60 / machine.CLOCK_TICKS
    assert spent["ended_threads_s"] == 0

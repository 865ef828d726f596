"""bench scale's memory peak of `serve --workers N` as the processes' PSS summed (issue 31): a page the
processes share (the mapped vector graph) counts once, where the sum of each process's VmHWM counts it in each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ragmcp_bench.bench_scale import Served

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")


def _pss_mb() -> float:
    rollup = Path("/proc/self/smaps_rollup").read_text().splitlines()
    return next(int(line.split()[1]) for line in rollup if line.startswith("Pss:")) / 1024


TAKES_AND_LETS_GO = """
import json, mmap, os
from pathlib import Path
from ragmcp_bench.bench_scale import Served, pss_peak

def own_pss():
    rollup = Path("/proc/self/smaps_rollup").read_text().splitlines()
    return next(int(line.split()[1]) for line in rollup if line.startswith("Pss:")) / 1024

served = Served("http://127.0.0.1:1/mcp", os.getpid())
seen = {"before": own_pss(), "pages_before": served.pages_mb()}
with pss_peak(served, every=60.0) as peak:  # a sample when the block starts, the next when it ends
    held = mmap.mmap(-1, 64 * 2**20)  # 64 MB of new pages (the heap may hold freed ones a bytearray would reuse)
    held.write(os.urandom(1024) * (64 * 1024))  # every page written
    seen["during"] = served.pss_mb()
held.close()
print(json.dumps({**seen, **peak, "after": served.pss_mb()}))
"""


def test_the_peak_holds_memory_taken_and_let_go_while_the_block_ran() -> None:
    """In a process of its own: the suite's process has other children (its tests' servers), whose
    memory moves the sums of its tree while the block runs."""
    ran = subprocess.run([sys.executable, "-c", TAKES_AND_LETS_GO], capture_output=True, text=True, check=True)
    seen = json.loads(ran.stdout)
    assert seen["during"] >= seen["before"] + 60
    assert seen["pss"] >= seen["before"] + 60
    assert seen["pages_before"] is None or seen["pages"] >= seen["pages_before"] + 60  # where frames can be read
    assert seen["after"] < seen["pss"]


def test_a_child_that_ended_unreaped_does_not_hide_the_others() -> None:
    child = subprocess.Popen(["true"])
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the child did not end"
            time.sleep(0.01)  # until it is a zombie: its smaps_rollup then answers "No such process"
        pss = Served("http://127.0.0.1:1/mcp", os.getpid()).pss_mb()
        assert pss is not None and pss >= _pss_mb() * 0.5
    finally:
        child.wait()


def _rss_mb(pid: int) -> float:
    rollup = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
    return next(int(line.split()[1]) for line in rollup if line.startswith("Rss:")) / 1024


MAPS_AND_SPAWNS = """
import mmap, subprocess, sys
with open(sys.argv[1], "rb") as f:
    view = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
sum(view[i] for i in range(0, len(view), 4096))  # every page of the file resident
if sys.argv[2] == "parent":  # and a child of its own mapping the same file
    pipe = subprocess.PIPE
    child = subprocess.Popen(sys.orig_argv[:3] + [sys.argv[1], "child"], stdin=pipe, stdout=pipe, text=True)
    assert child.stdout.readline() == "read\\n"
    print(child.pid, flush=True)
    sys.stdin.read()
    child.communicate("")
else:
    print("read", flush=True)
    sys.stdin.read()
"""


def test_pages_two_processes_map_count_once_in_the_pages_held_together(tmp_path) -> None:
    """A 64 MB file mapped and read by a process and by its child: in the pages the two hold together
    once, in their RSS summed twice (and the PSS sum would give the bench process's own share away).
    The two are a tree of their own: the suite's process has other children (its tests' servers)."""
    if Served("http://127.0.0.1:1/mcp", os.getpid()).pages_mb() is None:
        pytest.skip("page frame numbers need CAP_SYS_ADMIN")
    shared = tmp_path / "shared.bin"
    shared.write_bytes(os.urandom(1024) * (64 * 1024))
    parent = subprocess.Popen(
        [sys.executable, "-c", MAPS_AND_SPAWNS, str(shared), "parent"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        together = Served("http://127.0.0.1:1/mcp", parent.pid).pages_mb()
        apart = _rss_mb(parent.pid) + _rss_mb(child)
        assert together is not None and apart - together >= 60  # the file's pages once, not twice
    finally:
        parent.communicate("")


def test_threads_ending_while_the_tree_is_read_lose_no_sample() -> None:
    """A server's threads end all the time; one that ended between listing a process's tasks and
    reading its children made the whole tree unreadable, so pss_peak lost that sample (its peak then
    missed memory the block held: test_the_peak_holds_memory_taken_and_let_go_while_the_block_ran
    failed so in `make test`)."""
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            short = threading.Thread(target=lambda: None)
            short.start()
            short.join()

    churners = [threading.Thread(target=churn) for _ in range(4)]
    for churner in churners:
        churner.start()
    try:
        served = Served("http://127.0.0.1:1/mcp", os.getpid())
        assert all(served.pss_mb() is not None for _ in range(300))
    finally:
        stop.set()
        for churner in churners:
            churner.join()

"""bench scale's memory peak of `serve --workers N` as the processes' PSS summed (issue 31): a page the
processes share (the mapped vector graph) counts once, where the sum of each process's VmHWM counts it in each."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from ragmcp_bench.bench_scale import Served, pss_peak

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")


def _pss_mb() -> float:
    rollup = Path("/proc/self/smaps_rollup").read_text().splitlines()
    return next(int(line.split()[1]) for line in rollup if line.startswith("Pss:")) / 1024


def test_the_peak_holds_memory_taken_and_let_go_while_the_block_ran() -> None:
    served = Served("http://127.0.0.1:1/mcp", os.getpid())
    before = _pss_mb()
    with pss_peak(served, every=60.0) as peak:  # a sample when the block starts, the next when it ends
        held = bytearray(os.urandom(1024)) * (64 * 1024)  # 64 MB, every page written
        assert served.pss_mb() >= before + 60
    assert peak["pss"] >= before + 60
    del held
    assert served.pss_mb() < peak["pss"]

"""What the machine was doing while a benchmark ran (Linux's /proc): its load average and CPU flags,
the CPU time every process spent that was not the measured one, and the measured processes' CPU
split by process and by thread role.

A figure measured while other work used the cores is not the code's figure: `Window` says what
share of the cores' time went to processes other than the measured ones, and `quiet` whether that
stays within a stated share."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragmcp.mcp.offloop import THREAD_NAME
from ragmcp_bench.bench import machine_ticks

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_int8", "fma")
"""The CPU flags that decide how fast onnxruntime's and faiss's kernels run."""

EMBEDDING, REQUESTS, BACKGROUND = "embedding", "request handling", "background"
MAIN = "main"
"""The process's first thread (the server's event loop) in `split`'s threads by name."""


def cpu() -> dict[str, Any]:
    """The CPU's model, its count and the FLAGS it has (from /proc/cpuinfo; empty elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {"cpus": os.cpu_count()}
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    present = set(fields.get("flags", "").split())
    return {"cpus": os.cpu_count(), "model": fields.get("model name"), "flags": [f for f in FLAGS if f in present]}


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def thread_role(comm: str, tid: int, pid: int, process_comm: str) -> str:
    """A thread's role by its kernel name (ragmcp.threadnames names the code's own threads): the
    embedding pool, request handling (the event loop's main thread, the search pool, the threads
    tool bodies run on (mcp/offloop.py) and the unnamed worker threads requests run on), or
    background (every other named thread)."""
    if comm.startswith("embed"):
        return EMBEDDING
    if tid == pid or comm.startswith(("search", THREAD_NAME)) or comm == process_comm:
        return REQUESTS
    return BACKGROUND


def _ticks(stat: str) -> int:
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


@dataclass
class ProcessSnapshot:
    pid: int
    comm: str
    ticks: int
    """User + system ticks of the process, its exited threads' included."""
    threads: dict[int, tuple[str, int]] = field(default_factory=dict)
    """tid: (kernel name, user + system ticks)."""


def snapshot(pids: Iterable[int]) -> dict[int, ProcessSnapshot]:
    """Each live process of `pids` with its threads' CPU ticks now (processes gone are left out)."""
    taken = {}
    for pid in pids:
        base = Path(f"/proc/{pid}")
        try:
            process = ProcessSnapshot(pid, (base / "comm").read_text().strip(), _ticks((base / "stat").read_text()))
            for task in (base / "task").iterdir():
                try:
                    comm = (task / "comm").read_text().strip()
                    process.threads[int(task.name)] = (comm, _ticks((task / "stat").read_text()))
                except OSError:  # the thread ended while being read
                    continue
        except OSError:
            continue
        taken[pid] = process
    return taken


def split(
    before: dict[int, ProcessSnapshot], after: dict[int, ProcessSnapshot], names: dict[int, str]
) -> dict[str, dict[str, Any]]:
    """CPU seconds between two snapshots, by process (named by `names`, pid otherwise): in all, by
    thread role, by thread name (the first thread as MAIN), and spent by threads that ended in
    between ("ended threads")."""
    out: dict[str, dict[str, Any]] = {}
    for pid, late in after.items():
        early = before.get(pid, ProcessSnapshot(pid, late.comm, 0))
        roles = {EMBEDDING: 0, REQUESTS: 0, BACKGROUND: 0}
        by_name: dict[str, int] = {}
        for tid, (comm, ticks) in late.threads.items():
            spent = ticks - early.threads.get(tid, (comm, 0))[1]
            role = thread_role(comm, tid, pid, late.comm)
            roles[role] += spent
            name = MAIN if tid == pid else comm
            by_name[name] = by_name.get(name, 0) + spent
        total = late.ticks - early.ticks
        out[names.get(pid, str(pid))] = {
            "pid": pid,
            "cpu_s": total / CLOCK_TICKS,
            "roles": {role: ticks / CLOCK_TICKS for role, ticks in roles.items()},
            "threads": {name: ticks / CLOCK_TICKS for name, ticks in sorted(by_name.items()) if ticks},
            "ended_threads_s": max(0, total - sum(roles.values())) / CLOCK_TICKS,
        }
    return out


@dataclass
class Window:
    """The machine over one measured run."""

    load_average: dict[str, list[float]]
    """1/5/15-minute load averages at the start and at the end."""
    busy: float | None
    """Share of every core's time not idle."""
    measured_cpu_s: float
    """CPU seconds of the measured processes (the server's, the benchmark's own)."""
    other_cpu_s: float | None
    """CPU seconds of every other process on the machine (its busy time less the measured)."""
    other_share: float | None
    """other_cpu_s over every core's time in the run: the share of the machine others took."""
    max_other_share: float
    quiet: bool | None
    """other_share <= max_other_share (None without /proc/stat: not known)."""


class Watch:
    """Started before a run, `stop`ped after it: the Window, given the CPU seconds the measured
    processes spent in between."""

    def __init__(self, max_other_share: float):
        self.max_other_share = max_other_share
        self._load, self._ticks = load_average(), machine_ticks()

    def stop(self, measured_cpu_s: float) -> Window:
        load, ticks = load_average(), machine_ticks()
        busy = other = share = None
        if self._ticks is not None and ticks is not None and ticks[0] > self._ticks[0]:
            all_ticks, idle = ticks[0] - self._ticks[0], ticks[1] - self._ticks[1]
            busy = round(1 - idle / all_ticks, 3)
            other = max(0.0, (all_ticks - idle) / CLOCK_TICKS - measured_cpu_s)
            share = round(other * CLOCK_TICKS / all_ticks, 3)
            other = round(other, 2)
        return Window(
            load_average={"start": self._load, "end": load},
            busy=busy,
            measured_cpu_s=round(measured_cpu_s, 2),
            other_cpu_s=other,
            other_share=share,
            max_other_share=self.max_other_share,
            quiet=None if share is None else share <= self.max_other_share,
        )


def busy_warning(windows: dict[str, Window]) -> str | None:
    """A loud line naming the runs whose machine was busier than their limit, or None."""
    busy = {label: w for label, w in windows.items() if w.quiet is False}
    if not busy:
        return None
    runs = ", ".join(f"{label} ({w.other_share:.0%} of the cores to other processes)" for label, w in busy.items())
    limit = next(iter(busy.values())).max_other_share
    return (
        f"**MACHINE BUSY: not a result.** Other processes took more than {limit:.0%} of the cores during: {runs}."
        " Measure again on a quiet machine, or compare only ratios taken side by side."
    )

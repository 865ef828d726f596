"""`ragmcp bench hostile`: issue 29's hostile files, at the issue's sizes, among ordinary files in
one folder served by `ragmcp serve --docs`; the server's process tree's resident memory sampled
through the first sync (its parse workers included), each file's outcome, and whether the ordinary
files were indexed.

The tree's memory is the sum of its processes' VmRSS read together every 50 ms (a worker that is
killed takes its own high-water mark with it, so the sum is sampled, not read from VmHWM); the
server's own VmHWM is reported beside it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ragmcp_bench import hostile
from ragmcp_bench.bench_scale import _process_tree, free_port

BUDGET_MB = 1536.0
"""Issue 29: the server's resident memory stays under 1.5 GB on the mixed hostile folder."""


@dataclass
class HostileRun:
    files: dict[str, str]
    """Each file's outcome: "indexed (N chunks)" or the reason it failed."""
    sync_line: str
    seconds: float
    peak_tree_mb: float
    """The server's processes' resident memory summed, at its sampled peak through the sync."""
    peak_server_mb: float
    """The server process's own high-water mark (VmHWM)."""
    after_tree_mb: float
    """The tree's resident memory once the sync is done."""
    ordinary_indexed: bool
    within_budget: bool
    budget_mb: float = BUDGET_MB
    load_average: list[float] = field(default_factory=list)


class _Sampler(threading.Thread):
    """Sums the resident memory of `pid`'s process tree every `interval` seconds; keeps the peak."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak_kib = 0
        self.stopped = threading.Event()

    def tree_kib(self) -> int:
        total = 0
        try:
            pids = _process_tree(self.pid)
        except OSError:
            return 0
        for pid in pids:
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            total += sum(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
        return total

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            self.peak_kib = max(self.peak_kib, self.tree_kib())


def _kb(base: str, tool: str, arguments: dict[str, Any]) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    accept = {"Accept": "application/json, text/event-stream"}
    reply = httpx.post(f"{base}/mcp/kb", json=body, headers=accept, timeout=60)
    return json.loads(reply.json()["result"]["content"][0]["text"])


def run(
    folder: Path | None = None,
    files: list[hostile.Hostile] | None = None,
    timeout: float = 1800,
    budget_mb: float = BUDGET_MB,
) -> HostileRun:
    """Serve `folder` (else `files`, the issue's hostile files by default, and the ordinary ones,
    written to a temporary folder) until its first sync is done; the memory and each file's outcome."""
    with tempfile.TemporaryDirectory(prefix="ragmcp-hostile-") as scratch:
        docs = folder or Path(scratch) / "docs"
        if folder is None:
            hostile.write_folder(docs, files)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        command = [sys.executable, "-m", "ragmcp.cli", "--data-dir", f"{scratch}/data", "serve", "--open"]
        command += ["--port", str(port), "--docs", str(docs), "--no-watch"]
        with (Path(scratch) / "server.log").open("wb") as log:
            started = time.monotonic()
            process = subprocess.Popen(command, env=dict(os.environ), stdout=log, stderr=subprocess.STDOUT)
            sampler = _Sampler(process.pid)
            sampler.start()
            try:
                ingest = _wait_for_sync(base, process, started + timeout)
                seconds = round(time.monotonic() - started, 1)
                sampler.stopped.set()
                sampler.join()
                after = sampler.tree_kib()
                server_hwm = _hwm_kib(process.pid)
                jobs = _kb(base, "kb_jobs", {"limit": 500})["jobs"]
                found = _kb(base, "kb_search", {"query": "wind turbine kinetic energy electricity"})["results"]
            finally:
                process.terminate()
                process.wait(timeout=30)
    files = {
        job["target"]: job["error"] if job["status"] == "failed" else f"indexed ({job['counts'].get('chunks')} chunks)"
        for job in jobs
    }
    ordinary = all(files.get(name, "").startswith("indexed") for name in hostile.ORDINARY)
    ordinary = ordinary and any(hit["file_name"] == "turbines.md" for hit in found)
    peak = round(sampler.peak_kib / 1024, 1)
    return HostileRun(
        files=dict(sorted(files.items())),
        sync_line=f"{ingest['ingested']} ingested, {ingest['failed']} failed",
        seconds=seconds,
        peak_tree_mb=peak,
        peak_server_mb=round(server_hwm / 1024, 1),
        after_tree_mb=round(after / 1024, 1),
        ordinary_indexed=ordinary,
        within_budget=peak < budget_mb and ordinary,
        budget_mb=budget_mb,
        load_average=[round(x, 2) for x in os.getloadavg()],
    )


def _wait_for_sync(base: str, process: subprocess.Popen, deadline: float) -> dict[str, Any]:
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"ragmcp serve exited with {process.returncode} during the sync")
        try:
            ingest = httpx.get(f"{base}/healthz", timeout=5).json().get("ingest") or {}
            if ingest.get("state") == "idle":
                return ingest
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError("the first sync did not end in time")


def _hwm_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))


def summary(result: HostileRun) -> str:
    lines = [f"{name}: {outcome}" for name, outcome in result.files.items()]
    lines.append(
        f"sync: {result.sync_line} in {result.seconds} s; server tree peak {result.peak_tree_mb} MB (budget "
        f"{result.budget_mb:g}), server VmHWM {result.peak_server_mb} MB, after {result.after_tree_mb} MB; "
        f"ordinary files indexed: {result.ordinary_indexed}; load average {result.load_average}"
    )
    return "\n".join(lines)


def as_json(result: HostileRun) -> str:
    return json.dumps(asdict(result), indent=2)

"""Server CPU per MCP request, A/B between code versions on a busy machine.

Starts `ragmcp serve --open --no-watch` (query cache off) once per checkout, each over its own
copy of one index, all at the same time; then, round after round, sends each server the same
batch of requests one at a time and reads the server process's CPU time (user + system, Linux's
/proc) before and after the batch. The servers take turns within every round, so a change in the
machine's load falls on all of them alike; the figure is the median over rounds of CPU ms per
request. Kinds of request:

- `list`: tools/list (HTTP, middleware, the SDK's session, no tool);
- `search1`: mindset rag_search of one short phrase (the above, the tool, one embedding);
- `search5`: rag_search of 5 SciFact queries, as `ragmcp bench scale` sends.

    python bench/request_cpu.py --index /tmp/x/scifact-10000/index --dataset ../shared/eval/scifact \
        --rounds 7 A=/path/to/checkout-a B=/path/to/checkout-b

The harness uses this tree's bench helpers (query groups, a free port, /proc CPU); each server runs
its checkout's code (PYTHONPATH=<checkout>/layers/ragmcp:<checkout>/bench) with this interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from ragmcp_bench.bench_scale import cpu_seconds_of, free_port, query_groups

KINDS = ("list", "search1", "search5")


@dataclass
class Server:
    label: str
    process: subprocess.Popen
    base: str
    log: Path

    def cpu_seconds(self) -> float:
        return cpu_seconds_of(self.process.pid)

    def ready(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"{self.label}: the server stopped: {self.log.read_text()[-2000:]}")
        try:
            health = httpx.get(f"{self.base}/healthz", timeout=2).json()
        except (httpx.HTTPError, ValueError):
            return False
        graph, warm = health.get("vector_graph"), health.get("warm")
        graph_ready = graph is None or (graph["state"] == "ready" and graph["behind"] == 0)
        return graph_ready and (warm is None or warm["state"] == "ready")


def start(label: str, checkout: Path, index: Path, scratch: Path) -> Server:
    data = scratch / label
    shutil.copytree(index, data)
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": f"{checkout}/layers/ragmcp:{checkout}/bench",
        "RAGMCP_QUERY_CACHE_SIZE": "0",
    }
    log = scratch / f"{label}.log"
    command = [sys.executable, "-m", "ragmcp.cli", "--data-dir", str(data), "serve", "--open", "--no-watch"]
    process = subprocess.Popen(
        [*command, "--port", str(port)], env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=checkout
    )
    return Server(label, process, f"http://127.0.0.1:{port}", log)


def bodies(kind: str, groups: list[list[str]], count: int, offset: int) -> list[dict]:
    out = []
    for n in range(count):
        if kind == "list":
            out.append({"jsonrpc": "2.0", "id": n, "method": "tools/list", "params": {}})
            continue
        phrases = ["aspirin"] if kind == "search1" else groups[(offset + n) % len(groups)]
        params = {"name": "rag_search", "arguments": {"search_phrases": phrases}}
        out.append({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params})
    return out


def batch(client: httpx.Client, server: Server, requests: list[dict]) -> float:
    """CPU ms of the server per request over `requests`, sent one at a time."""
    before = server.cpu_seconds()
    for body in requests:
        response = client.post(f"{server.base}/mcp/mindset", json=body)
        if response.status_code != 200 or "result" not in response.json():
            raise RuntimeError(f"{server.label}: {response.status_code} {response.text[:300]}")
    return (server.cpu_seconds() - before) * 1000 / len(requests)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", type=Path, required=True, help="an index folder (copied per checkout)")
    parser.add_argument("--dataset", type=Path, required=True, help="a BEIR folder with queries.jsonl")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=40, help="searches per batch (tools/list: 4x)")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("checkouts", nargs="+", help="LABEL=PATH of a source tree")
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    groups = query_groups(args.dataset)
    scratch = Path(tempfile.mkdtemp(prefix="request-cpu-"))
    servers: list[Server] = []
    try:
        for item in args.checkouts:
            label, _, path = item.partition("=")
            servers.append(start(label, Path(path).resolve(), args.index, scratch))
        deadline = time.monotonic() + 900
        while not all(s.ready() for s in servers):
            if time.monotonic() > deadline:
                raise RuntimeError("the servers did not become ready in 15 minutes")
            time.sleep(0.5)
        samples: dict[str, dict[str, list[float]]] = {s.label: {k: [] for k in kinds} for s in servers}
        with httpx.Client(timeout=60) as client:
            for s in servers:  # one untimed pass: imports, first model runs, connections
                for kind in kinds:
                    batch(client, s, bodies(kind, groups, 5, 0))
            for r in range(args.rounds):
                order = servers if r % 2 == 0 else servers[::-1]
                for kind in kinds:
                    count = args.requests * (4 if kind == "list" else 1)
                    requests = bodies(kind, groups, count, r * args.requests)
                    for s in order:
                        samples[s.label][kind].append(batch(client, s, requests))
                print(f"round {r + 1}/{args.rounds}, load {os.getloadavg()[0]:.2f}", file=sys.stderr)
        result = {
            s.label: {
                k: {"median_ms": round(statistics.median(v), 2), "runs": [round(x, 2) for x in v]}
                for k, v in samples[s.label].items()
            }
            for s in servers
        }
        print(f"{'':12}" + "".join(f"{k:>12}" for k in kinds))
        for s in servers:
            print(f"{s.label:12}" + "".join(f"{result[s.label][k]['median_ms']:>12}" for k in kinds))
        if args.out:
            args.out.write_text(json.dumps({"cpu_ms_per_request": result, "rounds": args.rounds}, indent=2) + "\n")
    finally:
        for s in servers:
            s.process.terminate()
        for s in servers:
            try:
                s.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                s.process.kill()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()

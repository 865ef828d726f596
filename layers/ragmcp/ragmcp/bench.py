"""`ragmcp bench`: latency and throughput of rag_search over HTTP, and ingestion throughput.

Every run is bounded in request count and in time, and talks only to the URL it is given.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import anyio
import httpx

DEFAULT_QUERIES = [
    [
        "how did word processors evolve",
        "history of the word processor",
        "typewriters and early text editing machines",
        "WordStar and WordPerfect software",
        "word processing on personal computers",
    ],
    [
        "row and column access control",
        "RCAC permissions in DB2 for i",
        "column masks and row permissions",
        "security administrator roles",
        "protecting sensitive data in tables",
    ],
    [
        "what do ducks eat",
        "duck diet and feeding behaviour",
        "dabbling and diving ducks",
        "waterfowl food sources",
        "mallard feeding",
    ],
    [
        "aircraft maintenance technician handbook",
        "aviation maintenance practices",
        "inspection of aircraft structures",
        "FAA AMT handbook",
        "tools used by mechanics",
    ],
]


@dataclass
class SearchBench:
    url: str
    concurrency: int
    requests: int
    errors: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float
    throughput_rps: float
    wall_s: float


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[rank]


def rag_search_body(queries: list[list[str]]) -> Callable[[int], dict]:
    def body(n: int) -> dict:
        params = {"name": "rag_search", "arguments": {"search_phrases": queries[n % len(queries)]}}
        return {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}

    return body


def verify_body(segment_uids: list[str]) -> Callable[[int], dict]:
    def body(n: int) -> dict:
        arguments = {"segment_uid": segment_uids[n % len(segment_uids)]}
        params = {"name": "verify_document_access", "arguments": arguments}
        return {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}

    return body


async def _http_run(
    url: str,
    make_body: Callable[[int], dict],
    requests: int,
    concurrency: int,
    time_limit: float,
    headers: dict[str, str],
) -> SearchBench:
    latencies: list[float] = []
    errors = 0
    issued = 0
    deadline = time.perf_counter() + time_limit
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async with httpx.AsyncClient(timeout=30, limits=limits, headers=headers) as client:

        async def worker() -> None:
            nonlocal errors, issued
            while issued < requests and time.perf_counter() < deadline:
                n = issued
                issued += 1
                started = time.perf_counter()
                try:
                    response = await client.post(url, json=make_body(n))
                    ok = response.status_code == 200 and "result" in response.json()
                except (httpx.HTTPError, ValueError):
                    ok = False
                latencies.append((time.perf_counter() - started) * 1000)
                errors += not ok

        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(concurrency):
                tg.start_soon(worker)
        wall = time.perf_counter() - started
    return SearchBench(
        url=url,
        concurrency=concurrency,
        requests=len(latencies),
        errors=errors,
        p50_ms=round(percentile(latencies, 50), 2),
        p95_ms=round(percentile(latencies, 95), 2),
        p99_ms=round(percentile(latencies, 99), 2),
        mean_ms=round(statistics.fmean(latencies), 2) if latencies else float("nan"),
        throughput_rps=round(len(latencies) / wall, 2) if wall else 0.0,
        wall_s=round(wall, 2),
    )


def bench_search(
    url: str,
    *,
    requests: int = 200,
    concurrency: list[int] | None = None,
    time_limit: float = 60.0,
    warmup: int = 5,
    queries: list[list[str]] | None = None,
    headers: dict[str, str] | None = None,
) -> list[SearchBench]:
    body = rag_search_body(queries or DEFAULT_QUERIES)
    headers = headers or {}
    anyio.run(_http_run, url, body, warmup, 1, time_limit, headers)
    return [anyio.run(_http_run, url, body, requests, c, time_limit, headers) for c in (concurrency or [1, 4, 8])]


def bench_verify(
    url: str, *, requests: int = 200, time_limit: float = 60.0, headers: dict[str, str] | None = None
) -> list[SearchBench]:
    """verify_document_access latency (it runs on every click): segment ids from one search, then one
    verification after another."""
    headers = headers or {}
    response = httpx.post(url, json=rag_search_body(DEFAULT_QUERIES)(0), headers=headers, timeout=30)
    uids = [s["segment_uid"] for s in response.json()["result"]["segments"]]
    if not uids:
        raise ValueError("the search found no segments to verify")
    body = verify_body(uids)
    anyio.run(_http_run, url, body, 5, 1, time_limit, headers)
    return [anyio.run(_http_run, url, body, requests, 1, time_limit, headers)]


@dataclass
class IngestBench:
    path: str
    files: int
    failed: int
    chunks: int
    seconds: float
    files_per_s: float
    chunks_per_s: float
    cache: str


def bench_ingest(path: Path, data_dir: Path | None = None) -> list[IngestBench]:
    """Ingest `path` into a fresh index twice: cold (empty embedding cache), then with the cache warm."""
    from ragmcp.bootstrap import build_services
    from ragmcp.settings import Settings

    results = []
    with tempfile.TemporaryDirectory(prefix="ragmcp-bench-") as scratch:
        cache_dir = data_dir or Path(scratch)
        for label in ("cold", "warm"):
            services = build_services(Settings(data_dir=cache_dir))
            source = services.register_folder("bench", f"bench-{label}", str(path.resolve()))
            started = time.perf_counter()
            report = services.ingest.sync(source)
            seconds = time.perf_counter() - started
            chunks = sum(j.counts.get("chunks", 0) for j in report.jobs)
            results.append(
                IngestBench(
                    path=str(path),
                    files=report.ingested,
                    failed=report.failed,
                    chunks=chunks,
                    seconds=round(seconds, 2),
                    files_per_s=round(report.ingested / seconds, 2),
                    chunks_per_s=round(chunks / seconds, 2),
                    cache=label,
                )
            )
    return results


def write_results(out: Path | None, kind: str, rows: list) -> str:
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    payload = {"kind": kind, "at": at, "results": [asdict(r) for r in rows]}
    text = json.dumps(payload, indent=2)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    return text


@dataclass
class ColdStart:
    """One Lambda function: the import time of its handler module (compiled bytecode, the best of
    `runs`) and the unzipped size of its package (its code and the ragmcp layer as `sam build`
    makes it), against the budgets."""

    function: str
    import_ms: float
    import_budget_ms: float | None
    package_mb: float | None
    package_budget_mb: float
    within_budget: bool


def _import_ms(function_dir: Path, layer_dir: Path, env: dict[str, str]) -> float:
    """Cumulative import time of the handler module `app`, from `python -X importtime`."""
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import app"],
        cwd=function_dir,
        env={**env, "PYTHONPATH": f"{function_dir}:{layer_dir}"},
        capture_output=True,
        text=True,
        check=True,
    )
    app_line = next(line for line in reversed(result.stderr.splitlines()) if line.rstrip().endswith("| app"))
    return int(app_line.split("|")[1]) / 1000


def _tree_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def _layer_mb(layer_dir: Path) -> float:
    """Build the layer as its Makefile does (Linux x86_64 wheels from the registry) and measure it."""
    import subprocess

    with tempfile.TemporaryDirectory(prefix="ragmcp-layer-") as artifacts:
        subprocess.run(
            ["make", "-s", "-C", str(layer_dir), "build-RagmcpLayer", f"ARTIFACTS_DIR={artifacts}"],
            check=True,
            capture_output=True,
        )
        return _tree_mb(Path(artifacts))


def bench_cold_start(
    repo: Path | None = None, *, runs: int = 3, package: bool = True, import_budget_ms: float = 1000.0,
    package_budget_mb: float = 250.0,
) -> list[ColdStart]:
    """Every handler under functions/: import time (budget for mcp_api) and package size (budget for all)."""
    import compileall
    import os

    root = repo or Path(__file__).resolve().parents[3]
    layer_dir = root / "layers" / "ragmcp"
    compileall.compile_dir(layer_dir / "ragmcp", quiet=1)
    env = {
        **os.environ,
        "RAGMCP_BACKEND": "aws",
        "AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
        "POWERTOOLS_SERVICE_NAME": "ragmcp-bench",
        "POWERTOOLS_METRICS_NAMESPACE": "ragmcp-bench",
    }
    layer_mb = _layer_mb(layer_dir) if package else None
    rows = []
    for function_dir in sorted(p for p in (root / "functions").iterdir() if (p / "app.py").is_file()):
        compileall.compile_dir(function_dir, quiet=1)
        import_ms = min(_import_ms(function_dir, layer_dir, env) for _ in range(runs))
        budget = import_budget_ms if function_dir.name == "mcp_api" else None
        package_mb = None if layer_mb is None else round(layer_mb + _tree_mb(function_dir), 1)
        within = (budget is None or import_ms < budget) and (package_mb is None or package_mb < package_budget_mb)
        rows.append(ColdStart(function_dir.name, round(import_ms, 1), budget, package_mb, package_budget_mb, within))
    return rows

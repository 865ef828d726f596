"""`ragmcp bench`: latency and throughput of rag_search over HTTP, ingestion throughput, and the Lambda
functions' cold start and memory on the AWS emulator (ragmcp_bench.emulator).

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

from ragmcp.progress import Progress
from ragmcp_bench import REPO
from ragmcp_bench.emulator import emulated_aws

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
    client_cpu_ms: float
    """CPU time of this benchmark process per request: it runs on the same cores as the server."""
    machine_busy: float | None
    """Share of every core's time not idle during the run (Linux's /proc/stat; None elsewhere)."""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[rank]


def machine_ticks() -> tuple[int, int] | None:
    """(all, idle) CPU ticks of the whole machine since boot, or None without /proc/stat."""
    try:
        line = Path("/proc/stat").read_text().split("\n", 1)[0]
    except OSError:
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in line.split()[1:9])
    return user + nice + system + idle + iowait + irq + softirq + steal, idle + iowait


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
    progress: Progress | None = None,
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
                if progress is not None:
                    progress.advance(failed=not ok)

        started, cpu_started, ticks = time.perf_counter(), time.process_time(), machine_ticks()
        async with anyio.create_task_group() as tg:
            for _ in range(concurrency):
                tg.start_soon(worker)
        wall = time.perf_counter() - started
        cpu, ticks_after = time.process_time() - cpu_started, machine_ticks()
    busy = None
    if ticks is not None and ticks_after is not None and ticks_after[0] > ticks[0]:
        busy = round(1 - (ticks_after[1] - ticks[1]) / (ticks_after[0] - ticks[0]), 3)
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
        client_cpu_ms=round(cpu * 1000 / len(latencies), 1) if latencies else float("nan"),
        machine_busy=busy,
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
    progress: Progress | None = None,
) -> list[SearchBench]:
    body = rag_search_body(queries or DEFAULT_QUERIES)
    headers = headers or {}
    levels = concurrency or [1, 4, 8]
    anyio.run(_http_run, url, body, warmup, 1, time_limit, headers)
    progress = progress or Progress("requests")
    progress.begin(requests * len(levels))
    rows = [anyio.run(_http_run, url, body, requests, c, time_limit, headers, progress) for c in levels]
    progress.end()
    return rows


def bench_verify(
    url: str,
    *,
    requests: int = 200,
    time_limit: float = 60.0,
    headers: dict[str, str] | None = None,
    progress: Progress | None = None,
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
    progress = progress or Progress("requests")
    progress.begin(requests)
    rows = [anyio.run(_http_run, url, body, requests, 1, time_limit, headers, progress)]
    progress.end()
    return rows


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


def bench_ingest(path: Path, data_dir: Path | None = None, progress: Progress | None = None) -> list[IngestBench]:
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
            if progress is not None:
                progress.label = f"{label} files"
            report = services.ingest.sync(source, progress)
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
    `runs`), the unzipped size of its code (the handler and the ragmcp library it ships) and of its
    package (its code and the ragmcp layer as `sam build` makes it), against the budgets.

    `first_call_ms` (mcp_api): the cold start a first caller waits for, import of `app` plus the first
    invocation answering a rag_search (best of `runs`, each in a fresh process), on the AWS emulator
    of `bench ingest-memory` with an empty index; not held to a budget."""

    function: str
    import_ms: float
    first_call_ms: float | None
    import_budget_ms: float | None
    code_mb: float
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
    """Bytes under `path`, links followed (each function's `ragmcp` links to the library it ships)."""
    import os

    return sum(
        (Path(root) / name).stat().st_size
        for root, _, names in os.walk(path, followlinks=True)
        if "__pycache__" not in Path(root).parts
        for name in names
    ) / 1e6


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
    repo: Path | None = None,
    *,
    runs: int = 3,
    package: bool = True,
    import_budget_ms: float = 1000.0,
    package_budget_mb: float = 250.0,
) -> list[ColdStart]:
    """Every handler under functions/: import time (budget for mcp_api) and package size (budget for all);
    for mcp_api also the first rag_search's time."""
    import compileall
    import os

    root = repo or REPO
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
    with emulated_aws(root) as aws, tempfile.TemporaryDirectory(prefix="ragmcp-bench-") as scratch:
        secret = _bench_key(aws)
        for function_dir in sorted(p for p in (root / "functions").iterdir() if (p / "app.py").is_file()):
            compileall.compile_dir(function_dir, quiet=1)
            # The MCP function builds its services during init (what SnapStart snapshots): against the emulator.
            lambda_env = {**env, **aws, **_MCP_ENV, **_lambda_env(function_dir)}
            lambda_env["RAGMCP_DATA_DIR"] = f"{scratch}/init"
            import_ms = min(_import_ms(function_dir, layer_dir, lambda_env) for _ in range(runs))
            first_call_ms = None
            if function_dir.name == "mcp_api":
                first_call_ms = round(
                    min(_first_call_ms(function_dir, lambda_env, f"{scratch}/{n}", secret) for n in range(runs)), 1
                )
            budget = import_budget_ms if function_dir.name == "mcp_api" else None
            code_mb = _tree_mb(function_dir)
            package_mb = None if layer_mb is None else round(layer_mb + code_mb, 1)
            within = (budget is None or import_ms < budget) and (package_mb is None or package_mb < package_budget_mb)
            row = ColdStart(
                function_dir.name,
                round(import_ms, 1),
                first_call_ms,
                budget,
                round(code_mb, 3),
                package_mb,
                package_budget_mb,
                within,
            )
            rows.append(row)
    return rows


def _lambda_env(function_dir: Path) -> dict[str, str]:
    """What the Lambda runtime sets that changes how a handler starts: with LAMBDA_TASK_ROOT, Powertools'
    Tracer is on and patches its modules, and X-Ray's recorder leaves sampling to Lambda (outside Lambda it
    builds a sampler with its own X-Ray client instead); an invocation carries a sampled trace header."""
    return {
        "LAMBDA_TASK_ROOT": str(function_dir),
        "AWS_LAMBDA_FUNCTION_NAME": f"ragmcp-{function_dir.name}",
        "_X_AMZN_TRACE_ID": "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1",
    }


_MCP_ENV = {
    "RAGMCP_SYNTHESIS_STATE_MACHINE_ARN": "arn:aws:states:us-east-1:123456789012:stateMachine:ragmcp-synthesis",
    "RAGMCP_DNS_REBINDING_PROTECTION": "false",
}
"""What template.yaml sets for the MCP function beyond the emulator's environment (rag_search never
starts the state machine)."""

_LAMBDA_CONTEXT = """
import json, sys, time
from types import SimpleNamespace

context = SimpleNamespace(
    function_name=sys.argv[1],
    memory_limit_in_mb=1024,
    aws_request_id="bench",
    invoked_function_arn=f"arn:aws:lambda:us-east-1:123456789012:function:{sys.argv[1]}",
    get_remaining_time_in_millis=lambda: 300_000,
)
"""

_FIRST_CALL_CHILD = (
    _LAMBDA_CONTEXT
    + """
event = json.load(sys.stdin)
started = time.perf_counter()
import app

response = app.handler(event, context)
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "status": response["statusCode"], "body": response["body"]}))
"""
)
"""Imports the handler module and answers the event from stdin, timing both together."""


def _bench_key(aws: dict[str, str]) -> str:
    """An API key in the emulator's keys table (the AWS deployment answers no request without one)."""
    import boto3

    from ragmcp.adapters.aws.dynamodb import DynamoKeyStore
    from ragmcp.security.keys import KeyService

    session = boto3.session.Session(aws_access_key_id="bench", aws_secret_access_key="bench", region_name="us-east-1")
    table = session.resource("dynamodb", endpoint_url=aws["AWS_ENDPOINT_URL"]).Table("ragmcp-keys")
    return KeyService(DynamoKeyStore(table)).create("default", name="bench").secret


def _http_api_event(body: dict, path: str = "/mcp", secret: str | None = None) -> dict:
    """The event API Gateway's HTTP API (payload 2.0) passes to the MCP function for a POST."""
    http = {"method": "POST", "path": path, "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1"}
    headers = {"content-type": "application/json", "host": "abc.execute-api.us-east-1.amazonaws.com"}
    return {
        "version": "2.0",
        "routeKey": f"ANY {path}",
        "rawPath": path,
        "rawQueryString": "",
        "headers": headers | ({"authorization": f"Bearer {secret}"} if secret else {}),
        "requestContext": {"http": http, "requestId": "bench", "stage": "$default"},
        "body": json.dumps(body),
        "isBase64Encoded": False,
    }


def _first_call_ms(function_dir: Path, env: dict[str, str], data_dir: str, secret: str) -> float:
    """Import plus the first rag_search (the mindset profile's tool, on /mcp), in a fresh process with
    an empty data directory, as a new execution environment starts."""
    event = _http_api_event(rag_search_body(DEFAULT_QUERIES)(0), secret=secret)
    result = _run_child(_FIRST_CALL_CHILD, "ragmcp-mcp", function_dir, {**env, "RAGMCP_DATA_DIR": data_dir}, event)
    answer = json.loads(result["body"])
    if result["status"] != 200 or answer.get("result", {}).get("status") != "success":
        raise RuntimeError(f"rag_search failed on the first call: {result}")
    return result["seconds"] * 1000


@dataclass
class IngestMemory:
    """The ingest function's peak memory on one document: functions/ingest's handler, in a fresh
    process, on the SQS-delivered S3 event of the document put into the drop bucket.

    AWS is moto on 127.0.0.1 (DynamoDB, S3, SQS provisioned by the LocalStack init script, and
    Bedrock's InvokeModel answering a constant Titan vector); the embedded SQLite index stands in for
    OpenSearch. `embedder` bedrock is the deployed configuration, held to the function's MemorySize;
    onnx is the embedded model in the same process, for comparison."""

    file: str
    file_mb: float
    embedder: str
    chunks: int
    seconds: float
    peak_rss_mb: float
    budget_mb: float | None
    within_budget: bool


_INGEST_CHILD = (
    _LAMBDA_CONTEXT
    + """
import resource

import app

event = json.load(sys.stdin)
started = time.perf_counter()
response = app.handler(event, context)
seconds = time.perf_counter() - started
outcomes = [app.apply(change=c) for r in event["Records"] for c in app.changes_of(r["body"])]
chunks = sum(o.counts.get("chunks", 0) for o in outcomes if o.action == "ingested")
peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"failures": response["batchItemFailures"], "chunks": chunks, "seconds": seconds, "peak_kb": peak_kb}))
"""
)
"""Runs the handler on the event from stdin, reads each change's outcome back as a redelivery does (the
idempotency store answers, nothing is ingested twice), and reports the process's own peak RSS last: the
`ru_maxrss` its parent would read, which would also count the provisioning script's process."""


def _largest_file(path: Path) -> Path:
    if path.is_file():
        return path
    files = [p for p in path.rglob("*") if p.is_file()]
    if not files:
        raise ValueError(f"no files under {path}")
    return max(files, key=lambda p: p.stat().st_size)


def _sqs_event(messages: list[dict], queue_arn: str) -> dict:
    """The event Lambda's SQS event source mapping passes to the ingest function."""
    keys = {"messageId": "MessageId", "receiptHandle": "ReceiptHandle", "body": "Body", "md5OfBody": "MD5OfBody"}
    fixed = {"attributes": {}, "messageAttributes": {}, "eventSource": "aws:sqs", "awsRegion": "us-east-1"}
    records = [{**{k: m[v] for k, v in keys.items()}, **fixed, "eventSourceARN": queue_arn} for m in messages]
    return {"Records": records}


def _run_child(script: str, function_name: str, function_dir: Path, env: dict[str, str], event: dict) -> dict:
    """Run a child script in a fresh process beside the function's `app` module, the event on its stdin;
    what it printed last, as JSON."""
    import subprocess
    import sys

    child = subprocess.run(
        [sys.executable, "-c", script, function_name],
        cwd=function_dir,
        env=env,
        input=json.dumps(event),
        capture_output=True,
        text=True,
        timeout=900,
    )
    if child.returncode != 0:
        raise RuntimeError(f"the {function_name} handler's process failed: {child.stderr[-2000:]}")
    return json.loads(child.stdout.strip().splitlines()[-1])


def bench_ingest_memory(path: Path, *, budget_mb: float = 1024.0, repo: Path | None = None) -> list[IngestMemory]:
    """Peak RSS (`ru_maxrss`, kB on Linux) of the ingest handler's process on `path`, or on the largest
    file under it, with each embedder."""
    import boto3

    root = repo or REPO
    function_dir = root / "functions" / "ingest"
    document = _largest_file(path)
    rows = []
    with emulated_aws(root) as aws, tempfile.TemporaryDirectory(prefix="ragmcp-bench-") as scratch:
        endpoint = aws["AWS_ENDPOINT_URL"]
        env = {
            **aws,
            "RAGMCP_GENERATOR": "extractive",
            "POWERTOOLS_SERVICE_NAME": "ragmcp-ingest",
            "POWERTOOLS_TRACE_DISABLED": "true",
        }
        session = boto3.session.Session(aws_access_key_id="bench", aws_secret_access_key="bench")
        s3 = session.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        sqs = session.client("sqs", endpoint_url=endpoint, region_name="us-east-1")
        queue_url = sqs.get_queue_url(QueueName="ragmcp-ingest")["QueueUrl"]
        queue = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]
        for embedder in ("bedrock", "onnx"):
            key = f"sources/default/bench-{embedder}/{document.name}"
            s3.put_object(Bucket="ragmcp-drop", Key=key, Body=document.read_bytes())
            received = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=5)
            event = _sqs_event(received.get("Messages", []), queue["QueueArn"])
            run_env = {
                **env,
                "RAGMCP_INGEST_QUEUE_URL": queue_url,
                "RAGMCP_EMBEDDER": embedder,
                "RAGMCP_DATA_DIR": f"{scratch}/{embedder}",
            }
            result = _run_child(_INGEST_CHILD, "ragmcp-ingest", function_dir, run_env, event)
            if result["failures"] or not result["chunks"]:
                raise RuntimeError(f"nothing was ingested: {result}")
            peak_mb = result["peak_kb"] / 1024
            budget = budget_mb if embedder == "bedrock" else None
            rows.append(
                IngestMemory(
                    file=str(document),
                    file_mb=round(document.stat().st_size / 1e6, 3),
                    embedder=embedder,
                    chunks=result["chunks"],
                    seconds=round(result["seconds"], 2),
                    peak_rss_mb=round(peak_mb, 1),
                    budget_mb=budget,
                    within_budget=budget is None or peak_mb < budget,
                )
            )
    return rows

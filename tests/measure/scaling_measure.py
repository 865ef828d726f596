"""Per-request costs of the AWS deployment, measured on the moto emulator: what docs/SCALING.md scales up.

    python tests/measure/scaling_measure.py [--requests 10] [--out bench/results/scaling-measured.json]

The MCP function's real handler (functions/mcp_api, Mangum, the deployed Settings) runs in this process
against moto on 127.0.0.1 (tests/integration/aws_harness.py) with the *deployed* search path: the OpenSearch
adapter over the spec-checked OpenSearch double (tests/integration/opensearch_double.py) and the Bedrock
embedder calling moto's InvokeModel (answering Titan-shaped vectors, one per text). A few shared documents are
ingested through the ingest handler, then `rag_search` (mindset, 5 phrases from the ingested articles) and
`kb_search` (kb, one query) are called warm, with a key whose rate limit no bounded run reaches. Per call it
counts InvokeModel requests (as moto receives them), OpenSearch requests and their JSON bytes each way (at the
double), and every AWS API call the function makes (botocore). Time: the handler's wall time, and its own time
(the wall time less the stretches in which it waited on at least one AWS or OpenSearch call, which on AWS are
network round trips instead of moto and the double). Round trips waited for one after another: the calls again
with every InvokeModel, then every OpenSearch request, held DELAY_MS, so that parallel calls overlap; the time
in which at least one call of that kind was in flight, over DELAY_MS, is that count.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
DOCUMENTS = ("wiki.md", "wiki_duck.html", "lorem_ipsum.docx", "word_tables.docx", "example_03.html")
INDEX = "ragmcp-chunks"
DELAY_MS = 200.0


class Counts:
    """What one tool call made the function do."""

    def __init__(self) -> None:
        self.invoke_model = 0
        self.opensearch: Counter[str] = Counter()
        self.opensearch_sent = 0
        self.opensearch_received = 0
        self.aws_calls: Counter[str] = Counter()
        self.intervals: list[tuple[str, float, float]] = []
        self.bedrock_delay = 0.0
        self.opensearch_delay = 0.0

    def record(self, kind: str, started: float) -> None:
        self.intervals.append((kind, started, time.perf_counter()))

    def spans(self, kind: str | None = None) -> list[tuple[float, float]]:
        """The stretches of time in which at least one call (of `kind`) was in flight, merged."""
        merged: list[list[float]] = []
        for start, end in sorted((start, end) for k, start, end in self.intervals if kind is None or k == kind):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        return [(a, b) for a, b in merged]

    def reset(self) -> None:
        self.__init__()


COUNTS = Counts()


def titan_vector(text: str, dimension: int) -> list[float]:
    """A deterministic unit vector per text, in Titan's answer shape: the sum of a fixed random vector
    per word, so texts sharing words are near each other and searches find on-topic chunks (answers are
    not empty, so the bytes read and returned are those of a real answer)."""
    total = np.zeros(dimension)
    for word in re.findall(r"\w+", text.lower()):
        seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "little")
        total += np.random.default_rng(seed).standard_normal(dimension)
    norm = np.linalg.norm(total)
    return (total / norm if norm else total).tolist()


def _invoke_model(self: object, payload: dict, model_id: str) -> dict:
    COUNTS.invoke_model += 1
    if COUNTS.bedrock_delay:
        time.sleep(COUNTS.bedrock_delay)
    return {"embedding": titan_vector(payload["inputText"], payload["dimensions"]), "inputTextTokenCount": 0}


def counted_double(double: Any) -> Any:
    """Count each request the adapter sends and its JSON size both ways. The JSON encoding stays outside
    the timed wait, in the function's own time, standing in for the real client's (de)serialization."""

    def wrap(name: str, method: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            COUNTS.opensearch[name] += 1
            COUNTS.opensearch_sent += len(json.dumps(kwargs.get("body", {})))
            started = time.perf_counter()
            if COUNTS.opensearch_delay:
                time.sleep(COUNTS.opensearch_delay)
            response = method(*args, **kwargs)
            COUNTS.record("opensearch", started)
            COUNTS.opensearch_received += len(json.dumps(response))
            return response

        return call

    for name in ("search", "count", "bulk"):
        setattr(double, name, wrap(name, getattr(double, name)))
    return double


def document_phrases(n: int) -> list[str]:
    """`n` distinct phrases, the first words of sentences of two ingested articles (their groundtruth
    renderings): on-topic questions, none repeated, so no cache answers one."""
    phrases: dict[str, None] = {}
    for name in ("wiki_duck.html.md", "wiki.md.md"):
        text = re.sub(r"[#*|\[\]()_]", " ", (SHARED / "documents" / "groundtruth" / name).read_text())
        for sentence in re.split(r"(?<=[.!?])\s+", text):
            words = [w.strip(",;:'\"") for w in sentence.split()[:8]]
            if len(words) >= 6 and all(w.isalpha() for w in words):
                phrases[" ".join(words)] = None
    if len(phrases) < n:
        raise ValueError(f"only {len(phrases)} phrases for {n}")
    return list(phrases)[:n]


def measure(requests: int) -> dict[str, Any]:
    import botocore.client
    import pytest
    from moto.bedrockruntime.models import BedrockRuntimeBackend

    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "layers" / "ragmcp"))
    from ragmcp.adapters.aws import opensearch as opensearch_module
    from ragmcp.domain.models import Tier
    from ragmcp.security.models import RateLimits
    from ragmcp.settings import Settings
    from tests.integration import aws_harness
    from tests.integration.opensearch_double import Clock, OpenSearchDouble
    from tests.integration.opensearch_spec import OpenSearchSpec

    monkeypatch = pytest.MonkeyPatch()
    settings = Settings()
    double = counted_double(OpenSearchDouble(OpenSearchSpec(), Clock(), serverless=False, delay=0.0))
    double.indices.create(
        index=INDEX,
        body=opensearch_module.index_body(settings.aws.embedding_model_id, settings.aws.embedding_dimension),
    )
    deployed = {
        "RAGMCP_SEARCH_BACKEND": "opensearch",
        "RAGMCP_EMBEDDER": "bedrock",
        "RAGMCP_OPENSEARCH_ENDPOINT": "http://127.0.0.1:9",
        "RAGMCP_OPENSEARCH_SIGV4": "false",
        "RAGMCP_OPENSEARCH_INDEX": INDEX,
    }
    original_env = aws_harness.emulator_env
    monkeypatch.setattr(aws_harness, "emulator_env", lambda *a: {**original_env(*a), **deployed})
    monkeypatch.setattr(opensearch_module, "opensearch_client", lambda *a, **k: double)
    monkeypatch.setattr(BedrockRuntimeBackend, "invoke_model", _invoke_model)
    make_api_call = botocore.client.BaseClient._make_api_call

    def counted_call(client: Any, operation: str, params: Any) -> Any:
        service = client.meta.service_model.service_name
        COUNTS.aws_calls[f"{service}:{operation}"] += 1
        started = time.perf_counter()
        try:
            return make_api_call(client, operation, params)
        finally:
            COUNTS.record(service, started)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", counted_call)
    server = None
    try:
        with tempfile.TemporaryDirectory(prefix="ragmcp-scaling-") as scratch:
            server, emulator = aws_harness.start_emulator(Path(scratch) / "data", monkeypatch)
            # A key whose limits no bounded run reaches (the default allows 60 requests a minute).
            emulator.secret = (
                emulator.functions["mcp_api"]
                .services.keys.create(
                    "default",
                    name="scaling",
                    scopes=("read", "write", "admin"),
                    max_tier=Tier.privileged,
                    platform=True,
                    limits=RateLimits(per_minute=1_000_000, concurrent=100),
                )
                .secret
            )
            for name in DOCUMENTS:
                body = (SHARED / "documents" / "source" / name).read_bytes()
                emulator.s3.put_object(Bucket=emulator.bucket, Key=f"sources/default/scaling/{name}", Body=body)
            drained = emulator.drain()
            if drained.failed:
                raise RuntimeError(f"{drained.failed} documents failed to ingest")
            stored = double.stored(INDEX).values()
            vector_field = opensearch_module.VECTOR_FIELD
            source_bytes = statistics.mean(
                len(json.dumps({k: v for k, v in doc.items() if k != vector_field})) for doc in stored
            )
            phrases = document_phrases(5 * requests)
            calls = {
                "rag_search": lambda n: ("/mcp/mindset", "rag_search", {"search_phrases": phrases[5 * n : 5 * n + 5]}),
                "kb_search": lambda n: ("/mcp/kb", "kb_search", {"query": phrases[n]}),
            }
            results = {
                "chunks_indexed": len(stored),
                "chunk_source_bytes_mean": round(source_bytes),
                "documents": list(DOCUMENTS),
                "tools": {},
            }
            for tool, make in calls.items():
                results["tools"][tool] = _measure_tool(emulator, make, requests)
            results["tools_list"] = _measure_floor(emulator, requests)
            return results
    finally:
        monkeypatch.undo()
        if server is not None:
            server.stop()


def _call(emulator: Any, path: str, tool: str, arguments: dict) -> tuple[float, dict]:
    from tests.integration.aws_harness import call

    started = time.perf_counter()
    answered = emulator.mcp(call(tool, arguments), path)
    elapsed = (time.perf_counter() - started) * 1000
    result = answered["body"].get("result")
    if answered["status"] != 200 or result is None or result.get("isError"):
        raise RuntimeError(f"{tool} failed: {answered}")
    return elapsed, answered


def _measure_floor(emulator: Any, requests: int) -> dict[str, Any]:
    """What any MCP call costs here: `tools/list` (authenticated, rate-limited, audited or not as the
    server does it), its wall and own time and its AWS calls."""
    rows = []
    emulator.mcp({"jsonrpc": "2.0", "id": 0, "method": "tools/list"}, "/mcp/mindset")
    for n in range(requests):
        COUNTS.reset()
        started = time.perf_counter()
        answered = emulator.mcp({"jsonrpc": "2.0", "id": n, "method": "tools/list"}, "/mcp/mindset")
        ms = (time.perf_counter() - started) * 1000
        if answered["status"] != 200 or "result" not in answered["body"]:
            raise RuntimeError(f"tools/list failed: {answered}")
        waiting = sum(end - start for start, end in COUNTS.spans()) * 1000
        rows.append((ms, ms - waiting, sum(COUNTS.aws_calls.values())))
    return {
        "requests": requests,
        "handler_ms_median": round(statistics.median(r[0] for r in rows), 1),
        "own_ms_median": round(statistics.median(r[1] for r in rows), 1),
        "aws_calls_per_call": statistics.median(r[2] for r in rows),
    }


def _measure_tool(emulator: Any, make: Any, requests: int) -> dict[str, Any]:
    """Counts and times of `requests` warm calls; then the same calls with every InvokeModel, and again
    with every OpenSearch request, held `DELAY_MS`: the time in which at least one call of that kind was
    in flight, in units of the delay, is the number of its round trips the call waits for one after
    another (calls made in parallel overlap). DynamoDB calls, not delayed, are counted in stretches."""
    _call(emulator, *make(0))  # warm: the index check and the first clients are not per-request costs
    rows = []
    for n in range(requests):
        COUNTS.reset()
        ms, answered = _call(emulator, *make(n))
        waiting = sum(end - start for start, end in COUNTS.spans()) * 1000
        rows.append(
            {
                "ms": ms,
                "own_ms": ms - waiting,
                "invoke_model": COUNTS.invoke_model,
                "opensearch": dict(COUNTS.opensearch),
                "opensearch_sent": COUNTS.opensearch_sent,
                "opensearch_received": COUNTS.opensearch_received,
                "aws_calls": dict(COUNTS.aws_calls),
                "dynamodb_waves": len(COUNTS.spans("dynamodb")),
                "response_bytes": len(json.dumps(answered["body"])),
            }
        )
    waits: dict[str, list[float]] = {"bedrock-runtime": [], "opensearch": []}
    for kind, measured in waits.items():
        for n in range(requests):
            COUNTS.reset()
            setattr(COUNTS, "bedrock_delay" if kind == "bedrock-runtime" else "opensearch_delay", DELAY_MS / 1000)
            _call(emulator, *make(n))
            measured.append(sum(end - start for start, end in COUNTS.spans(kind)) / (DELAY_MS / 1000))
    if not all(r["invoke_model"] and r["opensearch"].get("search") for r in rows):
        raise RuntimeError("a call reached neither Bedrock nor OpenSearch: the deployed search path was not used")
    aws_calls: Counter[str] = Counter()
    for r in rows:
        aws_calls.update(r["aws_calls"])
    return {
        "requests": requests,
        "handler_ms_median": round(statistics.median(r["ms"] for r in rows), 1),
        "own_ms_median": round(statistics.median(r["own_ms"] for r in rows), 1),
        "invoke_model_per_call": statistics.median(r["invoke_model"] for r in rows),
        "opensearch_searches_per_call": statistics.median(r["opensearch"].get("search", 0) for r in rows),
        "opensearch_requests_per_call": statistics.median(sum(r["opensearch"].values()) for r in rows),
        "opensearch_bytes_sent_per_call": round(statistics.median(r["opensearch_sent"] for r in rows)),
        "opensearch_bytes_received_per_call": round(statistics.median(r["opensearch_received"] for r in rows)),
        "response_bytes_per_call": round(statistics.median(r["response_bytes"] for r in rows)),
        "other_aws_calls_per_call": {
            k: round(v / requests, 2) for k, v in sorted(aws_calls.items()) if not k.startswith("bedrock-runtime")
        },
        "sequential_dynamodb_round_trips": statistics.median(r["dynamodb_waves"] for r in rows),
        "delay_ms": DELAY_MS,
        "sequential_bedrock_round_trips": round(statistics.median(waits["bedrock-runtime"]), 2),
        "sequential_opensearch_round_trips": round(statistics.median(waits["opensearch"]), 2),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10, help="calls per tool (and per delayed run)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "scaling-measured.json")
    args = parser.parse_args(argv)
    results = measure(args.requests)
    payload = {
        "kind": "scaling-measured",
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": f"python tests/measure/scaling_measure.py --requests {args.requests}",
        **results,
    }
    text = json.dumps(payload, indent=2)
    args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()

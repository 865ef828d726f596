"""The AWS deployment at 1M, 10M and 100M chunks, on paper: the tables of docs/SCALING.md from their inputs.

    python bench/scaling.py            # print the tables
    python bench/scaling.py --write    # put them into docs/SCALING.md (between its scaling markers)
    python bench/scaling.py --check    # exit 1 when docs/SCALING.md's tables differ from these

Inputs: bench/scaling_inputs.json (every figure with its kind, measured / documented / list price /
assumed, and its source) and the per-request costs measured on the emulator by tests/measure/scaling_measure.py
(bench/results/scaling-measured.json). Nothing here calls AWS.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
INPUTS = REPO / "bench" / "scaling_inputs.json"
DOC = REPO / "docs" / "SCALING.md"
START, END = "<!-- scaling:start -->", "<!-- scaling:end -->"
GIB = 2**30
GB_PER_GIB = GIB / 1e9


@dataclass(frozen=True)
class Model:
    inputs: dict[str, Any]
    measured: dict[str, Any]

    @classmethod
    def load(cls, inputs_path: Path = INPUTS) -> Model:
        inputs = json.loads(inputs_path.read_text())
        measured = json.loads((REPO / inputs["measured_file"]).read_text())
        return cls(inputs, measured)

    def f(self, name: str) -> Any:
        return self.inputs["figures"][name]["value"]

    @property
    def request(self) -> dict[str, Any]:
        """The per-request costs of rag_search (5 phrases), the request every table is scaled from."""
        return self.measured["tools"]["rag_search"]

    @property
    def seconds_per_month(self) -> float:
        return self.f("hours_per_month") * 3600

    # --- OpenSearch memory and data

    def hnsw_bytes(self, dimension: int, encoding: str) -> float:
        """Bytes per vector of the HNSW graph (the k-NN plugin's estimate)."""
        per_dimension = self.inputs["encodings"][encoding]
        return self.f("hnsw_overhead") * (per_dimension * dimension + 8 * self.f("hnsw_m"))

    def knn_gib(self, chunks: int, dimension: int, encoding: str, copies: int = 1) -> float:
        return chunks * self.hnsw_bytes(dimension, encoding) * copies / GIB

    def copies(self) -> int:
        return 1 + self.f("replicas")

    def primary_gib(self, chunks: int, dimension: int) -> float:
        """One copy of the data: the chunk's stored source without its vector (measured) and the vector
        twice at 4 bytes a dimension (the k-NN files and the vector kept in _source)."""
        return chunks * (self.measured["chunk_source_bytes_mean"] + 2 * 4 * dimension) / GIB

    def primary_shards(self, chunks: int, dimension: int) -> int:
        return max(1, math.ceil(self.primary_gib(chunks, dimension) / self.f("shard_target_gib")))

    def ebs_gib(self, chunks: int, dimension: int) -> float:
        return self.primary_gib(chunks, dimension) * self.copies() * self.f("storage_overhead")

    # --- search CPU

    def search_cpu_ms(self, chunks: int, dimension: int) -> float:
        """CPU one request's searches cost across the shards they fan out to (every primary or replica
        of each shard answers once)."""
        shards = self.primary_shards(chunks, dimension)
        per_shard = chunks / shards
        return self.f("search_cpu_ms_100k") * (per_shard / 100_000) ** self.f("search_cost_exponent") * shards

    def search_vcpus(self, chunks: int, dimension: int, rate: float) -> float:
        return rate * self.search_cpu_ms(chunks, dimension) / 1000 / self.f("target_cpu_utilization")

    # --- managed domain

    def knn_gib_per_node(self, memory_gib: float) -> float:
        heap = min(memory_gib * self.f("heap_fraction"), self.f("heap_cap_gib"))
        return (memory_gib - heap) * self.f("knn_circuit_breaker")

    def domain(self, chunks: int, dimension: int, encoding: str, rate: float) -> tuple[int, dict[str, Any]]:
        """The cheapest data-node count and type holding every copy's graphs in the k-NN memory and the
        search CPU at the target utilization (at least one node per copy)."""
        need_gib = self.knn_gib(chunks, dimension, encoding, self.copies())
        vcpus = self.search_vcpus(chunks, dimension, rate)
        options = []
        for instance in self.f("instances"):
            nodes = max(
                math.ceil(need_gib / self.knn_gib_per_node(instance["memory_gib"])),
                math.ceil(vcpus / instance["vcpu"]),
                self.copies(),
            )
            options.append((nodes * instance["usd_hour"], nodes, instance))
        _, nodes, instance = min(options, key=lambda o: (o[0], o[1]))
        return nodes, instance

    def domain_usd_month(self, chunks: int, dimension: int, encoding: str, rate: float) -> float:
        nodes, instance = self.domain(chunks, dimension, encoding, rate)
        hours = self.f("hours_per_month")
        storage = self.ebs_gib(chunks, dimension) * GB_PER_GIB * self.f("ebs_gp3_usd_gb_month")
        return nodes * instance["usd_hour"] * hours + storage

    # --- Serverless

    def search_ocus(self, chunks: int, dimension: int, encoding: str, rate: float) -> int:
        per_ocu = self.f("ocu_memory_gib") * self.f("ocu_graph_share")
        memory = self.f("ocu_redundancy") * math.ceil(self.knn_gib(chunks, dimension, encoding) / per_ocu)
        compute = math.ceil(self.search_vcpus(chunks, dimension, rate) / self.f("ocu_vcpu"))
        return max(memory, compute, self.f("ocu_redundancy"))

    def serverless_usd_month(self, chunks: int, dimension: int, encoding: str, rate: float) -> float:
        ocus = self.search_ocus(chunks, dimension, encoding, rate) + self.f("indexing_ocus")
        storage = self.primary_gib(chunks, dimension) * GB_PER_GIB * self.f("aoss_storage_usd_gb_month")
        return ocus * self.f("ocu_usd_hour") * self.f("hours_per_month") + storage

    # --- the request path: Lambda, Bedrock, API Gateway, DynamoDB

    def dynamodb_calls(self) -> dict[str, float]:
        return {
            k.split(":", 1)[1]: v
            for k, v in self.request["other_aws_calls_per_call"].items()
            if k.startswith("dynamodb:")
        }

    def lambda_ms(self, dimension: int) -> float:
        """Warm duration: the handler's own time measured here (its wall time less the stretches it waited
        on moto or the OpenSearch double) scaled to the function's CPU share, plus the round trips it waits
        for one after another at assumed latencies. At 384 dimensions the phrases are embedded in the
        function (MiniLM, its measured CPU) instead of by Bedrock."""
        cpu_scale = self.f("lambda_full_vcpu_mb") / self.f("lambda_memory_mb")
        own = self.request["own_ms_median"] * cpu_scale
        waits = self.request["sequential_opensearch_round_trips"] * self.f("opensearch_latency_ms")
        waits += self.request["sequential_dynamodb_round_trips"] * self.f("dynamodb_latency_ms")
        if self.embedded(dimension):
            return own + waits + self.f("embed_cpu_ms_5_phrases") * cpu_scale
        return own + waits + self.request["sequential_bedrock_round_trips"] * self.f("bedrock_latency_ms")

    @staticmethod
    def embedded(dimension: int) -> bool:
        """Titan Text Embeddings V2 gives 256, 512 or 1024 dimensions; 384 is MiniLM-L6, run in the function."""
        return dimension not in (256, 512, 1024)

    def concurrency(self, dimension: int, rate: float) -> float:
        return rate * self.lambda_ms(dimension) / 1000

    def lambda_usd_month(self, dimension: int, rate: float) -> float:
        requests = rate * self.seconds_per_month
        gb_seconds = requests * self.lambda_ms(dimension) / 1000 * self.f("lambda_memory_mb") / 1024
        return gb_seconds * self.f("lambda_usd_gb_second") + requests / 1e6 * self.f("lambda_usd_million_requests")

    def invoke_model_per_minute(self, rate: float) -> float:
        return rate * 60 * self.request["invoke_model_per_call"]

    def tokens_per_phrase(self) -> float:
        return self.f("phrase_chars") / self.f("chars_per_token")

    def bedrock_usd_month(self, dimension: int, rate: float) -> float:
        if self.embedded(dimension):
            return 0.0
        tokens = rate * self.seconds_per_month * self.request["invoke_model_per_call"] * self.tokens_per_phrase()
        return tokens / 1000 * self.f("titan_usd_1k_tokens")

    def apigw_usd_month(self, rate: float) -> float:
        left, total = rate * self.seconds_per_month, 0.0
        for size, usd in self.f("apigw_usd_million"):
            taken = left if size is None else min(left, size)
            total += taken / 1e6 * usd
            left -= taken
        return total

    def dynamodb_usd_month(self, rate: float) -> float:
        reads = writes = 0.0
        units = self.f("dynamodb_units")
        for operation, calls in self.dynamodb_calls().items():
            rru, wru = units[operation]
            reads += calls * rru
            writes += calls * wru
        requests = rate * self.seconds_per_month
        return (
            requests / 1e6 * (reads * self.f("dynamodb_usd_million_rru") + writes * self.f("dynamodb_usd_million_wru"))
        )

    def request_path_usd_month(self, dimension: int, rate: float) -> float:
        return (
            self.lambda_usd_month(dimension, rate)
            + self.apigw_usd_month(rate)
            + self.bedrock_usd_month(dimension, rate)
            + self.dynamodb_usd_month(rate)
        )

    def per_1000(self, usd_month: float, rate: float) -> float:
        return usd_month / (rate * self.seconds_per_month) * 1000


def _n(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def _usd(value: float) -> str:
    return f"${value:,.2f}" if value < 100 else f"${value:,.0f}"


def _usd_small(value: float) -> str:
    return f"${value:.4f}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _chunks(n: int) -> str:
    return f"{n // 1_000_000}M"


def measured_table(m: Model) -> str:
    tools = m.measured["tools"]
    rows = []
    labels = [
        ("Bedrock InvokeModel calls", "invoke_model_per_call", 0),
        ("OpenSearch searches (k-NN, BM25, the chunk fetch)", "opensearch_searches_per_call", 0),
        ("OpenSearch request bytes sent", "opensearch_bytes_sent_per_call", 0),
        ("OpenSearch response bytes read", "opensearch_bytes_received_per_call", 0),
        ("answer bytes (JSON-RPC body)", "response_bytes_per_call", 0),
        ("handler wall time here, warm, median ms", "handler_ms_median", 1),
        ("handler's own time (wall less waits on moto and the double), ms", "own_ms_median", 1),
        ("Bedrock round trips waited for in turn", "sequential_bedrock_round_trips", 2),
        ("OpenSearch round trips waited for in turn", "sequential_opensearch_round_trips", 2),
        ("DynamoDB round trips waited for in turn", "sequential_dynamodb_round_trips", 2),
    ]
    for label, key, digits in labels:
        rows.append([label, *(_n(tools[t][key], digits) for t in ("rag_search", "kb_search"))])
    operations = sorted({k for t in tools.values() for k in t["other_aws_calls_per_call"]})
    for operation in operations:
        rows.append(
            [
                f"AWS call {operation}",
                *(_n(tools[t]["other_aws_calls_per_call"].get(operation, 0), 1) for t in ("rag_search", "kb_search")),
            ]
        )
    return _table(["per call", "rag_search (5 phrases)", "kb_search (1 query)"], rows)


def memory_table(m: Model) -> str:
    rows = []
    for chunks in m.inputs["sizes"]:
        for dimension in m.inputs["dimensions"]:
            row = [_chunks(chunks), str(dimension)]
            for encoding in m.inputs["encodings"]:
                one, all_copies = (m.knn_gib(chunks, dimension, encoding, c) for c in (1, m.copies()))
                row.append(f"{_n(one, 1)} / {_n(all_copies, 1)}")
            rows.append(row)
    header = ["chunks", "dimensions", *(f"{e}: one copy / with replica, GiB" for e in m.inputs["encodings"])]
    return _table(header, rows)


def capacity_table(m: Model) -> str:
    rows = []
    rates = m.inputs["rates"]
    for chunks in m.inputs["sizes"]:
        for dimension in m.inputs["dimensions"]:
            shards = m.primary_shards(chunks, dimension)
            for encoding in m.inputs["encodings"]:
                row = [
                    _chunks(chunks),
                    str(dimension),
                    encoding,
                    _n(m.primary_gib(chunks, dimension), 1),
                    f"{shards} x {m.copies()}",
                ]
                for rate in rates:
                    nodes, instance = m.domain(chunks, dimension, encoding, rate)
                    row.append(f"{nodes} x {instance['type'].removesuffix('.search')}")
                row += [str(m.search_ocus(chunks, dimension, encoding, rate)) for rate in rates]
                rows.append(row)
    header = [
        "chunks",
        "dim",
        "vectors",
        "data, one copy GiB",
        "shards (primaries x copies)",
        *(f"managed data nodes at {r}/s" for r in rates),
        *(f"Serverless search OCUs at {r}/s" for r in rates),
    ]
    return _table(header, rows)


def load_table(m: Model) -> str:
    rows = []
    quota = m.f("lambda_concurrency_quota")
    head_limit = m.f("dynamodb_partition_wu_per_s")
    key_writes = m.dynamodb_calls()["UpdateItem"]  # the rate limiter's counters, all under the key's partition key
    for rate in m.inputs["rates"]:
        row = [str(rate)]
        for dimension in m.inputs["dimensions"]:
            concurrency = m.concurrency(dimension, rate)
            row += [_n(m.lambda_ms(dimension)), f"{_n(concurrency, 1)} ({_n(100 * concurrency / quota, 1)}%)"]
        row += [
            _n(m.invoke_model_per_minute(rate)),
            _n(m.invoke_model_per_minute(rate) * m.tokens_per_phrase()),
            _n(rate * m.request["opensearch_searches_per_call"]),
            f"{_n(rate * m.f('audit_head_wru'))} ({_n(100 * rate * m.f('audit_head_wru') / head_limit)}%)",
            f"{_n(rate * key_writes)} ({_n(100 * rate * key_writes / head_limit)}%)",
        ]
        rows.append(row)
    header = ["searches/s"]
    for dimension in m.inputs["dimensions"]:
        how = "MiniLM in Lambda" if m.embedded(dimension) else "Titan on Bedrock"
        header += [f"Lambda ms, {dimension}-d ({how})", f"Lambda concurrency, {dimension}-d (% of the default quota)"]
    header += [
        "InvokeModel/min (1024-d)",
        "Titan tokens/min (1024-d)",
        "OpenSearch searches/s",
        "write units/s on one tenant's audit head (% of a partition's limit)",
        "write units/s on one API key's rate-limit items (% of a partition's limit)",
    ]
    return _table(header, rows)


def cost_table(m: Model) -> str:
    rows = []
    for chunks in m.inputs["sizes"]:
        for dimension in m.inputs["dimensions"]:
            for rate in m.inputs["rates"]:
                managed = m.domain_usd_month(chunks, dimension, "fp32", rate)
                managed16 = m.domain_usd_month(chunks, dimension, "fp16", rate)
                serverless = m.serverless_usd_month(chunks, dimension, "fp32", rate)
                path = m.request_path_usd_month(dimension, rate)
                rows.append(
                    [
                        _chunks(chunks),
                        str(dimension),
                        str(rate),
                        _usd(managed),
                        _usd(managed16),
                        _usd(serverless),
                        _usd(m.lambda_usd_month(dimension, rate)),
                        _usd(m.apigw_usd_month(rate)),
                        _usd(m.bedrock_usd_month(dimension, rate)),
                        _usd(m.dynamodb_usd_month(rate)),
                        f"{_usd(managed + path)} ({_usd_small(m.per_1000(managed + path, rate))})",
                        f"{_usd(serverless + path)} ({_usd_small(m.per_1000(serverless + path, rate))})",
                    ]
                )
    header = [
        "chunks",
        "dim",
        "searches/s",
        "OpenSearch domain (fp32)",
        "domain (fp16)",
        "OpenSearch Serverless (fp32)",
        "Lambda",
        "API Gateway",
        "Bedrock",
        "DynamoDB",
        "total with the domain (per 1,000 searches)",
        "total with Serverless (per 1,000 searches)",
    ]
    return _table(header, rows)


def inputs_table(m: Model) -> str:
    rows = []
    for name, figure in m.inputs["figures"].items():
        value = figure["value"]
        if isinstance(value, list | dict):
            shown = json.dumps(value)
        elif isinstance(value, float) and value < 0.001:
            shown = f"{value:.10f}".rstrip("0")
        else:
            shown = str(value)
        rows.append([f"`{name}`", shown.replace("|", "/"), figure["kind"], figure["source"].replace("|", "/")])
    return _table(["input", "value", "kind", "source"], rows)


def render(m: Model) -> str:
    measured = m.measured
    parts = [
        f"Generated by `python bench/scaling.py --write` from bench/scaling_inputs.json and "
        f"{m.inputs['measured_file']} (measured {measured['at']} by `{measured['command']}`). "
        f"Prices: {m.inputs['region']}, on-demand, as of {m.inputs['date']} unless an input says otherwise.",
        "### Measured per request (the AWS handler on the emulator)",
        measured_table(m),
        f"{measured['chunks_indexed']} chunks indexed ({', '.join(measured['documents'])}); a stored chunk's "
        f"source without its vector: {_n(measured['chunk_source_bytes_mean'])} bytes on average. "
        f"The floor of any MCP call here, `tools/list`: {_n(measured['tools_list']['handler_ms_median'], 1)} ms "
        f"wall, {_n(measured['tools_list']['own_ms_median'], 1)} ms own time, "
        f"{_n(measured['tools_list']['aws_calls_per_call'])} AWS calls.",
        "### HNSW memory (the k-NN plugin's estimate)",
        memory_table(m),
        "### OpenSearch capacity",
        capacity_table(m),
        "### Load at each rate (rag_search, 5 phrases)",
        load_table(m),
        "### Cost per month (and per 1,000 searches)",
        cost_table(m),
        "### Inputs",
        inputs_table(m),
    ]
    return "\n\n".join(parts) + "\n"


def replace_block(doc: str, block: str) -> str:
    if START not in doc or END not in doc:
        raise ValueError(f"{DOC} has no {START} ... {END} block")
    head, rest = doc.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{block}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="rewrite the tables in docs/SCALING.md")
    action.add_argument("--check", action="store_true", help="exit 1 when docs/SCALING.md's tables are stale")
    args = parser.parse_args(argv)
    block = render(Model.load())
    if args.write:
        DOC.write_text(replace_block(DOC.read_text(), block))
        return 0
    if args.check:
        current = DOC.read_text()
        if replace_block(current, block) != current:
            print("docs/SCALING.md is stale: run python bench/scaling.py --write", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())

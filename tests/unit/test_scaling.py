"""docs/SCALING.md's tables are what bench/scaling.py writes from its inputs, and a few of its figures
agree with the same figures worked out by hand."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load_script():
    spec = importlib.util.spec_from_file_location("bench_scaling", REPO / "bench" / "scaling.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


scaling = _load_script()


@pytest.fixture(scope="module")
def model():
    return scaling.Model.load()


def with_inputs(model, **figures):
    inputs = copy.deepcopy(model.inputs)
    for name, value in figures.items():
        inputs["figures"][name]["value"] = value
    return scaling.Model(inputs, model.measured)


def test_the_document_holds_exactly_the_tables_the_script_writes(model) -> None:
    doc = (REPO / "docs" / "SCALING.md").read_text()
    block = doc.split(scaling.START, 1)[1].split(scaling.END, 1)[0]
    assert block == "\n" + scaling.render(model)
    assert scaling.main(["--check"]) == 0


def test_a_stale_document_is_caught(model, tmp_path, monkeypatch) -> None:
    stale = tmp_path / "SCALING.md"
    text = (REPO / "docs" / "SCALING.md").read_text()
    stale.write_text(text.replace("| 1M | 1024 |", "| 1M | 1000 |", 1))
    monkeypatch.setattr(scaling, "DOC", stale)
    assert scaling.main(["--check"]) == 1


def test_every_input_says_what_kind_of_figure_it_is_and_where_it_comes_from(model) -> None:
    kinds = {"measured", "documented", "list price", "assumed", "convention"}
    for name, figure in model.inputs["figures"].items():
        assert figure["kind"] in kinds, name
        assert len(figure["source"]) > 20, name
        if figure["kind"] == "list price":
            assert "http" in figure["source"] or "not verified here" in figure["source"], name


def test_hnsw_memory_follows_the_knn_plugins_formula(model) -> None:
    # 1.1 * (4 * 1024 + 8 * 16) = 4,646.4 bytes a vector; 1M vectors = 4.327 GiB, twice with a replica.
    assert model.hnsw_bytes(1024, "fp32") == pytest.approx(4646.4)
    assert model.knn_gib(1_000_000, 1024, "fp32") == pytest.approx(4646.4e6 / 2**30)
    assert model.knn_gib(1_000_000, 1024, "fp32", copies=2) == pytest.approx(8.6545, abs=1e-4)
    # The plugin's own worked examples, 1M x 256 dimensions, m 16: "1.267 GB" fp32 (10^9 bytes), "0.656 GB"
    # fp16 and "0.39 GB" byte vectors (those two in GiB: the pages mix the units).
    assert model.hnsw_bytes(256, "fp32") * 1e6 / 1e9 == pytest.approx(1.267, abs=0.001)
    assert model.hnsw_bytes(256, "fp16") * 1e6 / 2**30 == pytest.approx(0.656, abs=0.001)
    assert model.hnsw_bytes(256, "byte") * 1e6 / 2**30 == pytest.approx(0.39, abs=0.005)


def test_knn_memory_per_node_is_half_what_the_heap_leaves() -> None:
    model = scaling.Model.load()
    assert model.knn_gib_per_node(16) == 4.0  # heap 8 GiB, half of the other 8
    assert model.knn_gib_per_node(384) == 176.0  # heap capped at 32 GiB, half of the other 352
    # The settings page's example: 100 GB, a 32 GB heap, 34 GB for k-NN.
    assert model.knn_gib_per_node(100) == 34.0


def test_the_smallest_domain_holds_both_copies_and_one_node_per_copy(model) -> None:
    # 1M x 384 fp32 with a replica: 3.41 GiB of graphs fit one r6g.large (4 GiB), but two copies need two nodes.
    nodes, instance = model.domain(1_000_000, 384, "fp32", 10)
    assert (nodes, instance["type"]) == (2, "r6g.large.search")
    cost = 2 * 0.167 * 730 + model.ebs_gib(1_000_000, 384) * scaling.GB_PER_GIB * 0.122
    assert model.domain_usd_month(1_000_000, 384, "fp32", 10) == pytest.approx(cost)


def test_api_gateway_tiers(model) -> None:
    # 1,000/s for 730 hours = 2,628M requests: 300M at $1.00, 700M at $0.90, the other 1,628M at $0.80.
    assert model.apigw_usd_month(1000) == pytest.approx(300 + 630 + 1628 * 0.8)
    assert model.apigw_usd_month(10) == pytest.approx(26.28)


def test_titan_tokens_and_their_cost(model) -> None:
    # 10/s x 2,628,000 s x 5 phrases x (89.1 / 4.7) tokens x $0.00002 per 1,000 tokens.
    tokens = 10 * 2_628_000 * 5 * 89.1 / 4.7
    assert model.bedrock_usd_month(1024, 10) == pytest.approx(tokens / 1000 * 0.00002)
    assert model.bedrock_usd_month(384, 10) == 0.0  # MiniLM runs in the function
    assert model.invoke_model_per_minute(100) == 100 * 60 * model.request["invoke_model_per_call"]


def test_lambda_concurrency_is_rate_times_duration(model) -> None:
    changed = with_inputs(model, bedrock_latency_ms=100, opensearch_latency_ms=0, dynamodb_latency_ms=0)
    request = model.request
    duration = request["own_ms_median"] * 1769 / 1024 + request["sequential_bedrock_round_trips"] * 100
    assert changed.lambda_ms(1024) == pytest.approx(duration)
    assert changed.concurrency(1024, 100) == pytest.approx(100 * duration / 1000)
    gb_seconds = 10 * 2_628_000 * duration / 1000
    assert changed.lambda_usd_month(1024, 10) == pytest.approx(gb_seconds * 0.0000166667 + 26.28 * 0.2)


def test_measured_request_costs_are_those_of_the_deployed_path(model) -> None:
    """The counts come from tests/measure/scaling_measure.py's run: one InvokeModel per phrase, two searches per
    phrase and one fetch, and the audit append as one transaction."""
    measured = json.loads((REPO / model.inputs["measured_file"]).read_text())
    rag = measured["tools"]["rag_search"]
    assert rag["invoke_model_per_call"] == model.f("phrases_per_request")
    assert rag["opensearch_searches_per_call"] == 2 * model.f("phrases_per_request") + 1
    assert rag["other_aws_calls_per_call"]["dynamodb:TransactWriteItems"] == 1
    assert measured["tools"]["kb_search"]["invoke_model_per_call"] == 1

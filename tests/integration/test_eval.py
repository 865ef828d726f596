"""`ragmcp eval` smoke: a few hundred SciFact documents through the real pipeline, index and search service."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragmcp import cli
from ragmcp_bench.evaluation import DEFAULT_MODES, METRICS, load_collection, subset

MAX_DOCS = 120


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("eval-data")


def run_eval(scifact: Path, data_dir: Path, out: Path, *modes: str) -> dict:
    argv = ["--data-dir", str(data_dir), "eval", "--dataset", str(scifact), "--max-docs", str(MAX_DOCS)]
    argv += ["--out", str(out), *(arg for mode in modes for arg in ("--mode", mode))]
    assert cli.main(argv) == 0
    return json.loads((out / f"eval-scifact-test-{MAX_DOCS}docs.json").read_text())


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("eval-out")


@pytest.fixture(scope="module")
def report(scifact: Path, data_dir: Path, out_dir: Path) -> dict:
    return run_eval(scifact, data_dir, out_dir)


def test_subset_keeps_every_relevant_document_of_its_queries(scifact: Path):
    collection = subset(load_collection(scifact, "test"), MAX_DOCS)
    ids = {str(row["_id"]) for row in collection.corpus}
    assert len(collection.corpus) == MAX_DOCS
    assert len(collection.queries) >= 50
    assert all(set(judged) <= ids for judged in collection.qrels.values())


def test_every_mode_is_scored_within_sane_bounds(report: dict):
    assert report["documents"] == MAX_DOCS
    assert report["chunks"] >= MAX_DOCS
    by_mode = {r["mode"]: r for r in report["results"]}
    assert list(by_mode) == list(DEFAULT_MODES)
    for result in by_mode.values():
        assert set(result["metrics"]) == set(METRICS)
        assert all(0.3 < value <= 1.0 for value in result["metrics"].values()), result
    assert by_mode["hybrid"]["metrics"]["ndcg@10"] > 0.5
    assert by_mode["hybrid"]["metrics"]["recall@100"] > 0.9


def test_metrics_agree_with_ir_measures(report: dict):
    pytest.importorskip("ir_measures")
    for result in report["results"]:
        assert result["agrees"] is True, result
        for name in METRICS:
            assert result["metrics"][name] == pytest.approx(result["reference"][name], abs=5e-5)


def test_markdown_table_has_a_row_per_mode(report: dict, out_dir: Path):
    table = (out_dir / f"eval-scifact-test-{MAX_DOCS}docs.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert [row.split(" | ")[0].lstrip("| ") for row in rows[1:]] == list(DEFAULT_MODES)


def test_a_rerun_builds_a_fresh_index_from_the_cache_with_the_same_scores(
    report: dict, scifact: Path, data_dir: Path, tmp_path: Path
):
    again = run_eval(scifact, data_dir, tmp_path, "hybrid")
    first = next(r for r in report["results"] if r["mode"] == "hybrid")
    assert again["results"][0]["metrics"] == first["metrics"]
    assert again["chunks"] == report["chunks"]

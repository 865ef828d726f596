"""`ragmcp eval-floor`: the relevance floor fitted on train splits (and the even half of a set without
splits), reported on test splits (and the odd half), from the per-query figures `ragmcp eval
--off-topic` writes. Synthetic reports with known answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragmcp import cli
from ragmcp_bench.evaluation import FloorQuery, floor_rows
from ragmcp_bench.floor_fit import fit, load, outcome


def report(path: Path, dataset: str, split: str, judged: list[tuple[float, float]], off: list[float]) -> Path:
    """A report whose judged queries have (nDCG@10, best cosine) and off-topic queries (best cosine),
    every hit without word coverage."""
    queries = [{"query": f"q{i}", "ndcg": n, "hits": [[c, 0.0], [c - 0.1, 0.0]]} for i, (n, c) in enumerate(judged)]
    queries += [{"query": f"off-topic:{i}", "ndcg": None, "hits": [[c, 0.0]]} for i, c in enumerate(off)]
    body = {"dataset": dataset, "split": split, "floor": {"queries": queries}}
    path.write_text(json.dumps(body))
    return path


def test_the_fit_takes_the_floor_that_silences_off_topic_queries_without_costing_ndcg(tmp_path: Path):
    # On-topic queries reach at least 0.45, off-topic ones at most 0.40: a floor in (0.40, 0.45] silences
    # every off-topic query and no judged one; a higher floor costs nDCG, a lower one silences less.
    train = report(tmp_path / "train.json", "c", "train", [(0.8, 0.45), (0.6, 0.7)], [0.3, 0.35, 0.4, 0.38])
    test = report(tmp_path / "test.json", "c", "test", [(0.7, 0.44), (0.5, 0.9)], [0.33, 0.41, 0.5, 0.2])
    fit_on, report_on = load([train, test])
    assert [p.name for p in fit_on] == ["c train"] and [p.name for p in report_on] == ["c test"]
    assert [q.query for q in fit_on[0].off_topic] == ["off-topic:0", "off-topic:2"]
    result = fit(fit_on, report_on)
    assert result.weight == 0.0 and result.floor == 0.41  # the lowest floor above 0.40 (ties: the lower floor)
    assert result.fitted_on[0].ndcg_with == result.fitted_on[0].ndcg_without == 0.7
    held_out = result.reported_on[0]  # the test split: 0.44 is heard, and of the odd off-topic queries 0.41 is too
    assert held_out.judged_silenced == 0.0 and held_out.off_topic_silenced == 0.5


def test_a_set_without_splits_is_halved(tmp_path: Path):
    qa = report(tmp_path / "qa.json", "qa", "all", [(1.0, 0.6), (1.0, 0.3), (0.5, 0.7)], [0.2, 0.25])
    fit_on, report_on = load([qa])
    assert [len(p.judged) for p in fit_on + report_on] == [2, 1]
    assert outcome(report_on[0], 0.0, 0.5).judged_silenced == 1.0


def test_the_floor_table_counts_silenced_queries_and_their_ndcg():
    queries = [
        FloorQuery("a", 1.0, [(0.5, 1.0)]),
        FloorQuery("b", 0.5, [(0.3, 0.0)]),
        FloorQuery("off-topic:0", None, []),
    ]
    rows = {row.floor: row for row in floor_rows(queries, weight=0.2, grid=(0.3, 0.4, 0.8))}
    assert (rows[0.3].ndcg, rows[0.3].on_topic_silenced, rows[0.3].off_topic_silenced) == (0.75, 0.0, 1.0)
    assert (rows[0.4].ndcg, rows[0.4].on_topic_silenced) == (0.5, 0.5)
    assert rows[0.8].ndcg == 0.0


def test_the_command_prints_the_fit_and_refuses_reports_without_calibration(tmp_path: Path, capsys):
    train = report(tmp_path / "train.json", "c", "train", [(0.8, 0.45)], [0.3])
    assert cli.main(["eval-floor", str(train), "--out", str(tmp_path / "fit.json")]) == 0
    assert "| c train | fitted on |" in capsys.readouterr().out
    assert json.loads((tmp_path / "fit.json").read_text())["floor"] == pytest.approx(0.31)
    (tmp_path / "bare.json").write_text(json.dumps({"dataset": "c", "split": "train", "floor": None}))
    assert cli.main(["eval-floor", str(tmp_path / "bare.json")]) == 2
    assert "no floor calibration" in capsys.readouterr().err


def test_a_short_on_topic_query_caps_the_floor_even_where_off_topic_queries_score_higher(tmp_path: Path):
    # A long-query collection alone would take a floor above 0.40; a fitted short on-topic query at 0.30
    # (a one-word query embeds far from every passage) keeps the floor at or below 0.30 (issue 27).
    train = report(tmp_path / "train.json", "c", "train", [(0.8, 0.6), (0.6, 0.7)], [0.3, 0.35, 0.4, 0.38])
    short = report(tmp_path / "short.json", "short", "all", [(1.0, 0.30), (1.0, 0.25), (1.0, 0.5)], [0.1, 0.2])
    alone = fit(*load([train]))
    assert alone.floor > 0.4
    both = fit(*load([train, short]))
    assert both.floor <= 0.30
    assert all(o.judged_silenced == 0.0 for o in both.fitted_on)

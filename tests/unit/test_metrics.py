"""The eval scorer on hand-made rankings whose metric values are worked out by hand."""

from __future__ import annotations

import math

import pytest

from ragmcp_bench.evaluation import mrr_at, ndcg_at, recall_at, score_run

JUDGED = {"a": 1, "b": 1}


def test_ndcg_is_one_for_the_ideal_ranking_and_zero_without_relevant_hits():
    assert ndcg_at(["a", "b", "x"], JUDGED, 10) == pytest.approx(1.0)
    assert ndcg_at(["x", "y"], JUDGED, 10) == 0.0
    assert ndcg_at(["a"], {}, 10) == 0.0


def test_ndcg_discounts_by_log2_of_the_rank():
    # relevant at ranks 2 and 3: (1/log2(3) + 1/log2(4)) / (1 + 1/log2(3))
    expected = (1 / math.log2(3) + 0.5) / (1 + 1 / math.log2(3))
    assert ndcg_at(["x", "a", "b"], JUDGED, 10) == pytest.approx(expected)


def test_ndcg_uses_linear_gain_and_ignores_hits_past_the_cutoff():
    graded = {"a": 2, "b": 1}
    # b then a: (1 + 2/log2(3)) / (2 + 1/log2(3))
    assert ndcg_at(["b", "a"], graded, 10) == pytest.approx((1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3)))
    assert ndcg_at(["x", "a"], JUDGED, 1) == 0.0


def test_non_positive_judgments_are_not_relevant():
    judged = {"a": 1, "n": 0, "m": -1}
    assert ndcg_at(["n", "m", "a"], judged, 10) == pytest.approx(0.5)
    assert recall_at(["n", "m"], judged, 100) == 0.0
    assert mrr_at(["m", "n", "a"], judged, 10) == pytest.approx(1 / 3)


def test_recall_counts_relevant_documents_within_the_cutoff():
    assert recall_at(["a", "x", "b"], JUDGED, 100) == 1.0
    assert recall_at(["a", "x", "b"], JUDGED, 2) == 0.5
    assert recall_at(["x"], JUDGED, 100) == 0.0


def test_mrr_is_the_reciprocal_rank_of_the_first_relevant_document():
    assert mrr_at(["x", "y", "b", "a"], JUDGED, 10) == pytest.approx(1 / 3)
    assert mrr_at(["a"], JUDGED, 10) == 1.0
    assert mrr_at(["x"] * 10 + ["a"], JUDGED, 10) == 0.0


def test_score_run_averages_over_judged_queries_and_a_missing_query_scores_zero():
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
    scores = score_run({"q1": ["x", "a"]}, qrels)
    assert scores["mrr@10"] == pytest.approx(0.25)
    assert scores["recall@100"] == pytest.approx(0.5)
    assert scores["ndcg@10"] == pytest.approx(1 / math.log2(3) / 2)


def test_scorer_agrees_with_ir_measures():
    pytest.importorskip("ir_measures")
    from ragmcp_bench.evaluation import agree, reference_scores

    qrels = {"q1": {"a": 1, "b": 2, "c": 0}, "q2": {"d": 1}, "q3": {"e": 1, "f": 1}}
    run = {"q1": ["c", "b", "x", "a"], "q2": [f"n{i}" for i in range(12)] + ["d"], "q3": ["f"]}
    mine = score_run(run, qrels)
    reference = reference_scores(run, qrels)
    assert reference is not None
    assert agree(mine, reference), (mine, reference)

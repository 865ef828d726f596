import pytest

from ragmcp.domain.models import IndexHit
from ragmcp.retrieval.fusion import RankedList, ScoredList, convex, rrf


def test_rrf_prefers_items_ranked_high_in_several_lists():
    fused = rrf([RankedList(["a", "b", "c"]), RankedList(["b", "a", "d"])], k0=60)
    ids = [i for i, _ in fused]
    assert set(ids[:2]) == {"a", "b"}
    assert ids[2:] == ["c", "d"]


def test_rrf_scores_are_normalised_and_higher_is_better():
    fused = rrf([RankedList(["x", "y"]), RankedList(["x", "y"])], k0=60)
    assert fused[0] == ("x", 1.0)
    assert 0 < fused[1][1] < 1


def test_rrf_weights_shift_the_order():
    lists = [RankedList(["fts-top", "vec-top"], weight=0.1), RankedList(["vec-top", "fts-top"], weight=1.0)]
    assert rrf(lists)[0][0] == "vec-top"
    lists = [RankedList(["fts-top", "vec-top"], weight=1.0), RankedList(["vec-top", "fts-top"], weight=0.1)]
    assert rrf(lists)[0][0] == "fts-top"


def test_rrf_deduplicates_and_handles_empty_input():
    assert rrf([]) == []
    fused = rrf([RankedList(["a", "a2"]), RankedList(["a"])])
    assert [i for i, _ in fused] == ["a", "a2"]


def test_rrf_k0_controls_how_fast_rank_matters_decays():
    steep = dict(rrf([RankedList(["a", "b"])], k0=1))
    flat = dict(rrf([RankedList(["a", "b"])], k0=1000))
    assert steep["b"] < flat["b"]


def test_convex_blends_min_max_normalised_scores_by_weight():
    bm25 = ScoredList([("a", 12.0), ("b", 9.0), ("c", 6.0)], weight=0.4)
    cosine = ScoredList([("b", 0.8), ("c", 0.7), ("d", 0.3)], weight=0.6)
    fused = dict(convex([bm25, cosine]))
    assert fused["b"] == pytest.approx(0.4 * 0.5 + 0.6 * 1.0)
    assert fused["a"] == pytest.approx(0.4)
    assert fused["c"] == pytest.approx(0.6 * 0.8)
    assert fused["d"] == 0.0
    assert [i for i, _ in convex([bm25, cosine])] == ["b", "c", "a", "d"]


def test_convex_ignores_each_lists_scale_and_is_one_for_the_best_everywhere():
    small = convex([ScoredList([("x", 2.0), ("y", 1.0)]), ScoredList([("x", 0.9), ("y", 0.1)])])
    large = convex([ScoredList([("x", 200.0), ("y", 100.0)]), ScoredList([("x", 0.9), ("y", 0.1)])])
    assert small == large
    assert small[0] == ("x", 1.0)


def test_convex_weights_shift_the_order():
    lists = [ScoredList([("kw", 3.0), ("sem", 1.0)], 0.2), ScoredList([("sem", 0.9), ("kw", 0.2)], 0.8)]
    assert convex(lists)[0][0] == "sem"
    lists = [ScoredList([("kw", 3.0), ("sem", 1.0)], 0.8), ScoredList([("sem", 0.9), ("kw", 0.2)], 0.2)]
    assert convex(lists)[0][0] == "kw"


def test_convex_handles_empty_lists_and_equal_scores():
    assert convex([]) == []
    assert convex([ScoredList([])]) == []
    assert convex([ScoredList([("a", 5.0), ("b", 5.0)]), ScoredList([])]) == [("a", 1.0), ("b", 1.0)]


def test_index_hits_are_the_pairs_convex_fuses() -> None:
    """A search fuses ten lists of up to 100 hits: the hits go to convex as they are, with no (id, score)
    pair copied from each (at 100 candidates a side those copies were a thousand more objects a search
    for the garbage collector's young generation, which ran twice as often)."""
    hits = [IndexHit(f"c{i}", float(i % 7)) for i in range(100)]
    assert convex([ScoredList(hits, 0.6)]) == convex([ScoredList([(h.chunk_id, h.raw_score) for h in hits], 0.6)])


def test_convex_maps_the_true_scores_of_ids_a_list_did_not_fetch_on_its_own_scale() -> None:
    """Issue 27: an id a list did not fetch, with its true score in that index (`unfetched`), gets that
    score on the list's min-max scale: below 0 under the list's lowest, not 0 whatever it scored."""
    bm25 = ScoredList([("a", 12.0), ("b", 9.0), ("c", 6.0)], 0.5, unfetched=[("near", 5.4), ("far", 0.0)])
    cosine = ScoredList([("near", 0.8), ("far", 0.8), ("b", 0.6)], 0.5, unfetched=[("a", 0.5)])
    fused = dict(convex([bm25, cosine]))
    assert fused["near"] == pytest.approx(0.5 * (5.4 - 6.0) / 6.0 + 0.5 * 1.0)
    assert fused["far"] == pytest.approx(0.5 * -1.0 + 0.5 * 1.0)
    assert fused["a"] == pytest.approx(0.5 * 1.0 + 0.5 * (0.5 - 0.6) / 0.2)
    assert fused["near"] > fused["far"]  # both fetched by the vector side alike; the keyword side tells them apart
    flat = dict(convex([ScoredList([("x", 2.0), ("y", 2.0)], unfetched=[("up", 2.0), ("down", 1.0)])]))
    assert (flat["up"], flat["down"]) == (1.0, 0.0)

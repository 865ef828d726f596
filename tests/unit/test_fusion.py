from ragmcp.retrieval.fusion import RankedList, rrf


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

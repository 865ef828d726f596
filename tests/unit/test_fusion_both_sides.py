"""Issue 27: hybrid_scores scores each phrase's candidates on both sides. A chunk only the phrase's
vector search found is given its true bm25 on the keyword side (0 with none of the words), one only
the keyword search found its true cosine on the vector side, each on that side's own min-max scale
(below 0 under its lowest candidate), instead of 0 from the side that did not fetch it. Chosen on
SciFact train, Cranfield train and the passage sets v1-v5 (BENCHMARKS.md, "Every candidate scored on
both sides")."""

from __future__ import annotations

from ragmcp.domain.models import Principal, SearchFilter
from ragmcp.ports import ScoresAsked
from ragmcp.retrieval.fusion import ScoredList, convex
from ragmcp.retrieval.service import SearchRequest, SearchService, sureness
from tests.fakes import HashEmbedder, MemorySearchIndex, index_of_texts

TEXTS = [
    "ducks",
    "pond",
    "wild ducks",
    "seeds",
    "wild ducks eat seeds near the pond among reeds rushes sedges willows alders birches and many other plants",
    "ducks eat seeds and snails near the pond in every season of the year when the water is open and warm",
    "the pond near the farm holds fish frogs newts beetles dragonflies and herons that wait in the shallows",
    "wild geese graze on grasses in winter",
    "small fish live in the pond all year",
    "insects and snails hide under pond weed",
]
ME = Principal(tenant="t")
PHRASE = "what do wild ducks eat near the pond"  # the long texts lead on bm25, the short ones on cosines


def test_a_candidate_one_side_did_not_fetch_gets_its_true_score_from_that_side() -> None:
    index = index_of_texts(TEXTS, MemorySearchIndex())
    embedder = HashEmbedder()
    service = SearchService(index, embedder)
    phrase = PHRASE
    request = SearchRequest(phrases=[phrase], mode="hybrid_scores", fts_k=3, vec_k=3, top_k=len(TEXTS))
    found = service.search(ME, request)

    vector = embedder.embed_queries([phrase])[0]
    every_bm25 = {h.chunk_id: h.raw_score for h in index.search_fts(ME, phrase, SearchFilter(), 100)}
    every_cosine = {h.chunk_id: h.raw_score for h in index.search_vector(ME, vector, SearchFilter(), 100)}
    keyword = index.search_fts(ME, phrase, SearchFilter(), 3)
    semantic = index.search_vector(ME, vector, SearchFilter(), 3)
    only_semantic = [h.chunk_id for h in semantic if h.chunk_id not in {k.chunk_id for k in keyword}]
    only_keyword = [h.chunk_id for h in keyword if h.chunk_id not in {s.chunk_id for s in semantic}]
    assert only_semantic and only_keyword  # the two sides fetched different chunks
    both = convex(
        [
            ScoredList(keyword, 1.0, [(c, every_bm25.get(c, 0.0)) for c in only_semantic]),
            ScoredList(semantic, sureness("vec", semantic), [(c, every_cosine[c]) for c in only_keyword]),
        ]
    )
    one_side = convex([ScoredList(keyword, 1.0), ScoredList(semantic, sureness("vec", semantic))])
    assert dict(both) != dict(one_side)  # what it changes shows in this search
    assert [h.chunk.chunk_id for h in found.hits] == [c for c, _ in both]
    assert [h.score for h in found.hits] == [round(max(s, 0.0), 6) for _, s in both]  # never below 0 out
    assert all(0.0 <= h.score <= 1.0 for h in found.hits)


def test_only_a_fusion_of_both_sides_asks_for_the_other_sides_scores() -> None:
    """hybrid (reciprocal ranks), a fusion weighing one side 0, and the single-index modes ask the index for
    no keyword scores (the floor's cosines of keyword-only hits are asked in every mode); hybrid_scores asks
    once a request, for every phrase whose two searches found different chunks."""
    index = index_of_texts(TEXTS, MemorySearchIndex())
    service = SearchService(index, HashEmbedder())
    asked: list[list[ScoresAsked]] = []
    score_chunks = index.score_chunks
    index.score_chunks = lambda p, flt, ask, **kw: (asked.append(list(ask)), score_chunks(p, flt, ask, **kw))[1]  # type: ignore[method-assign]
    for request in (
        SearchRequest(phrases=[PHRASE], mode="hybrid", fts_k=3, vec_k=3),
        SearchRequest(phrases=[PHRASE], mode="hybrid_scores", fts_k=3, vec_k=3, vec_weight=0.0),
        SearchRequest(phrases=[PHRASE], mode="fts", fts_k=3),
        SearchRequest(phrases=[PHRASE, "ducks"], mode="vector", vec_k=3),
    ):
        service.search(ME, request)
    assert not any(ask.bm25_of for call in asked for ask in call)
    asked.clear()
    service.search(ME, SearchRequest(phrases=[PHRASE, "wild geese"], mode="hybrid_scores", fts_k=3, vec_k=3))
    assert [ask.query for ask in asked[0]] == [PHRASE]  # the second phrase's two searches found the same three
    assert asked[0][0].bm25_of and asked[0][0].cosine_of

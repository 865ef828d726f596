"""The search service measures each candidate's heading path against the question (issue 27,
sections named by a paraphrase): a path is embedded once and kept, apart from the phrase cache,
and the hits outside any section keep the scores the fusion gave them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ragmcp.domain.models import Chunk, Document, Principal, SearchFilter
from ragmcp.retrieval.query_cache import query_cache_stats, with_query_cache
from ragmcp.retrieval.service import SearchRequest, SearchService, _fuse
from ragmcp.text import keyword_text
from tests import fakes

TEXTS = {
    "feed": "§ Duck › Behaviour › Feeding\nDabbling ducks take grasses, seeds and snails from the water.",
    "links": "§ Duck › External links\nA list of guides to ducks and their calls.",
    "plain": "Guides to ducks on a winter pond, a note without headings.",
}


class Counting(fakes.HashEmbedder):
    """The hashed-word embedder, recording every text it embeds as a search phrase."""

    def __init__(self) -> None:
        self.queried: list[str] = []

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        self.queried.extend(texts)
        return super().embed_queries(texts)


def service(embedder: Counting, cache: int = 0) -> SearchService:
    index = fakes.MemorySearchIndex()
    for n, (name, text) in enumerate(TEXTS.items()):
        doc = Document(
            tenant="t",
            doc_id=f"d{n}",
            source="s",
            path=f"{name}.md",
            title="Duck",
            file_name=f"{name}.md",
            file_type="md",
            content_hash=f"h{n}",
        )
        chunk = Chunk(chunk_id=name, doc_id=doc.doc_id, ordinal=0, text=text, headline="", summary="")
        index.replace_document(doc, [chunk], embedder.embed([text]))
    return SearchService(index, with_query_cache(embedder, cache))


def test_a_heading_path_is_embedded_once_and_kept_out_of_the_phrase_cache() -> None:
    embedder = Counting()
    search = service(embedder, cache=8)
    for phrase in ("what do ducks eat from the water", "which guides list duck calls"):
        hits = search.search(Principal(tenant="t"), SearchRequest(phrases=[phrase], mode="hybrid_scores")).hits
        assert {hit.chunk.chunk_id for hit in hits} == set(TEXTS)
    headings = [text for text in embedder.queried if text.startswith("Duck")]
    assert sorted(headings) == ["Duck › Behaviour › Feeding", "Duck › External links"]
    stats = query_cache_stats(search.embedder)
    assert stats is not None and stats.size == 2  # the two phrases, no heading


def test_hits_keep_their_fused_scores_unless_their_heading_pulls_them_up() -> None:
    """The chunk without a heading path carries exactly the fused score of the index's own lists
    (nothing is divided by a lifted best, so a caller's min_score means the same); the heading
    closest to the question among the top chunks pulls its chunk up, to at most 1."""
    search = service(Counting())
    phrase = "feeding guides for ducks"
    hits = {
        h.chunk.chunk_id: h.score
        for h in search.search(
            Principal(tenant="t"), SearchRequest(phrases=[phrase], mode="hybrid_scores", top_k=3)
        ).hits
    }
    principal, flt = Principal(tenant="t"), SearchFilter()
    keyword = search.index.search_fts(principal, keyword_text(phrase), flt, 50)
    vector = search.index.search_vector(principal, search.embedder.embed_queries([phrase])[0], flt, 50)
    request = SearchRequest(phrases=[phrase], mode="hybrid_scores", top_k=3)
    fused = dict(_fuse(request, [("fts", keyword, request.fts_weight), ("vec", vector, request.vec_weight)]))
    assert hits["plain"] == round(fused["plain"], 6)
    assert 0 < hits["plain"] < hits["links"]
    assert fused["links"] < hits["links"] <= 1.0


def test_a_single_indexs_search_keeps_that_indexs_order_whatever_the_headings() -> None:
    """rag.search_fts and rag.search_vector give one index's ranking and its normalised scores: a
    heading the question names ("Feeding") or a close heading path moves nothing there."""
    principal, flt = Principal(tenant="t"), SearchFilter()
    phrase = "feeding guides for ducks"
    for mode in ("fts", "vector"):
        search = service(Counting())
        request = SearchRequest(phrases=[phrase], mode=mode, top_k=3, floor=0.01)
        hits = search.search(principal, request).hits
        if mode == "fts":
            listed = search.index.search_fts(principal, keyword_text(phrase), flt, 50)
        else:
            listed = search.index.search_vector(principal, search.embedder.embed_queries([phrase])[0], flt, 50)
        assert [h.chunk.chunk_id for h in hits] == [h.chunk_id for h in listed][:3], mode

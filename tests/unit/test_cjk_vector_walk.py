"""With an English-only embedder a phrase all in CJK has no vector weight in the fusion (vector_share 0):
its vector search is not made, yet its hits are ranked and scored as before (the keyword side alone),
and the floor still reads their cosine to the phrase, measured for those hits only (review of stop 36).
On the real SQLite index, with the fake embedder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ragmcp.adapters.local.database import Database
from ragmcp.adapters.local.sqlite_index import SqliteSearchIndex
from ragmcp.domain.models import IndexHit, Principal, SearchFilter
from ragmcp.retrieval.service import SearchRequest, SearchService, vector_share
from tests import fakes

TEXTS = [
    "大数法则 是 概率论的基本定理",
    "大数法则 说明 样本均值收敛",
    "大数定律 与 中心极限定理",
    "法则的证明 用到 切比雪夫不等式",
    "The law of large numbers in probability theory",
    "Sample means converge to the expected value",
]
CJK = "大数法则 是 什么"
"""All in CJK; the fake embedder's words (split at the spaces) give its hits cosines that differ."""


class CountingIndex(SqliteSearchIndex):
    """The SQLite index counting its vector searches: walks (over every chunk the filter allows) and
    measures (cosines of given chunk ids, as the floor's similarity asks them: `score_chunks`)."""

    walks = 0
    measures = 0

    def search_vector(self, principal: Principal, vector: Any, flt: SearchFilter, k: int, **kw: Any) -> list[IndexHit]:
        if flt.chunk_ids is None:
            self.walks += 1
        else:
            self.measures += 1
        return super().search_vector(principal, vector, flt, k, **kw)

    def score_chunks(self, principal: Principal, flt: SearchFilter, asked: Any, **kw: Any) -> Any:
        self.measures += any(ask.cosine_of for ask in asked)
        return super().score_chunks(principal, flt, asked, **kw)


class MultilingualEmbedder(fakes.HashEmbedder):
    multilingual = True


@pytest.fixture
def index(tmp_path: Path) -> CountingIndex:
    index = CountingIndex(Database(tmp_path / "ragmcp.db"))
    index.ensure_model("hash", fakes.HashEmbedder.dimension)
    return fakes.index_of_texts(TEXTS, index)  # type: ignore[type-var]


def _hits(
    index: CountingIndex, embedder: fakes.HashEmbedder, phrases: list[str], mode: str, vec_weight: float = 1.0
) -> list[tuple]:
    index.walks = index.measures = 0
    request = SearchRequest(phrases=phrases, mode=mode, top_k=3, floor=0.05, floor_coverage=0.3, vec_weight=vec_weight)
    found = SearchService(index, embedder).search(Principal(tenant="t"), request).hits
    return [(h.chunk.chunk_id, h.score, h.similarity, h.floor_score) for h in found]


@pytest.mark.parametrize("mode", ["hybrid", "hybrid_scores"])
def test_a_cjk_phrase_ranks_as_before_without_its_vector_search(index: CountingIndex, mode: str) -> None:
    assert vector_share(CJK, multilingual=False) == 0.0
    # As before: the phrase's vector side searched (an embedder with the same vectors that says it
    # is multilingual), at weight 0.
    unweighted = _hits(index, MultilingualEmbedder(), [CJK], mode, vec_weight=0.0)
    assert index.walks == 1 and len(unweighted) == 3
    assert len({similarity for _, _, similarity, _ in unweighted}) > 1  # cosines the floor reads
    fused = _hits(index, fakes.HashEmbedder(), [CJK], mode)
    # The same hits, scores and floor scores; the same cosines but for float32 rounding (read from the stored
    # vectors in numpy by `score_chunks`, not by sqlite-vec's search).
    assert [(cid, score, floor) for cid, score, _, floor in fused] == [(c, s, f) for c, s, _, f in unweighted]
    assert [s for _, _, s, _ in fused] == pytest.approx([s for _, _, s, _ in unweighted], abs=1e-6)
    assert (index.walks, index.measures) == (0, 1)  # the floor's cosines, for these hits alone


def test_a_phrase_the_vector_side_counts_for_is_still_searched(index: CountingIndex) -> None:
    _hits(index, MultilingualEmbedder(), [CJK], "hybrid")
    assert index.walks == 1
    phrases = ["大数法则 and the law of large numbers", CJK]
    hits = _hits(index, fakes.HashEmbedder(), phrases, "hybrid")
    assert index.walks == 1  # the first phrase's; the one all in CJK is not searched
    # Each hit's cosine is still its best to any phrase, as when both were searched (the corpus is
    # smaller than vec_k: every chunk was in each search).
    embedder = fakes.HashEmbedder()
    texts = {f"d{n}#0": text for n, text in enumerate(TEXTS)}
    queries = embedder.embed_queries(phrases)
    best = {cid: float((embedder.embed([texts[cid]]) @ queries.T).max()) for cid, *_ in hits}
    assert len(hits) == 3 and len(set(best.values())) > 1
    assert [similarity for _, _, similarity, _ in hits] == pytest.approx([best[cid] for cid, *_ in hits], abs=1e-6)

"""A phrase's script and the embedder decide how much its vector search counts beside its keyword search:
with an English-only embedding model (Embedder.multilingual False), for a Korean, Chinese or Japanese
phrase the keyword side (its CJK character pairs) leads; a phrase without CJK characters, or any phrase
with a multilingual embedder, is fused at equal weights. A phrase naming a name in code ("CUSTOMER_TAX_ID")
is led by its keyword side too, whatever the embedder."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ragmcp.adapters.aws.bedrock import BedrockEmbedder
from ragmcp.adapters.local.onnx_embedder import OnnxEmbedder
from ragmcp.domain.models import Chunk, Document, IndexHit, Principal, SearchFilter
from ragmcp.retrieval import service
from ragmcp.retrieval.fusion import ScoredList, convex
from ragmcp.retrieval.query_cache import CachedQueryEmbedder
from ragmcp.retrieval.service import SearchRequest, SearchService, vector_share
from tests import fakes

KEYWORD = [("a", 10.0), ("b", 6.0), ("c", 0.0)]
"""The keyword side's scores, whatever the phrase: chunk a first."""
VECTOR = [("b", 0.9), ("a", 0.6), ("c", 0.5)]
"""The vector side's cosines, whatever the phrase: chunk b first, far enough ahead to win a fusion at equal weights."""


class ScriptedIndex(fakes.MemorySearchIndex):
    """The in-memory index holding chunks a, b and c, whose two searches return fixed lists."""

    def __init__(self, vector: list[tuple[str, float]] = VECTOR) -> None:
        super().__init__()
        self.vector = vector
        doc = Document(
            tenant="t",
            doc_id="d",
            source="s",
            path="d",
            title="d",
            file_name="d.txt",
            file_type="txt",
            content_hash="h",
        )
        chunks = [
            Chunk(chunk_id=c, doc_id="d", ordinal=i, text=c, headline="", summary="") for i, c in enumerate("abc")
        ]
        self.replace_document(doc, chunks, np.eye(3, 8, dtype=np.float32))

    def search_fts(self, principal: Principal, query: str, flt: SearchFilter, k: int, **_: Any) -> list[IndexHit]:
        return [IndexHit(chunk_id=c, raw_score=s) for c, s in KEYWORD]

    def search_vector(self, principal: Principal, vector: Any, flt: SearchFilter, k: int, **_: Any) -> list[IndexHit]:
        wanted = flt.chunk_ids
        return [IndexHit(chunk_id=c, raw_score=s) for c, s in self.vector if wanted is None or c in wanted]


class MultilingualEmbedder(fakes.HashEmbedder):
    """The fake embedder, declaring itself multilingual (as Bedrock's Titan v2 does)."""

    multilingual = True


def _search(
    phrase: str, embedder: fakes.HashEmbedder | None = None, vector: list[tuple[str, float]] = VECTOR
) -> list[tuple[str, float]]:
    service = SearchService(ScriptedIndex(vector), embedder or fakes.HashEmbedder())
    request = SearchRequest(phrases=[phrase], mode="hybrid_scores", top_k=3)
    return [(h.chunk.chunk_id, h.score) for h in service.search(Principal(tenant="t"), request).hits]


@pytest.mark.parametrize("phrase", ["대수의 법칙이란 무엇인가?", "大数法则是什么", "大数の法則とは"])
def test_a_cjk_phrase_is_led_by_its_keyword_side(phrase: str) -> None:
    assert _search(phrase)[0][0] == "a"


@pytest.mark.parametrize("phrase", ["What is the law of large numbers?", "covid-19 U07.1", "dūce"])
def test_a_phrase_without_cjk_is_fused_at_equal_weights_exactly_as_before(phrase: str) -> None:
    before = [(cid, round(s, 6)) for cid, s in convex([ScoredList(KEYWORD), ScoredList(VECTOR)])]
    assert _search(phrase) == before
    assert before[0][0] == "b"


def test_the_vector_side_counts_less_the_more_of_the_phrase_is_cjk() -> None:
    assert vector_share("law of large numbers", False) == 1.0
    assert vector_share("대수의 법칙", False) == 0.0
    assert 0.0 < vector_share("SARS와 MERS의 U코드", False) < 1.0


@pytest.mark.parametrize("phrase", ["대수의 법칙이란 무엇인가?", "大数法则是什么", "大数の法則とは"])
def test_a_multilingual_embedder_gives_a_cjk_phrase_no_keyword_lead(phrase: str) -> None:
    before = [(cid, round(s, 6)) for cid, s in convex([ScoredList(KEYWORD), ScoredList(VECTOR)])]
    assert _search(phrase, MultilingualEmbedder()) == before
    assert vector_share(phrase, True) == 1.0


def test_the_embedders_say_whether_they_are_multilingual() -> None:
    assert not OnnxEmbedder.multilingual
    assert BedrockEmbedder(None, "amazon.titan-embed-text-v2:0", 1024).multilingual
    assert BedrockEmbedder(None, "cohere.embed-multilingual-v3", 1024).multilingual
    assert not BedrockEmbedder(None, "cohere.embed-english-v3", 1024).multilingual
    assert CachedQueryEmbedder(MultilingualEmbedder(), 4).multilingual
    assert not CachedQueryEmbedder(fakes.HashEmbedder(), 4).multilingual


WEAK = [("b", 0.15), ("a", 0.05), ("c", 0.0)]
"""A vector side whose best cosine is near nothing: min-max still maps b to 1."""


def test_a_weak_vector_side_weighs_less_than_a_keyword_side_that_matches() -> None:
    """Issue 27's heading-17: every cosine under 0.3, yet min-max lifted the nearest chunk to 1.0 and it beat the
    keyword side's first. A vector side whose best cosine is under VECTOR_SURE counts in proportion to it."""
    even = [(cid, round(s, 6)) for cid, s in convex([ScoredList(KEYWORD), ScoredList(WEAK)])]
    assert even[0][0] == "b"  # at equal weights the near-zero side would win
    assert service.sureness("vec", [IndexHit(chunk_id=c, raw_score=s) for c, s in WEAK]) == pytest.approx(
        0.15 / service.VECTOR_SURE
    )
    assert _search("what is the law of large numbers", vector=WEAK)[0][0] == "a"
    assert service.sureness("vec", [IndexHit(chunk_id="b", raw_score=0.9)]) == 1.0
    assert service.sureness("vec", [IndexHit(chunk_id="b", raw_score=-0.2)]) == service.LEAST_SURE
    assert service.sureness("fts", [IndexHit(chunk_id="b", raw_score=0.01)]) == 1.0


@pytest.mark.parametrize("embedder", [fakes.HashEmbedder(), MultilingualEmbedder()])
def test_a_phrase_naming_a_name_in_code_is_led_by_its_keyword_side(embedder: fakes.HashEmbedder) -> None:
    """Issue 27, code questions: for "What does the mask return to tellers for CUSTOMER_TAX_ID?" the
    vector side ranked the employees' TAX_ID mask and a prose line about it above the code holding
    CUSTOMER_TAX_ID, which the keyword side ranked first; at equal weights the vector side won."""
    assert _search("What does the mask return to tellers for CUSTOMER_TAX_ID?", embedder)[0][0] == "a"
    assert _search("What does the mask return to tellers for the customer tax ID?", embedder)[0][0] == "b"
    assert vector_share("FOR COLUMN TAX_ID", False) == service.CODE_NAME_VECTOR_SHARE
    korean = vector_share("SARS와 MERS의 TAXID", False)
    assert vector_share("SARS와 MERS의 TAX_ID", False) == korean * service.CODE_NAME_VECTOR_SHARE

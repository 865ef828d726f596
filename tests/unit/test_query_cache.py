"""The query-phrase cache: the vectors the model gives, a bounded LRU, its counts in /healthz."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from ragmcp.adapters.local.onnx_embedder import OnnxEmbedder
from ragmcp.bootstrap import build_registry, build_services
from ragmcp.domain.models import Principal
from ragmcp.http import create_app
from ragmcp.retrieval.query_cache import CachedQueryEmbedder, query_cache_stats
from ragmcp.retrieval.service import SearchRequest
from ragmcp.settings import Settings

pytestmark = pytest.mark.slow  # the real ONNX model, and services on a data directory

PHRASES = ["aspirin and a second heart attack", "BRCA1 mutations", "vitamin D and fractures"]


class Counting:
    """The real ONNX embedder, recording which phrases reach it."""

    def __init__(self, inner: OnnxEmbedder):
        self.inner = inner
        self.model_id, self.model_sha256, self.dimension = inner.model_id, inner.model_sha256, inner.dimension
        self.multilingual = inner.multilingual
        self.asked: list[str] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.embed(texts)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        self.asked.extend(texts)
        return self.inner.embed_queries(texts)


@pytest.fixture(scope="module")
def onnx() -> OnnxEmbedder:
    return OnnxEmbedder(workers=1)


def test_cached_vectors_are_the_models_and_a_repeat_is_not_embedded_again(onnx: OnnxEmbedder) -> None:
    model = Counting(onnx)
    cached = CachedQueryEmbedder(model, capacity=8)
    first = cached.embed_queries(PHRASES)
    np.testing.assert_array_equal(first, onnx.embed_queries(PHRASES))
    again = cached.embed_queries([PHRASES[1], PHRASES[0], PHRASES[1]])
    np.testing.assert_array_equal(again, first[[1, 0, 1]])
    assert model.asked == PHRASES
    again[0] += 1.0  # a caller's change stays in its copy
    np.testing.assert_array_equal(cached.embed_queries([PHRASES[1]])[0], first[1])
    stats = cached.stats()
    assert (stats.hits, stats.misses, stats.size, stats.capacity) == (4, 3, 3, 8)
    assert stats.hit_rate == round(4 / 7, 4)
    assert cached.embed_queries([]).shape == (0, onnx.dimension)
    np.testing.assert_array_equal(cached.embed(PHRASES[:1]), onnx.embed(PHRASES[:1]))
    assert model.asked == PHRASES  # document embeddings pass straight through, uncounted


def test_the_least_recently_used_phrase_is_evicted_at_the_bound(onnx: OnnxEmbedder) -> None:
    model = Counting(onnx)
    cached = CachedQueryEmbedder(model, capacity=2)
    cached.embed_queries(PHRASES[:2])
    cached.embed_queries(PHRASES[:1])  # PHRASES[0] is now the most recently used
    cached.embed_queries(PHRASES[2:])  # evicts PHRASES[1]
    assert cached.stats().size == 2
    model.asked.clear()
    cached.embed_queries([PHRASES[0], PHRASES[2]])
    assert model.asked == []
    cached.embed_queries([PHRASES[1]])
    assert model.asked == [PHRASES[1]]
    assert cached.stats().size == 2
    with pytest.raises(ValueError):
        CachedQueryEmbedder(model, capacity=0)


def test_healthz_shows_the_cache_and_size_zero_turns_it_off(tmp_path: Path) -> None:
    services = build_services(Settings(data_dir=tmp_path / "on", host="testserver", open=True, query_cache_size=5))
    request = SearchRequest(phrases=PHRASES[:2], mode="vector")
    services.search.search(Principal(tenant="default"), request)
    services.search.search(Principal(tenant="default"), request.model_copy(update={"phrases": PHRASES[1:]}))
    with TestClient(create_app(services, build_registry(services)), base_url="http://testserver") as http:
        body = http.get("/healthz").json()
    assert body["query_cache"] == {"size": 3, "capacity": 5, "hits": 1, "misses": 3, "hit_rate": 0.25}
    off = build_services(Settings(data_dir=tmp_path / "off", host="testserver", open=True, query_cache_size=0))
    assert query_cache_stats(off.embedder) is None
    with TestClient(create_app(off, build_registry(off)), base_url="http://testserver") as http:
        assert http.get("/healthz").json()["query_cache"] is None

"""A search's phrases are embedded in one call, cut into as few runs of the query model as the
workers take at once (issue 31: the per-run cost, about 1.6 ms of CPU, was paid once a phrase)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import pytest

from ragmcp.adapters.local.onnx_embedder import cut_query_runs
from ragmcp.domain.errors import DeadlineExceeded
from ragmcp.domain.models import Principal
from ragmcp.retrieval.service import SearchRequest, SearchService
from tests import fakes


@pytest.mark.parametrize(
    ("lengths", "batch", "workers", "runs"),
    [
        ([21, 9, 35, 14, 22], 8, 2, [[1, 3, 0], [4, 2]]),  # two runs for two workers, the short ones together
        ([21, 9, 35, 14, 22], 1, 2, [[1], [3], [0], [4], [2]]),  # batch 1: a run a phrase, as before
        ([21, 9, 35, 14, 22], 8, 8, [[1], [3], [0], [4], [2]]),  # no more runs than phrases
        ([12], 8, 2, [[0]]),
        ([5, 6, 7, 8, 9, 10, 11, 12, 13, 14], 4, 2, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]),  # none over the batch
        ([], 8, 2, []),
    ],
)
def test_phrases_are_cut_by_length_into_a_run_a_worker(
    lengths: list[int], batch: int, workers: int, runs: list[list[int]]
) -> None:
    assert cut_query_runs(lengths, batch, workers) == runs


class CountingEmbedder(fakes.HashEmbedder):
    """The fake's vectors; every embed_queries call recorded with its phrases."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self._lock = threading.Lock()

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            self.calls.append(list(texts))
        return super().embed_queries(texts)


TEXTS = ["herons nest in reed beds", "the tax form is due in april"]


def _service(embedder: fakes.HashEmbedder) -> SearchService:
    return SearchService(fakes.index_of_texts(TEXTS, fakes.MemorySearchIndex()), embedder)


PHRASES = ["heron nest", "reed beds", "tax form", "april", "herons"]
"""Three phrases for c0, two for c1 (a phrase no chunk is near, whose vector side alone would decide it, weighs
little in hybrid_scores: retrieval.service.sureness)."""


@pytest.mark.parametrize("mode", ["hybrid", "vector", "hybrid_scores", "fts_then_vec"])
def test_a_search_embeds_its_phrases_in_one_call(mode: str) -> None:
    embedder = CountingEmbedder()
    found = _service(embedder).search(Principal(tenant="t"), SearchRequest(phrases=PHRASES, mode=mode))
    assert embedder.calls == [PHRASES]
    assert found.hits and found.hits[0].chunk.chunk_id == "d0#0"


def test_the_phrases_vectors_are_each_phrase_s_own() -> None:
    """Each phrase searches with its own vector: the results are those of the phrases searched one by one."""
    embedder = CountingEmbedder()
    service = _service(embedder)
    together = service.search(Principal(tenant="t"), SearchRequest(phrases=["tax form", "heron"], mode="vector"))
    alone = {
        p: service.search(Principal(tenant="t"), SearchRequest(phrases=[p], mode="vector")).hits[0].similarity
        for p in ("tax form", "heron")
    }
    similarity = {hit.chunk.chunk_id: hit.similarity for hit in together.hits}
    assert similarity == {"d1#0": alone["tax form"], "d0#0": alone["heron"]}


def test_given_query_vectors_embed_nothing_and_an_fts_search_embeds_nothing() -> None:
    embedder = CountingEmbedder()
    service = _service(embedder)
    vector = embedder.embed(["heron"])[0].tolist()
    service.search(Principal(tenant="t"), SearchRequest(phrases=["heron"], mode="vector", query_vectors=[vector]))
    service.search(Principal(tenant="t"), SearchRequest(phrases=["heron"], mode="fts"))
    assert embedder.calls == []


def test_a_search_past_its_deadline_embeds_nothing() -> None:
    embedder = CountingEmbedder()
    with pytest.raises(DeadlineExceeded):
        _service(embedder).search(Principal(tenant="t"), SearchRequest(phrases=PHRASES, deadline=0.0))
    assert embedder.calls == []

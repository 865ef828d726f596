"""The search service every profile calls: modes, multi-phrase fusion, normalised scores.

Modes: fts (bm25), vector (cosine), hybrid (both, fused by weighted reciprocal rank),
hybrid_scores (both, fused by a weighted sum of min-max normalised scores), fts_then_vec
(keyword candidates ranked by vector similarity).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, Field

from ragmcp.domain.models import IndexHit, Principal, ScoredChunk, SearchFilter, SearchMode
from ragmcp.ports import Embedder, SearchIndex
from ragmcp.retrieval.fusion import RankedList, ScoredList, convex, rrf


class SearchRequest(BaseModel):
    phrases: list[str] = Field(min_length=1)
    mode: SearchMode = "hybrid"
    top_k: int = Field(default=8, ge=1, le=1000)
    filter: SearchFilter = SearchFilter()
    fts_k: int = Field(default=50, ge=1, le=1000)
    vec_k: int = Field(default=50, ge=1, le=1000)
    rrf_k0: int = Field(default=60, ge=1)
    fts_weight: float = Field(default=1.0, ge=0.0)
    vec_weight: float = Field(default=1.0, ge=0.0)
    query_vectors: list[list[float]] | None = Field(
        default=None, description="Caller-supplied embeddings, one per phrase, instead of embedding the phrases."
    )


@dataclass(slots=True)
class SearchResult:
    hits: list[ScoredChunk]
    total_candidates: int
    elapsed_ms: float


class SearchService:
    def __init__(self, index: SearchIndex, embedder: Embedder, workers: int = 8):
        self.index = index
        self.embedder = embedder
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="search")

    def search(self, principal: Principal, request: SearchRequest) -> SearchResult:
        started = time.perf_counter()
        phrases, flt = request.phrases, request.filter
        keyword = [
            self._pool.submit(self.index.search_fts, principal, phrase, flt, request.fts_k)
            for phrase in phrases
            if request.mode in ("fts", "hybrid", "hybrid_scores")
        ]
        semantic = (
            []
            if request.mode == "fts"
            else [self._pool.submit(self._semantic, principal, request, i) for i in range(len(phrases))]
        )
        runs = [
            (kind, hits)
            for i in range(len(phrases))
            for kind, futures in (("fts", keyword), ("vec", semantic))
            if futures and (hits := futures[i].result())
        ]
        raw: dict[str, dict[str, tuple[float, int]]] = {"fts": {}, "vec": {}}
        for kind, hits in runs:
            _keep_best(raw[kind], hits)
        fts_raw, vec_raw = raw["fts"], raw["vec"]
        fused = _fuse(request, runs)
        top = fused[: request.top_k]
        found = self.index.get_chunks(principal.tenant, [cid for cid, _ in top])
        results = []
        for cid, score in top:
            if cid not in found:
                continue
            chunk, doc = found[cid]
            fts = fts_raw.get(cid)
            vec = vec_raw.get(cid)
            results.append(
                ScoredChunk(
                    chunk=chunk,
                    document=doc,
                    score=round(score, 6),
                    fts_score=None if fts is None else fts[0],
                    fts_rank=None if fts is None else fts[1],
                    vec_score=None if vec is None else vec[0],
                    vec_rank=None if vec is None else vec[1],
                )
            )
        return SearchResult(results, len(fused), (time.perf_counter() - started) * 1000)

    def _semantic(self, principal: Principal, request: SearchRequest, i: int) -> list[IndexHit]:
        """Phrase i's vector search, as soon as its own embedding is ready (phrases embed in parallel)."""
        phrase = request.phrases[i]
        if request.query_vectors is not None:
            vector = np.asarray(request.query_vectors[i], dtype=np.float32)
        else:
            vector = self.embedder.embed_queries([phrase])[0]
        return self._vector_search(principal, request, phrase, vector)

    def _vector_search(
        self, principal: Principal, request: SearchRequest, phrase: str, vector: np.ndarray
    ) -> list[IndexHit]:
        """The phrase's nearest chunks; for fts_then_vec, among its keyword candidates only."""
        flt = request.filter
        if request.mode == "fts_then_vec":
            candidates = self.index.search_fts(principal, phrase, flt, request.fts_k)
            flt = flt.model_copy(update={"chunk_ids": tuple(h.chunk_id for h in candidates)})
        return self.index.search_vector(principal, vector, flt, request.vec_k)


def _fuse(request: SearchRequest, runs: list[tuple[str, list[IndexHit]]]) -> list[tuple[str, float]]:
    """One ranking from every index search: by score for hybrid_scores, else by reciprocal rank."""
    weight = {"fts": request.fts_weight, "vec": request.vec_weight}
    if request.mode == "hybrid_scores":
        return convex([ScoredList([(h.chunk_id, h.raw_score) for h in hits], weight[kind]) for kind, hits in runs])
    return rrf([RankedList([h.chunk_id for h in hits], weight[kind]) for kind, hits in runs], request.rrf_k0)


def _keep_best(raw: dict[str, tuple[float, int]], hits: list[IndexHit]) -> None:
    for rank, hit in enumerate(hits, start=1):
        seen = raw.get(hit.chunk_id)
        if seen is None or hit.raw_score > seen[0]:
            raw[hit.chunk_id] = (hit.raw_score, rank)

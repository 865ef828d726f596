"""A bounded, per-process LRU of search phrase -> query vector around any Embedder.

Agents repeat themselves: the same phrase comes back within a conversation and across callers
asking about the same thing, and embedding it again costs a model run (several ms of CPU with
the local model, a paid call with Bedrock). Only `embed_queries` is cached; `embed` (documents,
which have their own cache by content hash) passes straight through. Vectors are returned as
fresh arrays, so a caller that changes one cannot change the cache.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel

from ragmcp.ports import Embedder


class QueryCacheStats(BaseModel):
    size: int
    """Phrases held now."""
    capacity: int
    hits: int
    misses: int
    hit_rate: float | None
    """hits / (hits + misses); None before the first lookup."""


class CachedQueryEmbedder:
    """An Embedder whose query vectors are remembered, at most `capacity` phrases, least recently
    used evicted first."""

    def __init__(self, inner: Embedder, capacity: int):
        if capacity < 1:
            raise ValueError("a query cache holds at least one phrase")
        self.inner = inner
        self.capacity = capacity
        self.model_id = inner.model_id
        self.model_sha256 = inner.model_sha256
        self.dimension = inner.dimension
        self.multilingual = inner.multilingual
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.embed(texts)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for text in texts:
                vector = self._vectors.get(text)
                if vector is not None:
                    self._vectors.move_to_end(text)
                    found[text] = vector
            misses = [text for text in texts if text not in found]
            self._hits += len(texts) - len(misses)
            self._misses += len(misses)
        missing = list(dict.fromkeys(misses))
        if missing:
            fresh = np.asarray(self.inner.embed_queries(missing), dtype=np.float32)
            with self._lock:
                for text, vector in zip(missing, fresh, strict=True):
                    kept = vector.copy()
                    kept.flags.writeable = False
                    found[text] = kept
                    self._vectors[text] = kept
                    self._vectors.move_to_end(text)
                while len(self._vectors) > self.capacity:
                    self._vectors.popitem(last=False)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.stack([found[text] for text in texts])

    def stats(self) -> QueryCacheStats:
        with self._lock:
            looked_up = self._hits + self._misses
            return QueryCacheStats(
                size=len(self._vectors),
                capacity=self.capacity,
                hits=self._hits,
                misses=self._misses,
                hit_rate=round(self._hits / looked_up, 4) if looked_up else None,
            )


def with_query_cache(embedder: Embedder, capacity: int) -> Embedder:
    """The embedder with a query-phrase cache of `capacity` phrases; itself when 0 (off)."""
    return CachedQueryEmbedder(embedder, capacity) if capacity else embedder


def query_cache_stats(embedder: Embedder) -> QueryCacheStats | None:
    """The cache's counts when `embedder` has a query cache, else None."""
    return embedder.stats() if isinstance(embedder, CachedQueryEmbedder) else None

"""Each query term's bm25 scores over the whole FTS5 table, kept in memory as numpy arrays.

FTS5's bm25 of an OR query is a sum over its terms: for each term, its idf times a function of
the term's frequency in the chunk and the chunk's length. So the bm25 of `"a" OR "b"` for every
chunk is the sum of the single-term bm25 columns of "a" and of "b", which FTS5 itself computes
(`SELECT rowid, bm25(...) ... MATCH '"a"'`). Kept per term, a query becomes a few array
additions, a mask of the chunks the caller may see and a partial sort: the same scores as the
SQL query, without FTS5 scoring (and joining) every matching row of every query again.

Every entry belongs to one generation of the index: any write changes idf, lengths and rows,
so a new generation starts empty. Entries are evicted least recently used first once they hold
more than `max_entries` (chunk, score) pairs.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np

Loader = Callable[[str], tuple[np.ndarray, np.ndarray]]
"""A term -> (chunk ids, bm25 scores) of every chunk that has it."""


class TermPostings:
    def __init__(self, max_entries: int = 16_000_000):
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._generation = -1
        self._terms: OrderedDict[str, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._entries = 0

    def top(
        self, generation: int, terms: Sequence[str], load: Loader, allowed: np.ndarray, k: int
    ) -> list[tuple[int, float]]:
        """(chunk id, bm25) of the k best chunks for the OR of `terms`, among those whose bit is set
        in `allowed` (one bit per chunk id, little-endian bit order within bytes)."""
        columns = [self._get(generation, term, load) for term in terms]
        ids = np.concatenate([c[0] for c in columns])
        if ids.size == 0:
            return []
        totals = np.bincount(ids, weights=np.concatenate([c[1] for c in columns]))
        mask = np.unpackbits(allowed, bitorder="little")[: totals.size]
        totals[: mask.size] *= mask
        totals[mask.size :] = 0
        candidates = np.flatnonzero(totals > 0)
        if candidates.size > k:
            candidates = candidates[np.argpartition(-totals[candidates], k - 1)[:k]]
        candidates = candidates[np.argsort(-totals[candidates], kind="stable")]
        return [(int(i), float(totals[i])) for i in candidates]

    def _get(self, generation: int, term: str, load: Loader) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            if generation != self._generation:
                self._generation, self._entries = generation, 0
                self._terms.clear()
            found = self._terms.get(term)
            if found is not None:
                self._terms.move_to_end(term)
                return found
        found = load(term)
        with self._lock:
            if generation == self._generation and term not in self._terms:
                self._terms[term] = found
                self._entries += found[0].size
                while self._entries > self.max_entries and len(self._terms) > 1:
                    _, (old_ids, _) = self._terms.popitem(last=False)
                    self._entries -= old_ids.size
        return found

"""Each (tenant, term)'s bm25 scores over the tenant's chunks, kept in memory as numpy arrays.

The bm25 of a query is a sum over its terms: for each term, its idf times a function of the
term's frequency in the chunk and the chunk's length (bm25.py computes one term's column with the
tenant's statistics). Kept per tenant and term, a query becomes a few array additions, a mask of
the chunks the caller may see and a partial sort, without reading and scoring every chunk that
holds a query term again.

A term found in at least a quarter of the rows (the words every query shares: "of", "the",
"in") is kept as a dense column indexed by row id, added to the totals as it is; rarer terms
are kept as (row ids, scores) pairs and scattered in.

Row ids are kept as 32-bit integers and scores as 32-bit floats (the totals are summed in 64
bits): a (chunk, score) pair takes 8 bytes, a dense column 4 bytes a row.

Every entry belongs to one generation of the index: any write changes idf, lengths and rows,
so a new generation starts empty. Entries are evicted least recently used first once they hold
more than `max_entries` (chunk, score) pairs' worth of memory.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

Key = tuple[str, str]
"""(tenant, term)."""
Loader = Callable[[Key], tuple[np.ndarray, np.ndarray]]
"""(tenant, term) -> (chunk ids, bm25 scores) of every chunk of the tenant that has the term."""

_DENSE_FRACTION = 4
"""A term is kept dense when it is in at least 1/4 of the row ids up to its last one."""

PAIR_BYTES = 8
"""The memory of one (chunk, score) pair: a 32-bit row id and a 32-bit score."""


@dataclass(frozen=True, slots=True)
class _Column:
    ids: np.ndarray | None
    scores: np.ndarray
    """With ids: the score of each listed row; without: the score of every row id (0 where absent)."""
    peak: float
    """The highest score."""

    @classmethod
    def of(cls, ids: np.ndarray, scores: np.ndarray) -> _Column:
        peak = float(scores.max()) if scores.size else 0.0
        if ids.size and ids.size * _DENSE_FRACTION >= int(ids.max()) + 1:
            return cls(None, np.bincount(ids, weights=scores).astype(np.float32), peak)
        return cls(ids.astype(np.int32), scores.astype(np.float32), peak)

    @property
    def entries(self) -> int:
        return self.scores.size if self.ids is not None else (self.scores.size + 1) // 2


class TermPostings:
    def __init__(self, max_entries: int = 16_000_000):
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._generation = -1
        self._terms: OrderedDict[Key, _Column] = OrderedDict()
        self._entries = 0

    def top(
        self, generation: int, terms: Sequence[Key], load: Loader, allowed: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Chunk ids and bm25 of the k best chunks for the OR of `terms` (a term given twice counts
        twice), best first, among those `allowed` lets through (one bool per chunk id); equal scores
        in row id order."""
        columns = [self._get(generation, term, load) for term in terms]
        size = allowed.size
        scattered = [c for c in columns if c.ids is not None and c.ids.size]
        if scattered:
            ids = np.concatenate([c.ids for c in scattered])
            weights = np.concatenate([c.scores for c in scattered])
            totals: np.ndarray = np.bincount(ids, weights=weights, minlength=size)[:size]
        else:
            totals = np.zeros(size)
        for column in columns:
            if column.ids is None:
                shared = min(size, column.scores.size)
                totals[:shared] += column.scores[:shared]
        # A row none of the rarer terms is in scores at most the sum of the common words' peaks:
        # the k best usually lie above that, among far fewer rows than the whole table.
        floor = sum(column.peak for column in columns if column.ids is None)
        # The rarest term with at least k rows: the k-th best total among its rows bounds the k-th
        # best of all from below, so only the rows at or above it need sorting.
        hint = min((c.ids for c in scattered if c.ids is not None and c.ids.size >= k), key=len, default=None)
        best = _best(totals, k, floor, hint)
        if not allowed[best].all():  # the best of all rows are not all allowed: mask, then look again
            totals *= allowed
            best = _best(totals, k, floor, hint)
        return best, totals[best]

    def preload(self, generation: int, terms: Sequence[Key], load: Loader, stop: threading.Event) -> int:
        """Load these terms' columns (most wanted first) until three quarters of the budget are
        used (the rest is for the words searches read later) or `stop` is set; the number of
        terms held."""
        held = 0
        for term in terms:
            if stop.is_set() or self._entries >= self.max_entries * 3 // 4:
                break
            self._get(generation, term, load)
            held += 1
        return held

    @property
    def entries(self) -> int:
        """(chunk, score) pairs' worth of memory held (PAIR_BYTES each)."""
        return self._entries

    def _get(self, generation: int, term: Key, load: Loader) -> _Column:
        with self._lock:
            if generation != self._generation:
                self._generation, self._entries = generation, 0
                self._terms.clear()
            found = self._terms.get(term)
            if found is not None:
                self._terms.move_to_end(term)
                return found
        found = _Column.of(*load(term))
        with self._lock:
            if generation == self._generation and term not in self._terms:
                self._terms[term] = found
                self._entries += found.entries
                while self._entries > self.max_entries and len(self._terms) > 1:
                    _, old = self._terms.popitem(last=False)
                    self._entries -= old.entries
        return found


def _best(totals: np.ndarray, k: int, floor: float, hint: np.ndarray | None = None) -> np.ndarray:
    """The row ids of the k highest positive totals, best first, equal totals in row id order.
    Looked for among the rows at or above the k-th best total of the `hint` rows when that is
    positive (k rows reach it, so the k best do), else among the rows above `floor` when at least
    k are (any k best lie among them), else among every positive one."""
    bound = totals[hint[hint < totals.size]] if hint is not None else totals[:0]
    if 0 < k <= bound.size:
        edge = bound[np.argpartition(bound, bound.size - k)[bound.size - k]]
        if edge > max(floor, 0.0):
            return _ranked(totals, np.flatnonzero(totals >= edge), k)
    rows = np.flatnonzero(totals > floor) if floor > 0 else np.zeros(0, dtype=np.intp)
    if rows.size < k:
        rows = np.flatnonzero(totals > 0)
    return _ranked(totals, rows, k)


def _ranked(totals: np.ndarray, rows: np.ndarray, k: int) -> np.ndarray:
    """The k of `rows` with the highest totals (all of them when fewer), best first, equal totals
    in row id order (`rows` ascending)."""
    if rows.size > k:
        scores = totals[rows]
        edge = scores[np.argpartition(scores, rows.size - k)[rows.size - k]]
        above = rows[scores > edge]
        rows = np.concatenate([above, rows[scores == edge][: k - above.size]])  # ties at the edge: lowest ids
    return rows[np.lexsort((rows, -totals[rows]))]

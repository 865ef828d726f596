"""Each (tenant, term)'s bm25 scores over the tenant's chunks, kept in memory as numpy arrays.

The bm25 of a query is a sum over its terms: for each term, its idf times a function of the
term's frequency in the chunk and the chunk's length (bm25.py computes one term's column with the
tenant's statistics). Kept per tenant and term, a query becomes a few array additions, a mask of
the chunks the caller may see and a partial sort, without reading and scoring every chunk that
holds a query term again.

A term found in at least a quarter of the rows (the words every query shares: "of", "the",
"in") is kept as a dense column indexed by row id, added to the totals as it is; rarer terms
are kept as (row ids, scores) pairs and scattered in.

A rarer term's rows are kept in blocks of 65,536 row ids: each row id as its 16 low bits, with
where each block starts; their scores are kept as 16-bit floats (within 0.05% of the computed
bm25; the totals are summed in 64 bits). A (chunk, score) pair takes 4 bytes: each process of
`ragmcp serve --workers N` holds its own postings, so at 1M chunks this is half of what 32-bit ids
and scores took. The sums are counted two blocks at a time: one count makes the totals up to 131,072
rows, and above that a count holds one stretch's pairs, not every pair a phrase lists. A dense
column keeps 32-bit scores, 4 bytes a row (the few words in a quarter of the rows; numpy adds
16-bit floats to 64-bit totals three times slower than 32-bit ones), and is added only to the
rows that can reach the k best (the rarer terms' sums bound them), not to every row.

Every entry belongs to one generation of the index: any write changes idf, lengths and rows,
so a new generation starts empty. Entries are evicted least recently used first once they hold
more than `max_entries` (chunk, score) pairs' worth of memory.

With `SharedColumns` the processes of `serve --workers N` share the columns: the first process to
read a term's column writes it to a file of the index's folder, and every process (that one too)
maps the file instead of keeping arrays of its own (columns of at least SHARED_MIN_ENTRIES pairs:
the few long ones that hold nearly all the memory). The OS holds the pages once for all of them
(at 1M chunks a process's postings were about 300 MB, one copy each).

A generation is its write count and the random stamp its last write drew: a backup restored over
the database (the same file, the same inode) sends the count back and later writes reach the same
counts again, but never the same stamps, so neither the memory nor the files of the timeline it
replaced are read for it.
"""

from __future__ import annotations

import hashlib
import itertools
import mmap
import os
import shutil
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

Key = tuple[str, str]
"""(tenant, term)."""
Loader = Callable[[Key], tuple[np.ndarray, np.ndarray]]
"""(tenant, term) -> (chunk ids, bm25 scores) of every chunk of the tenant that has the term."""


class Generation(NamedTuple):
    """One state of the index: its write count, and the stamp drawn by the write that made it (None
    for an index no write has stamped: its columns are not shared, since its count may repeat)."""

    number: int
    stamp: str | None


_DENSE_FRACTION = 4
"""A term is kept dense when it is in at least 1/4 of the row ids up to its last one."""

PAIR_BYTES = 4
"""The memory of one (chunk, score) pair: the row id's 16 low bits and a 16-bit score."""

_BLOCK_BITS = 16
_BLOCK = 1 << _BLOCK_BITS
"""Row ids per block: a rarer term's row ids are kept as their offsets within their block (16 bits)."""


@dataclass(frozen=True, slots=True)
class _Column:
    low: np.ndarray | None
    """A rarer term's row ids, block by block, each as its offset in its block (uint16); None: dense."""
    starts: np.ndarray
    """Where each block's rows start in `low` and `scores` (one more than the blocks: the end)."""
    scores: np.ndarray
    """With `low`: the score of each listed row; without: the score of every row id (0 where absent)."""
    peak: float
    """The highest score (as kept)."""

    @classmethod
    def of(cls, ids: np.ndarray, scores: np.ndarray) -> _Column:
        if ids.size and ids.size * _DENSE_FRACTION >= int(ids.max()) + 1:
            dense = np.bincount(ids, weights=scores).astype(np.float32)
            return cls(None, np.zeros(0, dtype=np.int64), dense, float(dense.max()))
        order = np.argsort(ids, kind="stable")
        ids, kept = ids[order], scores[order].astype(np.float16)
        blocks = (int(ids[-1]) >> _BLOCK_BITS) + 1 if ids.size else 0
        starts = np.searchsorted(ids >> _BLOCK_BITS, np.arange(blocks + 1))
        peak = float(kept.max()) if kept.size else 0.0
        return cls((ids & (_BLOCK - 1)).astype(np.uint16), starts, kept, peak)

    @property
    def rows(self) -> int:
        """How many rows a rarer term's column lists."""
        return self.scores.size

    def ids(self) -> np.ndarray:
        """A rarer term's row ids, ascending."""
        assert self.low is not None
        ids = self.low.astype(np.intp)
        _add_block_bases(ids, self.starts)
        return ids

    @property
    def entries(self) -> int:
        return self.scores.size  # a pair or a dense row: 4 bytes each


_HEADER = np.dtype([("dense", "<i8"), ("starts", "<i8"), ("rows", "<i8"), ("peak", "<f8")])
"""A column file's header; then its block starts (int64), its scores (float32 dense, else float16)
and, for a rarer term, its row offsets (uint16)."""
SHARED_MIN_ENTRIES = 16_384
"""The smallest column kept in a file (64 KB): smaller ones stay in the process's memory, so the
mappings a process holds stay few (at most the budget over this; Linux allows 65,530 a process)."""
_FORMAT = "postings-1"
"""Changes with the file layout or with how a column is built from its (ids, scores)."""


class SharedColumns:
    """Term columns kept in files of `folder`, one subfolder a generation of the index (named by its
    stamp, never by its count alone), and mapped read-only by every process that reads them.
    `identity` names the database and the scoring (a column is only read back by an index with the
    same). A column that cannot be written or read (a full disk, a damaged file, an index without a
    stamp) is kept in the process's memory instead."""

    def __init__(self, folder: Path, identity: str):
        self.folder = folder
        self._tag = hashlib.sha256(f"{_FORMAT}:{identity}".encode()).hexdigest()[:16]
        self._cleared = -1

    def read(self, generation: Generation, key: Key) -> _Column | None:
        self._clear_before(generation.number)
        if generation.stamp is None:
            return None
        try:
            with open(self._path(generation, key), "rb") as file:
                return _mapped(mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ))
        except (OSError, ValueError):
            return None

    def write(self, generation: Generation, key: Key, column: _Column) -> _Column:
        """The column as mapped from its file, once written there (the given one when that fails)."""
        if generation.stamp is None:
            return column
        path = self._path(generation, key)
        part = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}")
        header = np.array([(column.low is None, column.starts.size, column.scores.size, column.peak)], dtype=_HEADER)
        arrays = [header, column.starts, column.scores, *([] if column.low is None else [column.low])]
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(part, "wb") as file:
                for array in arrays:
                    file.write(np.ascontiguousarray(array).tobytes())
            os.replace(part, path)  # whole or absent: another process maps only complete files
            return self.read(generation, key) or column
        except OSError:
            with suppress(OSError):
                part.unlink(missing_ok=True)
            return column

    def _path(self, generation: Generation, key: Key) -> Path:
        name = hashlib.sha256(f"{key[0]}\0{key[1]}".encode()).hexdigest()[:32]
        return self.folder / f"{self._tag}-{generation.number}-{generation.stamp}" / f"{name}.col"

    def _clear_before(self, number: int) -> None:
        """Once a write count: remove the files of lower counts (a restored timeline's higher ones
        go once it passes them), of other databases and of older layouts. A process lagging the
        writer by a moment never removes the writer's newer files."""
        if number <= self._cleared:
            return
        self._cleared = number
        try:
            folders = list(self.folder.iterdir())
        except OSError:
            return
        for folder in folders:
            tag, _, seen = folder.name.rpartition("-")[0].rpartition("-")
            if tag != self._tag or not seen.isdigit() or int(seen) < number:
                shutil.rmtree(folder, ignore_errors=True)  # a process still mapping a file keeps its pages


def _mapped(view: mmap.mmap) -> _Column:
    header = np.frombuffer(view, dtype=_HEADER, count=1)[0]
    dense, starts, rows = bool(header["dense"]), int(header["starts"]), int(header["rows"])
    offset = _HEADER.itemsize
    block_starts = np.frombuffer(view, dtype=np.int64, count=starts, offset=offset)
    offset += 8 * starts
    scores = np.frombuffer(view, dtype=np.float32 if dense else np.float16, count=rows, offset=offset)
    offset += scores.nbytes
    low = None if dense else np.frombuffer(view, dtype=np.uint16, count=rows, offset=offset)
    if offset + (0 if low is None else low.nbytes) != len(view):
        raise ValueError("a column file of the wrong size")
    return _Column(low, block_starts, scores, float(header["peak"]))


@dataclass(frozen=True, slots=True)
class Summed:
    """What one `top` summed: every row's total (`dense` empty), or the rarer terms' sums with the
    common words' columns still to be added to the rows asked for (`dense`)."""

    sums: np.ndarray
    dense: tuple[_Column, ...]

    def at(self, rows: np.ndarray) -> np.ndarray:
        """The totals `top` gives these rows, in their order (each allowed: a row its filter hides may read
        0; a row written since it summed reads 0)."""
        order = np.argsort(rows, kind="stable")
        ascending = rows[order]
        inside = ascending < self.sums.size
        totals = np.zeros(rows.size)
        totals[order[inside]] = _totals_at(self.sums, self.dense, ascending[inside])
        return totals


class TermPostings:
    def __init__(self, max_entries: int = 16_000_000, shared: SharedColumns | None = None):
        self.max_entries = max_entries
        self.shared = shared
        self._lock = threading.Lock()
        self._generation: Generation | None = None
        self._terms: OrderedDict[Key, _Column] = OrderedDict()
        self._entries = 0

    def top(
        self, generation: Generation, terms: Sequence[Key], load: Loader, allowed: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Chunk ids and bm25 of the k best chunks for the OR of `terms` (a term given twice counts
        twice), best first, among those `allowed` lets through (one bool per chunk id); equal scores
        in row id order."""
        best, scores, _ = self.top_summed(generation, terms, load, allowed, k)
        return best, scores

    def top_summed(
        self, generation: Generation, terms: Sequence[Key], load: Loader, allowed: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray, Summed]:
        """`top`, and what it summed: the totals it would give any other allowed row (`Summed.at`)."""
        columns = [self._get(generation, term, load) for term in terms]
        size = allowed.size
        scattered = [c for c in columns if c.low is not None and c.rows]
        dense = [c for c in columns if c.low is None]
        totals = _sums(scattered, size)
        # A row none of the rarer terms is in scores at most the sum of the common words' peaks:
        # the k best usually lie above that, among far fewer rows than the whole table.
        floor = sum(column.peak for column in dense)
        # The rarest term with at least k rows: the k-th best total among its rows bounds the k-th
        # best of all from below, so only the rows at or above it need sorting.
        rarest = min((c for c in scattered if c.rows >= k), key=lambda c: c.rows, default=None)
        hint = None if rarest is None else rarest.ids()
        if hint is not None:
            found = _best_near(totals, dense, allowed, k, floor, hint)
            if found is not None:
                return *found, Summed(totals, tuple(dense))
        for column in dense:
            shared = min(size, column.scores.size)
            totals[:shared] += column.scores[:shared]
        best = _best(totals, k, floor, hint)
        if not allowed[best].all():  # the best of all rows are not all allowed: mask, then look again
            totals *= allowed
            best = _best(totals, k, floor, hint)
        return best, totals[best], Summed(totals, ())

    def at(
        self, generation: Generation, asked: Sequence[tuple[Sequence[Key], np.ndarray]], load: Loader
    ) -> list[np.ndarray]:
        """For each (terms, row ids) asked, the totals `top` gives those rows (in their order) for the OR of
        the terms (the same float64 sums in the same order), each row looked up in each column instead of
        every row summed: for a few named chunks. A term several asks share is looked up once."""
        rows = np.unique(np.concatenate([wanted for _, wanted in asked])) if asked else np.zeros(0, dtype=np.int64)
        if not rows.size:
            return [np.zeros(wanted.size) for _, wanted in asked]
        blocks = rows >> _BLOCK_BITS
        cuts = [0, *(np.flatnonzero(np.diff(blocks)) + 1).tolist(), rows.size]
        spans = [(int(blocks[first]), first, last) for first, last in itertools.pairwise(cuts)]
        offsets = (rows & (_BLOCK - 1)).astype(np.uint16)
        values: dict[Key, np.ndarray] = {}
        dense: set[Key] = set()
        for key in dict.fromkeys(key for terms, _ in asked for key in terms):
            column = self._get(generation, key, load)
            found = values[key] = np.zeros(rows.size)
            if column.low is None:
                dense.add(key)
                inside = rows < column.scores.size
                found[inside] = column.scores[rows[inside]]
                continue
            starts = column.starts.tolist()
            for block, first, last in spans:
                if block >= len(starts) - 1:
                    break
                start, end = starts[block], starts[block + 1]
                if start == end:
                    continue
                listed, named = column.low[start:end], offsets[first:last]
                at = np.minimum(np.searchsorted(listed, named), end - start - 1)
                held = listed[at] == named
                found[first:last][held] = column.scores[start:end][at[held]]
        totals = []
        for terms, wanted in asked:
            at = np.searchsorted(rows, wanted)
            summed = np.zeros(wanted.size)
            for key in sorted(terms, key=lambda key: key in dense):  # the rarer terms first, in order, as `top` adds
                summed += values[key][at]
            totals.append(summed)
        return totals

    def preload(self, generation: Generation, terms: Sequence[Key], load: Loader, stop: threading.Event) -> int:
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

    def _get(self, generation: Generation, term: Key, load: Loader) -> _Column:
        with self._lock:
            if generation != self._generation:
                self._generation, self._entries = generation, 0
                self._terms.clear()
            found = self._terms.get(term)
            if found is not None:
                self._terms.move_to_end(term)
                return found
        found = None if self.shared is None else self.shared.read(generation, term)
        if found is None:
            found = _Column.of(*load(term))
            if self.shared is not None and found.entries >= SHARED_MIN_ENTRIES:
                found = self.shared.write(generation, term, found)
        with self._lock:
            if generation == self._generation and term not in self._terms:
                self._terms[term] = found
                self._entries += found.entries
                while self._entries > self.max_entries and len(self._terms) > 1:
                    _, old = self._terms.popitem(last=False)
                    self._entries -= old.entries
        return found


def _sums(columns: Sequence[_Column], size: int) -> np.ndarray:
    """The rarer terms' scores summed by row id, for row ids below `size`: one count of the listed row
    ids with their scores as weights, column after column (each row's sum in the columns' order), a
    stretch of `_COUNT_ROWS` rows at a time. Up to that many rows (100k chunks) the count makes the
    totals itself: no zeroed table that each block's count is copied into; above it each stretch's
    count is copied into a table left unzeroed (every row is in one stretch)."""
    listed = [c for c in columns if c.low is not None and c.rows]
    if size <= _COUNT_ROWS:
        return _count(listed, 0, size)
    totals = np.empty(size)
    for start in range(0, size, _COUNT_ROWS):
        end = min(size, start + _COUNT_ROWS)
        totals[start:end] = _count(listed, start, end)
    return totals


_COUNT_ROWS = 2 * _BLOCK
"""The rows one count of `_sums` covers (whole blocks): it holds its stretch's listed pairs' ids and
scores at once (16 bytes a pair) beside its totals (8 bytes a row). A phrase's pairs at 1M chunks
(about 470k) held at once would be about 8 MB more at the memory peak of each search running; two
blocks' stretch holds about 1 MB of them, and at 100k chunks every row is in one count."""


def _count(columns: Sequence[_Column], start: int, end: int) -> np.ndarray:
    """The scores of the listed rows from `start` (a block's first row) to `end` summed by row, as
    float64 totals of `end - start` rows: one bincount of their offsets from `start`, the columns' pairs
    one column after the other. A column's rows at or past `end` (written since the allowed rows were
    counted) are left out where its last block is cut."""
    first, last = start >> _BLOCK_BITS, ((end - 1) >> _BLOCK_BITS) + 1  # the blocks [first, last)
    tail = end - ((last - 1) << _BLOCK_BITS)  # the last block's rows below `end`
    parts = []
    for column in columns:
        blocks = min(last, column.starts.size - 1)
        if first >= blocks:
            continue
        lo, hi = int(column.starts[first]), int(column.starts[blocks])
        if blocks == last and tail < _BLOCK and column.low[hi - 1] >= tail:  # type: ignore[index]
            cut = int(column.starts[last - 1])  # rows past `end` in the block it cuts: its offsets ascend
            hi = cut + int(np.searchsorted(column.low[cut:hi], tail))  # type: ignore[index]
        if lo < hi:
            parts.append((column, lo, hi, blocks))
    if not parts:
        return np.zeros(end - start)
    ids = np.concatenate([column.low[lo:hi] for column, lo, hi, _ in parts], dtype=np.intp)  # type: ignore[index]
    weights = np.concatenate([column.scores[lo:hi] for column, lo, hi, _ in parts], dtype=np.float64)
    at = 0
    for column, lo, hi, blocks in parts:
        _add_block_bases(ids[at : at + hi - lo], column.starts[: blocks + 1], first)
        at += hi - lo
    return np.bincount(ids, weights=weights, minlength=end - start)


def _add_block_bases(offsets: np.ndarray, starts: np.ndarray, first: int = 0) -> None:
    """Make a column's offsets from block `first` on (as intp, in place) its row ids less `first`'s
    first row id: each later block's distance from it added to its stretch (block `first`'s offsets
    are those already)."""
    lo = starts[first]
    for block in range(first + 1, starts.size - 1):
        offsets[starts[block] - lo : starts[block + 1] - lo] += (block - first) << _BLOCK_BITS


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


def _best_near(
    partial: np.ndarray, dense: Sequence[_Column], allowed: np.ndarray, k: int, floor: float, hint: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """The k best allowed rows and their totals, as `top` finds them, without adding the dense
    columns to every row: `partial` holds the rarer terms' sums. The k-th best total of the allowed
    `hint` rows bounds the k-th best of all from below; a row reaches it only if its partial sum
    reaches it less the common words' peaks (`floor`), so the totals are made for those rows alone,
    each added up as `top` adds it (the same float64 sums in the same order). None when that bound
    is no cut (the hint rows hold fewer than k allowed ones, or the common words alone could reach it)."""
    size = allowed.size
    hint = hint[hint < size]
    hint = hint[allowed[hint]]
    if hint.size < k:
        return None
    near = _totals_at(partial, dense, hint)
    edge = near[np.argpartition(near, hint.size - k)[hint.size - k]]
    cut = edge - floor - _SLACK * max(1.0, edge)
    if cut <= 0:
        return None
    rows = np.flatnonzero(partial >= cut)
    rows = rows[allowed[rows]]
    totals = _totals_at(partial, dense, rows)
    reach = totals >= edge
    return _leading(rows[reach], totals[reach], k)


_SLACK = 1e-9
"""A margin below the cut `_best_near` takes rows at: the sums are exact in float64 (16-bit scores,
a few 32-bit ones), but a row is never left out by a last bit of rounding either."""


def _totals_at(partial: np.ndarray, dense: Sequence[_Column], rows: np.ndarray) -> np.ndarray:
    """The totals of `rows` (ascending): their partial sums plus each dense column in turn, as `top` adds them."""
    totals = partial[rows]
    for column in dense:
        if not rows.size or rows[-1] < column.scores.size:  # rows ascending: all of them in the column
            totals += column.scores[rows]
        else:
            inside = rows < column.scores.size
            totals[inside] += column.scores[rows[inside]]
    return totals


def _ranked(totals: np.ndarray, rows: np.ndarray, k: int) -> np.ndarray:
    """The k of `rows` with the highest totals (all of them when fewer), best first, equal totals
    in row id order (`rows` ascending)."""
    return _leading(rows, totals[rows], k)[0]


def _leading(rows: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k of `rows` (ascending) with the highest `scores` (all of them when fewer) and their
    scores, best first, equal scores in row id order."""
    if rows.size > k:
        edge = scores[np.argpartition(scores, rows.size - k)[rows.size - k]]
        kept = np.flatnonzero(scores > edge)
        kept = np.concatenate([kept, np.flatnonzero(scores == edge)[: k - kept.size]])  # ties at the edge: lowest ids
        rows, scores = rows[kept], scores[kept]
    order = np.lexsort((rows, -scores))
    return rows[order], scores[order]

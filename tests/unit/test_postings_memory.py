"""Term postings in 4 bytes a (chunk, score) pair (issue 31: 1M chunks under `serve --workers 2`, where
each process holds its own postings, up to the budget): row ids kept as 16 bits within blocks of
65,536 rows, their scores as 16-bit floats; the sums and the top k are those of the scores as kept."""

from __future__ import annotations

import threading

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ragmcp.adapters.local import postings as postings_module
from ragmcp.adapters.local.postings import PAIR_BYTES, TermPostings
from tests.traced import kept_under


def _held(postings: TermPostings, columns: dict[str, tuple[np.ndarray, np.ndarray]]) -> int:
    """Bytes the postings keep after loading every column (the loader's own arrays freed)."""
    return kept_under(
        postings_module,
        lambda: postings.preload(0, [("t", term) for term in columns], lambda key: columns[key[1]], threading.Event()),
    )


def test_a_pair_takes_four_bytes_and_a_common_words_row_four():
    """Sparse columns spread over a million rows (several blocks of row ids) and a dense one: the
    memory held is 4 bytes a pair and 4 a dense row, as the budget counts it (PAIR_BYTES)."""
    rng = np.random.default_rng(7)
    rows = 1_000_000
    columns = {f"rare{n}": (np.sort(rng.choice(rows, 50_000, replace=False)), rng.random(50_000) * 9) for n in range(4)}
    columns["the"] = (np.arange(1, rows, dtype=np.int64), rng.random(rows - 1))  # dense: in every row
    postings = TermPostings(max_entries=10**9)
    held = _held(postings, columns)
    pairs, dense_rows = 4 * 50_000, rows
    assert held <= 4 * pairs + 4 * dense_rows + 64_000, held  # a few KB of arrays' headers and block offsets
    assert PAIR_BYTES == 4 and postings.entries == pairs + dense_rows


def _plain_top(columns: dict[str, tuple[np.ndarray, np.ndarray]], terms: list[str], allowed: np.ndarray, k: int):
    """Every allowed row's total of the scores as kept (16-bit floats; 32-bit in a column of a word in a
    quarter of the rows or more) in float64, sorted by (-total, row id)."""
    totals = np.zeros(allowed.size)
    for term in terms:
        ids, scores = columns[term]
        kept = np.float32 if ids.size and 4 * ids.size >= ids.max() + 1 else np.float16
        inside = ids < allowed.size
        np.add.at(totals, ids[inside], scores[inside].astype(kept).astype(np.float64))
    totals *= allowed
    rows = np.flatnonzero(totals > 0)
    rows = rows[np.lexsort((rows, -totals[rows]))][:k]
    return rows, totals[rows]


@st.composite
def _spread(draw):
    """Columns over up to 300k rows (row ids in several blocks of 65,536), given in any order, some
    rows past the end of `allowed` (written after the filter was read)."""
    size = draw(st.integers(1, 300_000))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    columns = {}
    for term, share in {"the": 0.5, "mid": 0.05, "rare": 0.001, "block": 0.0}.items():
        ids = np.flatnonzero(rng.random(size + 50) < share)
        if term == "block":  # all in one block past the first
            ids = np.arange(size // 2, size + 50, 997)
        if draw(st.booleans()):
            ids = rng.permutation(ids)
        columns[term] = (ids, rng.choice(np.array([0.3, 1.7, 2.9, 7.25]), ids.size) * rng.random(ids.size))
    terms = draw(st.lists(st.sampled_from(sorted(columns)), min_size=1, max_size=5))
    allowed = rng.random(size) < draw(st.sampled_from([1.0, 0.5, 0.02]))
    return columns, terms, allowed, draw(st.integers(1, 40))


@settings(max_examples=40, deadline=None)
@given(_spread())
def test_the_top_k_over_many_blocks_is_the_sorted_totals_of_the_scores_as_kept(corpus) -> None:
    columns, terms, allowed, k = corpus
    found_ids, found_scores = TermPostings().top(0, [("t", t) for t in terms], lambda key: columns[key[1]], allowed, k)
    ids, scores = _plain_top(columns, terms, allowed, k)
    assert found_ids.tolist() == ids.tolist()
    assert np.allclose(found_scores, scores)

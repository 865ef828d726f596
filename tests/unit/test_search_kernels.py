"""The search half's kernels made cheaper for issue 31 give what the plain formulas give: the
postings' top k (a bound from the rarest term's rows instead of sorting every row above the common
words' floor) and the word coverage's accent folding and CJK pairs (no per-character loop)."""

from __future__ import annotations

import unicodedata

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragmcp.adapters.local import postings
from ragmcp.adapters.local.postings import TermPostings
from ragmcp.retrieval.coverage import Questions, TextStems, _fold, content_words
from ragmcp.text import cjk_bigrams


def _plain_top(postings: dict[str, tuple[np.ndarray, np.ndarray]], terms: list[str], allowed: np.ndarray, k: int):
    """Every allowed row's total in float64, the positive ones sorted by (-total, row id), k kept."""
    totals = np.zeros(allowed.size)
    for term in terms:
        ids, scores = postings[term]
        kept = np.float32 if ids.size and 4 * ids.size >= ids.max() + 1 else np.float16  # the scores as kept
        np.add.at(totals, ids, scores.astype(kept).astype(np.float64))
    totals *= allowed
    rows = np.flatnonzero(totals > 0)
    rows = rows[np.lexsort((rows, -totals[rows]))][:k]
    return rows, totals[rows]


@st.composite
def _corpora(draw):
    size = draw(st.integers(1, 400))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    postings = {}
    for term in ("the", "of", "rare", "rarer", "mid"):
        share = {"the": 0.9, "of": 0.4, "rare": 0.02, "rarer": 0.005, "mid": 0.15}[term] * draw(st.floats(0.1, 1.0))
        ids = np.flatnonzero(rng.random(size) < share)
        # few distinct scores: ties at the k-th place are common
        scores = rng.choice(np.array([0.5, 1.0, 1.5, 2.25, 3.0]), ids.size) * draw(st.sampled_from([1.0, 0.1]))
        postings[term] = (ids, scores)
    terms = draw(st.lists(st.sampled_from(sorted(postings)), min_size=1, max_size=6))
    allowed = rng.random(size) < draw(st.sampled_from([1.0, 0.5, 0.05]))
    return postings, terms, allowed, draw(st.integers(1, 60))


@settings(max_examples=80, deadline=None)
@given(_corpora())
def test_the_postings_top_k_equals_sorting_every_rows_total(corpus) -> None:
    postings, terms, allowed, k = corpus
    keys = [("t", term) for term in terms]
    found_ids, found_scores = TermPostings().top(0, keys, lambda key: postings[key[1]], allowed, k)
    ids, scores = _plain_top(postings, terms, allowed, k)
    assert found_ids.tolist() == ids.tolist()
    assert np.allclose(found_scores, scores)


def _plain_fold(text: str) -> str:
    if text.isascii():
        return text.lower()
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return unicodedata.normalize("NFC", "".join(c for c in decomposed if not unicodedata.combining(c)))


_TEXT = st.text(
    st.one_of(
        st.characters(codec="utf-8", exclude_categories=["Cs"]),
        st.sampled_from("dūce naïve Ångström ﬁne ½ 국내 확진자는 東京 カタカナ ẞ K Ǆ \u0301\u0308"),
    ),
    max_size=80,
)


@settings(max_examples=100, deadline=None)
@given(_TEXT)
def test_folding_drops_the_same_accents_as_a_per_character_loop(text: str) -> None:
    assert _fold(text) == _plain_fold(text)


@settings(max_examples=100, deadline=None)
@given(_TEXT, _TEXT)
def test_a_texts_stems_hold_its_cjk_pairs_and_cover_a_question_as_before(text: str, question: str) -> None:
    held = TextStems.of(text)
    assert held.pairs == frozenset(cjk_bigrams(_fold(text)))
    wanted = content_words(question)
    share, missing = held.coverage(question)
    assert missing == tuple(w for w in wanted if not held.holds(w))
    assert share == ((1.0 - len(missing) / len(wanted)) if wanted else 1.0)


def test_the_bounded_top_k_gives_every_rows_sums_to_the_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The top k found from the rows near the bound (the common words added to those rows alone) is
    the top k of every row's total, ids and float64 scores to the bit; the bound is taken in a good
    share of these corpora (common words, rarer ones, filters)."""
    cases = []
    for seed in range(24):
        rng = np.random.default_rng(seed)
        size = int(rng.integers(2_000, 80_000))
        columns = {}
        for term, share in {"the": 0.9, "of": 0.3, "mid": 0.1, "rare": 0.01, "rarer": 0.002}.items():
            ids = rng.permutation(np.flatnonzero(rng.random(size + 30) < share))
            weight = 0.2 if share > 0.25 else 1.0  # a common word's idf is low
            columns[term] = (ids, weight * rng.choice(np.array([0.3, 1.7, 2.9, 7.25]), ids.size) * rng.random(ids.size))
        terms = list(rng.choice(sorted(columns), int(rng.integers(2, 6))))
        allowed = rng.random(size) < rng.choice([1.0, 0.5, 0.2])
        cases.append((columns, [("t", str(t)) for t in terms], allowed, int(rng.integers(1, 30))))

    bounded = []
    near = postings._best_near

    def counted(*args):
        found = near(*args)
        bounded.append(found is not None)
        return found

    monkeypatch.setattr(postings, "_best_near", counted)
    found = [TermPostings().top(0, keys, lambda key, c=c: c[key[1]], allowed, k) for c, keys, allowed, k in cases]
    monkeypatch.setattr(postings, "_best_near", lambda *args: None)  # every row's total, then the k best
    summed = [TermPostings().top(0, keys, lambda key, c=c: c[key[1]], allowed, k) for c, keys, allowed, k in cases]
    for (ids, scores), (every_ids, every_scores) in zip(found, summed, strict=True):
        assert ids.tolist() == every_ids.tolist()
        assert scores.tolist() == every_scores.tolist()
    assert sum(bounded) >= len(cases) // 2, bounded  # fixed seeds: 15 of the 24 take it


_WORDS = st.sampled_from(
    "serve served serving serv hunt hunts hunter hunted feed feeding fed duck ducks cell cells cellular bone"
    " gene genes genetic aspirin aspirins abc abcd abcde abcdef ab dūce duce naïve 국내 확진자는 확진자 東京"
    " カタカナ what the called release notes".split()
)
_WORDED = st.lists(st.one_of(_WORDS, _TEXT), max_size=12).map(" ".join)


@settings(max_examples=80, deadline=None)
@given(_WORDED, st.lists(_WORDED, min_size=1, max_size=5))
def test_questions_made_once_cover_a_text_as_each_question_s_coverage_does(text: str, questions: list[str]) -> None:
    """A search's phrases are prepared once and only the text words that could match one are cut
    to stems: the best share is still each phrase's TextStems coverage, to the bit."""
    held = TextStems.of(text)
    assert Questions.of(questions).best_coverage(text) == max(held.coverage(q)[0] for q in questions)


_ASCII_TEXT = st.lists(
    st.one_of(_WORDS.filter(str.isascii), st.text(st.characters(max_codepoint=127), max_size=12)), max_size=16
).map(" ".join)


@settings(max_examples=100, deadline=None)
@given(_ASCII_TEXT, st.lists(st.one_of(_ASCII_TEXT, _WORDED), min_size=1, max_size=5))
def test_an_ascii_text_s_words_read_as_bytes_cover_as_each_question_s_coverage_does(
    text: str, questions: list[str]
) -> None:
    """An ASCII text's words are found by blanking every byte but a word character and splitting
    (not the regex), and compared as bytes: the same words (digits, underscores, capitals and
    punctuation included), so the same share to the bit, whatever the questions' script."""
    held = TextStems.of(text)
    assert Questions.of(questions).best_coverage(text) == max(held.coverage(q)[0] for q in questions)


@settings(max_examples=100, deadline=None)
@given(_ASCII_TEXT)
def test_an_ascii_question_s_content_words_are_those_the_cjk_aware_reading_finds(question: str) -> None:
    """A question all in ASCII skips the CJK cutting: the words are those of the same question read the
    long way, which a CJK word appended to it forces (and adds at the end)."""
    assert content_words(question) + ["東京"] == content_words(f"{question} 東京")


def test_the_rarer_terms_sums_are_each_rows_scores_added_in_the_columns_order() -> None:
    """`_sums` counts every listed row id of every block at once: each row's float64 total is its
    scores added column after column (as np.add.at adds them), over several 65,536-row blocks, and
    rows at or past `size` (written since the filter was made) are left out."""
    rng = np.random.default_rng(7)
    size = 3 * postings._BLOCK + 1_234
    pairs = []
    for share in (0.2, 0.05, 0.01, 0.2):
        ids = rng.permutation(np.flatnonzero(rng.random(size + 5_000) < share))  # some rows past `size`
        pairs.append((ids, rng.random(ids.size) * rng.choice(np.array([0.3, 1.7, 2.9]), ids.size)))
    columns = [postings._Column.of(ids, scores) for ids, scores in pairs]
    assert all(c.low is not None and c.starts.size - 1 == 4 for c in columns)  # rarer terms over 4 blocks
    expected = np.zeros(size)
    for (ids, scores), column in zip(pairs, columns, strict=True):  # the columns one after the other
        assert column.ids().tolist() == np.sort(ids).tolist()
        inside = ids < size
        np.add.at(expected, ids[inside], scores[inside].astype(np.float16).astype(np.float64))  # as kept
    found = postings._sums(columns, size)
    assert found.dtype == np.float64 and found.size == size
    assert found.tolist() == expected.tolist()
    first = np.zeros(100)  # a size inside the first block: every other block's rows left out
    ids, scores = pairs[0]
    np.add.at(first, ids[ids < 100], scores[ids < 100].astype(np.float16).astype(np.float64))
    assert postings._sums(columns[:1], 100).tolist() == first.tolist()
    for none in (postings._sums([], 10), postings._sums(columns[:1], 0), postings._sums([columns[0]], 0)):
        assert none.dtype == np.float64 and not none.any()
    late = postings._Column.of(np.array([size + 1, size + 9]), np.array([1.0, 2.0]))  # every row past `size`
    assert postings._sums([late], size).dtype == np.float64 and not postings._sums([late], size).any()


def test_the_rarer_terms_sums_over_many_blocks_hold_a_stretch_of_pairs_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Above `_COUNT_ROWS` rows `_sums` counts a stretch at a time: the totals are still each row's
    scores added column after column (a stretch no column lists is zeros, a column listed in the last
    stretch only is counted there, rows past `size` are left out), and each count holds one stretch's
    pairs and rows, not every listed pair's id and score at once (16 bytes a pair: about 8 MB a phrase
    at 1M chunks). What each count holds is read from its arguments, on this thread only: a memory
    figure would count what other threads of the suite allocate meanwhile."""
    import threading

    rng = np.random.default_rng(11)
    size = 12 * postings._BLOCK - 77
    pairs = []
    for share, low, high in (
        (0.2, 0, size + 900),
        (0.2, 0, size),
        (0.15, 0, size),
        (0.2, 0, size),
        (0.01, 10 * postings._BLOCK, size + 50),
    ):
        rows = np.arange(low, high)
        ids = rng.permutation(rows[rng.random(rows.size) < share])
        ids = ids[(ids < 2 * postings._BLOCK) | (ids >= 4 * postings._BLOCK)]  # rows 131,072 to 262,143: none listed
        pairs.append((ids, rng.random(ids.size) * 3))
    columns = [postings._Column.of(ids, scores) for ids, scores in pairs]
    assert all(c.low is not None for c in columns)
    expected = np.zeros(size)
    for ids, scores in pairs:
        inside = ids < size
        np.add.at(expected, ids[inside], scores[inside].astype(np.float16).astype(np.float64))
    listed = sum(c.rows for c in columns)
    assert listed > 400_000 and size > 3 * postings._COUNT_ROWS
    counted: list[tuple[int, int]] = []  # (pairs, rows) of each count made by this thread
    bincount, me = np.bincount, threading.get_ident()

    def watched(ids: np.ndarray, weights: np.ndarray | None = None, minlength: int = 0) -> np.ndarray:
        if threading.get_ident() == me:
            counted.append((ids.size, minlength))
        return bincount(ids, weights=weights, minlength=minlength)

    monkeypatch.setattr(postings.np, "bincount", watched)
    found = postings._sums(columns, size)
    monkeypatch.undo()
    assert found.tolist() == expected.tolist()
    assert not found[2 * postings._BLOCK : 4 * postings._BLOCK].any()
    stretches = [
        sum(int(((ids >= at) & (ids < min(size, at + postings._COUNT_ROWS))).sum()) for ids, _ in pairs)
        for at in range(0, size, postings._COUNT_ROWS)
    ]
    assert counted and max(n for n, _ in counted) <= max(stretches) < listed / 2
    assert max(rows for _, rows in counted) <= postings._COUNT_ROWS


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 6))
def test_named_rows_totals_are_the_totals_top_gives_them_to_the_bit(seed: int, asks: int) -> None:
    """Issue 27: `TermPostings.at` looks a few named rows up in each column (several asks at once, a
    term they share once) and gives each row the float64 total `top` gives it: the rarer terms added in
    their order, then the common words (a term asked twice counts twice), over several 65,536-row
    blocks; a row no term lists totals 0, a row past every column too."""
    rng = np.random.default_rng(seed)
    size = 3 * postings._BLOCK + 500
    lists = {}
    for term, share in (("the", 0.6), ("of", 0.3), ("mid", 0.1), ("rare", 0.01), ("rarer", 0.001)):
        ids = np.flatnonzero(rng.random(size) < share)
        lists[term] = (ids, rng.random(ids.size) * 4)
    kept = TermPostings()
    generation = postings.Generation(1, "s")
    asked = []
    for _ in range(asks):
        terms = [("t", str(term)) for term in rng.choice(sorted(lists), size=int(rng.integers(1, 7)))]
        rows = np.unique(rng.integers(0, size + 100, size=int(rng.integers(0, 60))))  # some past every column
        asked.append((terms, rows))
    found = kept.at(generation, asked, lambda key: lists[key[1]])
    everything = np.ones(size + 100, dtype=bool)
    for (terms, rows), totals in zip(asked, found, strict=True):
        best, scores = kept.top(generation, terms, lambda key: lists[key[1]], everything, size + 100)
        expected = dict(zip(best.tolist(), scores.tolist(), strict=True))
        assert totals.tolist() == [expected.get(row, 0.0) for row in rows.tolist()]

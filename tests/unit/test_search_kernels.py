"""The search half's kernels made cheaper for issue 31 give what the plain formulas give: the
postings' top k (a bound from the rarest term's rows instead of sorting every row above the common
words' floor) and the word coverage's accent folding and CJK pairs (no per-character loop)."""

from __future__ import annotations

import unicodedata

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ragmcp.adapters.local.postings import TermPostings
from ragmcp.retrieval.coverage import TextStems, _fold, content_words
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

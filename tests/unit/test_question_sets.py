"""The passage question sets of `ragmcp eval-qa` (tests/data/qa_passages*.jsonl) are well formed: every
line is a question the loader reads, ids are unique and name their kind, and the second held-out set
(qa_passages_v2.jsonl, written blind after the first) is all `held-out-2`, at least 60 questions
of the first set's kinds, none of them a question of the first set.

The third set (qa_passages_v3.jsonl) was written blind too, from the documents alone, before anyone ran
retrieval on it: at least 110 questions of every kind, split into `tune-3` and `held-out-3` by a fixed
seeded shuffle within each kind (the ids of a kind in order, shuffled by
`random.Random("qa_passages_v3:<kind>")`; the first half, rounded down, is `tune-3`), at least 55 in each
part, none repeating a question of the sets before it.

The fourth set (qa_passages_v4.jsonl) was written the same way after the third had been read and tuned on:
the same rules with its own parts (`tune-4`, `held-out-4`) and seed (`"qa_passages_v4:<kind>"`), none
repeating a question of the first three sets.

The fifth set (qa_passages_v5.jsonl) was written the same way after the fourth had been read and tuned on,
with more questions (at least 120, at least 60 in each part), its own parts (`tune-5`, `held-out-5`) and seed
(`"qa_passages_v5:<kind>"`), none repeating a question of the first four sets, and every one of the 19
shared documents asked about."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from ragmcp_bench.qa_eval import Question, read_jsonl

DATA = Path(__file__).resolve().parents[1] / "data"
KINDS = {"fact", "table", "heading", "code", "chart", "cjk"}


def questions(name: str) -> list[Question]:
    return read_jsonl(DATA / name, Question)


def test_each_question_names_its_kind_passage_and_documents() -> None:
    for name, prefix in (
        ("qa_passages.jsonl", "p"),
        ("qa_passages_v2.jsonl", "v2"),
        ("qa_passages_v3.jsonl", "v3"),
        ("qa_passages_v4.jsonl", "v4"),
        ("qa_passages_v5.jsonl", "v5"),
    ):
        rows = questions(name)
        assert len({q.id for q in rows}) == len(rows), name
        for q in rows:
            assert q.kind in KINDS and q.id.rsplit("-", 1)[0] == f"{prefix}-{q.kind}", q.id
            assert q.answerable and q.expected and q.passage and q.documents, q.id


def test_the_second_held_out_set_is_held_out_and_new() -> None:
    first, second = questions("qa_passages.jsonl"), questions("qa_passages_v2.jsonl")
    assert len(second) >= 60
    assert {q.part for q in second} == {"held-out-2"}
    assert {q.part for q in first} == {"tune", "held-out"}
    assert Counter(q.kind for q in second).keys() == KINDS
    assert not {q.question.casefold() for q in second} & {q.question.casefold() for q in first}


EARLIER = ("qa_passages.jsonl", "qa_passages_v2.jsonl", "qa_shared.jsonl")
BLIND = [("qa_passages_v3.jsonl", "v3"), ("qa_passages_v4.jsonl", "v4"), ("qa_passages_v5.jsonl", "v5")]
"""The blind sets in the order they were written, each with its id prefix (`v3`: parts tune-3, held-out-3)."""
SIZES = {"v3": (110, 55), "v4": (110, 55), "v5": (120, 60)}
"""Each blind set's least number of questions, and of questions in each of its two parts."""


@pytest.mark.parametrize(("name", "n"), BLIND)
def test_a_blind_set_has_every_kind_both_parts_and_no_question_of_the_sets_before(name: str, n: str) -> None:
    before = EARLIER + tuple(earlier for earlier, _ in BLIND[: BLIND.index((name, n))])
    rows = questions(name)
    parts = Counter(q.part for q in rows)
    least, least_in_part = SIZES[n]
    assert len(rows) >= least
    assert parts.keys() == {f"tune-{n[1:]}", f"held-out-{n[1:]}"} and min(parts.values()) >= least_in_part, parts
    assert Counter(q.kind for q in rows).keys() == KINDS
    asked = {q.question.casefold() for earlier in before for q in questions(earlier)}
    assert len({q.question.casefold() for q in rows}) == len(rows)
    assert not {q.question.casefold() for q in rows} & asked


@pytest.mark.parametrize(("name", "n"), BLIND)
def test_a_blind_set_is_split_by_its_seeded_shuffle_within_each_kind(name: str, n: str) -> None:
    rows = questions(name)
    for kind in KINDS:
        ids = sorted(q.id for q in rows if q.kind == kind)
        assert ids == [f"{n}-{kind}-{k:02d}" for k in range(1, len(ids) + 1)], kind
        random.Random(f"qa_passages_{n}:{kind}").shuffle(ids)
        tune = set(ids[: len(ids) // 2])
        assert {q.id: q.part for q in rows if q.kind == kind} == {
            i: f"tune-{n[1:]}" if i in tune else f"held-out-{n[1:]}" for i in ids
        }, kind


def test_the_fifth_set_asks_about_every_shared_document() -> None:
    assert len({d for q in questions("qa_passages_v5.jsonl") for d in q.documents}) == 19

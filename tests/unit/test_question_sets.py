"""The passage question sets of `ragmcp eval-qa` (tests/data/qa_passages*.jsonl) are well formed: every
line is a question the loader reads, ids are unique and name their kind, and the second held-out set
(qa_passages_v2.jsonl, written blind after the first) is all `held-out-2`, at least 60 questions
of the first set's kinds, none of them a question of the first set.

The third set (qa_passages_v3.jsonl) was written blind too, from the documents alone, before anyone ran
retrieval on it: at least 110 questions of every kind, split into `tune-3` and `held-out-3` by a fixed
seeded shuffle within each kind (the ids of a kind in order, shuffled by
`random.Random("qa_passages_v3:<kind>")`; the first half, rounded down, is `tune-3`), at least 55 in each
part, none repeating a question of the sets before it."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

from ragmcp_bench.qa_eval import Question, read_jsonl

DATA = Path(__file__).resolve().parents[1] / "data"
KINDS = {"fact", "table", "heading", "code", "chart", "cjk"}


def questions(name: str) -> list[Question]:
    return read_jsonl(DATA / name, Question)


def test_each_question_names_its_kind_passage_and_documents() -> None:
    for name, prefix in (("qa_passages.jsonl", "p"), ("qa_passages_v2.jsonl", "v2"), ("qa_passages_v3.jsonl", "v3")):
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


def test_the_third_set_has_every_kind_both_parts_and_no_question_of_the_sets_before() -> None:
    third = questions("qa_passages_v3.jsonl")
    parts = Counter(q.part for q in third)
    assert len(third) >= 110
    assert parts.keys() == {"tune-3", "held-out-3"} and min(parts.values()) >= 55, parts
    assert Counter(q.kind for q in third).keys() == KINDS
    asked = {
        q.question.casefold()
        for name in ("qa_passages.jsonl", "qa_passages_v2.jsonl", "qa_shared.jsonl")
        for q in questions(name)
    }
    assert len({q.question.casefold() for q in third}) == len(third)
    assert not {q.question.casefold() for q in third} & asked


def test_the_third_set_is_split_by_its_seeded_shuffle_within_each_kind() -> None:
    third = questions("qa_passages_v3.jsonl")
    for kind in KINDS:
        ids = sorted(q.id for q in third if q.kind == kind)
        assert ids == [f"v3-{kind}-{n:02d}" for n in range(1, len(ids) + 1)], kind
        random.Random(f"qa_passages_v3:{kind}").shuffle(ids)
        tune = set(ids[: len(ids) // 2])
        assert {q.id: q.part for q in third if q.kind == kind} == {
            i: "tune-3" if i in tune else "held-out-3" for i in ids
        }, kind

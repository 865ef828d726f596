"""The passage question sets of `ragmcp eval-qa` (tests/data/qa_passages*.jsonl) are well formed: every
line is a question the loader reads, ids are unique and name their kind, and the second held-out set
(qa_passages_v2.jsonl, written blind after the first) is all `held-out-2`, at least 60 questions
of the first set's kinds, none of them a question of the first set."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from ragmcp_bench.qa_eval import Question, read_jsonl

DATA = Path(__file__).resolve().parents[1] / "data"
KINDS = {"fact", "table", "heading", "code", "chart", "cjk"}


def questions(name: str) -> list[Question]:
    return read_jsonl(DATA / name, Question)


def test_each_question_names_its_kind_passage_and_documents() -> None:
    for name, prefix in (("qa_passages.jsonl", "p"), ("qa_passages_v2.jsonl", "v2")):
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

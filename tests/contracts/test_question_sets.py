"""The ground truth of the passage question sets holds on the shared documents as ragmcp parses and
chunks them: for every question of tests/data/qa_passages.jsonl, qa_passages_v2.jsonl,
qa_passages_v3.jsonl, qa_passages_v4.jsonl and qa_passages_v5.jsonl, some chunk of an expected document
holds every passage word, as `ragmcp eval-qa` scores a hit (no search: a question whose words no chunk
holds could never be found, and its misses would measure the parser, not ranking)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragmcp.bootstrap import Services
from ragmcp_bench.qa_eval import Question, contains_all, read_jsonl

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def chunk_texts(contract_services: Services) -> dict[str, list[str]]:
    """Each ingested file's name and the text of its chunks."""
    texts: dict[str, list[str]] = {}
    for doc in contract_services.documents.list("default"):
        ids = [f"{doc.doc_id}#{n}" for n in range(doc.chunk_count)]
        found = contract_services.index.get_chunks("default", ids)
        texts[Path(doc.path or doc.doc_id).name] = [found[i][0].text for i in ids if i in found]
    return texts


@pytest.mark.parametrize(
    "name",
    [
        "qa_passages.jsonl",
        "qa_passages_v2.jsonl",
        "qa_passages_v3.jsonl",
        "qa_passages_v4.jsonl",
        "qa_passages_v5.jsonl",
    ],
)
def test_a_chunk_of_an_expected_document_holds_every_passage_word(chunk_texts: dict[str, list[str]], name: str) -> None:
    texts = chunk_texts
    questions = read_jsonl(DATA / name, Question)
    assert all(d in texts for q in questions for d in q.documents)
    unheld = [q.id for q in questions if not any(contains_all(t, q.passage) for d in q.documents for t in texts[d])]
    assert unheld == []

"""Ranking and answers over the shared documents with the server's defaults (hybrid_scores, the
relevance floor, the calibrated gate), through the real profiles: the duck question finds the
paragraph that answers it before the duck-count tables, a nonsense search finds nothing, and
answers are whole cited sentences, or silence that says what was missing."""

from __future__ import annotations

import re

from .test_ragbox import HEADERS as RAGBOX_HEADERS
from .test_ragbox import call, title_of

MINDSET = {"path": "/mcp/mindset", "headers": {"x-user-id": "user@example.com"}}
DUCKS = "Which ducks feed at the surface of the water rather than diving?"
TABLE_FILES = {"pptx_chart.pptx", "xlsx_05_table_with_title.xlsx"}


def segments(contract, *phrases: str) -> list[dict]:
    return contract.payload("rag_search", {"search_phrases": list(phrases)}, **MINDSET)["segments"]


def test_the_duck_question_ranks_the_answering_paragraph_above_the_duck_counts(contract) -> None:
    found = segments(contract, DUCKS)
    names = [s["source_file_name"] for s in found]
    answering = next(i for i, s in enumerate(found) if "Dabbling ducks feed on the surface" in s["raw_text"])
    assert names[answering] == "wiki_duck.html" and names[0] == "wiki_duck.html"
    tables = [i for i, name in enumerate(names) if name in TABLE_FILES]
    assert all(answering < i for i in tables), names


def test_a_nonsense_search_returns_no_segment_and_an_on_topic_one_does(contract) -> None:
    assert segments(contract, "zqxvwy flurbotank") == []
    assert segments(contract, "Which wine pairs well with grilled salmon?") == []
    assert segments(contract, "Who patented the typewriter?")


def ask(contract, question: str) -> dict:
    return call(contract, "query_knowledge", {"query": question}, headers=RAGBOX_HEADERS)


def test_what_is_otsl_is_answered_from_the_paper_that_defines_it(contract) -> None:
    answer = ask(contract, "What is OTSL?")
    assert answer["silence"] is False, answer
    assert answer["sources"][0]["document"] == title_of(contract, "2305.03393v1-pg9.pdf")
    assert "OTSL" in answer["answer"]


def test_answers_are_whole_cited_sentences_without_reference_markers(contract) -> None:
    answer = ask(contract, DUCKS)
    assert answer["silence"] is False and "dabbling" in answer["answer"].lower()
    sentences = re.findall(r"(.+?[.!?]) \[(\d+)\](?: |$)", answer["answer"])
    assert " ".join(f"{s} [{n}]" for s, n in sentences) == answer["answer"], "every sentence ends with [n]"
    assert {int(n) for _, n in sentences} <= set(range(1, len(answer["sources"]) + 1))
    for sentence, _ in sentences:
        assert re.match(r"[A-Z0-9'\"]", sentence.strip()), sentence
        assert not re.search(r"\[\s*\d+\s*\]|\d+\]", sentence), sentence
    assert len({s.strip() for s, _ in sentences}) == len(sentences)


def test_silence_says_what_was_missing(contract) -> None:
    nothing = ask(contract, "zqxvwy flurbotank")
    assert nothing["silence"] is True and "above the floor" in nothing["silence_reason"]
    uncovered = ask(contract, "Who invented the ballpoint pen?")
    assert uncovered["silence"] is True
    assert uncovered["silence_reason"].startswith(("Too little coverage", "No passage")), uncovered
    disagree = ask(contract, "How many freshwater ducks were observed in 2022?")
    assert disagree["silence"] is True and disagree["silence_reason"].startswith("The passages disagree"), disagree

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


def test_the_db2_answer_has_no_running_page_headers(contract) -> None:
    """Issue 27: it answered "4 Row and Column Access Control Support in IBM DB2 for i. [1] 10 Row
    and Column ..." (the Redbook's running page headers) at confidence 1.0."""
    answer = ask(contract, "What is row and column access control in DB2 for i used for?")
    assert answer["silence"] is False, answer
    assert not re.search(r"\d+ Row and Column Access Control Support in IBM DB2 for i", answer["answer"]), answer
    assert "RCAC" in answer["answer"] or "access" in answer["answer"].lower(), answer


def test_a_table_answer_is_its_row_read_with_the_header(contract) -> None:
    """Issue 27: it answered with row fragments and an irrelevant row ("Berries, Food Blueberry,
    ... [1] Grain, Food Corn, ...")."""
    answer = ask(contract, "How many calories per portion do berries have for a respectful duck?")
    assert answer["silence"] is False, answer
    assert "Berries; Food: Blueberry, Strawberry, Cranberry; Calories per portion: 150." in answer["answer"], answer
    assert "Grain" not in answer["answer"] and "Leaves;" not in answer["answer"], answer


def test_what_do_wild_ducks_eat_is_answered_though_wild_is_in_another_passage(contract) -> None:
    """Issue 27: refused for "too little coverage: the closest passages do not mention wild"
    although the article says "wild ducks"."""
    answer = ask(contract, "What do wild ducks eat?")
    assert answer["silence"] is False, answer
    assert re.search(r"grasses|aquatic plants|molluscs|insects", answer["answer"]), answer


def test_a_korean_question_is_answered_from_the_korean_report(contract) -> None:
    """Issue 27: a Korean question was refused (at confidence 0.98)."""
    answer = ask(contract, "코로나-19 국내 확진자는 몇 명인가?")
    assert answer["silence"] is False, answer
    assert "9,661" in answer["answer"], answer
    assert answer["sources"][0]["document"] == title_of(contract, "normal_4pages.pdf")


def test_korean_questions_find_their_passage_first_and_are_answered(contract) -> None:
    """Issue 27: "대수의 법칙이란 무엇인가?" ranked its passage second (the English-only model's vector
    side outweighed the keyword side) and was refused for "too little coverage: the closest passages
    do not mention 법칙이란, 무엇인가"; "감염병관리위원회 위원장은 누구로 바뀌었나?" was refused for not
    mentioning "누구로, 바뀌었나" (a question word and the question's closing verb)."""
    for question, passage, expected in (
        ("대수의 법칙이란 무엇인가?", "대수의 법칙은", "보험료 계산원리"),
        ("감염병관리위원회 위원장은 누구로 바뀌었나?", "감염병관리위원회 위원장을", "질병관"),
    ):
        found = segments(contract, question)
        assert found[0]["source_file_name"] == "normal_4pages.pdf", found[0]
        assert passage in found[0]["raw_text"], [s["raw_text"][:60] for s in found[:3]]
        answer = ask(contract, question)
        assert answer["silence"] is False, answer
        assert expected in answer["answer"], answer


def test_a_refusal_is_never_confident(contract) -> None:
    for question in ("zqxvwy flurbotank", "Who invented the ballpoint pen?"):
        answer = ask(contract, question)
        assert answer["silence"] is True, answer
        assert answer["confidence"] < 0.5, answer


def test_the_receipt_s_server_is_quoted_from_its_field(contract) -> None:
    """It answered "The server ingests the folder ..." from getting-started.md (matched on 'the',
    'was' and 'server') though the receipt's passage ranked first, far ahead."""
    answer = ask(contract, "Who was the server on the restaurant receipt?")
    assert answer["silence"] is False, answer
    assert "Server: Quack Quackling." in answer["answer"], answer
    assert {s["document"] for s in answer["sources"]} == {title_of(contract, "kvp_data_example.html")}, answer


def test_a_question_that_names_a_section_finds_the_passage_under_its_heading_first(contract) -> None:
    """Issue 27 (heading questions): every chunk of a section carries its heading, so the words of
    the question tied them with other chunks, and a chunk of another section ranked first."""
    found = segments(contract, "What does the Morphology section of the duck article describe?")
    assert "overall body plan of ducks" in found[0]["raw_text"], [s["raw_text"][:80] for s in found[:4]]


def test_a_section_named_by_a_question_reads_from_its_first_passage(contract) -> None:
    """Issue 27: of a section's chunks, the one that opens under the heading comes first (a table
    or a later chunk of the same section ranked above it)."""
    found = segments(contract, "What is under Hyper Parameter Optimization?")
    assert "PubTabNet data set to perform HPO" in found[0]["raw_text"], [s["raw_text"][:80] for s in found[:4]]


def test_a_table_of_contents_neither_outranks_the_section_nor_shows_dot_leaders(contract) -> None:
    """Issue 27: the contents line "1.3.1 Existing row and column control . . . . 4" ranked above the
    section it points at, and contents lines were quoted with their dot leaders."""
    found = segments(contract, "What does the section Existing row and column control discuss?")
    assert "augmenting the all-or-nothing object-level security" in found[0]["raw_text"]
    assert not any(re.search(r"(?:\.\s*){4}", s["raw_text"]) for s in found)

"""The extractive answer and the confidence gate: whole sentences without the documents' reference
markers, no repeats, document order within a source, a citation after each sentence, and a
silence reason that says what was missing. The embedder is the real MiniLM one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ragmcp.bootstrap import build_services
from ragmcp.ports import Embedder
from ragmcp.settings import Settings
from ragmcp.synthesis import steps
from ragmcp.synthesis.generators import ExtractiveGenerator, units
from ragmcp.synthesis.models import Evidence, Passage

DUCK = (
    "Mallard landing in approach\n"
    "In most modern classifications, the so-called 'true ducks' belong to the subfamily Anatinae.[10] The largest"
    " of these, the Anatini, contains the 'dabbling' or 'river' ducks - named for their method of feeding"
    " primarily at the surface of fresh water.[11] The 'diving ducks', also named for their primary feeding"
    " method, make up the tribe Aythyini.[ 12 ] The tribe Oxyurini contains the stiff"
)


@pytest.fixture(scope="module")
def embedder(tmp_path_factory: pytest.TempPathFactory) -> Embedder:
    return build_services(Settings(data_dir=tmp_path_factory.mktemp("answers"))).embedder


def passage(pid: str, text: str, title: str = "Duck", similarity: float = 0.6) -> Passage:
    return Passage(passage_id=pid, text=text, title=title, similarity=similarity)


def test_units_are_whole_sentences_without_reference_markers() -> None:
    found = [u.text for u in units(0, DUCK)]
    assert found == [
        "In most modern classifications, the so-called 'true ducks' belong to the subfamily Anatinae.",
        "The largest of these, the Anatini, contains the 'dabbling' or 'river' ducks - named for their method of"
        " feeding primarily at the surface of fresh water.",
        "The 'diving ducks', also named for their primary feeding method, make up the tribe Aythyini.",
    ]
    assert not any(re.search(r"\[|\]", text) for text in found)


def test_fragments_cut_by_a_chunk_edge_or_a_table_lead_in_are_left_out() -> None:
    text = (
        "up-ending without submerging. 9] The perching ducks nest in trees near the water.\n"
        "Here are some interesting things a respectful duck could eat:\n"
        "| | Food | Calories per portion |\n| - | - | - |\n| Leaves | Ash, Elm, Maple | 50 |\n"
        "Ducks have many"
    )
    assert [u.text for u in units(0, text)] == [
        "The perching ducks nest in trees near the water.",
        "Leaves; Food: Ash, Elm, Maple; Calories per portion: 50.",
    ]


def test_answer_orders_sentences_by_document_cites_each_and_drops_repeats(embedder: Embedder) -> None:
    dabbling = "Dabbling ducks feed on the surface of water or on land, as deep as they reach"
    later = passage("docs:duck.html#7", f"{dabbling}.")
    earlier = passage("docs:duck.html#2", DUCK)
    repeat = passage("docs:copy.html#0", f"{dabbling}!")
    question = "Which ducks feed at the surface of the water rather than diving?"
    draft = ExtractiveGenerator(embedder).generate(question, [later, earlier, repeat], None, [])
    sentences = re.findall(r"(.+?) \[(\d+)\](?: |$)", draft.text)
    assert len(sentences) >= 2
    assert sum("Dabbling ducks feed" in s for s, _ in sentences) == 1, draft.text
    # Within the one document, chunk 2's sentences come before chunk 7's, each cited to its passage.
    places = [(2 if n == "2" else 7) for _, n in sentences if n in {"1", "2"}]
    assert places == sorted(places), draft.text
    assert {int(n) - 1 for _, n in sentences} == set(draft.used)


def test_citations_are_renumbered_to_the_answer_s_sources(embedder: Embedder) -> None:
    evidence = Evidence(
        question="Who patented the typewriter in 1868?",
        passages=[
            passage("docs:other.md#0", "IBM is a company headquartered in Armonk, New York.", "IBM"),
            passage("docs:wp.pdf#1", "Patented in 1868 by Christopher Latham Sholes, the typewriter changed it.", "W"),
        ],
    )
    draft = ExtractiveGenerator(embedder).generate(evidence.question, evidence.passages, "short", [])
    answer = steps.cite(evidence, steps.GateDecision(confidence=0.9, answerable=True), draft)
    assert answer.citations[0].passage.title == "W"
    assert answer.text.startswith("Patented in 1868") and "Sholes, the typewriter changed it. [1]" in answer.text
    assert set(re.findall(r"\[(\d+)\]", answer.text)) <= {str(n) for n in range(1, len(answer.citations) + 1)}


CALIBRATED = {"threshold": 0.5, "midpoint": 0.39, "steepness": 12.0, "coverage_weight": 1.25}
GATE = CALIBRATED | {"multilingual": False}


def test_silence_without_passages_says_none_is_above_the_floor() -> None:
    decision = steps.gate(Evidence(question="Who invented the ballpoint pen?", passages=[]), **GATE)
    assert (decision.answerable, decision.confidence) == (False, 0.0)
    assert "floor" in decision.reason


def test_silence_for_missing_words_names_them() -> None:
    text = "Christopher Latham Sholes patented the typewriter in 1868."
    evidence = Evidence(question="Who invented the ballpoint pen?", passages=[passage("d:a#0", text, similarity=0.45)])
    decision = steps.gate(evidence, **GATE)
    assert not decision.answerable and decision.confidence < GATE["threshold"]
    assert decision.reason.startswith("Too little coverage") and "ballpoint, pen" in decision.reason


def test_silence_for_a_distant_passage_says_so() -> None:
    evidence = Evidence(question="What is OTSL?", passages=[passage("d:a#0", "OTSL is short.", similarity=0.1)])
    decision = steps.gate(evidence, **GATE)
    assert not decision.answerable and decision.reason.startswith("No passage is close enough")


def test_two_tables_with_different_figures_disagree() -> None:
    question = "How many freshwater ducks were observed in 2022?"
    survey = "| | Freshwater Ducks | Saltwater Ducks |\n| 2021 | 150 | 110 |\n| 2022 | 175 | 130 |"
    sheet = "Number of freshwater ducks per year\n| Year | Freshwater Ducks |\n| 2022 | 170 |\n| 2023 | 160 |"
    agreeing = "Number of freshwater ducks per year\n| Year | Freshwater Ducks |\n| 2022 | 175 |"
    both = [passage("d:a#0", survey, "Survey", 0.7), passage("d:b#0", sheet, "Sheet", 0.7)]
    decision = steps.gate(Evidence(question=question, passages=both), **GATE)
    assert not decision.answerable and decision.confidence < GATE["threshold"]
    assert decision.reason == "The passages disagree: Survey and Sheet give different figures for this."
    same = [passage("d:a#0", survey, "Survey", 0.7), passage("d:c#0", agreeing, "Other", 0.7)]
    assert steps.gate(Evidence(question=question, passages=same), **GATE).answerable


def test_a_close_passage_holding_the_question_s_words_is_answered() -> None:
    text = "Patented in 1868 by Christopher Latham Sholes, the typewriter revolutionized written communication."
    close = [passage("d:a#0", text, similarity=0.56)]
    evidence = Evidence(question="Who patented the typewriter in 1868?", passages=close)
    decision = steps.gate(evidence, **GATE)
    assert decision.answerable and decision.confidence >= GATE["threshold"] and decision.reason is None


def test_the_shipped_gate_settings_are_the_calibrated_ones() -> None:
    settings = Settings(data_dir=Path("unused"))
    shipped = {
        "threshold": settings.synthesis.silence_threshold,
        "midpoint": settings.synthesis.confidence_midpoint,
        "steepness": settings.synthesis.confidence_steepness,
        "coverage_weight": settings.synthesis.confidence_coverage_weight,
    }
    assert shipped == CALIBRATED


def test_coverage_counts_the_words_of_the_best_passages_together() -> None:
    """Issue 27: "What do wild ducks eat?" was refused: "the closest passages do not mention wild"
    although the passage beside the answering one says "wild ducks"."""
    feeding = "Ducks eat food sources such as grasses, aquatic plants, fish, insects and small molluscs."
    hunting = "In many areas, wild ducks are hunted for food or sport."
    passages = [passage("d:a#3", feeding, similarity=0.62), passage("d:a#7", hunting, similarity=0.5)]
    decision = steps.gate(Evidence(question="What do wild ducks eat?", passages=passages), **GATE)
    assert decision.answerable, decision
    alone = [passages[0]]
    decision = steps.gate(Evidence(question="What do wild ducks eat?", passages=alone), **GATE)
    assert not decision.answerable and "wild" in decision.reason


def test_a_quantity_question_counts_the_words_of_the_best_passage_alone() -> None:
    """A count is given by one passage: "How many saltwater ducks were observed in 2023?" is not
    answered from a 2022 table beside a passage that names 2023 (the gate refit on qa_shared kept
    silence on its unanswerable questions at main's 0.92 this way)."""
    table = "2022; Freshwater ducks observed: 175; Saltwater ducks observed: 130."
    other = "The survey of 2023 counted geese and swans."
    passages = [passage("d:t#0", table, similarity=0.74), passage("d:o#1", other, similarity=0.5)]
    question = "How many saltwater ducks were observed in 2023?"
    found = steps.support(Evidence(question=question, passages=passages), False)
    assert found.coverage == 0.75 and found.missing == ("2023",)
    found = steps.support(Evidence(question="Which saltwater ducks were observed in 2023?", passages=passages), False)
    assert found.coverage == 0.75 + steps.NEIGHBOUR_SHARE * 0.25 and found.missing == ()


def test_a_refusal_after_an_empty_draft_is_not_confident() -> None:
    korean = [passage("d:k#0", "확 진자는", similarity=0.9)]
    evidence = Evidence(question="코로나-19 국내 확진자는 몇 명인가?", passages=korean)
    through = steps.GateDecision(confidence=0.98, answerable=True)
    answer = steps.cite(evidence, through, None)
    assert answer.silence and answer.confidence == 0.49


def test_korean_sentences_and_table_rows_are_units_and_the_path_line_is_not() -> None:
    text = (
        "§ 코로나-19 관련 보험약관 › 1 들어가며\n"
        "현재 국내 확 진자는 9,661명, 사망자는 158명으로 나타났다. 세계보건기구는 유행을 선언하였다.\n"
        "東京都に住む人は毎朝電車で通勤します。北京是中国的首都，也是政治和文化中心。\n"
        "Berries; Food: Blueberry, Strawberry, Cranberry; Calories per portion: 150."
    )
    assert [u.text for u in units(0, text)] == [
        "현재 국내 확 진자는 9,661명, 사망자는 158명으로 나타났다.",
        "세계보건기구는 유행을 선언하였다.",
        "東京都に住む人は毎朝電車で通勤します。",
        "北京是中国的首都，也是政治和文化中心。",
        "Berries; Food: Blueberry, Strawberry, Cranberry; Calories per portion: 150.",
    ]


RECEIPT = (
    "§ HEADER\nOrder Receipt Details\nReceipt documentation for table service:\n1\nRestaurant: Docling.\n2\n"
    "Telephone: (123) 456-7890.\n3\nServer: Quack Quackling.\n4\nOrder Number: 12345.\n5\nSeating: 13.\n"
    "Order items:\nItemized list of products ordered with quantities.\n"
    "Nr.: I; Item Description: Coffee; Quantity: 1.\nNr.: II; Item Description: Lunch; Quantity: 2.\n"
)


def test_a_form_field_is_quoted_and_a_far_weaker_passage_s_shared_word_does_not_beat_it(embedder: Embedder) -> None:
    """The receipt's field 'Server: Quack Quackling' answers who the server was. A sentence of a
    passage the search ranked far behind, sharing the word 'server' and the function words 'the'
    and 'was' with the question, is not a better answer: only the question's content words count,
    and a passage's rank relative to the first one weighs."""
    receipt = Passage(passage_id="docs:kvp.html#0", text=RECEIPT, title="Receipt", relevance=1.0)
    guide = Passage(
        passage_id="docs:getting-started.md#2",
        text="§ Getting started with ragmcp › Running it on one machine\nRun make serve. The server ingests the"
        " folder named by DOCS= and listens on http://127.0.0.1:8000/mcp.",
        title="Getting started",
        relevance=0.26,
    )
    draft = ExtractiveGenerator(embedder).generate(
        "Who was the server on the restaurant receipt?", [receipt, guide], None, []
    )
    assert "Server: Quack Quackling. [1]" in draft.text and set(draft.used) == {0}, draft.text
    assert "Nr.:" not in draft.text, draft.text


FORM = (
    "§ HEADER\nOrder Receipt Details\nReceipt documentation for table service:\n1\nRestaurant: Docling.\n2\n"
    "Telephone: (123) 456-7890.\n3\nServer: Quack Quackling.\n4\nOrder Number: 12345.\n5\nSeating: 13.\n6\n"
    "Dining Type: Celebration.\n7\nNumber of guests: 5.\n8\nReceipt date: 16/03/2026.\nOrder items:\n"
    "Itemized list of products ordered with quantities.\nNr.: I; Item Description: Coffee; Quantity: 1.\n"
    "Nr.: II; Item Description: Lunch; Quantity: 2.\nNr.: III; Item Description: Cake; Quantity: 1.\n"
    "Docling Restaurant 2026"
)


@pytest.mark.parametrize(
    ("question", "field", "others"),
    [
        ("Who was the server on the restaurant receipt?", "Server: Quack Quackling.", ["Restaurant:", "Receipt date:"]),
        ("What was the date on the restaurant receipt?", "Receipt date: 16/03/2026.", ["Restaurant:"]),
        ("How many guests were at the table on the receipt?", "Number of guests: 5.", ["Receipt date:"]),
        (
            "What is the telephone number of the restaurant?",
            "Telephone: (123) 456-7890.",
            ["Restaurant:", "Order Number:"],
        ),
    ],
)
def test_the_field_whose_label_names_the_question_s_head_word_is_the_answer(
    embedder: Embedder, question: str, field: str, others: list[str]
) -> None:
    """Among a form's fields, the one whose label holds the question's head word (its first content
    word after the wh-word and the auxiliary) is the answer; fields whose labels hold only later
    words of the question (the restaurant, the receipt: what the question is about) are not quoted,
    however close in meaning the embedder finds them."""
    form = Passage(passage_id="docs:kvp.html#0", text=FORM, title="Restaurant Receipt Form", relevance=1.0)
    draft = ExtractiveGenerator(embedder).generate(question, [form], None, [])
    assert draft.text.startswith(f"{field} [1]") or f" {field} [1]" in draft.text, draft.text
    assert not any(other in draft.text for other in others), draft.text


def test_a_field_s_value_is_not_read_as_its_label(embedder: Embedder) -> None:
    """The head word in a field's value ('Dining Type: Server's choice') does not make it the field
    that names the server: only labels are matched."""
    text = FORM.replace("Dining Type: Celebration.", "Dining Type: Server's choice.")
    form = Passage(passage_id="docs:kvp.html#0", text=text, title="Restaurant Receipt Form", relevance=1.0)
    draft = ExtractiveGenerator(embedder).generate("Who was the server on the restaurant receipt?", [form], None, [])
    assert draft.text.startswith("Server: Quack Quackling. [1]"), draft.text
    assert "Dining Type" not in draft.text, draft.text


def test_a_table_row_whose_first_header_is_lowercase_is_a_unit(embedder: Embedder) -> None:
    """A row sentence is a whole line however its header is written ("first: 5; ..."): it is not a
    fragment cut by the chunk's edge, and it answers the question that names its cells."""
    sheet = (
        "§ Sheet1\nfirst: 4; second: 2; third: 0.\nfirst: 5; second: 1; third: -3.\nfirst: 6; second: 0; third: -6.\n"
    )
    assert [u.text for u in units(0, sheet)] == [
        "first: 4; second: 2; third: 0.",
        "first: 5; second: 1; third: -3.",
        "first: 6; second: 0; third: -6.",
    ]
    draft = ExtractiveGenerator(embedder).generate(
        "In the 'first second third' sheet, what is third when first is 5?",
        [Passage(passage_id="docs:xlsx_01.xlsx#0", text=sheet, title="xlsx_01", relevance=1.0)],
        None,
        [],
    )
    assert "first: 5; second: 1; third: -3. [1]" in draft.text, draft.text


def test_the_row_holding_the_value_the_question_names_is_the_answer(embedder: Embedder) -> None:
    """A question that names a cell's value ("when col-1 is 4") singles out the rows holding it:
    the other rows of the table are not quoted. A number inside a column's name ("col-3") is not a
    value."""
    chart = (
        "§ Sheet2\n'col-3' (line chart)\ncol-1: 1; col-3: 3.\ncol-1: 2; col-3: 6.\ncol-1: 3; col-3: 9.\n"
        "col-1: 4; col-3: 12.\n"
    )
    draft = ExtractiveGenerator(embedder).generate(
        "In the line chart of col-3, what is col-3 when col-1 is 4?",
        [Passage(passage_id="docs:xlsx_01.xlsx#2", text=chart, title="xlsx_01", relevance=1.0)],
        None,
        [],
    )
    assert draft.text == "col-1: 4; col-3: 12. [1]", draft.text


def test_a_sentence_led_by_a_label_is_not_a_form_field(embedder: Embedder) -> None:
    """'Wang Laboratories: In the 1970s, Wang introduced ...' is a sentence that a label leads into,
    not a form's field: the field rule (the label naming the question's head word wins) does not
    drop it for 'Microsoft Word (1983): ...', whose label holds an earlier word of the question."""
    history = (
        "§ The Evolution of Word Processors\n"
        "• Wang Laboratories: In the 1970s, Wang introduced dedicated word processing machines. These devices,"
        " like the Wang 1200, featured small screens and floppy disks, making them revolutionary for their time.\n"
        "• WordStar (1978): Developed for the CP/M operating system, WordStar was one of the first widely used"
        " word processing programs.\n"
        "• Microsoft Word (1983): Microsoft launched Word for MS-DOS in 1983, introducing a graphical user"
        " interface (GUI) and mouse support.\n"
    )
    draft = ExtractiveGenerator(embedder).generate(
        "Which company introduced dedicated word processing machines like the Wang 1200 in the 1970s?",
        [Passage(passage_id="docs:multi_page.pdf#2", text=history, title="multi_page", relevance=1.0)],
        None,
        [],
    )
    assert "Wang Laboratories: In the 1970s, Wang introduced dedicated word processing machines." in draft.text


def test_the_value_is_read_in_the_column_named_just_before_it(embedder: Embedder) -> None:
    """ "what is third when first is 5?": the row whose 'first' cell is 5, not the one whose
    'second' cell is (both hold a 5, and the question names both columns)."""
    rows = [(1, 5, 9), (2, 4, 6), (3, 3, 3), (4, 2, 0), (5, 1, -3), (6, 0, -6)]
    sheet = "§ Sheet1\n" + "".join(f"first: {a}; second: {b}; third: {c}.\n" for a, b, c in rows)
    draft = ExtractiveGenerator(embedder).generate(
        "In the 'first second third' sheet, what is third when first is 5?",
        [Passage(passage_id="docs:xlsx_01.xlsx#0", text=sheet, title="xlsx_01", relevance=1.0)],
        None,
        [],
    )
    assert draft.text == "first: 5; second: 1; third: -3. [1]", draft.text


def test_a_korean_question_whose_passage_holds_its_words_is_answered_though_the_english_model_finds_it_far() -> None:
    """Issue 27: the English-only model's cosine of a Korean question to its passage is noise
    (0.2-0.5), so the gate refused Korean questions whose passage holds every word they ask about;
    for a question in CJK the similarity counts as in the search's fusion, the coverage for the rest."""
    text = (
        "개정된 법에서 이들은 제2급감염병으로 변경되었다. 대신에 「감염병예방법」 제1급감염병으로"
        " “에볼라바이러스병, ~ 디프테리아”등 17종이 새롭게 포함되었다."
    )
    korean = Evidence(
        question="개정된 감염병예방법에서 제1급감염병은 몇 종인가?", passages=[passage("d:k#0", text, similarity=0.25)]
    )
    assert steps.gate(korean, **GATE).answerable
    elsewhere = "Christopher Latham Sholes patented the typewriter in 1868."
    unrelated = Evidence(question="타자기는 누가 발명했나?", passages=[passage("d:a#0", elsewhere, similarity=0.25)])
    assert not steps.gate(unrelated, **GATE).answerable
    english = Evidence(question="What is OTSL?", passages=[passage("d:a#0", "OTSL is short.", similarity=0.1)])
    assert not steps.gate(english, **GATE).answerable


def test_the_gate_weighs_a_cjk_question_s_similarity_by_whether_the_embedder_reads_its_script() -> None:
    """An English-only embedder's similarity for a Korean question does not count, its coverage does; a
    multilingual embedder's (Embedder.multilingual) counts in full, as its search's fusion weighs it."""
    korean = [passage("d:k#0", "코로나 확진자는 모두 1만 명이다", similarity=0.8)]
    evidence = Evidence(question="코로나 확진자는 몇 명인가?", passages=korean)
    english_only, multilingual = steps.support(evidence, False), steps.support(evidence, True)
    assert multilingual.similarity == 0.8
    assert english_only.similarity == pytest.approx(english_only.coverage)

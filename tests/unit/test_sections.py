"""Sections a question names come first (issue 27, heading questions): the chunks whose heading
the question names, or whose heading path is the closest to it, rise above the others; a named
section's chunks read in their document order; every other chunk keeps its fused score."""

from __future__ import annotations

from typing import Any

import numpy as np

from ragmcp.domain.models import Chunk, Document, IndexHit, Principal, SearchFilter
from ragmcp.retrieval.sections import has_headings, headed_first, near_ties_by_coverage
from ragmcp.retrieval.service import SearchRequest, SearchService
from tests import fakes


def hit(chunk_id: str, text: str, at: int, title: str = "Duck", doc: str = "d1") -> tuple[Chunk, Document]:
    chunk = Chunk(chunk_id=chunk_id, doc_id=doc, ordinal=at, text=text, headline="", summary="", char_start=at)
    document = Document(
        tenant="t", doc_id=doc, source="s", path=f"{doc}.html", title=title, file_name=f"{doc}.html",
        file_type="html", content_hash="h",
    )
    return chunk, document


def ranked(found: dict[str, tuple[Chunk, Document]], scores: list[float]) -> list[tuple[str, float]]:
    return list(zip(found, scores, strict=True))


def named_sections_first(
    phrases: list[str], ranked: list[tuple[str, float]], found: dict[str, tuple[Chunk, Document]]
) -> list[tuple[str, float]]:
    """The named-heading signal alone (phrases without vectors: no heading is measured close)."""
    return headed_first(phrases, ranked, found, {})


def test_the_chunks_of_a_named_section_rise_above_a_better_scored_other_section() -> None:
    found = {
        "links": hit("links", "§ Duck › External links\nDucks at a Distance, a guide to ducks.", 900),
        "lead": hit("lead", "§ Duck\nA duck is a waterbird.", 0),
        "morph": hit("morph", "§ Duck › Morphology\nThe overall body plan of ducks is elongated.", 500),
    }
    order = named_sections_first(["What does the Morphology section of the duck article describe?"],
                                 ranked(found, [1.0, 0.95, 0.9]), found)
    assert [cid for cid, _ in order] == ["morph", "links", "lead"]
    assert [score for _, score in order] == sorted((score for _, score in order), reverse=True)


def test_a_named_sections_chunks_read_in_document_order() -> None:
    found = {
        "table": hit("table", "§ 5.1 Hyper Parameter Optimization\n# dec-layers: 4; TEDs all: 0.927.", 1221),
        "other": hit("other", "§ 5.2 Quantitative Results\nWe picked the model.", 2400),
        "opens": hit("opens", "§ 5.1 Hyper Parameter Optimization\nWe have chosen the PubTabNet data set.", 227),
    }
    order = named_sections_first(["What is under Hyper Parameter Optimization?"], ranked(found, [1.0, 0.9, 0.8]), found)
    assert [cid for cid, _ in order] == ["opens", "table", "other"]


def test_the_most_specific_named_heading_wins_and_section_numbers_count() -> None:
    found = {
        "s1": hit("s1", "§ 1. Section 1\nTest Document\nParagraph 1.1", 0),
        "s11": hit("s11", "§ 1. Section 1 › 1.1. Section 1.1\nParagraph 1.1.1", 60),
    }
    order = named_sections_first(["What is written under Section 1.1 of the numbered test document?"],
                                 ranked(found, [1.0, 0.6]), found)
    assert [cid for cid, _ in order] == ["s11", "s1"]


def test_a_heading_named_by_several_words_lifts_its_chunk_from_further_down() -> None:
    """"Section 2.1" (its words and number in a row) is strong evidence, unlike a one-word heading a
    question holds by chance: its chunk rises from under half the best fused score (the document's
    first chunk, which holds the words "Test Document", led on the keyword side)."""
    found = {
        "s1": hit("s1", "§ 1. Section 1\nTest Document\nParagraph 1.1", 0, title="Numbered"),
        "s2": hit("s2", "§ 2. Section 2\nParagraph 2.1", 210, title="Numbered"),
        "s21": hit("s21", "§ 2. Section 2 › 2.1. Section 2.1\nParagraph 2.1.1", 308, title="Numbered"),
    }
    order = named_sections_first(["Which paragraphs are under Section 2.1 in the numbered test document?"],
                                 ranked(found, [1.0, 0.55, 0.41]), found)
    assert [cid for cid, _ in order] == ["s21", "s1", "s2"]
    assert dict(order)["s2"] == 0.55  # the less specific "Section 2" is not named


def test_a_heading_named_in_another_document_than_the_one_the_question_names_does_not_move() -> None:
    """"The introduction of the IBM article" names the IBM document: the Introduction heading of
    another document does not lift its chunk over the IBM article's opening."""
    found = {
        "ibm": hit("ibm", "§ IBM\nIBM is an American multinational technology company.", 0, title="IBM", doc="d1"),
        "intro": hit("intro", "§ Example Document › Introduction\nThis is the first paragraph.", 0,
                     title="Example Document", doc="d2"),
    }
    scores = ranked(found, [1.0, 0.8])
    assert named_sections_first(["What does the introduction of the IBM article say the company is?"],
                                scores, found) == scores
    order = named_sections_first(["What does the introduction say?"], scores, found)
    assert [cid for cid, _ in order] == ["intro", "ibm"]  # no document named: the heading counts


def test_nothing_moves_when_no_heading_is_named_or_the_heading_is_the_documents_title() -> None:
    found = {
        "a": hit("a", "§ Duck › Taxonomy\nAll ducks belong to the order Anseriformes.", 100),
        "b": hit("b", "§ Duck\nA duck is a waterbird.", 0),
        "c": hit("c", "Prose without a heading.", 0, doc="d2"),
    }
    scores = [1.0, 0.7, 0.5]
    assert named_sections_first(["What do wild ducks eat?"], ranked(found, scores), found) == ranked(found, scores)


def test_a_heading_is_named_by_its_whole_words_in_a_row_not_by_stems_or_scattered_words() -> None:
    found = {
        "intro": hit("intro", "§ Example Document › Introduction\nThis is the first paragraph.", 0, title="Example"),
        "chart": hit("chart", "§ Quarterly revenue › Bar 3d chart\nQ1; 2026: 10.", 0, title="Survey", doc="d2"),
        "feed": hit("feed", "§ Duck › Feeding\nDucks eat grasses.", 0, doc="d3"),
    }
    scores = [1.0, 0.8, 0.6]
    for question in (
        "Which editing features did WordStar introduce early examples of?",
        "What is the highest freshwater duck count in the bar chart of the duck survey slides?",
        "What do sea ducks mostly feed on?",
    ):
        assert named_sections_first([question], ranked(found, scores), found) == ranked(found, scores), question


def test_only_chunks_with_a_heading_path_call_for_the_chunks_below_the_top() -> None:
    headed = hit("h", "§ Duck › Morphology\nThe body plan.", 0)
    plain = hit("p", "An abstract without headings.", 0, doc="d2")
    assert has_headings([plain, headed]) and not has_headings([plain])


def test_a_heading_named_by_chance_does_not_lift_a_chunk_far_below_the_best() -> None:
    """A one-word heading ("HEADER") that a question about a table's "Header 0.1" happens to hold
    names a section the search placed far down: it stays there."""
    found = {
        "row": hit("row", "§ Tables › Table 1\nHeader 0.0: cell 1; Header 0.1: cell 2.", 300, title="Word tables"),
        "near": hit("near", "§ Tables › Table 2\nHeader 1.0: cell 3.", 600, title="Word tables"),
        "chance": hit("chance", "§ HEADER\nThe page's running header.", 0, title="Sample", doc="d2"),
    }
    order = named_sections_first(["What is in the Header 0.1 column of the first table?"],
                                 ranked(found, [1.0, 0.8, 0.3]), found)
    assert [cid for cid, _ in order] == ["row", "near", "chance"]


def test_chunks_outside_the_named_section_keep_their_fused_scores() -> None:
    """No rescaling: proxysql's min_score compares the same fused score whether or not a section is
    named; the named section's chunks reach at most 1."""
    found = {
        "links": hit("links", "§ Duck › External links\nDucks at a Distance, a guide to ducks.", 900),
        "lead": hit("lead", "§ Duck\nA duck is a waterbird.", 0),
        "morph": hit("morph", "§ Duck › Morphology\nThe overall body plan of ducks is elongated.", 500),
        "prose": hit("prose", "Ducks in a pond, without a heading.", 0, doc="d2"),
    }
    order = headed_first(["What does the Morphology section of the duck article describe?"],
                         ranked(found, [1.0, 0.95, 0.9, 0.6]), found, {})
    assert order == [("morph", 1.0), ("links", 1.0), ("lead", 0.95), ("prose", 0.6)]


def test_a_paraphrased_heading_closest_to_the_question_rises_above_a_better_fused_chunk() -> None:
    """"What ducks eat" names no word of "Feeding": the heading path's closeness to the question
    (its cosine, measured by the search service) pulls its chunk up; the others keep their scores."""
    found = {
        "links": hit("links", "§ Duck › External links\nThe duck article's sources.", 900),
        "feed": hit("feed", "§ Duck › Behaviour › Feeding\nPecten along the bill. Ducks eat grasses.", 400),
        "lead": hit("lead", "§ Duck\nA duck is a waterbird.", 0),
    }
    closeness = {"Duck › External links": 0.2, "Duck › Behaviour › Feeding": 0.55, "Duck": 0.45}
    order = headed_first(["What does the part of the duck article on what ducks eat say?"],
                         ranked(found, [0.95, 0.9, 0.8]), found, closeness)
    assert [cid for cid, _ in order] == ["feed", "links", "lead"]
    scores = dict(order)
    assert abs(scores["feed"] - (0.9 + 0.1 * 0.6)) < 1e-9
    assert scores["links"] == 0.95 and scores["lead"] == 0.8  # lead: under CLOSE_NEAR of the best, not pulled


def test_a_close_heading_does_not_pull_a_chunk_the_search_ranked_far_below_the_best() -> None:
    """Closeness reorders the passages the search placed near the top only: a chunk far below keeps
    its place however close its heading, so the top five the search found stay in the top five."""
    found = {
        "links": hit("links", "§ Duck › External links\nDucks at a Distance.", 900),
        "lead": hit("lead", "§ Duck\nA duck is a waterbird.", 0),
        "taxo": hit("taxo", "§ Duck › Taxonomy\nAll ducks belong to the order Anseriformes.", 100),
    }
    closeness = {"Duck › External links": 0.2, "Duck": 0.3, "Duck › Taxonomy": 0.9}
    order = headed_first(["Which order do ducks belong to?"], ranked(found, [1.0, 0.9, 0.5]), found, closeness)
    assert [cid for cid, _ in order] == ["links", "lead", "taxo"] and dict(order)["taxo"] == 0.5


def test_headings_all_far_from_the_question_pull_nothing() -> None:
    """A question that has no section in mind ("What does the mask return to tellers?") is only
    distantly close to every heading: the closest of them by a wide margin still gains nothing."""
    found = {
        "activate": hit("activate", "§ 3.6.6 Activating RCAC\nCASE WHEN TELLER THEN 'XXX-XX-' || SUBSTR(TAX_ID)", 900,
                        title="Redpaper"),
        "verify": hit("verify", "§ 3.3 VERIFY_GROUP_FOR_USER function\nThe function returns 1 or 0.", 400,
                      title="Redpaper"),
    }
    closeness = {"3.6.6 Activating RCAC": 0.03, "3.3 VERIFY_GROUP_FOR_USER function": 0.21}
    scores = ranked(found, [0.86, 0.79])
    question = "What does the mask return to tellers for CUSTOMER_TAX_ID?"
    assert headed_first([question], scores, found, closeness) == scores


def test_chunks_without_heading_paths_are_returned_as_fused() -> None:
    found = {"a": hit("a", "An abstract.", 0, doc="d1"), "b": hit("b", "Another abstract.", 0, doc="d2")}
    scores = ranked(found, [1.0, 0.4])
    assert headed_first(["What is an abstract?"], scores, found, {}) == scores


class SiblingsIndex(fakes.MemorySearchIndex):
    """Two chunks of one section ("Boots Self-Locking Nut") and one of another document, whose two searches
    return fixed lists: the section's opening chunk a hair ahead of its sibling on both sides (v4-fact-34)."""

    def __init__(self) -> None:
        super().__init__()
        doc = Document(
            tenant="t", doc_id="d", source="s", path="d.pdf", title="Hardware", file_name="d.pdf",
            file_type="pdf", content_hash="h",
        )
        texts = {
            "opens": "§ Boots Self-Locking Nut\nThe Boots self-locking nut is of one piece, all-metal construction.",
            "styles": "§ Boots Self-Locking Nut\nBoots nuts: three spring styles; the wing type is the most common.",
            "other": "§ Elastic Stop Nut\nThe elastic stop nut is a standard nut with a fiber locking collar.",
        }
        chunks = [
            Chunk(chunk_id=c, doc_id="d", ordinal=i, text=t, headline="", summary="", char_start=100 * i)
            for i, (c, t) in enumerate(texts.items())
        ]
        self.replace_document(doc, chunks, np.eye(3, 8, dtype=np.float32))

    def search_fts(self, principal: Principal, query: str, flt: SearchFilter, k: int, **_: Any) -> list[IndexHit]:
        return [IndexHit(chunk_id=c, raw_score=s) for c, s in (("opens", 10.0), ("styles", 9.9), ("other", 2.0))]

    def search_vector(self, principal: Principal, vector: Any, flt: SearchFilter, k: int, **_: Any) -> list[IndexHit]:
        listed = (("opens", 0.70), ("styles", 0.69), ("other", 0.40))
        return [IndexHit(chunk_id=c, raw_score=s) for c, s in listed if flt.chunk_ids is None or c in flt.chunk_ids]


def test_the_sibling_holding_the_questions_words_comes_first_in_a_near_tie_of_one_section() -> None:
    search = SearchService(SiblingsIndex(), fakes.HashEmbedder())
    request = SearchRequest(
        phrases=["Which spring style of Boots self-locking nut is the most common?"], mode="hybrid_scores", top_k=3
    )
    hits = search.search(Principal(tenant="t"), request).hits
    assert [h.chunk.chunk_id for h in hits] == ["styles", "opens", "other"]
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_only_near_ties_are_ordered_by_the_questions_words_and_a_named_section_keeps_its_order() -> None:
    found = {
        "lead": hit("lead", "§ Duck › Feeding\nDucks eat grasses and aquatic plants.", 0),
        "taxonomy": hit("taxonomy", "§ Duck › Taxonomy\nSea ducks feed mostly on molluscs.", 100),
        "sibling": hit("sibling", "§ Duck › Feeding\nSea ducks dive for molluscs.", 200),
        "far": hit("far", "§ Duck › Feeding\nSea ducks feed mostly on molluscs in winter.", 300),
    }
    question = ["What do sea ducks mostly feed on?"]
    # within 1% of the best, any chunk; within 3%, the first chunk's own section; the scores stay in place
    near = ranked(found, [1.0, 0.995, 0.98, 0.5])
    assert near_ties_by_coverage(question, near, found) == [
        ("taxonomy", 1.0), ("sibling", 0.995), ("lead", 0.98), ("far", 0.5)
    ]
    siblings = ranked(found, [1.0, 0.98, 0.975, 0.5])
    assert near_ties_by_coverage(question, siblings, found) == [
        ("sibling", 1.0), ("taxonomy", 0.98), ("lead", 0.975), ("far", 0.5)
    ]
    # a question naming a heading: its section's own chunks may still move, no other chunk does
    assert near_ties_by_coverage(question, near, found, named=True) == [
        ("sibling", 1.0), ("taxonomy", 0.995), ("lead", 0.98), ("far", 0.5)
    ]
    apart = ranked(found, [1.0, 0.9, 0.8, 0.5])
    assert near_ties_by_coverage(question, apart, found) == apart

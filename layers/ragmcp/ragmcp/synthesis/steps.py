"""The four synthesis steps. Each takes and returns plain models, so that in process they are
function calls and on AWS each is a Step Functions task."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ragmcp.domain.models import Principal, ScoredChunk, SearchFilter
from ragmcp.ports import Reranker
from ragmcp.retrieval.coverage import coverage
from ragmcp.retrieval.service import SearchRequest, SearchService, vector_share
from ragmcp.synthesis.models import Answer, Citation, Draft, Evidence, GateDecision, Passage
from ragmcp.synthesis.ports import Generator

SNIPPET_CHARS = 300
_MARK = re.compile(r"\[(\d+)\]")
"""A draft's citation of passage n (1-based, in the evidence's order); an answer cites its own sources list."""


def passage_from_hit(hit: ScoredChunk, uri: str | None) -> Passage:
    return Passage(
        passage_id=hit.chunk.chunk_id,
        text=hit.chunk.text,
        title=hit.document.title,
        source=hit.document.source,
        uri=uri,
        page=hit.chunk.page_start,
        section=hit.chunk.headline,
        relevance=hit.score,
        similarity=hit.similarity,
    )


def retrieve(
    search: SearchService,
    principal: Principal,
    question: str,
    *,
    flt: SearchFilter,
    top_k: int,
    history: list[str],
    link: Callable[[Principal, ScoredChunk], str | None],
    defaults: Mapping[str, Any],
) -> Evidence:
    """Search with the question, and with the conversation so far folded in when there is one,
    with the server's search `defaults` (SearchSettings.defaults)."""
    phrases = [question] + ([" ".join([*history[-2:], question])] if history else [])
    request = SearchRequest(phrases=phrases, top_k=top_k, filter=flt, **defaults)
    result = search.search(principal, request)
    passages = [passage_from_hit(h, link(principal, h)) for h in result.hits]
    return Evidence(question=question, passages=passages, truncated=result.total_candidates > top_k)


_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_QUANTITY = re.compile(r"^\W*(?:how (?:many|much|long|old)|what (?:number|year|percentage|share))\b", re.IGNORECASE)

COVERAGE_BONUS = 0.15
"""What a passage holding every word of the question adds to its similarity: a short question
("What is OTSL?") is far, in MiniLM's space, from any long passage that holds its term."""

COVERED_PASSAGES = 3
"""How many of the best-ranked passages the coverage of the question's words is measured on."""

NEIGHBOUR_SHARE = 0.25
"""What a question's word counts for when only a passage beside the best one holds it (COVERED_PASSAGES):
fitted with the midpoint on tests/data/qa_shared.jsonl (BENCHMARKS.md, "The answer gate")."""

NO_PASSAGE = "No passage in the documents available to you is close enough to this question (none above the floor)."


@dataclass(frozen=True, slots=True)
class Support:
    """What the evidence offers a question: its closest passage's similarity, the share of the
    question's words the best-ranked passage holds (and the words it lacks), and two documents
    that give different figures for a question asking for one (None when they agree)."""

    similarity: float
    coverage: float
    missing: tuple[str, ...]
    conflict: tuple[str, str] | None


def conflict(question: str, passages: list[Passage]) -> tuple[str, str] | None:
    """For a question asking for a figure about something it names by number (a year...), two
    documents whose lines with that number give different figures: ("How many ducks in 2022?",
    one table says 175, another 170). Only passages holding most of the question's words count."""
    anchors = set(_NUMBER.findall(question))
    if not anchors or not _QUANTITY.search(question):
        return None
    figures: dict[str, set[str]] = {}
    for passage in passages:
        if coverage(question, passage.text)[0] < 0.5:
            continue
        lines = [line for line in passage.text.splitlines() if anchors & set(_NUMBER.findall(line))]
        found = {n for line in lines for n in _NUMBER.findall(line)} - anchors
        if found:
            figures.setdefault(passage.title or passage.passage_id, set()).update(found)
    named = list(figures.items())
    return next(
        ((a, b) for i, (a, x) in enumerate(named) for b, y in named[i + 1 :] if not x & y),
        None,
    )


def support(evidence: Evidence, multilingual: bool) -> Support:
    """The closest passage's similarity (for a question in CJK, mixed with the coverage as its
    search's fusion mixes vector and keyword sides: `vector_share`), and the coverage of the
    question's words: those the best-ranked passage holds, plus NEIGHBOUR_SHARE of those only the next passages hold (a
    question's words may be split between the passage that answers it and one beside it: "wild" in
    one, "ducks eat" in the next). A question asking for a quantity counts the best passage alone:
    a count is given by one passage, not put together from words of several."""
    if not evidence.passages:
        return Support(0.0, 0.0, (), None)
    best = max((p.similarity or 0.0) for p in evidence.passages)
    share, missing = coverage(evidence.question, evidence.passages[0].text)
    if missing and not _QUANTITY.search(evidence.question):
        together = "\n".join(p.text for p in evidence.passages[:COVERED_PASSAGES])
        wider, still_missing = coverage(evidence.question, together)
        share, missing = share + NEIGHBOUR_SHARE * (wider - share), still_missing
    weight = vector_share(evidence.question, multilingual)  # as in the search's fusion
    return Support(weight * best + (1 - weight) * share, share, missing, conflict(evidence.question, evidence.passages))


def confidence(found: Support, midpoint: float, steepness: float, coverage_weight: float) -> float:
    """How well the evidence supports an answer: a logistic of the closest passage's similarity to
    the question, plus COVERAGE_BONUS times the share of the question's words the best-ranked
    passage holds, less `coverage_weight` times the share it lacks. Calibrated on the labelled QA
    set (BENCHMARKS.md)."""
    signal = found.similarity + COVERAGE_BONUS * found.coverage - coverage_weight * (1.0 - found.coverage)
    return 1.0 / (1.0 + math.exp(-steepness * (signal - midpoint)))


def gate(
    evidence: Evidence,
    threshold: float,
    midpoint: float,
    steepness: float,
    coverage_weight: float,
    multilingual: bool,
) -> GateDecision:
    """Answer, or the Silence Protocol with what was missing: no passage above the floor, passages
    that disagree, too little coverage of the question's words, or passages not close enough."""
    if not evidence.passages:
        return GateDecision(confidence=0.0, answerable=False, reason=NO_PASSAGE)
    found = support(evidence, multilingual)
    score = round(confidence(found, midpoint, steepness, coverage_weight), 4)
    if found.conflict is not None:
        first, second = found.conflict
        reason = f"The passages disagree: {first} and {second} give different figures for this."
        return GateDecision(confidence=round(min(score, threshold) / 2, 4), answerable=False, reason=reason)
    if score >= threshold:
        return GateDecision(confidence=score, answerable=True)
    if found.similarity + COVERAGE_BONUS - midpoint >= 0:
        reason = f"Too little coverage: the closest passages do not mention {', '.join(found.missing)}."
    else:
        reason = f"No passage is close enough to this question (best similarity {found.similarity:.2f})."
    return GateDecision(confidence=score, answerable=False, reason=reason)


def rerank(reranker: Reranker, evidence: Evidence) -> Evidence:
    """The passages in the reranker's order, its score (clipped to 0..1) as their relevance."""
    if not evidence.passages:
        return evidence
    scores = reranker.rerank(evidence.question, [p.text for p in evidence.passages])
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    passages = [
        evidence.passages[i].model_copy(update={"relevance": round(min(max(scores[i], 0.0), 1.0), 6)}) for i in order
    ]
    return evidence.model_copy(update={"passages": passages})


def generate(generator: Generator, evidence: Evidence, style: str | None, history: list[str]) -> Draft:
    return generator.generate(evidence.question, evidence.passages, style, history)


def silent_confidence(decision: GateDecision) -> float:
    """A refusal's confidence: the gate's, but never more than half of it when the gate let the
    question through and no answer came of it (the evidence had no sentence to quote), so a
    non-answer never reads as a confident one."""
    return round(decision.confidence / 2, 4) if decision.answerable else decision.confidence


def cite(evidence: Evidence, decision: GateDecision, draft: Draft | None) -> Answer:
    """The answer with a citation for every passage it rests on; or the refusal, citing nothing."""
    if draft is None or not decision.answerable or not draft.text:
        return Answer(
            question=evidence.question,
            text="",
            confidence=silent_confidence(decision),
            citations=[],
            silence=True,
            silence_reason=decision.reason or "The documents do not answer this question.",
            model=draft.model if draft else "none",
        )
    order = list(dict.fromkeys(draft.used))
    passages = [evidence.passages[i] for i in order]
    citations = [Citation(passage=p, snippet=_snippet(p.text, draft.text)) for p in passages]
    number = {i + 1: n for n, i in enumerate(order, start=1)}
    text = _MARK.sub(lambda m: f"[{number[int(m[1])]}]" if int(m[1]) in number else "", draft.text)
    return Answer(
        question=evidence.question,
        text=" ".join(text.split()),
        confidence=decision.confidence,
        citations=citations,
        model=draft.model,
        truncated=evidence.truncated,
    )


def _snippet(text: str, answer: str) -> str:
    """The part of the passage the answer quotes, else its beginning; at most SNIPPET_CHARS."""
    for sentence in _MARK.sub("", answer).split(". "):
        at = text.find(sentence.strip()[:60])
        if sentence and at >= 0:
            return text[at : at + SNIPPET_CHARS].strip()
    return text[:SNIPPET_CHARS].strip()

"""The four synthesis steps. Each takes and returns plain models, so that in process they are
function calls and on AWS each is a Step Functions task."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ragmcp.domain.models import Principal, ScoredChunk, SearchFilter
from ragmcp.retrieval.service import SearchRequest, SearchService
from ragmcp.synthesis.models import Answer, Citation, Draft, Evidence, GateDecision, Passage

SNIPPET_CHARS = 300


class Generator(Protocol):
    model_id: str

    def generate(self, question: str, passages: list[Passage], style: str | None, history: list[str]) -> Draft: ...


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
        similarity=hit.vec_score,
        lexical=hit.fts_score is not None,
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
    with the server's search `defaults` (Settings.search_defaults)."""
    phrases = [question] + ([" ".join([*history[-2:], question])] if history else [])
    request = SearchRequest(phrases=phrases, top_k=top_k, filter=flt, **defaults)
    result = search.search(principal, request)
    passages = [passage_from_hit(h, link(principal, h)) for h in result.hits]
    return Evidence(question=question, passages=passages, truncated=result.total_candidates > top_k)


def confidence(evidence: Evidence, midpoint: float, steepness: float) -> float:
    """How well the evidence supports an answer: a logistic of the best passage's similarity to the
    question, nudged up when its words matched too. Calibrated on questions with known answers."""
    support = [(p.similarity or 0.0) + (0.05 if p.lexical else 0.0) for p in evidence.passages]
    best = max(support, default=0.0)
    return 1.0 / (1.0 + math.exp(-steepness * (best - midpoint)))


def gate(evidence: Evidence, threshold: float, midpoint: float, steepness: float) -> GateDecision:
    score = round(confidence(evidence, midpoint, steepness), 4)
    if not evidence.passages:
        reason = "No documents available to you match this question."
        return GateDecision(confidence=0.0, answerable=False, reason=reason)
    if score < threshold:
        return GateDecision(
            confidence=score,
            answerable=False,
            reason="No documents in the vault contain information about this topic.",
        )
    return GateDecision(confidence=score, answerable=True)


def generate(generator: Generator, evidence: Evidence, style: str | None, history: list[str]) -> Draft:
    return generator.generate(evidence.question, evidence.passages, style, history)


def cite(evidence: Evidence, decision: GateDecision, draft: Draft | None) -> Answer:
    """The answer with a citation for every passage it rests on; or the refusal, citing nothing."""
    if draft is None or not decision.answerable or not draft.text:
        return Answer(
            question=evidence.question,
            text="",
            confidence=decision.confidence,
            citations=[],
            silence=True,
            silence_reason=decision.reason or "The documents do not answer this question.",
            model=draft.model if draft else "none",
        )
    citations = []
    for index in dict.fromkeys(draft.used):
        passage = evidence.passages[index]
        citations.append(Citation(passage=passage, snippet=_snippet(passage.text, draft.text)))
    return Answer(
        question=evidence.question,
        text=draft.text,
        confidence=decision.confidence,
        citations=citations,
        model=draft.model,
        truncated=evidence.truncated,
    )


def _snippet(text: str, answer: str) -> str:
    """The part of the passage the answer quotes, else its beginning; at most SNIPPET_CHARS."""
    for sentence in answer.split(". "):
        at = text.find(sentence[:60])
        if sentence and at >= 0:
            return text[at : at + SNIPPET_CHARS].strip()
    return text[:SNIPPET_CHARS].strip()

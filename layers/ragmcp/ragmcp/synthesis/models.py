"""What flows between the synthesis steps (serialisable: on AWS each step is a Step Functions task)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from ragmcp.domain.models import Principal, SearchFilter


class Passage(BaseModel):
    """One piece of evidence: a retrieved chunk, or a hit the caller provided."""

    passage_id: str
    text: str
    title: str = ""
    source: str = ""
    uri: str | None = None
    page: int | None = None
    section: str | None = None
    relevance: float = 0.0
    similarity: float | None = Field(default=None, description="Cosine similarity to the question, when known.")
    lexical: bool = Field(default=False, description="Whether the words of the question matched this passage.")


class Evidence(BaseModel):
    question: str
    passages: list[Passage]
    truncated: bool = False


class GateDecision(BaseModel):
    confidence: float
    answerable: bool
    reason: str | None = None


class Draft(BaseModel):
    """A generated answer and the passages (by index into the evidence) each sentence rests on."""

    text: str
    used: list[int]
    model: str


class Citation(BaseModel):
    passage: Passage
    snippet: str


class Answer(BaseModel):
    question: str
    text: str
    confidence: float
    citations: list[Citation]
    silence: bool = False
    silence_reason: str | None = None
    model: str
    truncated: bool = False


class SynthesisRequest(BaseModel):
    """One question to answer, with everything the steps need: the input of the synthesis state machine."""

    principal: Principal
    question: str
    filter: SearchFilter = SearchFilter()
    top_k: int = Field(default=5, ge=1, le=100)
    style: str | None = None
    history: list[str] = Field(default_factory=list, description="Earlier questions of the conversation.")
    provided: list[Passage] | None = Field(default=None, description="Evidence the caller gave instead of a search.")
    provided_ref: str | None = Field(
        default=None, description="Where `provided` was stashed while the request runs on a state machine."
    )

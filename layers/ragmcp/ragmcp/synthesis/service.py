"""Synthesis: the steps of synthesis/steps.py run in process (SynthesisSteps), and the service that
answers with conversation memory, whichever runner (in process, or a state machine) runs the steps."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from ragmcp.domain.errors import InvalidArgument
from ragmcp.domain.models import Principal, ScoredChunk, SearchFilter, Turn
from ragmcp.ports import ConversationStore, Embedder, Reranker
from ragmcp.retrieval.service import SearchService
from ragmcp.security.policy import owner_of
from ragmcp.synthesis import steps
from ragmcp.synthesis.models import Answer, Draft, Evidence, GateDecision, Passage, SynthesisRequest
from ragmcp.synthesis.ports import Generator, SynthesisRunner
from ragmcp.synthesis.stash import PassageStash


class SynthesisSteps:
    """Each step as a method taking and returning models: in process, `run` calls them in turn;
    on AWS each state machine task calls one of them."""

    def __init__(
        self,
        *,
        search: SearchService,
        embedder: Embedder,
        generator: Generator,
        link: Callable[[Principal, ScoredChunk], str | None],
        search_defaults: Mapping[str, Any],
        threshold: float,
        midpoint: float,
        steepness: float,
        coverage_weight: float,
        stash: PassageStash | None = None,
        reranker: Reranker | None = None,
    ):
        self.stash = stash
        self.search = search
        self.embedder = embedder
        self.generator = generator
        self.link = link
        self.search_defaults = search_defaults
        self.threshold = threshold
        self.midpoint = midpoint
        self.steepness = steepness
        self.coverage_weight = coverage_weight
        self.reranker = reranker

    @property
    def model_id(self) -> str:
        return self.generator.model_id

    def with_search_defaults(self, defaults: Mapping[str, Any]) -> SynthesisSteps:
        """The same steps searching with other knobs (an evaluation compares search modes this way)."""
        twin = copy.copy(self)
        twin.search_defaults = defaults
        return twin

    def evidence(self, request: SynthesisRequest) -> Evidence:
        """The passages to answer from (searched, or the caller's), reranked when a reranker is set."""
        evidence = self.retrieve(request)
        return evidence if self.reranker is None else steps.rerank(self.reranker, evidence)

    def retrieve(self, request: SynthesisRequest) -> Evidence:
        if request.provided_ref is not None:
            if self.stash is None:
                raise InvalidArgument("provided_ref names stashed passages, but this server keeps no stash")
            request = self.stash.restored(request)
        if request.provided is not None:
            passages = self.with_similarity(request.question, request.provided[: request.top_k])
            return Evidence(question=request.question, passages=passages)
        return steps.retrieve(
            self.search,
            request.principal,
            request.question,
            flt=request.filter,
            top_k=request.top_k,
            history=request.history,
            link=self.link,
            defaults=self.search_defaults,
        )

    def decide(self, evidence: Evidence) -> GateDecision:
        return steps.gate(
            evidence, self.threshold, self.midpoint, self.steepness, self.coverage_weight, self.embedder.multilingual
        )

    def draft(self, evidence: Evidence, style: str | None, history: list[str]) -> Draft:
        return steps.generate(self.generator, evidence, style, history)

    @staticmethod
    def cite(evidence: Evidence, decision: GateDecision, draft: Draft | None) -> Answer:
        return steps.cite(evidence, decision, draft)

    def run(self, request: SynthesisRequest) -> Answer:
        evidence = self.evidence(request)
        decision = self.decide(evidence)
        draft = self.draft(evidence, request.style, request.history) if decision.answerable else None
        return self.cite(evidence, decision, draft)

    def with_similarity(self, question: str, passages: list[Passage]) -> list[Passage]:
        """Provided passages scored against the question, so the gate can weigh them too."""
        if not passages:
            return []
        vectors = self.embedder.embed([question, *(p.text for p in passages)])
        similarity = vectors[1:] @ vectors[0]
        return [p.model_copy(update={"similarity": float(s)}) for p, s in zip(passages, similarity, strict=True)]


class SynthesisService:
    def __init__(self, *, runner: SynthesisRunner, conversations: ConversationStore, conversation_ttl_seconds: int):
        self.runner = runner
        self.conversations = conversations
        self.conversation_ttl = conversation_ttl_seconds

    @property
    def model_id(self) -> str:
        return self.runner.model_id

    def answer(
        self,
        principal: Principal,
        question: str,
        *,
        flt: SearchFilter | None = None,
        top_k: int = 5,
        style: str | None = None,
        conversation_id: str | None = None,
        provided: list[Passage] | None = None,
    ) -> Answer:
        user = owner_of(principal) or ""  # the open server naming no user: one anonymous user
        turns = self.conversations.get(principal.tenant, user, conversation_id) if conversation_id else []
        request = SynthesisRequest(
            principal=principal,
            question=question,
            filter=flt or SearchFilter(),
            top_k=top_k,
            style=style,
            history=[t.question for t in turns],
            provided=provided,
        )
        answer = self.runner.run(request)
        if conversation_id:
            turn = Turn(question=question, answer=answer.text)
            self.conversations.append(principal.tenant, user, conversation_id, turn, self.conversation_ttl)
        return answer

"""Synthesis in process: the steps of synthesis/steps.py run one after the other."""

from __future__ import annotations

from collections.abc import Callable

from ragmcp.domain.models import Principal, ScoredChunk, SearchFilter, Turn
from ragmcp.ports import ConversationStore, Embedder
from ragmcp.retrieval.service import SearchService
from ragmcp.synthesis import steps
from ragmcp.synthesis.models import Answer, Evidence, Passage


class SynthesisService:
    def __init__(
        self,
        *,
        search: SearchService,
        embedder: Embedder,
        generator: steps.Generator,
        conversations: ConversationStore,
        link: Callable[[ScoredChunk], str | None],
        threshold: float,
        midpoint: float,
        steepness: float,
        conversation_ttl_seconds: int,
    ):
        self.search = search
        self.embedder = embedder
        self.generator = generator
        self.conversations = conversations
        self.link = link
        self.threshold = threshold
        self.midpoint = midpoint
        self.steepness = steepness
        self.conversation_ttl = conversation_ttl_seconds

    @property
    def model_id(self) -> str:
        return self.generator.model_id

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
        turns = self.conversations.get(principal.tenant, conversation_id) if conversation_id else []
        history = [t.question for t in turns]
        if provided is not None:
            evidence = Evidence(question=question, passages=self.with_similarity(question, provided[:top_k]))
        else:
            evidence = steps.retrieve(
                self.search,
                principal,
                question,
                flt=flt or SearchFilter(),
                top_k=top_k,
                history=history,
                link=self.link,
            )
        decision = steps.gate(evidence, self.threshold, self.midpoint, self.steepness)
        draft = steps.generate(self.generator, evidence, style, history) if decision.answerable else None
        answer = steps.cite(evidence, decision, draft)
        if conversation_id:
            turn = Turn(question=question, answer=answer.text)
            self.conversations.append(principal.tenant, conversation_id, turn, self.conversation_ttl)
        return answer

    def with_similarity(self, question: str, passages: list[Passage]) -> list[Passage]:
        """Provided passages scored against the question, so the gate can weigh them too."""
        if not passages:
            return []
        vectors = self.embedder.embed([question, *(p.text for p in passages)])
        similarity = vectors[1:] @ vectors[0]
        return [p.model_copy(update={"similarity": float(s)}) for p, s in zip(passages, similarity, strict=True)]

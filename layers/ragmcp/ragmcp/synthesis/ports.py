"""The seams of the synthesis package: the model that drafts an answer (adapters: Bedrock, an
OpenAI-compatible endpoint; in process: the extractive generator) and where the steps run."""

from __future__ import annotations

from typing import Protocol

from ragmcp.synthesis.models import Answer, Draft, Passage, SynthesisRequest


class Generator(Protocol):
    model_id: str

    def generate(self, question: str, passages: list[Passage], style: str | None, history: list[str]) -> Draft: ...


class SynthesisRunner(Protocol):
    """Runs the synthesis steps for one request: in process, or on a state machine."""

    model_id: str

    def run(self, request: SynthesisRequest) -> Answer: ...

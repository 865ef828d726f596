"""Generators: extractive (no LLM, the embedded default) or any OpenAI-compatible endpoint."""

from __future__ import annotations

import re

import httpx
import numpy as np

from ragmcp.domain.errors import RagError
from ragmcp.ingest.summaries import sentences
from ragmcp.ports import Embedder
from ragmcp.synthesis.models import Draft, Passage

STYLE_SENTENCES = {"short": 2, "default": 3, "detailed": 5}
_WORD = re.compile(r"\w+", re.UNICODE)
_MIN_WORDS = 4


def sentence_count(style: str | None) -> int:
    return STYLE_SENTENCES.get(style or "default", STYLE_SENTENCES["default"])


class ExtractiveGenerator:
    """Composes the answer from the evidence sentences closest in meaning to the question."""

    model_id = "extractive"

    def __init__(self, embedder: Embedder):
        self.embedder = embedder

    def generate(self, question: str, passages: list[Passage], style: str | None, history: list[str]) -> Draft:
        candidates = [
            (i, s)
            for i, p in enumerate(passages)
            for s in sentences(p.text)
            if len(_WORD.findall(s)) >= _MIN_WORDS and not s.endswith("?")
        ]
        if not candidates:
            return Draft(text="", used=[], model=self.model_id)
        vectors = self.embedder.embed([question, *(s for _, s in candidates)])
        similarity = vectors[1:] @ vectors[0]
        terms = {w.lower() for w in _WORD.findall(question) if len(w) > 2}
        overlap = np.array([len(terms & {w.lower() for w in _WORD.findall(s)}) for _, s in candidates])
        score = similarity + 0.05 * np.minimum(overlap, 4) - 0.01 * np.array([i for i, _ in candidates])
        chosen: list[tuple[int, str]] = []
        for j in np.argsort(-score):
            i, text = candidates[int(j)]
            if all(text != t for _, t in chosen):
                chosen.append((i, text))
            if len(chosen) == sentence_count(style):
                break
        return Draft(text=" ".join(t for _, t in chosen), used=[i for i, _ in chosen], model=self.model_id)


SYSTEM_PROMPT = (
    "Answer only from the numbered passages. Cite each claim as [n]. "
    "If the passages do not answer the question, say so."
)


def grounded_prompt(question: str, passages: list[Passage], style: str | None, history: list[str]) -> str:
    """The user turn of a generator asked to answer from numbered passages only."""
    context = "\n\n".join(f"[{i + 1}] {p.title}\n{p.text}" for i, p in enumerate(passages))
    length = {"short": "in one or two sentences", "detailed": "thoroughly"}.get(style or "", "concisely")
    earlier = "Earlier questions in this conversation:\n" + "\n".join(history) + "\n\n" if history else ""
    return f"{earlier}Passages:\n{context}\n\nQuestion: {question}\nAnswer {length}."


def cited(text: str, passages: int) -> list[int]:
    """The passages (indexes) an answer cites as [n]."""
    return sorted({int(n) - 1 for n in re.findall(r"\[(\d+)\]", text) if 0 < int(n) <= passages})


class OpenAICompatibleGenerator:
    """Asks a chat-completions endpoint to answer from numbered passages only, citing them as [n]."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout: float = 60.0):
        self.base_url = base_url.rstrip("/")
        self.model_id = model
        self.api_key = api_key
        self.timeout = timeout

    def generate(self, question: str, passages: list[Passage], style: str | None, history: list[str]) -> Draft:
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": grounded_prompt(question, passages, style, history)},
        ]
        headers = {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            response = httpx.post(
                f"{self.base_url}/chat/completions",
                json={"model": self.model_id, "messages": messages, "temperature": 0},
                headers=headers,
                timeout=self.timeout,
            )
            response.raise_for_status()
            text = response.json()["choices"][0]["message"]["content"].strip()
        except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
            raise RagError(f"generator unavailable: {type(exc).__name__}") from None
        return Draft(text=text, used=cited(text, len(passages)), model=self.model_id)

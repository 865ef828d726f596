"""A generator on any OpenAI-compatible chat-completions endpoint (RAGMCP_GENERATOR_URL)."""

from __future__ import annotations

import httpx

from ragmcp.domain.errors import RagError
from ragmcp.synthesis.generators import SYSTEM_PROMPT, cited, grounded_prompt
from ragmcp.synthesis.models import Draft, Passage


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

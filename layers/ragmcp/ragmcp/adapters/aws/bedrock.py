"""Bedrock: the embedder (Titan Text Embeddings v2, InvokeModel), the generator (Converse) and the
optional reranker (the Rerank API of bedrock-agent-runtime)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from botocore.exceptions import BotoCoreError, ClientError

from ragmcp.domain.errors import RagError
from ragmcp.synthesis.generators import SYSTEM_PROMPT, cited, grounded_prompt
from ragmcp.synthesis.models import Draft, Passage

BedrockClient = Any  # boto3 bedrock-runtime client
MULTILINGUAL_MODELS = ("amazon.titan-embed-text-v2", "cohere.embed-multilingual")
"""Bedrock embedding models (id prefixes) trained on many languages, CJK among them (Embedder.multilingual)."""


def failure(what: str, exc: Exception) -> RagError:
    code = exc.response.get("Error", {}).get("Code", "") if isinstance(exc, ClientError) else type(exc).__name__
    return RagError(f"{what} unavailable: {code}")


def titan_request(text: str, dimension: int) -> str:
    """The InvokeModel body of Titan Text Embeddings v2: one text, unit-length output."""
    return json.dumps({"inputText": text, "dimensions": dimension, "normalize": True})


class BedrockEmbedder:
    """One InvokeModel call per text (Titan v2 takes one input), `concurrency` of them at a time."""

    def __init__(self, client: BedrockClient, model_id: str, dimension: int, concurrency: int = 8):
        self.client = client
        self.model_id = model_id
        self.dimension = dimension
        self.model_sha256 = hashlib.sha256(f"bedrock:{model_id}:{dimension}:normalized".encode()).hexdigest()
        self.multilingual = model_id.startswith(MULTILINGUAL_MODELS)
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="embed")

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, vector in enumerate(self._pool.map(self._embed_one, texts)):
            out[i] = vector
        return out

    embed_queries = embed

    def _embed_one(self, text: str) -> np.ndarray:
        try:
            response = self.client.invoke_model(
                modelId=self.model_id,
                body=titan_request(text, self.dimension),
                contentType="application/json",
                accept="application/json",
            )
        except (BotoCoreError, ClientError) as exc:
            raise failure("embedder", exc) from None
        vector = np.asarray(json.loads(response["body"].read())["embedding"], dtype=np.float32)
        if vector.shape != (self.dimension,):
            raise RagError(f"embedder returned {vector.shape[0]} dimensions, expected {self.dimension}")
        norm = float(np.linalg.norm(vector))
        return vector / norm if norm else vector


class BedrockGenerator:
    """Answers from numbered passages with the Converse API, citing them as [n]."""

    def __init__(self, client: BedrockClient, model_id: str, max_tokens: int = 1024):
        self.client = client
        self.model_id = model_id
        self.max_tokens = max_tokens

    def generate(self, question: str, passages: list[Passage], style: str | None, history: list[str]) -> Draft:
        try:
            response = self.client.converse(
                modelId=self.model_id,
                system=[{"text": SYSTEM_PROMPT}],
                messages=[{"role": "user", "content": [{"text": grounded_prompt(question, passages, style, history)}]}],
                inferenceConfig={"maxTokens": self.max_tokens, "temperature": 0.0},
            )
        except (BotoCoreError, ClientError) as exc:
            raise failure("generator", exc) from None
        blocks = response["output"]["message"]["content"]
        text = "".join(block.get("text", "") for block in blocks).strip()
        return Draft(text=text, used=cited(text, len(passages)), model=self.model_id)


def rerank_request(query: str, texts: Sequence[str], model_arn: str) -> dict[str, Any]:
    """The Rerank call's arguments: the question against every passage, a score for each."""
    return {
        "queries": [{"type": "TEXT", "textQuery": {"text": query}}],
        "sources": [
            {"type": "INLINE", "inlineDocumentSource": {"type": "TEXT", "textDocument": {"text": text}}}
            for text in texts
        ],
        "rerankingConfiguration": {
            "type": "BEDROCK_RERANKING_MODEL",
            "bedrockRerankingConfiguration": {
                "numberOfResults": len(texts),
                "modelConfiguration": {"modelArn": model_arn},
            },
        },
    }


class BedrockReranker:
    """Bedrock's Rerank API (bedrock-agent-runtime): one call scores every passage against the question."""

    def __init__(self, client: BedrockClient, model_arn: str):
        self.client = client
        self.model_arn = model_arn
        self.model_id = model_arn.rpartition("/")[2]

    def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
        if not texts:
            return []
        try:
            response = self.client.rerank(**rerank_request(query, texts, self.model_arn))
        except (BotoCoreError, ClientError) as exc:
            raise failure("reranker", exc) from None
        scores = [0.0] * len(texts)
        for result in response["results"]:
            scores[result["index"]] = float(result["relevanceScore"])
        return scores

"""`ragmcp eval-qa` and `ragmcp eval` score the search the server runs: the candidate counts of
SearchSettings (fts_k, vec_k), its floor, and a named-section window no wider than a tool's search
sees. A passage ranking of eval-qa is the ranking rag_search returns for the same question, through
the mindset server's MCP tool; a search that fetched 300 candidates a side (what eval-qa did) ranks
other passages first on the same index."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client import Client

from ragmcp.bootstrap import build_registry, build_services
from ragmcp.domain.models import Chunk, Document, IndexHit, Principal, SearchFilter
from ragmcp.mcp.caller import Caller, current_caller
from ragmcp.mcp.server import build_server
from ragmcp.retrieval.service import SearchRequest
from ragmcp.security.identity import open_credential
from ragmcp.services import Services
from ragmcp_bench import evaluation, qa_eval
from tests import fakes

N = 300
KEYWORD = {"a": 10.0, "b": 8.0} | {f"c{i}": 5.9 - 5.8 * i / N for i in range(N - 2)}
"""bm25 of each chunk, whatever the question: chunk a first, b second, then a long tail."""
VECTOR = {"b": 0.60, "a": 0.52} | {f"c{i}": 0.55 - 0.55 * i / N for i in range(N - 2)}
"""Cosines: b first; a about 18th, a little above the 50th cosine and far above the corpus's worst."""
QUESTION = "when does the flood tide reach the harbour bar"


class Disagreeing(fakes.MemorySearchIndex):
    """The in-memory index whose two sides disagree on a and b: fused over the 50 candidates a side the
    server fetches, b wins; over 300 a side, a does (the vector side's minimum falls to 0)."""

    def search_fts(self, principal: Principal, query: str, flt: SearchFilter, k: int, **_: Any) -> list[IndexHit]:
        return self._top(KEYWORD, flt, k)

    def search_vector(self, principal: Principal, vector: Any, flt: SearchFilter, k: int, **_: Any) -> list[IndexHit]:
        return self._top(VECTOR, flt, k)

    @staticmethod
    def _top(scores: dict[str, float], flt: SearchFilter, k: int) -> list[IndexHit]:
        wanted = flt.chunk_ids
        ranked = sorted(((s, c) for c, s in scores.items() if wanted is None or c in wanted), reverse=True)
        return [IndexHit(chunk_id=c, raw_score=s) for s, c in ranked[:k]]


@pytest.fixture
def services(tmp_path: Path) -> Services:
    built = build_services(fakes.settings(tmp_path / "data"), replace(fakes.adapters(), index=Disagreeing()))
    doc = Document(
        tenant=qa_eval.TENANT,
        doc_id="harbour",
        source="s",
        path="harbour.md",
        title="Harbour",
        file_name="harbour.md",
        file_type="md",
        content_hash="h",
    )
    chunks = [
        Chunk(chunk_id=c, doc_id=doc.doc_id, ordinal=i, text=QUESTION, headline=f"Harbour > Part {i}", summary="")
        for i, c in enumerate(KEYWORD)
    ]
    built.index.replace_document(doc, chunks, built.embedder.embed([c.text for c in chunks]))
    return built


async def _rag_search(services: Services, question: str) -> list[str]:
    current_caller.set(Caller(credential=open_credential(qa_eval.TENANT), identities=services.identities))
    async with Client(build_server(build_registry(services), "mindset")) as client:
        result = await client.call_tool("rag_search", {"search_phrases": [question]})
    assert not result.is_error, result
    return [s["segment_uid"] for s in json.loads(result.content[0].text)["segments"]]


def _deeper(services: Services, question: str, top_k: int) -> list[str]:
    knobs: dict[str, Any] = services.settings.search.defaults() | {"fts_k": 300, "vec_k": 300}
    request = SearchRequest(phrases=[question], top_k=top_k, **knobs)
    return [h.chunk.chunk_id for h in services.search.search(Principal(tenant=qa_eval.TENANT), request).hits]


def test_eval_qa_ranks_passages_as_rag_search_returns_them(services: Services) -> None:
    shown = services.settings.search.mindset_segments
    served = anyio.run(_rag_search, services, QUESTION)
    ranked = [h.chunk.chunk_id for h in qa_eval.passages(services, QUESTION)]
    assert len(served) == shown and len(ranked) == qa_eval.PASSAGE_DEPTH
    assert ranked[:shown] == served
    assert served[0] == "b"
    assert _deeper(services, QUESTION, qa_eval.DEPTH)[0] == "a"  # what eval-qa measured before: not what ships


def test_the_default_mode_of_eval_passes_the_servers_search_settings() -> None:
    settings = fakes.settings(Path("/nonexistent"), fts_k=40, vec_k=60)
    knobs = evaluation.default_mode(settings).knobs
    assert knobs == settings.search.defaults()
    assert (knobs["fts_k"], knobs["vec_k"]) == (40, 60)
    for name in ("hybrid", "hybrid_k60", "hybrid_scores"):
        shipped = evaluation.SHIPPED
        assert (evaluation.MODES[name].knobs["fts_k"], evaluation.MODES[name].knobs["vec_k"]) == (
            shipped.fts_k,
            shipped.vec_k,
        )

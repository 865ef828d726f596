"""The server's search settings reach every profile that searches with the server's defaults.

With `RAGMCP_SEARCH_MODE=fts`, words that no document has find nothing through mindset's
rag_search, kb_search and ragbox's search_documents, and ragbox's query_knowledge sees no passage
at all; with the relevance floor off, the default hybrid search still returns the nearest chunks
from its vector side, and with the shipped floor it returns nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from ragmcp.bootstrap import Services, build_registry, build_services
from ragmcp.http import create_app
from ragmcp.settings import Settings
from ragmcp.synthesis.steps import NO_PASSAGE

from .conftest import ContractClient

UNMATCHED = "zqxvwy flurbotank"
"""Two words that no shared document or sample contains."""


@pytest.fixture(scope="module")
def keyword_only(contract_data: Path, contract_services: Services) -> Iterator[ContractClient]:
    """A second server over the contract index, configured to search by keywords only (no floor)."""
    settings = Settings(
        data_dir=contract_data / "index", host="testserver", search_mode="fts", open=True, relevance_floor=0
    )
    services = build_services(settings)
    with TestClient(create_app(services, build_registry(services)), base_url="http://testserver") as http:
        yield ContractClient(http, services)


def found(client: ContractClient) -> dict[str, Any]:
    """What each profile's search and ragbox's answer return for UNMATCHED."""
    mindset = client.payload("rag_search", {"search_phrases": [UNMATCHED]}, path="/mcp/mindset")
    kb = client.payload("kb_search", {"query": UNMATCHED}, path="/mcp/kb")
    ragbox = client.payload("search_documents", {"query": UNMATCHED}, path="/mcp/ragbox")
    answer = client.payload("query_knowledge", {"query": UNMATCHED}, path="/mcp/ragbox")
    return {
        "mindset": len(mindset["segments"]),
        "kb": len(kb["results"]),
        "ragbox": len(ragbox),
        "answer": answer["silence_reason"],
    }


def test_profiles_search_with_the_server_s_mode(unfloored: ContractClient, keyword_only: ContractClient) -> None:
    semantic, keywords = found(unfloored), found(keyword_only)
    assert semantic["mindset"] > 0 and semantic["kb"] > 0 and semantic["ragbox"] > 0
    assert semantic["answer"].startswith(("Too little coverage", "No passage is close enough"))
    assert keywords == {"mindset": 0, "kb": 0, "ragbox": 0, "answer": NO_PASSAGE}


def test_profiles_search_above_the_server_s_relevance_floor(contract: ContractClient) -> None:
    """The shipped settings: words no document holds find nothing in any profile (hybrid_scores would
    otherwise return the nearest chunks, however far), and the answer says no passage was close."""
    assert found(contract) == {"mindset": 0, "kb": 0, "ragbox": 0, "answer": NO_PASSAGE}

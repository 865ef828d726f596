"""The server's search settings reach every profile that searches with the server's defaults.

With `RAGMCP_SEARCH_MODE=fts`, words that no document has find nothing through mindset's
rag_search, kb_search and ragbox's search_documents, and ragbox's query_knowledge sees no passage
at all; with the default hybrid search the vector side still returns the nearest chunks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from ragmcp.bootstrap import Services, build_services
from ragmcp.http import create_app
from ragmcp.mcp.server import build_registry
from ragmcp.settings import Settings

from .conftest import ContractClient

UNMATCHED = "zqxvwy flurbotank"
"""Two words that no shared document or sample contains."""


@pytest.fixture(scope="module")
def keyword_only(contract_data: Path, contract_services: Services) -> Iterator[ContractClient]:
    """A second server over the contract index, configured to search by keywords only."""
    settings = Settings(data_dir=contract_data / "index", host="testserver", search_mode="fts", open=True)
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


def test_profiles_search_with_the_server_s_mode(contract: ContractClient, keyword_only: ContractClient) -> None:
    hybrid, keywords = found(contract), found(keyword_only)
    assert hybrid["mindset"] > 0 and hybrid["kb"] > 0 and hybrid["ragbox"] > 0
    assert hybrid["answer"] == "No documents in the vault contain information about this topic."
    assert keywords == {
        "mindset": 0,
        "kb": 0,
        "ragbox": 0,
        "answer": "No documents available to you match this question.",
    }

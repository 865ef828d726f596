"""The contracts' responses as JSON Schema (draft 2020-12): schemas/<profile>/<tool>.response.json, written
from the example responses in ../shared/contracts/*.md (what every example has is required, what only some
have is optional, every field typed). The contract tests validate each payload they receive with them;
test_response_schemas.py checks that each schema accepts its contract's examples and rejects altered ones."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from tests.contract_examples import contract_text, json_blocks

SCHEMAS = Path(__file__).resolve().parent / "schemas"
CONTRACTS = {
    "chat": "chat-app-rag-mcp.md",
    "mindset": "mindset-rag-mcp.md",
    "ragbox": "ragbox-mcp.md",
    "proxysql": "proxysql-rag-mcp.md",
}


@cache
def _registry() -> Registry:
    documents = [(f"{p.parent.name}/{p.name}", json.loads(p.read_text())) for p in sorted(SCHEMAS.glob("*/*.json"))]
    return Registry().with_resources(
        (uri, Resource.from_contents(schema, default_specification=DRAFT202012)) for uri, schema in documents
    )


def response_schemas() -> list[tuple[str, str]]:
    """(profile, tool) of every response schema."""
    return [(p.parent.name, p.name.removesuffix(".response.json")) for p in sorted(SCHEMAS.glob("*/*.response.json"))]


@cache
def validator(profile: str, tool: str) -> Draft202012Validator:
    return Draft202012Validator(_registry().contents(f"{profile}/{tool}.response.json"), registry=_registry())


def item_fields(profile: str, tool: str, array: str) -> frozenset[str]:
    """Every field the contract gives an item of the result's `array`, required or not."""
    schema = _registry().contents(f"{profile}/{tool}.response.json")
    return frozenset(schema["properties"][array]["items"]["properties"])


def problems(payload: Any, profile: str, tool: str) -> list[str]:
    return [f"{e.json_path}: {e.message}" for e in validator(profile, tool).iter_errors(payload)]


def assert_valid(payload: Any, profile: str, tool: str) -> None:
    """The payload a tool answered with is what its contract's schema allows."""
    found = problems(payload, profile, tool)
    assert not found, f"{profile}/{tool}: {found}"


def _unfenced_responses(profile: str) -> list[Any]:
    """The JSON-RPC responses written without code fences: each a `{` at the start of a line."""
    text = contract_text(profile)
    decoder = json.JSONDecoder()
    found = [decoder.raw_decode(text, m.start())[0] for m in re.finditer(r"^\{\n", text, re.M)]
    return [block for block in found if "result" in block]


def contract_examples() -> list[tuple[str, str, Any]]:
    """(profile, tool, payload) of every example response in the contract documents."""
    found: list[tuple[str, str, Any]] = []
    chat = {
        "resources": "rag_discover_resources",
        "hits": "rag_get_raw_results",
        "answer": "rag_get_synthesized_results",
    }
    for block in json_blocks("chat"):
        if isinstance(block.get("results"), dict):
            found.append(("chat", next(chat[k] for k in chat if k in block["results"]), block))
    for block in _unfenced_responses("mindset"):
        tool = "rag_search" if "segments" in block["result"] else "verify_document_access"
        found.append(("mindset", tool, block["result"]))
    ragbox = {1: "search_documents", 2: "get_document", 3: "query_knowledge"}
    for block in json_blocks("ragbox"):
        if "result" in block:
            found.append(("ragbox", ragbox[block["id"]], json.loads(block["result"]["content"][0]["text"])))
    tools = iter(
        ["rag.search_fts", "rag.search_vector", "rag.search_hybrid", "rag.get_chunks", "rag.get_docs"]
        + ["rag.fetch_from_source", "rag.admin.stats", "rag.admin.sync"]
    )
    for block in json_blocks("proxysql"):
        if {"results", "chunks", "docs", "rows", "sources", "accepted"} & set(block):
            found.append(("proxysql", next(tools), block))
    return found

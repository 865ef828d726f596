"""Every tool is a top-level function of its profile's module, registered with `@tool`, and its
definition tells an agent what each argument means and where its limits lie."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import pytest

import ragmcp.mcp
from ragmcp.mcp.outputs import OUTPUTS
from ragmcp.mcp.registry import tool
from ragmcp.mcp.server import PROFILES, tool_specs

SPECS = {spec.name: spec for spec in tool_specs()}
MCP_PACKAGE = Path(ragmcp.mcp.__file__).parent

# Limits the contracts state (contracts/*.md), which must be in the input schema, not only in prose.
CONTRACT_LIMITS = [
    ("rag_search", "search_phrases", "maxItems", 5),
    ("rag_search", "search_phrases", "minItems", 1),
    ("search_documents", "limit", "maximum", 20),
    ("search_documents", "limit", "minimum", 1),
    ("list_documents", "limit", "maximum", 100),
    ("kb_search", "top", "maximum", 100),
    # proxysql's caps (section 1.3): a larger k or candidate count is cut to the cap, a longer query refused
    ("rag.search_fts", "k", "maximum", 50),
    ("rag.search_vector", "k", "maximum", 50),
    ("rag.search_hybrid", "k", "maximum", 50),
    ("rag.search_fts", "offset", "maximum", 500),
    ("rag.search_fts", "query", "maxLength", 8192),
    ("rag.search_hybrid", "query", "maxLength", 8192),
    ("rag.search_vector", "query_text", "maxLength", 8192),
    ("rag.get_chunks", "chunk_ids", "maxItems", 500),
]


def undescribed(schema: dict[str, Any], defs: dict[str, Any], where: str) -> list[str]:
    """The properties, nested ones included, that have no description."""
    missing = []
    for name, prop in schema.get("properties", {}).items():
        path = f"{where}.{name}"
        if not prop.get("description"):
            missing.append(path)
        for part in [prop, prop.get("items", {}), *prop.get("anyOf", [])]:
            if "$ref" in part:
                missing += undescribed(defs[part["$ref"].rsplit("/", 1)[-1]], defs, path)
            elif part.get("type") == "object":
                missing += undescribed(part, defs, path)
    return missing


def test_every_profile_has_tools_and_every_tool_a_profile() -> None:
    assert {spec.profile for spec in SPECS.values()} == set(PROFILES)
    assert len(SPECS) == 26


@pytest.mark.parametrize("name", sorted(SPECS))
def test_a_tool_is_a_top_level_function_of_its_profile_module(name: str) -> None:
    spec = SPECS[name]
    function = spec.function
    assert inspect.iscoroutinefunction(function)
    assert function.__module__ == f"ragmcp.mcp.{spec.profile}"
    assert function.__qualname__ == function.__name__, "defined inside another function"
    assert getattr(inspect.getmodule(function), function.__name__) is function


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_argument_is_described(name: str) -> None:
    schema = SPECS[name].args.model_json_schema()
    assert undescribed(schema, schema.get("$defs", {}), name) == []


@pytest.mark.parametrize("name", sorted(n for n, s in SPECS.items() if s.structured))
def test_a_structured_payload_declares_its_output_schema(name: str) -> None:
    assert OUTPUTS[name]["type"] == "object"


@pytest.mark.parametrize(("name", "argument", "keyword", "value"), CONTRACT_LIMITS)
def test_contract_limits_are_in_the_schema(name: str, argument: str, keyword: str, value: int) -> None:
    assert SPECS[name].args.model_json_schema()["properties"][argument][keyword] == value


NESTED_CONTRACT_LIMITS = [
    ("rag.search_hybrid", "FuseParams", "fts_k", 500),
    ("rag.search_hybrid", "FuseParams", "vec_k", 500),
    ("rag.search_hybrid", "FtsThenVecParams", "candidates_k", 500),
    ("rag.fetch_from_source", "FetchLimits", "max_rows", 100),
]


@pytest.mark.parametrize(("name", "model", "argument", "maximum"), NESTED_CONTRACT_LIMITS)
def test_nested_contract_caps_are_in_the_schema(name: str, model: str, argument: str, maximum: int) -> None:
    schema = SPECS[name].args.model_json_schema()
    assert schema["$defs"][model]["properties"][argument]["maximum"] == maximum


def test_the_undescribed_check_finds_a_nested_argument_without_a_description() -> None:
    from pydantic import BaseModel, Field

    class Inner(BaseModel):
        column: str

    class Args(BaseModel):
        where: list[Inner] = Field(description="Conditions.")

    schema = Args.model_json_schema()
    assert undescribed(schema, schema["$defs"], "t") == ["t.where.column"]


def test_a_tool_name_cannot_be_registered_twice() -> None:
    existing = next(iter(SPECS.values()))
    with pytest.raises(ValueError, match="defined twice"):
        tool(existing.name, profile=existing.profile, description="again")(existing.function)


def test_nothing_in_the_mcp_package_imports_the_composition_root() -> None:
    importers = []
    for path in MCP_PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module] if isinstance(node, ast.ImportFrom) else []
            names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if any(n and n.startswith("ragmcp.bootstrap") for n in names):
                importers.append(path.name)
    assert importers == []


def test_a_bound_tool_names_its_dependencies_limits_in_its_description() -> None:
    limits = type("Limits", (), {"part_kib": 7, "upload_mib": 3, "upload_minutes": 9})()
    assert "at most 7 KiB decoded" in SPECS["kb_upload_chunk"].bound(limits).description
    start = SPECS["kb_upload_start"].bound(limits).description
    assert "up to 3 MiB" in start and "within 9 minutes" in start and "Answers {upload_id}." in start

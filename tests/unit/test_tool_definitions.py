"""Every tool is a top-level function of its profile's module, registered with `@tool`, and its
definition tells an agent what each argument means and where its limits lie."""

from __future__ import annotations

import ast
import copy
import inspect
import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

import ragmcp.mcp
from ragmcp.mcp.outputs import OUTPUTS
from ragmcp.mcp.registry import catalogue, tool
from ragmcp.mcp.server import PROFILES, tool_specs

SPECS = {spec.name: spec for spec in tool_specs()}
MCP_PACKAGE = Path(ragmcp.mcp.__file__).parent
CONTRACT_SCHEMAS = Path(__file__).resolve().parents[1] / "contracts" / "schemas"

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


def _resolve(schema: dict[str, Any], profile: str, file: str = "definitions.json") -> dict[str, Any]:
    """A schema with its top-level `$ref` followed (a bare `#/...` is in `file`, where the schema came from);
    the referring schema's own properties and required fields are added to those of the one it refers to."""
    while "$ref" in schema:
        target, _, pointer = schema["$ref"].partition("#")
        file = target or file
        document = json.loads((CONTRACT_SCHEMAS / profile / file).read_text())
        for key in filter(None, pointer.split("/")):
            document = document[key]
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        schema = {
            **document,
            **rest,
            "properties": {**document.get("properties", {}), **rest.get("properties", {})},
            "required": [*document.get("required", []), *rest.get("required", [])],
        }
    return schema


def contract_fields(name: str) -> tuple[dict[str, Any], set[str]]:
    """The top-level fields of a tool's contract response (tests/contracts/schemas) and those it requires;
    a `oneOf` answers with the fields of every branch and requires what all of them require."""
    [path] = CONTRACT_SCHEMAS.glob(f"*/{name}.response.json")
    profile = path.parent.name
    schema = _resolve(json.loads(path.read_text()), profile, path.name)
    branches = [_resolve(b, profile, path.name) for b in schema.get("oneOf", [schema])]
    fields = {k: _resolve(v, profile) for b in branches for k, v in b.get("properties", {}).items()}
    return fields, set.intersection(*(set(b.get("required", [])) for b in branches))


def _types(schema: dict[str, Any]) -> set[str]:
    kind = schema.get("type", [])
    return {kind} if isinstance(kind, str) else set(kind)


# Fields a tool declares that its response schema has not: each with where the contract or README gives it.
BEYOND_THE_SCHEMAS = {
    "kb_search": {"warning"},  # README: "kb_search adds a top-level warning" while the first sync fills
    # chat-app-rag-mcp.md: "`results` plus optional `meta_data` and `artifacts`"
    "rag_discover_resources": {"artifacts"},
    "rag_get_raw_results": {"artifacts"},
    "rag_get_synthesized_results": {"artifacts"},
}


def output_schema_drift(
    output: dict[str, Any], fields: dict[str, Any], required: set[str], beyond: frozenset[str] = frozenset()
) -> list[str]:
    """How a declared output schema differs from its contract: a field the contract does not have, a field it
    requires that is not declared, or a declared type that leaves out the type the contract gives."""
    declared = output["properties"]
    drift = [f"{n}: not in the contract" for n in declared if n not in fields and n not in beyond]
    drift += [f"{n}: required by the contract, not declared" for n in sorted(required - set(declared))]
    drift += [
        f"{n}: declared {sorted(_types(d))}, contract {sorted(_types(fields[n]))}"
        for n, d in declared.items()
        if n in fields and not _types(fields[n]) <= _types(d)
    ]
    return drift + [f"{n}: required but not declared" for n in output["required"] if n not in declared]


@pytest.mark.parametrize("name", sorted(n for n, s in SPECS.items() if s.structured))
def test_a_structured_payload_declares_the_fields_of_its_contract(name: str) -> None:
    beyond = frozenset(BEYOND_THE_SCHEMAS.get(name, ()))
    assert output_schema_drift(OUTPUTS[name], *contract_fields(name), beyond) == []


def test_the_drift_check_finds_a_field_removed_from_an_output_schema() -> None:
    fields, required = contract_fields("kb_search")
    output = copy.deepcopy(OUTPUTS["kb_search"])
    del output["properties"]["count"]
    output["required"].remove("count")
    output["properties"]["mode"]["type"] = "integer"
    assert output_schema_drift(output, fields, required, frozenset({"warning"})) == [
        "count: required by the contract, not declared",
        "mode: declared ['integer'], contract ['string']",
    ]


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
    again = types.ModuleType("again")

    async def twin(deps: Any, caller: Any, args: Any) -> dict:
        return {}

    twin.__annotations__.update(deps=existing.deps_type, args=existing.args)  # what @tool reads
    again.twin = tool(existing.name, profile=existing.profile, description="again")(twin)
    home = sys.modules[existing.function.__module__]
    assert catalogue([home])[existing.name] is existing  # defining a tool registers nothing by itself
    with pytest.raises(ValueError, match="defined twice"):
        catalogue([home, again])


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


def output_schema_problems(schema: dict[str, Any]) -> list[str]:
    """What makes an output schema unusable: not a valid JSON Schema (a misspelt type, a keyword of the
    wrong shape), or a required field it does not describe."""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return [f"invalid: {exc.message}"]
    return [f"{n}: required but not a property" for n in schema.get("required", []) if n not in schema["properties"]]


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_every_output_schema_is_a_valid_json_schema(name: str) -> None:
    assert output_schema_problems(SPECS[name].definition.output_schema or {}) == []


def test_the_output_schema_check_finds_a_misspelt_type_and_an_undeclared_field() -> None:
    misspelt = copy.deepcopy(OUTPUTS["kb_search"])
    misspelt["properties"]["count"]["type"] = "int"
    assert output_schema_problems(misspelt)[0].startswith("invalid: 'int' is not valid")
    undeclared = copy.deepcopy(OUTPUTS["kb_search"])
    undeclared["required"].append("hits")
    assert output_schema_problems(undeclared) == ["hits: required but not a property"]

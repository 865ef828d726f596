"""Every tool whose payload goes out as structuredContent declares an outputSchema (the contract
tests validate each payload they receive against it); ragbox's text-only tools declare none. That each
is a valid JSON Schema is checked in tests/unit/test_tool_definitions.py."""

from __future__ import annotations

from ragmcp.bootstrap import build_registry
from ragmcp.mcp.outputs import OUTPUTS


def test_every_structured_tool_has_an_output_schema_and_no_other_does(contract):
    listed = {t["name"]: t for t in contract.rpc("tools/list", {}).json()["result"]["tools"]}
    registry = build_registry(contract.services)
    structured = {name for name, spec in registry.tools.items() if spec.structured}
    assert set(OUTPUTS) == structured
    assert {"search_documents", "get_document", "query_knowledge", "list_documents"}.isdisjoint(structured)
    for name, tool in listed.items():
        if name in structured:
            assert tool["outputSchema"] == OUTPUTS[name]
        else:
            assert "outputSchema" not in tool, name

"""`ragmcp serve` over the shared documents, driven by the MCP Inspector CLI (a real Node MCP client).

Every call runs `node inspector --cli --transport http --server-url URL --method ... --format json`,
so stdout is one JSON object (`{"result": ...}`) and a failure is a non-zero exit with one JSON
envelope on stderr (`{"error": {"code": ..., "message": ...}}`).  Exit codes (inspector 2.12.0):
0 ok, 1 error (a JSON-RPC error from the server included), 5 the tool returned isError, 6 an
unportable tool schema under --strict.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.contracts.response_schemas import item_fields

NODE_MODULES = Path(__file__).resolve().parent / "node" / "node_modules"
NODE = NODE_MODULES / ".bin" / "node"
INSPECTOR = NODE_MODULES / "@modelcontextprotocol" / "inspector" / "clients" / "launcher" / "build" / "index.js"
TIMEOUT = 120

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not (NODE.exists() and INSPECTOR.exists()),
        reason=f"MCP Inspector CLI not installed under {NODE_MODULES} (run `make node-tools`)",
    ),
]

SEGMENT_FIELDS = item_fields("mindset", "rag_search", "segments")
# The contract's headers, exactly as its curl example sends them.
CONTRACT_HEADERS = {
    "Authorization": "Bearer your-api-key",
    "x-user-id": "user@example.com",
    "x-human-uid": "human_123456789",
    "x-session-tags": '["department:sales","premium_access"]',
}


@pytest.fixture(scope="module")
def inspector_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throwaway HOME: the inspector keeps its catalog and storage under ~/.mcp-inspector."""
    return tmp_path_factory.mktemp("inspector-home")


@pytest.fixture
def inspector(inspector_home: Path):
    def run(url: str, method: str, *args: str, headers: dict[str, str] | None = None):
        header_args: list[str] = []
        for name, value in (CONTRACT_HEADERS if headers is None else headers).items():
            header_args += ["--header", f"{name}: {value}"]
        command = [
            str(NODE),
            str(INSPECTOR),
            "--cli",
            "--transport",
            "http",
            "--server-url",
            url,
            "--method",
            method,
            *args,
            *header_args,
            "--format",
            "json",
        ]
        env = {
            **os.environ,
            # Node 22 first, so any `#!/usr/bin/env node` the inspector spawns gets it too.
            "PATH": f"{NODE.parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "HOME": str(inspector_home),
            "NO_COLOR": "1",
        }
        return subprocess.run(
            command, capture_output=True, text=True, timeout=TIMEOUT, env=env, cwd=inspector_home, check=False
        )

    return run


def ok_result(completed: subprocess.CompletedProcess) -> dict:
    output = f"exit {completed.returncode}\nstdout: {completed.stdout}\nstderr: {completed.stderr}"
    assert completed.returncode == 0, output
    return json.loads(completed.stdout)["result"]


def error_envelope(completed: subprocess.CompletedProcess) -> dict:
    """The inspector's error envelope: the last JSON line on stderr."""
    lines = [line for line in completed.stderr.splitlines() if line.startswith("{")]
    assert lines, f"no JSON error envelope on stderr: {completed.stderr!r}"
    return json.loads(lines[-1])["error"]


def assert_segment(seg: dict) -> None:
    assert set(seg) == SEGMENT_FIELDS
    for key in SEGMENT_FIELDS:
        assert isinstance(seg[key], str) and seg[key], key


def test_tools_list_shows_rag_search_with_its_input_schema(served_documents, inspector):
    # --strict: exit 6 if the inspector finds an error-severity tool-schema portability problem.
    result = ok_result(inspector(served_documents.url, "tools/list", "--strict"))
    tools = {t["name"]: t for t in result["tools"]}
    assert "rag_search" in tools
    tool = tools["rag_search"]
    assert tool["description"]
    assert tool["annotations"]["readOnlyHint"] is True
    schema = tool["inputSchema"]
    assert schema["type"] == "object"
    assert schema["required"] == ["search_phrases"]
    assert schema.get("additionalProperties") is False
    assert set(schema["properties"]) == {"search_phrases"}
    phrases = schema["properties"]["search_phrases"]
    assert (phrases["type"], phrases["minItems"], phrases["maxItems"]) == ("array", 1, 5)
    assert phrases["items"]["type"] == "string"


def test_tools_call_returns_contract_segments_with_the_duck_page_first(served_documents, inspector):
    completed = inspector(
        served_documents.url,
        "tools/call",
        "--tool-name",
        "rag_search",
        "--tool-arg",
        'search_phrases=["ducks are aquatic birds"]',
    )
    result = ok_result(completed)
    assert result["isError"] is False
    structured = result["structuredContent"]
    assert structured["status"] == "success"
    segments = structured["segments"]
    assert 1 <= len(segments) <= 20
    for seg in segments:
        assert_segment(seg)
    top = segments[0]
    assert top["source_file_name"] == "wiki_duck.html"
    assert top["source_file_type"] == "html"
    # The same payload as text content, and lifted to the top of the result as the contract shows it.
    assert json.loads(result["content"][0]["text"]) == structured
    assert (result["status"], result["segments"]) == ("success", segments)
    original = httpx.get(top["source_url"], timeout=30)
    assert original.status_code == 200
    assert b"duck" in original.content.lower()


def test_empty_phrase_list_is_a_jsonrpc_error_and_a_nonzero_exit(served_documents, inspector):
    completed = inspector(
        served_documents.url, "tools/call", "--tool-name", "rag_search", "--tool-arg", "search_phrases=[]"
    )
    # Exit 1 with code "error" is how the inspector reports a JSON-RPC error response; a tool
    # result with isError:true would be exit 5 ("tool_is_error") instead.
    assert completed.returncode == 1, completed.stderr
    assert completed.stdout.strip() == ""
    error = error_envelope(completed)
    assert error["code"] == "error"
    assert error["message"].startswith("Invalid params: search_phrases"), error
    assert "at least 1 item" in error["message"]


def test_session_tags_header_reaches_the_server(served_documents, inspector):
    completed = inspector(
        served_documents.url,
        "tools/call",
        "--tool-name",
        "rag_search",
        "--tool-arg",
        'search_phrases=["duck"]',
        headers={**CONTRACT_HEADERS, "x-session-tags": "not json"},
    )
    assert completed.returncode == 1, completed.stderr
    error = error_envelope(completed)
    assert error["message"] == "Invalid params: x-session-tags must be a JSON array of strings"


def test_profile_endpoint_through_the_inspector(served_documents, inspector):
    profile_url = served_documents.url + "/mindset"
    completed = inspector(
        profile_url,
        "tools/call",
        "--tool-name",
        "rag_search",
        "--tool-args-json",
        json.dumps({"search_phrases": ["duck plumage and feeding", "what do ducks eat"]}),
    )
    result = ok_result(completed)
    segments = result["structuredContent"]["segments"]
    assert segments
    for seg in segments:
        assert_segment(seg)
    assert segments[0]["source_file_name"] == "wiki_duck.html"

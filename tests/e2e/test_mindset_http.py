"""`ragmcp serve` over the shared documents, driven by the official MCP client and by raw HTTP."""

from __future__ import annotations

import json

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.contracts.response_schemas import item_fields

pytestmark = pytest.mark.e2e

SEGMENT_FIELDS = item_fields("mindset", "rag_search", "segments")
HEADERS = {
    "Content-Type": "application/json",
    "Authorization": "Bearer your-api-key",
    "x-user-id": "user@example.com",
    "x-human-uid": "human_123456789",
    "x-session-tags": '["department:sales","premium_access"]',
}


def rpc(server, method, params=None, *, headers=None, path="/mcp", request_id="request-123"):
    body = {"jsonrpc": "2.0", "method": method, "id": request_id}
    if params is not None:
        body["params"] = params
    return httpx.post(server.base + path, json=body, headers=headers or HEADERS, timeout=60)


def search(server, phrases, **kw):
    return rpc(server, "tools/call", {"name": "rag_search", "arguments": {"search_phrases": phrases}}, **kw)


def assert_segment(seg):
    assert set(seg) == SEGMENT_FIELDS
    for key in SEGMENT_FIELDS:
        assert isinstance(seg[key], str) and seg[key], key
    assert len(seg["headline"].split()) <= 10


def test_contract_curl_example_replayed_as_written(served_documents):
    # The contract's curl example: only these headers, no Accept, no prior initialize.
    response = httpx.post(
        served_documents.base + "/mcp",
        headers=HEADERS,
        content=json.dumps(
            {
                "jsonrpc": "2.0",
                "method": "tools/call",
                "params": {
                    "name": "rag_search",
                    "arguments": {
                        "search_phrases": [
                            "product features",
                            "Product X capabilities and specifications",
                            "How does product X compare to competitors?",
                        ]
                    },
                },
                "id": "request-123",
            }
        ),
        timeout=60,
    )
    assert response.status_code == 200
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["id"] == "request-123"
    result = body["result"]
    assert result["status"] == "success"
    assert 1 <= len(result["segments"]) <= 20
    for seg in result["segments"]:
        assert_segment(seg)
    assert result["structuredContent"] == {"status": "success", "segments": result["segments"]}
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]


def test_search_finds_the_right_document_with_page_links(served_documents):
    result = search(served_documents, ["history of the word processor", "early typewriters and text editing"])
    segments = result.json()["result"]["segments"]
    assert len(segments) == 8
    top = segments[0]
    assert top["source_file_name"] == "multi_page.pdf"
    assert top["source_file_type"] == "pdf"
    assert "#page=" in top["source_url"]
    original = httpx.get(top["source_url"].split("#")[0], timeout=30)
    assert original.status_code == 200
    # A redacting source (the default) serves the redacted text the index holds, never the raw PDF.
    assert original.headers["content-type"].startswith("text/plain") and not original.content.startswith(b"%PDF")
    assert original.content.startswith(b"The Evolution of the Word Processor")
    tampered = top["source_url"].split("#")[0].replace("sig=", "sig=0")
    assert httpx.get(tampered, timeout=30).status_code == 403


@pytest.mark.parametrize(
    ("phrase", "expected_file"),
    [
        ("Row and column access control in DB2 for i", "redp5110_sampled.pdf"),
        ("ducks are aquatic birds; mallard", "wiki_duck.html"),
        ("IBM international business machines founded", "wiki.md"),
    ],
)
def test_search_across_formats(served_documents, phrase, expected_file):
    segments = search(served_documents, [phrase]).json()["result"]["segments"]
    assert expected_file in [s["source_file_name"] for s in segments[:3]]


def test_no_results_is_an_empty_list(served_documents):
    body = search(served_documents, ["qqqzzzxv"], path="/mcp/mindset").json()
    assert body["result"]["status"] == "success"
    assert isinstance(body["result"]["segments"], list)


def test_profile_endpoint_lists_only_its_tools_and_get_is_405(served_documents):
    tools = rpc(served_documents, "tools/list", path="/mcp/mindset").json()["result"]["tools"]
    names = {t["name"] for t in tools}
    assert "rag_search" in names
    schema = next(t for t in tools if t["name"] == "rag_search")["inputSchema"]
    phrases = schema["properties"]["search_phrases"]
    assert (phrases["type"], phrases["minItems"], phrases["maxItems"]) == ("array", 1, 5)
    assert phrases["items"]["type"] == "string"
    response = httpx.get(served_documents.base + "/mcp", timeout=10)
    assert response.status_code == 405
    assert rpc(served_documents, "tools/list", path="/mcp/nope").status_code == 404


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ({"search_phrases": []}, "search_phrases"),
        ({"search_phrases": ["a", "b", "c", "d", "e", "f"]}, "search_phrases"),
        ({"search_phrases": ["x" * 1_000_000]}, "longer than"),
        ({"search_phrases": [1, 2]}, "search_phrases"),
        ({"search_phrases": "not a list"}, "search_phrases"),
        ({}, "search_phrases"),
        ({"search_phrases": ["   "]}, "blank"),
    ],
)
def test_invalid_arguments_are_jsonrpc_invalid_params(served_documents, arguments, fragment):
    response = rpc(served_documents, "tools/call", {"name": "rag_search", "arguments": arguments})
    body = response.json()
    assert body["id"] == "request-123"
    assert body["error"]["code"] == -32602
    assert fragment in body["error"]["message"]


def test_broken_session_tags_are_invalid_params(served_documents):
    for raw in ['["unclosed', '{"a": 1}', "[1, 2]", "not json"]:
        response = search(served_documents, ["duck"], headers={**HEADERS, "x-session-tags": raw})
        assert response.json()["error"]["code"] == -32602, raw


def test_malformed_requests_get_jsonrpc_errors_and_server_keeps_serving(served_documents):
    url = served_documents.base + "/mcp"
    parse = httpx.post(url, content=b'{"jsonrpc": "2.0", "method": ', headers=HEADERS, timeout=10)
    assert parse.json()["error"]["code"] == -32700
    unknown = rpc(served_documents, "no/such/method")
    assert unknown.json()["error"]["code"] == -32601
    for not_rpc in [{"hello": "world"}, [1, 2], "text", {"jsonrpc": "1.0", "method": "tools/list", "id": 1}]:
        answer = httpx.post(url, json=not_rpc, headers=HEADERS, timeout=10)
        assert answer.json()["error"]["code"] == -32600, not_rpc
    bad_method = httpx.post(url, json={"jsonrpc": "2.0", "method": 5, "id": 9}, headers=HEADERS, timeout=10)
    assert bad_method.json() == {
        "jsonrpc": "2.0",
        "error": {"code": -32600, "message": "Invalid Request: not a JSON-RPC 2.0 message"},
        "id": 9,
    }
    binary = httpx.post(url, content=b"\xff\xfe\x00garbage", headers=HEADERS, timeout=10)
    assert binary.json()["error"]["code"] == -32700
    huge = httpx.post(url, content=b"[" + b"1," * 3_000_000 + b"1]", headers=HEADERS, timeout=30)
    assert huge.status_code == 413
    assert huge.json()["error"]["code"] == -32600
    unknown_tool = rpc(served_documents, "tools/call", {"name": "nope", "arguments": {}})
    assert unknown_tool.json()["error"]["code"] == -32602
    assert search(served_documents, ["duck"]).json()["result"]["status"] == "success"


def test_official_python_client(served_documents):
    async def run():
        http = httpx2.AsyncClient(headers={k: v for k, v in HEADERS.items() if k != "Content-Type"}, timeout=60)
        transport = streamable_http_client(served_documents.url + "/mindset", http_client=http)
        async with http, Client(transport) as client:
            tools = await client.list_tools()
            assert [t.name for t in tools.tools] == ["rag_search", "verify_document_access"]
            result = await client.call_tool("rag_search", {"search_phrases": ["duck plumage and feeding"]})
            assert not result.is_error
            segments = result.structured_content["segments"]
            assert segments and segments[0]["source_file_name"] == "wiki_duck.html"
            with pytest.raises(MCPError) as err:
                await client.call_tool("rag_search", {"search_phrases": []})
            assert err.value.code == -32602

    anyio.run(run)


def test_ingest_jobs_over_the_shared_documents(served_documents):
    health = served_documents.health()["ingest"]
    # All 19 shared documents, the image-only ocr_test.pdf by OCR.
    assert health["ingested"] == 19
    assert health["failed"] == 0

"""The MCP Lambda handler answers API Gateway v2 events through Mangum, warm call after warm call."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from .aws_harness import LambdaContext

REPO = Path(__file__).resolve().parents[2]
CONTEXT = LambdaContext("ragmcp-mcp")


def http_api_event(body: dict, path: str = "/mcp") -> dict:
    return {
        "version": "2.0",
        "routeKey": f"POST {path}",
        "rawPath": path,
        "rawQueryString": "",
        "headers": {
            "content-type": "application/json",
            "x-user-id": "user@example.com",
            "x-session-tags": '["department:sales"]',
            "host": "abc.execute-api.eu-west-1.amazonaws.com",
        },
        "requestContext": {
            "http": {"method": "POST", "path": path, "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1"},
            "requestId": "req",
            "stage": "$default",
        },
        "body": json.dumps(body),
        "isBase64Encoded": False,
    }


@pytest.fixture(scope="module")
def handler(tmp_path_factory):
    data = tmp_path_factory.mktemp("lambda")
    docs = data / "docs"
    shutil.copytree(REPO / "samples" / "docs", docs)
    mp = pytest.MonkeyPatch()
    mp.setenv("RAGMCP_DATA_DIR", str(data / "index"))
    mp.setenv("RAGMCP_DNS_REBINDING_PROTECTION", "false")
    mp.setenv("POWERTOOLS_METRICS_NAMESPACE", "ragmcp-test")
    mp.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    spec = importlib.util.spec_from_file_location("mcp_api_app", REPO / "functions" / "mcp_api" / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    services = module.services
    services.ingest.sync(services.register_folder("default", "docs", str(docs)))
    yield module.handler
    mp.undo()


def test_rag_search_through_mangum_warm_invocations(handler):
    call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "rag_search", "arguments": {"search_phrases": ["how long is a link valid"]}},
    }
    for path in ["/mcp", "/mcp/mindset", "/mcp", "/mcp/mindset"]:
        response = handler(http_api_event(call, path), CONTEXT)
        assert response["statusCode"] == 200
        body = json.loads(response["body"])
        assert body["id"] == 7
        assert body["result"]["status"] == "success"
        assert body["result"]["segments"][0]["source_file_name"] == "security-faq.md"


def test_errors_through_mangum(handler):
    bad = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "rag_search", "arguments": {}}}
    body = json.loads(handler(http_api_event(bad), CONTEXT)["body"])
    assert body["error"]["code"] == -32602
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    body = json.loads(handler(http_api_event(listing), CONTEXT)["body"])
    names = {t["name"] for t in body["result"]["tools"]}
    assert {"rag_search", "verify_document_access", "rag.search_hybrid"} <= names

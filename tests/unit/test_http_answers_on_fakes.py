"""POST /mcp as the contracts see it, over the in-memory fakes (no model, no server, no SQLite file):
a lifted tool's fields on top of its JSON-RPC result, the HTTP status the ragbox contract gives a
JSON-RPC error, the transport's plain-text refusals said in JSON-RPC with the request's id, and the
answer the SDK's transport wrote passed on as it is: no JSON parser ever reads the response body
again on its way out (http.py once captured it, parsed it to lift fields and parsed it again for
the status)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from ragmcp.bootstrap import build_registry, build_services
from ragmcp.http import create_app
from ragmcp.services import Services
from ragmcp.web.state import ServeState
from tests import fakes
from tests.contract_examples import USER, write_corpus

HEADERS = {"accept": "application/json, text/event-stream", "x-user-id": USER}


_LOADS = json.loads


class ParsedBodies:
    """Every text `json.loads` is given while a request is answered."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def saw_an_answer(self) -> bool:
        """Whether one of them was a JSON-RPC answer (the request, which the server must read, is not)."""
        messages = [_LOADS(text) for text in self.texts]
        return any(isinstance(m, dict) and m.keys() & {"result", "error"} for m in messages)


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Services:
    adapters = fakes.adapters()
    services = build_services(fakes.settings(tmp_path_factory.mktemp("nothing-written") / "data"), adapters)
    write_corpus(adapters, services)
    return services


@pytest.fixture(scope="module")
def http(services: Services) -> Iterator[TestClient]:
    with TestClient(create_app(services, build_registry(services)), base_url="http://127.0.0.1") as client:
        yield client


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> ParsedBodies:
    seen = ParsedBodies()

    def spy(text: str | bytes, *args: Any, **kwargs: Any) -> Any:
        seen.texts.append(text.decode() if isinstance(text, bytes | bytearray) else text)
        return _LOADS(text, *args, **kwargs)

    monkeypatch.setattr(json, "loads", spy)
    return seen


def _call(http: TestClient, tool: str, arguments: dict[str, Any], path: str = "/mcp/mindset", **kw: Any) -> Any:
    message = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    return http.post(path, json=message, headers={**HEADERS, **kw.pop("headers", {})}, **kw)


def test_a_lifted_tool_has_its_fields_on_top_and_its_body_is_not_parsed_again(http, parsed) -> None:
    response = _call(http, "rag_search", {"search_phrases": ["paid time off"]})
    assert not parsed.saw_an_answer()  # before the test's own response.json()
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    payload = result["structuredContent"]
    assert payload["status"] == "success" and payload["segments"], payload
    assert result["status"] == payload["status"] and result["segments"] == payload["segments"]
    assert json.loads(result["content"][0]["text"]) == payload
    assert int(response.headers["content-length"]) == len(response.content)


def test_a_lifted_null_stays_on_top(http, parsed) -> None:
    response = _call(http, "verify_document_access", {"segment_uid": "no-such-segment"})
    assert not parsed.saw_an_answer()
    result = response.json()["result"]
    assert result["has_access"] is False and result["structuredContent"]["has_access"] is False
    assert "refreshed_url" in result and result["refreshed_url"] is None, result


def test_a_tool_that_is_not_lifted_keeps_its_fields_inside(http, parsed) -> None:
    response = _call(http, "kb_search", {"query": "paid time off"}, path="/mcp/kb")
    assert not parsed.saw_an_answer()
    result = response.json()["result"]
    assert "results" in result["structuredContent"] and "results" not in result


@pytest.mark.parametrize(
    ("message", "status", "code"),
    [
        ({"method": "tools/call", "params": {"name": "search_documents", "arguments": {}}}, 400, -32602),
        (
            {"method": "tools/call", "params": {"name": "get_document", "arguments": {"document_id": "nope"}}},
            400,
            -32602,
        ),
        ({"method": "tools/call", "params": {}}, 400, -32602),
        ({"method": "tools/call", "params": {"name": "no_such_tool", "arguments": {}}}, 400, -32602),
        ({"method": "no/such/method"}, 404, -32601),
    ],
)
def test_a_ragbox_error_has_the_contract_s_http_status_unparsed(http, parsed, message, status, code) -> None:
    response = http.post("/mcp/ragbox", json={"jsonrpc": "2.0", "id": 3, **message}, headers=HEADERS)
    assert not parsed.saw_an_answer()
    assert (response.status_code, response.json()["error"]["code"], response.json()["id"]) == (status, code, 3)


def test_an_error_outside_ragbox_stays_http_200(http) -> None:
    response = _call(http, "rag_search", {})
    assert (response.status_code, response.json()["error"]["code"]) == (200, -32602)


def test_a_ragbox_success_stays_http_200(http) -> None:
    response = _call(http, "search_documents", {"query": "paid time off"}, path="/mcp/ragbox")
    assert response.status_code == 200 and "result" in response.json(), response.text


def test_a_transport_refusal_in_plain_text_is_said_in_json_rpc_with_the_request_id(http) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 11, "method": "tools/list"})
    response = http.post("/mcp/kb", content=body, headers={**HEADERS, "content-type": "text/plain"})
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": 11,
        "error": {"code": -32600, "message": "Invalid Content-Type header"},
    }


def test_two_calls_in_a_row_answer_alike(http) -> None:
    first, second = (_call(http, "rag_search", {"search_phrases": ["cancellation fee"]}) for _ in range(2))
    assert first.json()["result"]["segments"] == second.json()["result"]["segments"]


def test_healthz_reports_no_serve_workers_on_a_bare_app(http) -> None:
    body = http.get("/healthz").json()
    assert body["status"] == "ok" and body["problems"] == []
    assert (body["ingest"], body["vector_graph"], body["warm"], body["worker"], body["readers"]) == (None,) * 5


class Stopped:
    def __init__(self, problem: str | None) -> None:
        self.said = problem
        self.stopped = False

    def problem(self) -> str | None:
        return self.said

    def status(self) -> dict[str, Any]:
        return {"stopped": self.stopped}

    def stop(self) -> None:
        self.stopped = True


def test_healthz_reads_what_serve_attached_and_the_pool_stops_with_the_app(services: Services) -> None:
    pool, dead = Stopped(None), Stopped("the watcher stopped: disk gone")
    serve = ServeState(workers=[pool, dead], worker={"pid": 42, "role": "writer"}, pool=pool, warmer=pool)
    app = create_app(services, build_registry(services), serve)
    assert app.state.serve is serve
    with TestClient(app, base_url="http://127.0.0.1") as http:
        response = http.get("/healthz")
    body = response.json()
    assert (response.status_code, body["status"], body["problems"]) == (503, "unhealthy", [dead.said])
    assert (body["worker"], body["readers"], body["warm"]) == (serve.worker, {"stopped": False}, {"stopped": False})
    assert pool.stopped

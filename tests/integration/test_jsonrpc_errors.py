"""Every path under /mcp answers JSON-RPC, whatever is wrong with the request: unknown paths and
methods, headers nested too deep to parse, a part of the server that fails; and an error given
after the API key was read carries the key's rate-limit headers."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import httpx
import pytest
from starlette.testclient import TestClient

from ragmcp.bootstrap import Services, build_registry, build_services
from ragmcp.http import create_app
from ragmcp.mcp.errors import DISK_FULL
from ragmcp.settings import Settings
from tests.integration.swappable import Swappable


@dataclass
class Keyed:
    services: Services = field(repr=False)
    http: TestClient = field(repr=False)
    secret: str = field(repr=False)


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keyed]:
    built = build_services(Settings(data_dir=tmp_path_factory.mktemp("jsonrpc") / "data", host="testserver"))
    services = replace(built, limiter=Swappable(built.limiter))
    secret = services.keys.create("default", name="errors").secret
    app = create_app(services, build_registry(services))
    with TestClient(app, base_url="http://testserver", raise_server_exceptions=False) as http:
        yield Keyed(services, http, secret)


def jsonrpc_error(response: httpx.Response) -> dict:
    assert response.headers["content-type"].startswith("application/json"), response.text
    body = response.json()
    assert body["jsonrpc"] == "2.0" and set(body) == {"jsonrpc", "error", "id"}, body
    assert isinstance(body["error"]["code"], int) and body["error"]["message"], body
    assert "Traceback" not in response.text
    return body["error"]


def call(tool: str, arguments: dict) -> dict:
    return {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}


def test_session_tags_nested_3000_deep_are_invalid_params_not_a_500(keyed: Keyed) -> None:
    nested = "[" * 3000 + "]" * 3000
    headers = {"x-api-key": keyed.secret, "x-session-tags": nested}
    searched = keyed.http.post("/mcp/mindset", json=call("rag_search", {"search_phrases": ["x"]}), headers=headers)
    assert searched.status_code < 500
    error = jsonrpc_error(searched)
    assert error["code"] == -32602 and "x-session-tags" in error["message"]
    assert searched.headers["x-ratelimit-limit"] == "60"  # the key was read: its limits are told
    listed = keyed.http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers)
    assert listed.status_code == 200 and listed.json()["result"]["tools"]


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("POST", "/mcp/mindset/x", 404),
        ("GET", "/mcp/mindset/x", 404),
        ("POST", "/mcp/", 404),
        ("POST", "/mcp/a/b/c/d", 404),
        ("POST", "/mcp/nope", 404),
        ("GET", "/mcp", 405),
        ("OPTIONS", "/mcp", 405),
        ("HEAD", "/mcp/kb", 405),
        ("TRACE", "/mcp/kb", 405),
    ],
)
def test_unknown_paths_and_methods_answer_json_rpc(keyed: Keyed, method: str, path: str, status: int) -> None:
    response = keyed.http.request(method, path, headers={"x-api-key": keyed.secret}, content=b"{}")
    assert response.status_code == status, response.text
    if method != "HEAD":
        assert jsonrpc_error(response)["code"] == -32600


def test_a_failing_part_of_the_server_answers_a_json_rpc_internal_error(keyed: Keyed) -> None:
    class BrokenLimiter:
        def acquire(self, *args: object) -> object:
            raise RuntimeError("the rate-limit table is unreachable")

        def release(self, *args: object) -> None:
            raise AssertionError("never acquired")

    with keyed.services.limiter.swapped(BrokenLimiter()):
        response = keyed.http.post(
            "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers={"x-api-key": keyed.secret}
        )
    assert response.status_code == 500
    error = jsonrpc_error(response)
    assert error == {"code": -32603, "message": "Internal error"}
    assert "unreachable" not in response.text


def test_a_full_disk_is_said_as_such_not_as_an_internal_error(keyed: Keyed, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by the operator's-year state machine: with the data directory's disk full, every
    request (the rate limiter counts it in a table) and every write answered "Internal error",
    each with a traceback in the log."""
    import errno
    import sqlite3

    class FullLimiter:
        def acquire(self, *args: object) -> object:
            raise sqlite3.OperationalError("database or disk is full")

    with keyed.services.limiter.swapped(FullLimiter()):
        listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        refused = keyed.http.post("/mcp", json=listing, headers={"x-api-key": keyed.secret})
    assert refused.status_code == 500
    assert jsonrpc_error(refused) == {"code": -32603, "message": DISK_FULL}

    def no_room(*args: object) -> object:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(keyed.services.notes, "add", no_room)
    noted = keyed.http.post("/mcp/kb", json=call("kb_addnote", {"text": "a note"}), headers={"x-api-key": keyed.secret})
    assert jsonrpc_error(noted)["message"] == DISK_FULL


def test_a_tool_error_after_the_key_was_read_carries_the_rate_limit_headers(keyed: Keyed) -> None:
    refused = keyed.http.post(
        "/mcp/ragbox", json=call("get_document", {"document_id": 12}), headers={"x-api-key": keyed.secret}
    )
    assert refused.status_code in (400, 404) and refused.headers["x-ratelimit-limit"] == "60"
    assert "x-ratelimit-remaining" in refused.headers
    jsonrpc_error(refused)


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_over_the_limit_is_refused_413_before_the_key_is_read(keyed: Keyed, chunked: bool) -> None:
    limit = keyed.services.settings.server.max_body_bytes
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list","pad":"' + b"x" * limit + b'"}'
    content = iter([body[: limit // 2], body[limit // 2 :]]) if chunked else body
    audited = audit_records(keyed)
    response = keyed.http.post("/mcp/kb", content=content, headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert jsonrpc_error(response) == {"code": -32600, "message": "Request body too large"}
    assert audit_records(keyed) == audited  # refused before anything was read or audited
    headers = {"x-api-key": keyed.secret, "content-type": "application/json"}
    fits = keyed.http.post("/mcp/kb", content=body[: limit - 100] + b'"}', headers=headers)
    assert fits.status_code == 200 and fits.json()["result"]["tools"]  # just under the limit: answered


def test_the_gate_answers_before_authentication(keyed: Keyed) -> None:
    keyed.services.audit.flush_refusals(everything=True)
    audited = audit_records(keyed)
    listing = {"jsonrpc": "2.0", "id": 7, "method": "tools/list"}
    unknown = keyed.http.post("/mcp/nope", json=listing)
    assert unknown.status_code == 404 and "profiles: " in jsonrpc_error(unknown)["message"]
    big_header = keyed.http.post("/mcp", json=listing, headers={"x-user-id": "u" * 8193})
    assert big_header.status_code == 431 and jsonrpc_error(big_header)["code"] == -32600
    not_json = keyed.http.post("/mcp", content=b"{", headers={"content-type": "application/json"})
    assert not_json.status_code == 400 and jsonrpc_error(not_json)["code"] == -32700
    unkeyed = keyed.http.post("/mcp", json=listing)
    assert unkeyed.status_code == 401 and jsonrpc_error(unkeyed)["code"] == -32000
    assert unkeyed.json()["id"] == 7 and "x-ratelimit-limit" not in unkeyed.headers
    # each refusal is audited, in the chain of unauthenticated requests (issue 29: every refused request);
    # one of a reason refused in the last second is counted, and written when its second ends
    keyed.services.audit.flush_refusals(everything=True)
    assert audit_records(keyed) == audited + 4


def audit_records(keyed: Keyed) -> int:
    store = keyed.services.audit.store
    return sum(1 for tenant in store.tenants() for _ in store.records(tenant))

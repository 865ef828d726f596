"""Bytes that are not Unicode text and floods of refused requests (issue 29): a lone surrogate
(a \\ud800 escape, or its UTF-8 bytes) or invalid UTF-8 anywhere in a body, with a missing, bad or
good key and with an id that would be echoed, is a JSON-RPC parse error with a body, never an HTTP
500 or an UnicodeEncodeError, and the refusal is audited; a flood of refusals is at most one
audit record a second per reason, with the count, and the chain still verifies."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from starlette.testclient import TestClient

from ragmcp.bootstrap import Services, build_registry, build_services
from ragmcp.domain.models import Principal
from ragmcp.http import create_app
from ragmcp.security.audit import UNAUTHENTICATED
from ragmcp.settings import Settings


@dataclass
class Keyed:
    services: Services = field(repr=False)
    http: TestClient = field(repr=False)
    secret: str = field(repr=False)


@pytest.fixture
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keyed]:
    services = build_services(Settings(data_dir=tmp_path_factory.mktemp("hostile") / "data", host="testserver"))
    secret = services.keys.create("default", name="hostile").secret
    with TestClient(create_app(services, build_registry(services)), base_url="http://testserver") as http:
        yield Keyed(services, http, secret)


SURROGATE_BODIES = [
    b'{"jsonrpc":"2.0","id":"\\ud800","method":"tools/list"}',
    b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"kb_search","arguments":{"query":"\\udfff"}}}',
    b'{"jsonrpc":"2.0","id":"x\\uDBFFy","method":"tools/call","params":{"name":"rag_search"}}',
    b'{"jsonrpc":"2.0","id":8,"method":"tools/list","params":{"\\ud800":1}}',
    b'{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{"_meta":{"progressToken":"\xed\xa0\x80"}}}',
    '{"jsonrpc":"2.0","id":10,"method":"tools/list","x":"\ud800"}'.encode("utf-16-le", "surrogatepass"),
]
INVALID_UTF8_BODIES = [
    b'{"jsonrpc":"2.0","id":11,"method":"tools/list","x":"\xff\xfe"}',
    b'{"jsonrpc":"2.0","id":12,"method":"tools/list","x":"\xc3"}',
    b'\xf8\x88\x80\x80\x80',
]
KEYS = ["none", "bad", "good"]


def headers_for(keyed: Keyed, key: str) -> dict[str, str]:
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    if key != "none":
        headers["x-api-key"] = keyed.secret if key == "good" else "rmcp_live_" + "0" * 64
    return headers


def unauthenticated(keyed: Keyed) -> list:
    return list(keyed.services.audit.store.records(UNAUTHENTICATED))


@pytest.mark.parametrize("path", ["/mcp", "/mcp/ragbox", "/mcp/mindset"])
def test_lone_surrogates_and_invalid_utf8_are_parse_errors_with_a_body_and_audited(keyed: Keyed, path: str) -> None:
    for body in SURROGATE_BODIES + INVALID_UTF8_BODIES:
        for key in KEYS:
            answer = keyed.http.post(path, content=body, headers=headers_for(keyed, key))
            assert answer.status_code == 400, (body, key, answer.status_code, answer.text)
            error = answer.json()
            assert error["jsonrpc"] == "2.0" and error["error"]["code"] == -32700, error
            # an id that is not Unicode text is never echoed; a clean one is
            assert error["id"] in (None, 7, 8, 9, 10, 11, 12), error
    keyed.services.audit.flush_refusals(everything=True)
    refused = [r for r in unauthenticated(keyed) if r.outcome == "refused 400"]
    counted = sum(json_count(r.tool) for r in refused)
    assert counted == len(KEYS) * (len(SURROGATE_BODIES) + len(INVALID_UTF8_BODIES))
    assert keyed.services.audit.verify().ok


def test_a_surrogate_in_x_session_tags_is_invalid_params_not_a_500(keyed: Keyed) -> None:
    headers = {**headers_for(keyed, "good"), "x-session-tags": '["\\ud800"]'}
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "rag_search"}}
    call["params"]["arguments"] = {"search_phrases": ["x"]}
    answer = keyed.http.post("/mcp/mindset", content=json.dumps(call), headers=headers)
    assert answer.status_code < 500, answer.text
    assert answer.json()["error"]["code"] == -32602 and "x-session-tags" in answer.json()["error"]["message"]


def json_count(tool: str) -> int:
    """How many refusals a record stands for: one, or the N of an aggregate's "N refused: ..."."""
    head, _, rest = tool.partition(" refused: ")
    return int(head) if rest and head.isdigit() else 1


def test_a_flood_of_refused_requests_is_one_audit_record_a_second_per_reason(keyed: Keyed) -> None:
    before = len(unauthenticated(keyed))
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "kb_search", "arguments": {}}}
    started = time.monotonic()
    for _ in range(300):
        answer = keyed.http.post("/mcp/kb", json=call, headers=headers_for(keyed, "bad"))
        assert answer.status_code == 401
    elapsed = time.monotonic() - started
    keyed.services.audit.flush_refusals(everything=True)
    records = unauthenticated(keyed)[before:]
    assert {r.outcome for r in records} == {"refused 401"}
    # the first at once, then at most one a window (second) for the rest, and one at the end
    assert len(records) <= elapsed / keyed.services.audit.refusal_window + 2, (len(records), elapsed)
    assert records[0].tool == "kb_search"
    assert sum(json_count(r.tool) for r in records) == 300
    assert all(r.tool.endswith("kb_search x" + str(json_count(r.tool))) for r in records[1:])
    assert keyed.services.audit.verify().ok


def test_refusals_of_different_reasons_are_kept_apart_and_a_lone_one_is_written_at_once(keyed: Keyed) -> None:
    audit = keyed.services.audit
    stranger = Principal(tenant="default", key_id="k1")
    audit.refused(stranger, "kb_search", {"query": "a"}, "refused 429")
    audit.refused(stranger, "kb_search", {"query": "b"}, "refused 403")
    written = list(audit.store.records("default"))
    assert [(r.tool, r.outcome) for r in written[-2:]] == [("kb_search", "refused 429"), ("kb_search", "refused 403")]
    audit.refused(stranger, "kb_get", {}, "refused 429")
    assert len(list(audit.store.records("default"))) == len(written)  # counted, not yet written
    time.sleep(audit.refusal_window * 2)  # the flusher writes the window's count when it ends
    last = list(audit.store.records("default"))[-1]
    assert (last.tool, last.outcome) == ("1 refused: kb_get x1", "refused 429")
    assert audit.verify().ok

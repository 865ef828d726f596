"""Rate limits per API key, through the real HTTP app with keys made by the real KeyService.

60 requests a minute, 10 synthesis calls a minute (query_knowledge, rag_get_synthesized_results),
5 concurrent requests, each configurable per key. A refused request is a JSON-RPC -32001 error,
HTTP 429 where the ragbox contract maps errors to statuses and 200 elsewhere; every answer to a
keyed request that reaches the JSON-RPC layer carries X-RateLimit-Limit/-Remaining/-Reset.
The server's own limiter (a SQLite file in the data directory, shared by every process serving it;
tests/unit/test_ratelimit.py races processes on it) with its clock injected, so "a minute later"
takes no time.
"""

from __future__ import annotations

import itertools
import json
import math
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import anyio
import httpx
import pytest
from starlette.testclient import TestClient

from ragmcp.adapters.local.ratelimit import SqliteRateLimiter
from ragmcp.bootstrap import Services, build_registry, build_services
from ragmcp.domain.models import Principal
from ragmcp.http import create_app
from ragmcp.retrieval.service import SearchRequest, SearchResult
from ragmcp.security.keys import CreatedKey
from ragmcp.security.models import RateLimits
from ragmcp.settings import Settings
from ragmcp.web.auth import caller_from_headers
from ragmcp.web.jsonrpc import McpCall
from ragmcp.web.rate_limits import RateLimiting
from tests.integration.swappable import Swappable

RATE_LIMITED = -32001
T0 = 1_800_000_000.0
_ids = itertools.count(1)


class Clock:
    def __init__(self, now: float = T0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class App:
    services: Services = field(repr=False)
    http: TestClient = field(repr=False)
    clock: Clock


@pytest.fixture(scope="module")
def module_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Services, TestClient]]:
    root: Path = tmp_path_factory.mktemp("ratelimits")
    built = build_services(Settings(data_dir=root / "data", host="testserver"))
    services = replace(built, limiter=Swappable(built.limiter))  # each test swaps in its own
    with TestClient(create_app(services, build_registry(services)), base_url="http://testserver") as http:
        yield services, http


@pytest.fixture
def app(module_app: tuple[Services, TestClient], tmp_path: Path) -> Iterator[App]:
    """The app with a fresh limiter on a clock that only moves when told."""
    services, http = module_app
    assert isinstance(services.limiter.target, SqliteRateLimiter)
    assert services.limiter.path == services.settings.server.data_dir / "ratelimits.db"
    clock = Clock()
    with services.limiter.swapped(SqliteRateLimiter(tmp_path / "ratelimits.db", clock=clock)):
        yield App(services, http, clock)


def post(
    app: App, path: str, key: CreatedKey, method: str, params: dict | None = None, **headers: str
) -> httpx.Response:
    body: dict = {"jsonrpc": "2.0", "id": next(_ids), "method": method}
    if params is not None:
        body["params"] = params
    return app.http.post(path, json=body, headers={"x-api-key": key.secret, **headers})


def call(app: App, path: str, key: CreatedKey, tool: str, arguments: dict) -> httpx.Response:
    return post(app, path, key, "tools/call", {"name": tool, "arguments": arguments})


def limit_headers(response: httpx.Response) -> tuple[int, int, int]:
    h = response.headers
    return int(h["x-ratelimit-limit"]), int(h["x-ratelimit-remaining"]), int(h["x-ratelimit-reset"])


def assert_refused(response: httpx.Response, status: int, reason: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["id"] == json.loads(response.request.content)["id"]
    assert body["error"]["code"] == RATE_LIMITED and reason in body["error"]["message"], body
    return body


def assert_answered(response: httpx.Response) -> httpx.Response:
    assert response.status_code == 200, response.text
    assert "result" in response.json(), response.text
    return response


@pytest.mark.parametrize(("path", "status"), [("/mcp/mindset", 200), ("/mcp/proxysql", 200), ("/mcp/ragbox", 429)])
def test_the_61st_request_in_a_minute_is_refused_with_headers(app: App, path: str, status: int) -> None:
    key = app.services.keys.create("acme")
    reset = math.ceil(T0 + 60)
    for n in range(1, 61):
        app.clock.now = T0 + (n - 1) * 0.5
        response = post(app, path, key, "tools/list")
        assert_answered(response)
        assert limit_headers(response) == (60, 60 - n, reset)
    app.clock.now = T0 + 31
    refused = post(app, path, key, "tools/list")
    assert_refused(refused, status, "more than 60 requests a minute")
    assert limit_headers(refused) == (60, 0, reset)


def test_the_servers_own_limiter_refuses_the_third_of_two_a_minute(module_app: tuple[Services, TestClient]) -> None:
    """As served: the limiter build_services made, on data_dir/ratelimits.db and the real clock."""
    services, http = module_app
    key = services.keys.create("acme", limits=RateLimits(per_minute=2))
    lists = [{"jsonrpc": "2.0", "id": n, "method": "tools/list"} for n in range(3)]
    answers = [http.post("/mcp/ragbox", json=body, headers={"x-api-key": key.secret}) for body in lists]
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert answers[2].json()["error"]["code"] == RATE_LIMITED, answers[2].text
    assert [limit_headers(a)[:2] for a in answers] == [(2, 1), (2, 0), (2, 0)]
    assert abs(limit_headers(answers[2])[2] - time.time() - 60) <= 2


def test_a_refused_tool_call_on_the_all_profiles_endpoint_takes_its_profiles_status(app: App) -> None:
    key = app.services.keys.create("acme", limits=RateLimits(per_minute=1))
    assert_answered(post(app, "/mcp", key, "tools/list"))
    assert_refused(call(app, "/mcp", key, "list_documents", {}), 429, "requests a minute")
    assert_refused(call(app, "/mcp", key, "kb_status", {}), 200, "requests a minute")
    assert_refused(post(app, "/mcp", key, "tools/list"), 200, "requests a minute")


def test_the_window_slides_and_frees_the_quota_a_minute_after_each_request(app: App) -> None:
    key = app.services.keys.create("acme")
    for n in range(60):
        app.clock.now = T0 + n  # one request a second
        assert_answered(post(app, "/mcp/kb", key, "tools/list"))
    app.clock.now = T0 + 59.9
    assert_refused(post(app, "/mcp/kb", key, "tools/list"), 200, "requests a minute")
    app.clock.now = T0 + 60  # the first request has left the window, the refused one never entered it
    response = assert_answered(post(app, "/mcp/kb", key, "tools/list"))
    assert limit_headers(response) == (60, 0, math.ceil(T0 + 61))
    assert_refused(post(app, "/mcp/kb", key, "tools/list"), 200, "requests a minute")
    app.clock.now = T0 + 200
    response = assert_answered(post(app, "/mcp/kb", key, "tools/list"))
    assert limit_headers(response) == (60, 59, math.ceil(T0 + 260))


def ask(app: App, key: CreatedKey) -> httpx.Response:
    return call(app, "/mcp/ragbox", key, "query_knowledge", {"query": "what is the refund policy?"})


def synthesize(app: App, key: CreatedKey) -> httpx.Response:
    arguments = {"username": "alice", "query": "what is the refund policy?"}
    return call(app, "/mcp/chat", key, "rag_get_synthesized_results", arguments)


def test_query_knowledge_is_limited_to_10_a_minute(app: App) -> None:
    key = app.services.keys.create("acme", platform=True)
    for n in range(10):
        app.clock.now = T0 + n
        assert limit_headers(assert_answered(ask(app, key)))[1] == 59 - n
    refused = ask(app, key)
    assert_refused(refused, 429, "more than 10 synthesis calls a minute")
    assert limit_headers(refused) == (60, 50, math.ceil(T0 + 60))
    listed = assert_answered(call(app, "/mcp/ragbox", key, "list_documents", {}))
    assert limit_headers(listed)[1] == 49  # other tools go on; the refused call was not counted
    app.clock.now = T0 + 60  # the first call leaves the window
    assert_answered(ask(app, key))
    assert_refused(ask(app, key), 429, "synthesis calls a minute")


def test_rag_get_synthesized_results_is_limited_to_10_a_minute(app: App) -> None:
    key = app.services.keys.create("acme", platform=True)
    for n in range(10):
        app.clock.now = T0 + n
        assert_answered(synthesize(app, key))
    refused = synthesize(app, key)
    assert_refused(refused, 200, "more than 10 synthesis calls a minute")
    assert limit_headers(refused) == (60, 50, math.ceil(T0 + 60))
    assert_answered(call(app, "/mcp/chat", key, "rag_discover_resources", {"username": "alice"}))


def test_both_synthesis_tools_draw_on_one_budget(app: App) -> None:
    key = app.services.keys.create("acme", platform=True)
    for _ in range(5):
        assert_answered(ask(app, key))
        assert_answered(synthesize(app, key))
    assert_refused(ask(app, key), 429, "synthesis calls a minute")
    assert_refused(synthesize(app, key), 200, "synthesis calls a minute")


def test_limits_are_configured_and_counted_per_key(app: App) -> None:
    small = app.services.keys.create("acme", limits=RateLimits(per_minute=3, synthesis_per_minute=1, concurrent=2))
    other = app.services.keys.create("acme")
    first = assert_answered(call(app, "/mcp/ragbox", small, "query_knowledge", {"query": "refunds"}))
    assert limit_headers(first) == (3, 2, math.ceil(T0 + 60))
    assert_refused(call(app, "/mcp/ragbox", small, "query_knowledge", {"query": "refunds"}), 429, "1 synthesis")
    assert_answered(post(app, "/mcp/ragbox", small, "tools/list"))
    assert_answered(post(app, "/mcp/ragbox", small, "tools/list"))
    refused = post(app, "/mcp/ragbox", small, "tools/list")
    assert_refused(refused, 429, "more than 3 requests a minute")
    assert limit_headers(refused) == (3, 0, math.ceil(T0 + 60))
    fresh = assert_answered(post(app, "/mcp/ragbox", other, "tools/list"))
    assert limit_headers(fresh) == (60, 59, math.ceil(T0 + 60))


def test_every_answer_to_a_keyed_request_carries_the_headers(app: App) -> None:
    key = app.services.keys.create("acme", limits=RateLimits(per_minute=5))
    answers = [
        post(app, "/mcp/mindset", key, "tools/list"),
        call(app, "/mcp/mindset", key, "rag_search", {"search_phrases": ["refunds"]}),
        call(app, "/mcp/mindset", key, "rag_search", {"search_phrases": []}),  # invalid params
        call(app, "/mcp/ragbox", key, "get_document", {"document_id": "docs:nothing.md"}),  # not found, 400
        post(app, "/mcp/mindset", key, "no/such/method"),
        post(app, "/mcp/mindset", key, "tools/list"),  # refused
    ]
    codes = [a.json().get("error", {}).get("code") for a in answers]
    assert codes == [None, None, -32602, -32602, -32601, RATE_LIMITED]
    assert [a.status_code for a in answers] == [200, 200, 200, 400, 200, 200]
    assert [limit_headers(a)[:2] for a in answers] == [(5, 4), (5, 3), (5, 2), (5, 1), (5, 0), (5, 0)]


class GatedSearch:
    """The real search, held at a gate: each call waits until the test opens it."""

    def __init__(self, real: Callable[[Principal, SearchRequest], SearchResult]):
        self.real = real
        self.gate = threading.Event()
        self.entered = threading.Semaphore(0)

    def search(self, principal: Principal, request: SearchRequest) -> SearchResult:
        self.entered.release()
        assert self.gate.wait(timeout=30), "the gate was never opened"
        return self.real(principal, request)


def test_the_6th_concurrent_request_is_refused_while_5_are_in_flight(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    key = app.services.keys.create("acme")
    gated = GatedSearch(app.services.search.search)
    # On the search service itself: the tools were given it when the registry was built.
    monkeypatch.setattr(app.services.search, "search", gated.search)
    try:
        with ThreadPoolExecutor(max_workers=5) as pool:
            slow = [
                pool.submit(call, app, "/mcp/mindset", key, "rag_search", {"search_phrases": [f"refunds {n}"]})
                for n in range(5)
            ]
            deadline = time.monotonic() + 30
            for _ in range(5):
                assert gated.entered.acquire(timeout=max(0.0, deadline - time.monotonic())), "5 calls never started"
            refused = post(app, "/mcp/mindset", key, "tools/list")
            assert_refused(refused, 200, "more than 5 concurrent requests")
            assert limit_headers(refused) == (60, 55, math.ceil(T0 + 60))
            refused_ragbox = call(app, "/mcp/ragbox", key, "list_documents", {})
            assert_refused(refused_ragbox, 429, "more than 5 concurrent requests")
            gated.gate.set()
            finished = [f.result(timeout=30) for f in slow]
    finally:
        gated.gate.set()
    for response in finished:
        assert assert_answered(response).json()["result"]["status"] == "success"
    assert sorted(limit_headers(r)[1] for r in finished) == [55, 56, 57, 58, 59]
    after = assert_answered(post(app, "/mcp/mindset", key, "tools/list"))
    assert limit_headers(after)[1] == 54


def test_a_streamed_answer_holds_its_concurrency_slot_until_the_stream_ends(app: App) -> None:
    """RateLimiting wraps the whole answer: a progress stream (Server-Sent Events) keeps its slot
    while it is being sent, and carries the limit headers in its start."""
    key = app.services.keys.create("acme", limits=RateLimits(concurrent=1))
    credential = app.services.identities.authenticate(key.secret)
    registry = build_registry(app.services)
    admitted = McpCall(
        profile="proxysql",
        message={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "rag.admin.sync"}},
        body=b"{}",
        headers={},
        tool="rag.admin.sync",
        status_mapped=False,
        caller=caller_from_headers({}, credential, app.services.identities),
    )
    sent: list[dict] = []

    async def run() -> None:
        streaming, finish = anyio.Event(), anyio.Event()

        async def events(scope: dict, receive: object, send: object) -> None:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            streaming.set()
            await finish.wait()
            await send({"type": "http.response.body", "body": b"data: {}\n\n", "more_body": False})

        async def send(message: dict) -> None:
            sent.append(message)

        middleware = RateLimiting(events, app.services, registry)
        scope = {"type": "http", "method": "POST", "path": "/mcp/proxysql", "state": {"mcp_call": admitted}}
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(middleware, scope, None, send)
            await streaming.wait()
            during = app.services.limiter.acquire(credential.subject, RateLimits(concurrent=1), False)
            assert not during.allowed and during.reason == "more than 1 concurrent requests"
            finish.set()
        after = app.services.limiter.acquire(credential.subject, RateLimits(concurrent=1), False)
        assert after.allowed
        app.services.limiter.release(credential.subject)

    anyio.run(run)
    start = dict(sent[0]["headers"])
    assert sent[0]["status"] == 200 and start[b"x-ratelimit-limit"] == b"60" and b"x-ratelimit-reset" in start

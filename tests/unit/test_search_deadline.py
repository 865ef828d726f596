"""A search takes a deadline and stops at it: it raises DeadlineExceeded without waiting for an index
call still running, and starts no index call after it. proxysql's search timeout is that deadline
(before, the timeout left the search running on an abandoned thread, to fuse and fetch its chunks)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError

from ragmcp.bootstrap import build_registry, build_services
from ragmcp.domain.errors import DeadlineExceeded
from ragmcp.domain.models import Principal, SearchFilter
from ragmcp.mcp import proxysql
from ragmcp.mcp.registry import Caller, current_caller
from ragmcp.mcp.server import build_server
from ragmcp.retrieval.service import SearchRequest, SearchService
from ragmcp.security.identity import open_credential
from tests import fakes

WAIT = 10.0
"""Bounds every wait of the test; a search that does not stop at its deadline fails after it."""


class HeldIndex(fakes.MemorySearchIndex):
    """The in-memory index whose vector searches wait until the test releases them; every call is
    recorded, with whether it came after the release."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.finished = threading.Event()
        self.calls: list[str] = []

    def search_vector(self, principal: Principal, vector: np.ndarray, flt: SearchFilter, k: int) -> Any:
        self.calls.append("search_vector")
        try:
            assert self.release.wait(WAIT)
            return super().search_vector(principal, vector, flt, k)
        finally:
            self.finished.set()

    def search_fts(self, principal: Principal, query: str, flt: SearchFilter, k: int) -> Any:
        self.calls.append("search_fts")
        return super().search_fts(principal, query, flt, k)

    def get_chunks(self, tenant: str, chunk_ids: Any) -> Any:
        self.calls.append("get_chunks")
        return super().get_chunks(tenant, chunk_ids)


@pytest.fixture
def index() -> Iterator[HeldIndex]:
    held = HeldIndex()
    yield held
    held.release.set()


def test_a_search_stops_at_its_deadline(index: HeldIndex) -> None:
    service = SearchService(index, fakes.HashEmbedder())
    request = SearchRequest(phrases=["heron"], mode="hybrid", deadline=time.monotonic() + 0.05)
    outcome: list[BaseException | object] = []
    searching = threading.Thread(target=lambda: outcome.append(_outcome(service, request)), daemon=True)
    searching.start()
    searching.join(WAIT)
    stopped = not searching.is_alive()
    index.release.set()
    assert stopped, "the search did not stop at its deadline: it waited for the index"
    assert isinstance(outcome[0], DeadlineExceeded)
    assert index.finished.wait(WAIT)  # the vector search that was running ends on its own, unread
    assert "get_chunks" not in index.calls  # nothing was started after the deadline


def _outcome(service: SearchService, request: SearchRequest) -> BaseException | object:
    try:
        return service.search(Principal(tenant="t"), request)
    except DeadlineExceeded as exc:
        return exc


def test_proxysql_answers_its_timeout_and_the_search_stops(
    index: HeldIndex, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(proxysql.TIMEOUT_MS, "search", 50)
    adapters = fakes.adapters()
    adapters.index = index
    services = build_services(fakes.settings(tmp_path / "data"), adapters)
    returned = threading.Event()
    search_once = services.search.search

    def search_and_tell(principal: Principal, request: SearchRequest) -> Any:
        try:
            return search_once(principal, request)
        finally:
            returned.set()

    services.search.search = search_and_tell  # type: ignore[method-assign]

    async def search() -> MCPError:
        current_caller.set(Caller(credential=open_credential("t"), identities=services.identities))
        async with Client(build_server(build_registry(services), "proxysql")) as client:
            with pytest.raises(MCPError) as refused:
                await client.call_tool("rag.search_vector", {"query_text": "where does the heron nest", "k": 3})
            return refused.value

    error = anyio.run(search)
    answered_after_the_search = returned.is_set()  # the index still holds its vector search here
    index.release.set()
    assert answered_after_the_search, "the timeout was answered while the search ran on, abandoned"
    assert error.error.code == proxysql.INTERNAL_ERROR and error.error.message == "timed out after 50 ms"
    assert json.loads(json.dumps(error.error.data)) == {"code": "INTERNAL"}
    assert index.finished.wait(WAIT)
    assert "get_chunks" not in index.calls

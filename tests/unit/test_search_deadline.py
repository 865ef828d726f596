"""A search takes a deadline and stops at it: it raises DeadlineExceeded without waiting for an index
call still running, and starts no index call after it. proxysql's search timeout is that deadline
(before, the timeout left the search running on an abandoned thread, to fuse and fetch its chunks).
The index port takes the deadline too: the SQLite index interrupts a statement running at it (its
connection's progress handler) and leaves nothing half-done, so the search's thread is free after it."""

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

    def search_vector(self, principal: Principal, vector: np.ndarray, flt: SearchFilter, k: int, **_: Any) -> Any:
        """Held, whatever its deadline: an index call that cannot be stopped (as a query's embedding)."""
        self.calls.append("search_vector")
        try:
            assert self.release.wait(WAIT)
            return super().search_vector(principal, vector, flt, k)
        finally:
            self.finished.set()

    def search_fts(self, principal: Principal, query: str, flt: SearchFilter, k: int, **_: Any) -> Any:
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


class Steps:
    """The SQLite index's clock, moved by the work itself: each reading (the progress handler's, every
    `progress_steps` SQLite instructions, and the index's own checks between steps) is one step later.
    So "how far did the search get" is counted in steps, never in milliseconds."""

    def __init__(self, start: float = 0.0, step: float = 1.0) -> None:
        self.start, self.step, self.readings = start, step, 0

    def __call__(self) -> float:
        self.readings += 1
        return self.start + self.readings * self.step


T = Principal(tenant="t")
DIM = 8
QUERY = "heron nest reeds"


def _unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def _sqlite_index(path: Path, graph: bool = False) -> Any:
    """A real SQLite index (FTS5, sqlite-vec, the term postings; with `graph`, vector searches through the
    HNSW graph) of 400 chunks that all hold the query's words, reading its clock every 50 SQLite
    instructions: a whole search takes many readings."""
    from ragmcp.adapters.local.database import Database
    from ragmcp.adapters.local.hnsw import HnswParams, HnswVectors
    from ragmcp.adapters.local.postings import TermPostings
    from ragmcp.adapters.local.sqlite_index import SqliteSearchIndex
    from ragmcp.domain.models import Chunk, Document

    db = Database(path)
    vectors = HnswVectors(db, path.with_suffix(".hnsw"), HnswParams(DIM, m=16, ef_construction=64)) if graph else None
    index = SqliteSearchIndex(db, vectors, postings=TermPostings(), exact_below=0)
    index.ensure_model("test-model", DIM)
    if index.count_chunks("t") == 0:
        for d in range(20):
            doc = Document(
                tenant="t",
                doc_id=f"d{d}",
                source="docs",
                path=f"d{d}",
                title=f"d{d}",
                file_name=f"d{d}.md",
                file_type="md",
                content_hash="h",
            )
            texts = [f"The heron {i} builds a nest in the reeds by pond {d}." for i in range(20)]
            chunks = [
                Chunk(chunk_id=f"d{d}#{i}", doc_id=doc.doc_id, ordinal=i, text=t, headline=t[:20], summary=t)
                for i, t in enumerate(texts)
            ]
            index.replace_document(doc, chunks, np.stack([_unit(100 * d + i) for i in range(20)]))
    if vectors is not None:
        vectors.catch_up()
    index.progress_steps = 50
    return index


@pytest.mark.parametrize("kind", ["fts", "vector", "graph"])
def test_the_sqlite_index_stops_a_running_statement_at_the_deadline(tmp_path: Path, kind: str) -> None:
    def search(index: Any, deadline: float | None) -> list[str]:
        if kind == "fts":
            hits = index.search_fts(T, QUERY, SearchFilter(), 10, deadline=deadline)
        else:
            hits = index.search_vector(T, _unit(7), SearchFilter(), 10, deadline=deadline)
        return [h.chunk_id for h in hits]

    whole = _sqlite_index(tmp_path / "i.db", graph=kind == "graph")
    whole.clock = unbounded = Steps()
    expected = search(whole, float("inf"))
    assert len(expected) == 10 and unbounded.readings > 40, "the whole search must take many clock readings"

    # A second index on the file: nothing of the first one's cached.
    index = _sqlite_index(tmp_path / "i.db", graph=kind == "graph")
    index.clock = stopped = Steps()
    with pytest.raises(DeadlineExceeded):
        search(index, 5.0)
    assert stopped.readings <= 7, f"the search ran on past its deadline ({stopped.readings} readings)"
    # Nothing half-done, nothing left on the thread's connection: the clock still says the deadline has
    # passed, and a search without one reads to its end, with the same hits the whole search found.
    assert search(index, None) == expected


def test_the_service_passes_its_deadline_to_the_index_and_its_thread_is_free_after(tmp_path: Path) -> None:
    index = _sqlite_index(tmp_path / "i.db")
    service = SearchService(index, fakes.HashEmbedder(), workers=1)
    deadline = time.monotonic() + 3600  # far off in real time: only the index's own clock reaches it
    index.clock = steps = Steps(start=time.monotonic(), step=900.0)
    request = SearchRequest(phrases=[QUERY], mode="hybrid", query_vectors=[_unit(7).tolist()], deadline=deadline)
    with pytest.raises(DeadlineExceeded):
        service.search(T, request)
    assert steps.readings <= 12, f"the index calls ran on past the deadline ({steps.readings} readings)"
    # Its one worker thread is free at once: the index calls ended at the deadline, none is left running.
    assert service._pool.submit(lambda: "free").result(timeout=WAIT) == "free"

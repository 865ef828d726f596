"""A search hands its thread pool only the work that gains by it (issue 31: each hand-off costs CPU,
80 a second at c=8 with ten a request): the phrases' embedding and their vector searches go to the pool
in one hand-off while the keyword searches run on the caller's thread; the pool thread that embedded
them hands every other phrase's vector search to a second, so two walk while the caller waits. With the
vectors given, the walks start at once beside the keyword searches, and one pool thread walks them all.
The hits are those of the same index calls, fused the same way."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from mcp.client import Client

from ragmcp.bootstrap import build_registry, build_services
from ragmcp.domain.models import Principal, SearchFilter
from ragmcp.mcp.caller import Caller, current_caller
from ragmcp.mcp.server import build_server
from ragmcp.retrieval.service import SearchRequest, SearchService
from ragmcp.security.identity import open_credential
from tests import fakes

PHRASES = ["heron nest reeds", "pond water level", "copper prices", "reed beds in winter", "the heron"]
TEXTS = [
    "The heron builds its nest in the reeds by the pond.",
    "The pond's water level fell in a dry summer.",
    "Copper prices rose in March on low stocks.",
    "Reed beds stand brown in winter; herons fish the open water.",
]


class ThreadsSeen(fakes.MemorySearchIndex):
    """The in-memory index, recording which thread made each search."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: dict[str, list[int]] = {"fts": [], "vector": []}

    def search_fts(self, principal: Principal, query: str, flt: SearchFilter, k: int, **kw: Any) -> Any:
        self.threads["fts"].append(threading.get_ident())
        return super().search_fts(principal, query, flt, k, **kw)

    def search_vector(self, principal: Principal, vector: np.ndarray, flt: SearchFilter, k: int, **kw: Any) -> Any:
        self.threads["vector"].append(threading.get_ident())
        return super().search_vector(principal, vector, flt, k, **kw)


@pytest.fixture
def index() -> ThreadsSeen:
    return fakes.index_of_texts(TEXTS, ThreadsSeen())


def test_keyword_searches_run_on_the_callers_thread_and_the_pool_embeds_and_walks_in_two_hand_offs(
    index: ThreadsSeen,
) -> None:
    service = SearchService(index, fakes.HashEmbedder())
    handed: list[object] = []
    submit = service._pool.submit
    service._pool.submit = lambda fn, *a, **kw: handed.append(fn) or submit(fn, *a, **kw)  # type: ignore[method-assign]
    caller = threading.get_ident()

    result = service.search(Principal(tenant="t"), SearchRequest(phrases=PHRASES, mode="hybrid", top_k=4))

    assert index.threads["fts"] == [caller] * len(PHRASES)
    # The phrases are embedded and phrases 0, 2 and 4 vector-searched in one hand-off, whose thread hands
    # 1 and 3 to another; the similarities of keyword-only hits (if any) are measured after, on the
    # caller's thread.
    assert caller not in index.threads["vector"][: len(PHRASES)]
    assert handed == [service._walk, service._semantics]
    assert [hit.chunk.chunk_id for hit in result.hits][:1] == ["d0#0"]
    assert all(hit.fts_rank is not None or hit.vec_rank is not None for hit in result.hits)


def test_with_the_vectors_given_one_hand_off_walks_every_phrase_beside_the_keyword_searches(
    index: ThreadsSeen,
) -> None:
    """The bench's and proxysql's searches come with their vectors: the caller's thread searches the
    keyword side while a single pool thread walks; a second walker would be one more hand-off for a
    thread that has no core to itself."""
    service = SearchService(index, fakes.HashEmbedder())
    vectors = fakes.HashEmbedder().embed_queries(PHRASES).tolist()
    handed: list[object] = []
    submit = service._pool.submit
    service._pool.submit = lambda fn, *a, **kw: handed.append(fn) or submit(fn, *a, **kw)  # type: ignore[method-assign]
    caller = threading.get_ident()
    request = SearchRequest(phrases=PHRASES, mode="hybrid", top_k=4, query_vectors=vectors)

    result = service.search(Principal(tenant="t"), request)

    assert handed == [service._walk]
    assert index.threads["fts"] == [caller] * len(PHRASES)
    walkers = index.threads["vector"][: len(PHRASES)]
    assert caller not in walkers and len(set(walkers)) == 1
    # The same hits as the same search embedding its phrases itself (split over two walkers).
    embedded = SearchService(index, fakes.HashEmbedder()).search(
        Principal(tenant="t"), SearchRequest(phrases=PHRASES, mode="hybrid", top_k=4)
    )
    assert [h.model_dump() for h in result.hits] == [h.model_dump() for h in embedded.hits]
    assert result.hits and [hit.chunk.chunk_id for hit in result.hits][:1] == ["d0#0"]


def test_a_keyword_only_search_hands_the_pool_nothing(index: ThreadsSeen) -> None:
    service = SearchService(index, fakes.HashEmbedder())
    handed: list[object] = []
    submit = service._pool.submit
    service._pool.submit = lambda fn, *a, **kw: handed.append(fn) or submit(fn, *a, **kw)  # type: ignore[method-assign]

    result = service.search(Principal(tenant="t"), SearchRequest(phrases=["copper prices"], mode="fts"))

    assert handed == [] and index.threads["vector"] == []
    assert [hit.chunk.chunk_id for hit in result.hits] == ["d2#0"]


def test_a_keyword_search_with_a_floor_hands_the_pool_only_the_embedding(index: ThreadsSeen) -> None:
    """The floor measures the hits' cosines, so the phrases are embedded (on the pool); with no vector side
    nothing is walked, and no second thread is handed a share of walks that are not made."""
    service = SearchService(index, fakes.HashEmbedder())
    handed: list[object] = []
    submit = service._pool.submit
    service._pool.submit = lambda fn, *a, **kw: handed.append(fn) or submit(fn, *a, **kw)  # type: ignore[method-assign]

    request = SearchRequest(phrases=["copper prices", "pond water"], mode="fts", floor=0.01)
    result = service.search(Principal(tenant="t"), request)

    assert handed == [service._walk]
    assert [hit.chunk.chunk_id for hit in result.hits][:1] == ["d2#0"]
    assert all(hit.similarity is not None for hit in result.hits)


@pytest.mark.parametrize(
    ("profile", "tool", "arguments", "empty"),
    [
        ("mindset", "rag_search", {"search_phrases": ["heron nest", "reed beds"]}, {"segments": []}),
        ("kb", "kb_search", {"query": "heron nest"}, {"results": [], "count": 0}),
        ("ragbox", "search_documents", {"query": "heron nest"}, None),
    ],
)
def test_a_search_tool_searches_on_its_tool_thread_without_another_hand_off(
    tmp_path: Path, profile: str, tool: str, arguments: dict[str, Any], empty: dict[str, Any] | None
) -> None:
    """The registry runs a tool body on a tool thread's own loop, off the server's (offloop.py): the
    mindset rag_search, kb_search and ragbox's search_documents search there, in line, instead of
    handing the search to a further thread."""
    services = build_services(fakes.settings(tmp_path / "data"), fakes.adapters())
    on_the_body_thread: list[bool] = []
    search = services.search.search

    def search_and_tell(principal: Principal, request: SearchRequest) -> Any:
        on_the_body_thread.append(_has_running_loop())
        return search(principal, request)

    services.search.search = search_and_tell  # type: ignore[method-assign]

    async def call() -> Any:
        current_caller.set(Caller(credential=open_credential("default"), identities=services.identities))
        async with Client(build_server(build_registry(services), profile)) as client:
            return await client.call_tool(tool, arguments)

    result = anyio.run(call)
    assert not result.is_error
    if empty is None:  # ragbox answers a JSON array as text
        assert [json.loads(c.text) for c in result.content] == [[]]
    else:
        assert result.structured_content is not None
        assert {k: result.structured_content[k] for k in empty} == empty
    assert on_the_body_thread == [True], "the search ran on a thread without the tool body's loop"


def _has_running_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True

"""A document's text is read no further than the answer's byte limit (issue 29): `resources/read`
and `rag.get_docs` over a document far larger than their limit fetch a batch or two of its chunks,
not all of them, hold a fraction of it in memory, and answer its text cut at the limit (with
`truncated`), through the real HTTP app over a real SQLite index.

The limits are lowered here (64 KB) so that a document of 4 MB is twenty times the limit, as a
50 MB document is to the real ones, at a small cost."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pytest
from starlette.testclient import TestClient

from ragmcp.bootstrap import Services, build_registry, build_services
from ragmcp.domain.models import Chunk, Document
from ragmcp.http import create_app
from ragmcp.mcp import proxysql, resources
from ragmcp.retrieval.catalog import TEXT_BATCH
from ragmcp.settings import Settings

CHUNKS = 2000
CHUNK_CHARS = 2000
PER_PAGE = 10
LIMIT = 64_000
DOC_ID = "docs:big.txt"
URI = "ragmcp://documents/docs%3Abig.txt"


@dataclass
class Big:
    http: TestClient
    services: Services
    fetched: list[int] = field(default_factory=list)
    """How many chunks each get_chunks call of the index asked for."""

    def rpc(self, method: str, params: dict, path: str = "/mcp") -> tuple[dict, int]:
        """The JSON-RPC result, and the traced memory's peak while it was answered."""
        self.fetched.clear()
        tracemalloc.start()
        try:
            response = self.http.post(path, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        body = response.json()
        assert "result" in body, body
        return body["result"], peak


def chunk_text(n: int) -> str:
    return f"[{n:05d}] " + "word " * ((CHUNK_CHARS - 8) // 5)


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Big]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("bounded") / "data", host="testserver", open=True)
    services = build_services(settings)
    doc = Document(
        tenant="default",
        doc_id=DOC_ID,
        source="docs",
        path="big.txt",
        title="A big document",
        file_name="big.txt",
        file_type="txt",
        content_hash="0" * 64,
        chunk_count=CHUNKS,
        pages=CHUNKS // PER_PAGE,
    )
    chunks = [
        Chunk(
            chunk_id=f"{DOC_ID}#{n}",
            doc_id=DOC_ID,
            ordinal=n,
            text=chunk_text(n),
            headline="",
            summary="",
            page_start=n // PER_PAGE + 1,
            page_end=n // PER_PAGE + 1,
        )
        for n in range(CHUNKS)
    ]
    services.index.replace_document(doc, chunks, np.zeros((CHUNKS, services.embedder.dimension), dtype=np.float32))
    services.documents.put(doc)
    big = Big(TestClient(create_app(services, build_registry(services)), base_url="http://testserver"), services)
    get_chunks = services.index.get_chunks

    def counted(tenant: str, chunk_ids: list[str]) -> dict:
        big.fetched.append(len(chunk_ids))
        return get_chunks(tenant, chunk_ids)

    services.index.get_chunks = counted  # type: ignore[method-assign]
    with big.http:
        big.rpc("resources/read", {"uri": f"{URI}/pages/1"})  # the app's first request, which sets up what it keeps
        yield big


DOCUMENT_BYTES = CHUNKS * CHUNK_CHARS
BOUNDED_FETCH = LIMIT // CHUNK_CHARS + TEXT_BATCH
"""The chunks a read within LIMIT may fetch: those that fit, and the rest of their last batch."""


def test_resources_read_of_a_large_document_is_cut_at_the_limit_and_reads_no_further(big, monkeypatch) -> None:
    monkeypatch.setattr(resources, "READ_TEXT_BYTES_MAX", LIMIT)
    result, peak = big.rpc("resources/read", {"uri": URI})
    [contents] = result["contents"]
    text = contents["text"]
    assert LIMIT - CHUNK_CHARS < len(text.encode()) <= LIMIT
    assert text.startswith(chunk_text(0) + "\n\n" + chunk_text(1)) and contents["_meta"] == {"truncated": True}
    assert sum(big.fetched) <= BOUNDED_FETCH, big.fetched
    assert peak < DOCUMENT_BYTES / 8, f"peak {peak} bytes while reading {LIMIT} of a {DOCUMENT_BYTES}-byte document"


def test_a_page_is_read_whole_when_it_fits_and_a_missing_page_is_not_found(big, monkeypatch) -> None:
    monkeypatch.setattr(resources, "READ_TEXT_BYTES_MAX", LIMIT)
    result, _ = big.rpc("resources/read", {"uri": f"{URI}/pages/3"})
    [contents] = result["contents"]
    assert contents["text"] == "\n\n".join(chunk_text(n) for n in range(20, 30)) and "_meta" not in contents
    assert sum(big.fetched) == TEXT_BATCH  # pages 1-6 are in the first batch: it stops past page 3
    missing = big.http.post(
        "/mcp",
        json={"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": f"{URI}/pages/{CHUNKS}"}},
    ).json()
    assert missing["error"]["code"] == -32002


def test_get_docs_of_a_large_document_cuts_its_body_at_the_limit_and_reads_no_further(big, monkeypatch) -> None:
    monkeypatch.setattr(proxysql, "CHUNK_BYTES_MAX", LIMIT)
    arguments = {"doc_ids": [DOC_ID], "return": {"include_body": True, "include_metadata": True}}
    result, peak = big.rpc("tools/call", {"name": "rag.get_docs", "arguments": arguments}, path="/mcp/proxysql")
    answer = json.loads(result["content"][0]["text"])
    [doc] = answer["docs"]
    assert answer["truncated"] is True and doc["doc_id"] == DOC_ID
    assert doc["body"].startswith(chunk_text(0) + "\n\n" + chunk_text(1))
    assert LIMIT - CHUNK_CHARS < len(json.dumps(doc, ensure_ascii=False).encode()) <= LIMIT
    assert sum(big.fetched) <= BOUNDED_FETCH, big.fetched
    assert peak < DOCUMENT_BYTES / 8, f"peak {peak} bytes while reading {LIMIT} of a {DOCUMENT_BYTES}-byte document"

"""The kb profile (contracts/kb-mcp-server.md): every request and response example, and its errors.

The module runs its own ragmcp (a few shared documents, a memory file with its sidecar), so the
notes and uploads it adds never reach the index the other profiles' contract tests share.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import random
import shutil
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from mcp.types import INVALID_PARAMS
from starlette.testclient import TestClient

import ragmcp
from ragmcp.bootstrap import Services, build_registry, build_services
from ragmcp.domain.models import COLLECTION_PREFIX, utcnow
from ragmcp.http import create_app
from ragmcp.settings import Settings
from tests.contracts.conftest import ContractClient
from tests.contracts.response_schemas import assert_valid

KB = "/mcp/kb"
KB_TOOLS = {
    "kb_search",
    "kb_addnote",
    "kb_upload_start",
    "kb_upload_chunk",
    "kb_upload_finish",
    "kb_update_note",
    "kb_get",
    "kb_status",
    "kb_jobs",
}
SHARED = ("multi_page.pdf", "wiki.md", "word_sample.docx")
PART = 64 * 1024


def assert_document(doc: dict[str, Any]) -> None:
    assert all(chunk["chunk_id"].startswith(doc["doc_id"] + "#") for chunk in doc["chunks"])


def unsigned(doc: dict[str, Any]) -> dict[str, Any]:
    """A document without its link's expiry and signature, which change with the second it is asked."""
    return {**doc, "url": doc["url"].split("?", 1)[0]}


def assert_hits(payload: dict[str, Any]) -> list[dict[str, Any]]:
    assert payload["count"] == len(payload["results"])
    return payload["results"]


@pytest.fixture(scope="module")
def kb_data(shared_documents: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("kb")
    docs = root / "docs"
    (docs / "memory").mkdir(parents=True)
    for name in SHARED:
        shutil.copy(shared_documents / "source" / name, docs / name)
    (docs / "memory" / "feedback_testing.md").write_text(
        "# Feedback on testing\n\nThe user wants integration tests to hit a real database, not mocks: "
        "a mocked migration once hid a broken schema change in production.\n"
    )
    sidecar = {"tags": ["collection:memory", "feedback", "testing"]}
    (docs / "memory" / "feedback_testing.md.metadata.json").write_text(json.dumps(sidecar))
    return root


@pytest.fixture(scope="module")
def kb_services(kb_data: Path) -> Services:
    # The relevance floor off: these tests check kb_search's filters and modes, not its relevance.
    services = build_services(Settings(data_dir=kb_data / "index", host="testserver", open=True, relevance_floor=0))
    source = services.register_folder("default", "docs", str(kb_data / "docs"))
    report = services.ingest.sync(source)
    assert report.failed == 0, [j.error for j in report.jobs]
    return services


@pytest.fixture(scope="module")
def kb(kb_services: Services) -> Iterator[ContractClient]:
    app = create_app(kb_services, build_registry(kb_services))
    with TestClient(app, base_url="http://testserver") as http:
        yield ContractClient(http, kb_services)


def ok(client: ContractClient, tool: str, arguments: dict) -> Any:
    """The tool's payload, valid against the contract's schema (schemas/kb/); its structured content
    and its text content say the same."""
    body = client.call(tool, arguments, path=KB)
    assert "error" not in body, body
    result = body["result"]
    assert result.get("isError") is not True, body
    text = json.loads(result["content"][0]["text"])
    assert result["structuredContent"] == text
    assert_valid(text, "kb", tool)
    return text


def rpc_error(client: ContractClient, tool: str, arguments: dict, code: int = INVALID_PARAMS) -> str:
    """The JSON-RPC error answering the call (never a tool result); its message."""
    body = client.call(tool, arguments, path=KB)
    assert "result" not in body, body
    assert body["jsonrpc"] == "2.0" and isinstance(body["id"], int)
    assert body["error"]["code"] == code, body
    message = body["error"]["message"]
    assert isinstance(message, str) and "Traceback" not in message
    return message


def stored_tags(services: Services, document_id: int) -> tuple[str, ...]:
    doc = services.documents.get_by_number("default", document_id)
    assert doc is not None
    return doc.tags


def collections_of(tags: tuple[str, ...]) -> list[str]:
    return [t for t in tags if t.startswith(COLLECTION_PREFIX)]


def add_note(client: ContractClient, arguments: dict) -> dict[str, Any]:
    added = ok(client, "kb_addnote", arguments)
    return added


def job(client: ContractClient, job_id: str) -> dict[str, Any]:
    found = ok(client, "kb_jobs", {"job_id": job_id})
    assert found["count"] == 1
    return found["jobs"][0]


@pytest.fixture(scope="module")
def notes(kb: ContractClient) -> dict[str, dict[str, Any]]:
    """The notes of the contract's examples, added through kb_addnote and ingested."""
    added = {
        # "Add a note with default collection"
        "default": add_note(kb, {"text": "User prefers concise responses"}),
        # "Add a note to a specific collection"
        "memory": add_note(
            kb, {"text": "User prefers concise responses", "collection": "memory", "tags": ["feedback"]}
        ),
        # "Add a note to a collection replaces existing collection tag"
        "some": add_note(kb, {"text": "some note", "collection": "memory"}),
        "email": add_note(
            kb,
            {
                "text": "Email preferences: the user reads email once a day and wants one digest, "
                "never a separate email for each alert.",
                "collection": "memory",
                "tags": ["feedback", "email"],
            },
        ),
        "pension": add_note(
            kb,
            {
                "text": "Pension revaluation: deferred pensions are revalued every April in line with CPI, "
                "capped at 5% a year for service before 2009 and 2.5% after.",
            },
        ),
        "errors": add_note(
            kb,
            {
                "text": "Runbook: when the error log shows 'embedder timeout', restart the ingest worker.",
                "collection": "ops",
            },
        ),
    }
    kb.services.tasks.join()
    for note in added.values():
        done = job(kb, note["job_id"])
        assert done["status"] == "succeeded", done
        assert done["type"] == "note"
        assert done["document_ids"] == [note["document_id"]]
    return added


# --- tools ----------------------------------------------------------------------------------


def test_the_kb_profile_lists_its_tools(kb: ContractClient) -> None:
    body = kb.rpc("tools/list", {}, path=KB).json()
    tools = {t["name"]: t for t in body["result"]["tools"]}
    assert set(tools) == KB_TOOLS
    for name, tool in tools.items():
        assert tool["inputSchema"]["type"] == "object", name
        assert tool["description"], name
    assert tools["kb_search"]["annotations"]["readOnlyHint"] is True
    assert tools["kb_addnote"]["annotations"]["readOnlyHint"] is False
    assert set(tools["kb_search"]["inputSchema"]["properties"]) == {"query", "top", "collection", "tags", "fts_only"}
    assert tools["kb_search"]["inputSchema"]["required"] == ["query"]


# --- Add note tool, collection management ----------------------------------------------------


def test_addnote_applies_the_default_collection(kb: ContractClient, notes: dict) -> None:
    note = notes["default"]
    assert note["collection"] == "documents"
    assert collections_of(stored_tags(kb.services, note["document_id"])) == ["collection:documents"]
    doc = ok(kb, "kb_get", {"document_id": note["document_id"]})
    assert_document(doc)
    assert doc["collection"] == "documents" and doc["tags"] == [] and doc["kind"] == "note"
    assert doc["doc_id"] == note["doc_id"]
    assert "User prefers concise responses" in doc["chunks"][0]["text"]


def test_addnote_to_a_collection_with_tags(kb: ContractClient, notes: dict) -> None:
    note = notes["memory"]
    assert set(stored_tags(kb.services, note["document_id"])) == {"collection:memory", "feedback"}
    doc = ok(kb, "kb_get", {"document_id": note["document_id"]})
    assert (doc["collection"], doc["tags"]) == ("memory", ["feedback"])


def test_a_note_has_exactly_one_collection(kb: ContractClient, notes: dict) -> None:
    assert collections_of(stored_tags(kb.services, notes["some"]["document_id"])) == ["collection:memory"]
    for doc in kb.services.documents.list("default"):
        assert len(collections_of(doc.tags)) == 1, doc.doc_id


def test_addnote_answers_at_once_and_ingests_in_the_background(kb: ContractClient) -> None:
    added = add_note(kb, {"text": "Background ingestion check: quokka", "tags": ["async"]})
    kb.services.tasks.join()
    done = job(kb, added["job_id"])
    assert done["status"] == "succeeded" and done["document_ids"] == [added["document_id"]]
    assert done["counts"]["documents"] == 1


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"text": ""},
        {"text": "   "},
        {"text": "x", "collection": ""},
        {"text": "x", "collection": "two words"},
        {"text": "x", "tags": ["collection:memory"]},
        {"text": "x", "tags": "feedback"},
        {"text": "x", "unknown": 1},
    ],
)
def test_addnote_rejects_bad_arguments(kb: ContractClient, arguments: dict) -> None:
    before = len(kb.services.jobs.list("default", limit=10_000))
    rpc_error(kb, "kb_addnote", arguments)
    assert len(kb.services.jobs.list("default", limit=10_000)) == before


# --- Search tool ----------------------------------------------------------------------------


def test_search(kb: ContractClient, notes: dict) -> None:
    payload = ok(kb, "kb_search", {"query": "pension revaluation", "top": 5})
    hits = assert_hits(payload)
    assert 1 <= len(hits) <= 5 and payload["mode"] == kb.services.settings.search.search_mode == "hybrid_scores"
    top = hits[0]
    assert top["document_id"] == notes["pension"]["document_id"]
    assert "Pension revaluation" in top["text"]
    assert top["collection"] == "documents" and top["tags"] == []
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)


def test_search_with_collection_filter(kb: ContractClient, notes: dict) -> None:
    hits = assert_hits(ok(kb, "kb_search", {"query": "email preferences", "collection": "memory"}))
    assert hits and {h["collection"] for h in hits} == {"memory"}
    assert hits[0]["document_id"] == notes["email"]["document_id"]
    everywhere = assert_hits(ok(kb, "kb_search", {"query": "email preferences", "top": 50}))
    assert {h["collection"] for h in everywhere} > {"memory"}


def test_search_with_tags_and_collection(kb: ContractClient, notes: dict) -> None:
    hits = assert_hits(ok(kb, "kb_search", {"query": "feedback", "tags": ["email"], "collection": "memory"}))
    assert [h["document_id"] for h in hits] == [notes["email"]["document_id"]]
    assert not assert_hits(ok(kb, "kb_search", {"query": "feedback", "tags": ["email"], "collection": "ops"}))
    assert not assert_hits(ok(kb, "kb_search", {"query": "feedback", "tags": ["email", "nope"]}))


def test_search_results_strip_collection_tags(kb: ContractClient, notes: dict) -> None:
    assert set(stored_tags(kb.services, notes["email"]["document_id"])) == {"collection:memory", "feedback", "email"}
    hits = assert_hits(ok(kb, "kb_search", {"query": "email digest", "collection": "memory"}))
    hit = next(h for h in hits if h["document_id"] == notes["email"]["document_id"])
    assert hit["collection"] == "memory"
    assert hit["tags"] == ["feedback", "email"]


def test_search_fts_only(kb: ContractClient, notes: dict) -> None:
    payload = ok(kb, "kb_search", {"query": "error log", "fts_only": True})
    hits = assert_hits(payload)
    assert payload["mode"] == "fts"
    assert hits[0]["document_id"] == notes["errors"]["document_id"]
    assert all(h["vector_score"] is None and h["fts_score"] is not None for h in hits)
    # Keywords only: a word in no document finds nothing, where semantic search always finds something.
    assert assert_hits(ok(kb, "kb_search", {"query": "xylophonequark", "fts_only": True})) == []
    assert assert_hits(ok(kb, "kb_search", {"query": "xylophonequark"}))


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"query": ""},
        {"query": "  "},
        {"query": "x", "top": 0},
        {"query": "x", "top": 101},
        {"query": "x", "top": "5"},
        {"query": "x", "fts_only": "yes"},
        {"query": "x", "tags": ["collection:memory"]},
        {"query": "x", "collection": "a:b"},
        {"query": "x", "extra": True},
        {"query": "x" * 9000},
    ],
)
def test_search_rejects_bad_arguments(kb: ContractClient, arguments: dict) -> None:
    rpc_error(kb, "kb_search", arguments)


# --- Get document tool ----------------------------------------------------------------------


def test_get_by_document_id(kb: ContractClient) -> None:
    pdf = kb.services.documents.get("default", "docs:multi_page.pdf")
    doc = ok(kb, "kb_get", {"document_id": pdf.number})
    assert_document(doc)
    assert doc["document_id"] == pdf.number and doc["doc_id"] == "docs:multi_page.pdf"
    assert doc["file_type"] == "pdf" and doc["collection"] == "documents"
    assert len(doc["chunks"]) == doc["chunk_count"] == pdf.chunk_count > 0 and doc["truncated"] is False
    assert [c["index"] for c in doc["chunks"]] == list(range(pdf.chunk_count))
    assert doc["chunks"][0]["page"] == 1
    assert unsigned(ok(kb, "kb_get", {"document_id": "docs:multi_page.pdf"})) == unsigned(doc)
    assert unsigned(ok(kb, "kb_get", {"document_id": str(pdf.number)})) == unsigned(doc)
    capped = ok(kb, "kb_get", {"document_id": pdf.number, "max_chunks": 1})
    assert len(capped["chunks"]) == 1 and capped["truncated"] is True


def test_get_by_source_path(kb: ContractClient) -> None:
    found = ok(kb, "kb_get", {"source_path": "memory/feedback_testing.md"})
    assert found["count"] == 1
    doc = found["documents"][0]
    assert_document(doc)
    assert doc["source_path"] == "memory/feedback_testing.md"
    # "Get results strip collection tags"
    assert doc["collection"] == "memory" and doc["tags"] == ["feedback", "testing"]
    assert "real database" in doc["chunks"][0]["text"]
    again = ok(kb, "kb_get", {"source_path": "docs/memory/feedback_testing.md"})
    assert again["count"] == 1 and [unsigned(d) for d in again["documents"]] == [unsigned(doc)]


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"document_id": 1, "source_path": "wiki.md"},
        {"document_id": 99_999},
        {"document_id": "docs:nothing.pdf"},
        {"document_id": True},
        {"document_id": 1.5},
        {"source_path": "memory/none.md"},
        {"source_path": ""},
    ],
)
def test_get_errors(kb: ContractClient, arguments: dict) -> None:
    rpc_error(kb, "kb_get", arguments)


def test_get_unknown_document_says_not_found(kb: ContractClient) -> None:
    assert "not found" in rpc_error(kb, "kb_get", {"document_id": 99_999})


# --- Update note tool -----------------------------------------------------------------------


def test_update_note(kb: ContractClient) -> None:
    note = add_note(kb, {"text": "Preference: user prefers zebrawood prose", "collection": "memory", "tags": ["style"]})
    kb.services.tasks.join()
    text = "Updated preference: user prefers bullet points"
    doc = ok(kb, "kb_update_note", {"document_id": note["document_id"], "text": text})
    assert_document(doc)
    assert doc["document_id"] == note["document_id"] and doc["kind"] == "note"
    assert (doc["collection"], doc["tags"]) == ("memory", ["style"])
    assert text in doc["chunks"][0]["text"]
    hits = assert_hits(ok(kb, "kb_search", {"query": "bullet points", "collection": "memory", "fts_only": True}))
    assert hits[0]["document_id"] == note["document_id"] and text in hits[0]["text"]
    assert not assert_hits(ok(kb, "kb_search", {"query": "zebrawood", "collection": "memory", "fts_only": True}))
    by_doc_id = ok(kb, "kb_update_note", {"document_id": note["doc_id"], "text": text + " and short lines"})
    assert by_doc_id["document_id"] == note["document_id"]


def test_update_note_moves_it_to_exactly_one_other_collection(kb: ContractClient) -> None:
    note = add_note(kb, {"text": "Moving note about heliotrope", "tags": ["keep"]})
    kb.services.tasks.join()
    assert collections_of(stored_tags(kb.services, note["document_id"])) == ["collection:documents"]
    doc = ok(
        kb, "kb_update_note", {"document_id": note["document_id"], "text": "Moved heliotrope", "collection": "memory"}
    )
    assert (doc["collection"], doc["tags"]) == ("memory", ["keep"])
    assert collections_of(stored_tags(kb.services, note["document_id"])) == ["collection:memory"]
    query = {"query": "heliotrope", "fts_only": True}
    assert not assert_hits(ok(kb, "kb_search", {**query, "collection": "documents"}))
    assert assert_hits(ok(kb, "kb_search", {**query, "collection": "memory"}))[0]["document_id"] == doc["document_id"]


def test_update_a_non_existent_document(kb: ContractClient) -> None:
    # The contract's own example id, 42, names no document here (this index holds far fewer).
    assert kb.services.documents.get_by_number("default", 42) is None
    message = rpc_error(kb, "kb_update_note", {"document_id": 42, "text": "Updated preference: bullet points"})
    assert "not found" in message
    assert "not found" in rpc_error(kb, "kb_update_note", {"document_id": "notes:none.md", "text": "x"})


def test_update_a_non_note_document(kb: ContractClient) -> None:
    pdf = kb.services.documents.get("default", "docs:multi_page.pdf")
    before = pdf.content_hash
    message = rpc_error(kb, "kb_update_note", {"document_id": pdf.number, "text": "overwrite the pdf"})
    assert "only notes can be updated" in message
    assert kb.services.documents.get("default", "docs:multi_page.pdf").content_hash == before


@pytest.mark.parametrize(
    "arguments",
    [{}, {"document_id": 1}, {"text": "x"}, {"document_id": 1, "text": ""}, {"document_id": [1], "text": "x"}],
)
def test_update_note_rejects_bad_arguments(kb: ContractClient, arguments: dict) -> None:
    rpc_error(kb, "kb_update_note", arguments)


# --- Chunked file upload tools --------------------------------------------------------------


def three_megabyte_pdf(shared_documents: Path) -> bytes:
    """Real pages of the shared PDFs, repeated until the file holds at least 3 MB."""
    from pypdf import PdfReader, PdfWriter

    logging.getLogger("pypdf").setLevel(logging.ERROR)
    writer = PdfWriter()
    while True:
        for name in ("amt_handbook_sample.pdf", "redp5110_sampled.pdf", "normal_4pages.pdf"):
            for page in PdfReader(shared_documents / "source" / name).pages:
                writer.add_page(page)
        out = io.BytesIO()
        writer.write(out)
        if out.tell() >= 3 * 1024 * 1024:
            return out.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def parts_of(data: bytes, size: int = PART) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def start(client: ContractClient, arguments: dict) -> str:
    started = ok(client, "kb_upload_start", arguments)
    assert str(uuid.UUID(started["upload_id"])) == started["upload_id"]
    return started["upload_id"]


def send(client: ContractClient, upload_id: str, index: int, part: bytes) -> dict[str, Any]:
    stored = ok(client, "kb_upload_chunk", {"upload_id": upload_id, "data": b64(part), "chunk_index": index})
    assert (stored["upload_id"], stored["chunk_index"], stored["size"]) == (upload_id, index, len(part))
    return stored


def staged_files(services: Services, upload_id: str) -> list[Path]:
    folder = services.settings.server.data_dir / "staging" / "default" / upload_id
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def test_start_an_upload(kb: ContractClient) -> None:
    arguments = {"filename": "report.pdf", "total_size": 5242880, "tags": ["insurance"], "collection": "documents"}
    upload_id = start(kb, arguments)
    session = kb.services.uploads.uploads.get("default", upload_id)
    assert (session.filename, session.total_size, session.tags, session.collection) == (
        "report.pdf",
        5242880,
        ("insurance",),
        "documents",
    )
    # "Upload a chunk": the decoded part is written to the staging area.
    stored = send(kb, upload_id, 0, b"%PDF-1.7 first part")
    assert (stored["chunks_received"], stored["bytes_received"], stored["total_size"]) == (1, 19, 5242880)
    assert [f.read_bytes() for f in staged_files(kb.services, upload_id)] == [b"%PDF-1.7 first part"]
    # 19 bytes of a declared 5 MB: finishing now is refused, and the upload stays to be completed.
    assert "total_size" in rpc_error(kb, "kb_upload_finish", {"upload_id": upload_id})
    assert kb.services.uploads.uploads.get("default", upload_id) is not None


def test_upload_multiple_chunks_in_sequence(kb: ContractClient) -> None:
    text = "# Sequence\n\n" + "".join(f"Line {n}: the okapi sequence test.\n" for n in range(400))
    data = text.encode()
    parts = parts_of(data, 4096)
    upload_id = start(kb, {"filename": "sequence.md", "total_size": len(data), "tags": ["seq"], "collection": "memory"})
    for index, part in enumerate(parts):
        stored = send(kb, upload_id, index, part)
        assert stored["chunks_received"] == index + 1
        assert stored["bytes_received"] == sum(len(p) for p in parts[: index + 1])
    finished = ok(kb, "kb_upload_finish", {"upload_id": upload_id})
    assert finished["filename"] == "sequence.md"
    assert staged_files(kb.services, upload_id) == []
    kb.services.tasks.join()
    done = job(kb, finished["job_id"])
    assert (done["status"], done["type"], done["target"]) == ("succeeded", "upload", "sequence.md")
    (number,) = done["document_ids"]
    doc = ok(kb, "kb_get", {"document_id": number})
    assert (doc["collection"], doc["tags"], doc["size_bytes"]) == ("memory", ["seq"], len(data))
    # The upload is finished: its id is gone.
    assert "not found" in rpc_error(kb, "kb_upload_finish", {"upload_id": upload_id})


def test_upload_a_3mb_pdf_in_64kb_parts_out_of_order(kb: ContractClient, shared_documents: Path) -> None:
    data = three_megabyte_pdf(shared_documents)
    assert len(data) >= 3 * 1024 * 1024
    parts = parts_of(data)
    upload_id = start(
        kb, {"filename": "fasteners-3mb.pdf", "total_size": len(data), "tags": ["insurance"], "collection": "reports"}
    )
    order = list(range(len(parts)))
    random.Random(7).shuffle(order)
    assert order != sorted(order)
    for index in order:
        send(kb, upload_id, index, parts[index])
    # A repeated part changes nothing.
    again = send(kb, upload_id, order[3], parts[order[3]])
    assert (again["chunks_received"], again["bytes_received"]) == (len(parts), len(data))
    assert len(staged_files(kb.services, upload_id)) == len(parts)

    finished = ok(kb, "kb_upload_finish", {"upload_id": upload_id})
    assert staged_files(kb.services, upload_id) == []
    kb.services.tasks.join()
    done = job(kb, finished["job_id"])
    assert done["status"] == "succeeded", done
    (number,) = done["document_ids"]
    doc = ok(kb, "kb_get", {"document_id": number, "max_chunks": 2000})
    assert doc["size_bytes"] == len(data) and doc["pages"] > 40
    original = kb.services.blobs.read(kb.services.sources.get("default", doc["source"]).location, doc["source_path"])
    assert original == data  # reassembled in index order, byte for byte

    query = "Boots self-locking nut spring locking section"
    hits = assert_hits(ok(kb, "kb_search", {"query": query}))
    assert hits[0]["document_id"] == number
    assert (hits[0]["collection"], hits[0]["tags"], hits[0]["file_type"]) == ("reports", ["insurance"], "pdf")
    assert "self-locking" in hits[0]["text"]
    in_reports = assert_hits(ok(kb, "kb_search", {"query": query, "collection": "reports", "fts_only": True}))
    assert in_reports and {h["document_id"] for h in in_reports} == {number}


def test_upload_size_is_checked_against_total_size(kb: ContractClient) -> None:
    upload_id = start(kb, {"filename": "short.txt", "total_size": 10})
    send(kb, upload_id, 0, b"12345")
    assert "total_size" in rpc_error(kb, "kb_upload_finish", {"upload_id": upload_id})
    message = rpc_error(
        kb, "kb_upload_chunk", {"upload_id": upload_id, "data": b64(b"too many bytes"), "chunk_index": 1}
    )
    assert "total_size" in message
    # A gap in the parts is named.
    send(kb, upload_id, 2, b"123")
    assert "missing" in rpc_error(kb, "kb_upload_finish", {"upload_id": upload_id})
    send(kb, upload_id, 1, b"12")
    finished = ok(kb, "kb_upload_finish", {"upload_id": upload_id})
    kb.services.tasks.join()
    assert job(kb, finished["job_id"])["status"] == "succeeded"


def test_upload_with_invalid_upload_id(kb: ContractClient) -> None:
    unknown = str(uuid.uuid4())
    message = rpc_error(kb, "kb_upload_chunk", {"upload_id": unknown, "data": b64(b"abc"), "chunk_index": 0})
    assert "not found" in message
    assert "not found" in rpc_error(kb, "kb_upload_finish", {"upload_id": unknown})
    assert "not found" in rpc_error(kb, "kb_upload_finish", {"upload_id": "../../etc/passwd"})


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("kb_upload_start", {"filename": "report.pdf"}),
        ("kb_upload_start", {"filename": "report.pdf", "total_size": 0}),
        ("kb_upload_start", {"filename": "report.pdf", "total_size": -1}),
        ("kb_upload_start", {"filename": "report.pdf", "total_size": 10**12}),
        ("kb_upload_start", {"filename": "program.exe", "total_size": 10}),
        ("kb_upload_start", {"filename": "report.pdf", "total_size": 10, "tags": ["collection:memory"]}),
        ("kb_upload_start", {"filename": "report.pdf", "total_size": 10, "collection": ""}),
        ("kb_upload_chunk", {"upload_id": "x", "data": "abc"}),
        ("kb_upload_chunk", {"upload_id": "x", "data": "abc", "chunk_index": -1}),
        ("kb_upload_finish", {}),
    ],
)
def test_upload_rejects_bad_arguments(kb: ContractClient, tool: str, arguments: dict) -> None:
    rpc_error(kb, tool, arguments)


def test_upload_chunk_rejects_bad_data(kb: ContractClient) -> None:
    upload_id = start(kb, {"filename": "data.csv", "total_size": 3 * 1024 * 1024})
    assert "base64" in rpc_error(
        kb, "kb_upload_chunk", {"upload_id": upload_id, "data": "not base64!", "chunk_index": 0}
    )
    too_big = b64(b"x" * (kb.services.settings.ingest.max_part_bytes + 1))
    rpc_error(kb, "kb_upload_chunk", {"upload_id": upload_id, "data": too_big, "chunk_index": 0})
    assert staged_files(kb.services, upload_id) == []
    # Base64 wrapped over lines (as MIME encoders write it) is accepted.
    part = b"id,name\n" + b"".join(b"%d,wrapped line\n" % n for n in range(20))
    wrapped = base64.encodebytes(part).decode()
    assert wrapped.count("\n") > 1
    stored = ok(kb, "kb_upload_chunk", {"upload_id": upload_id, "data": wrapped, "chunk_index": 0})
    assert stored["size"] == len(part)
    assert [f.read_bytes() for f in staged_files(kb.services, upload_id)] == [part]


def test_a_failed_ingest_is_a_failed_job(kb: ContractClient) -> None:
    data = b"%PDF-1.7 this is no pdf at all"
    upload_id = start(kb, {"filename": "broken.pdf", "total_size": len(data)})
    send(kb, upload_id, 0, data)
    finished = ok(kb, "kb_upload_finish", {"upload_id": upload_id})
    kb.services.tasks.join()
    failed = job(kb, finished["job_id"])
    assert failed["status"] == "failed" and failed["error"] and failed["document_ids"] == []


def test_abandoned_upload_is_removed_after_expiry(kb: ContractClient) -> None:
    data = b"a" * 3000
    upload_id = start(kb, {"filename": "abandoned.txt", "total_size": len(data)})
    send(kb, upload_id, 0, data[:1000])
    send(kb, upload_id, 1, data[1000:2000])
    assert len(staged_files(kb.services, upload_id)) == 2
    ttl = kb.services.settings.ingest.upload_ttl_seconds
    assert ttl == 600
    # Nine minutes on, the upload is still there.
    kb.services.uploads.sweep(now=utcnow() + timedelta(minutes=9))
    assert len(staged_files(kb.services, upload_id)) == 2
    assert kb.services.uploads.uploads.get("default", upload_id) is not None
    # Eleven minutes on, it and its parts are gone.
    assert kb.services.uploads.sweep(now=utcnow() + timedelta(minutes=11)) >= 1
    assert staged_files(kb.services, upload_id) == []
    assert kb.services.uploads.uploads.expired(utcnow() + timedelta(days=1)) == []
    message = rpc_error(kb, "kb_upload_chunk", {"upload_id": upload_id, "data": b64(data[2000:]), "chunk_index": 2})
    assert "not found" in message
    assert "not found" in rpc_error(kb, "kb_upload_finish", {"upload_id": upload_id})


def test_expired_uploads_are_swept_when_an_upload_starts(kb: ContractClient) -> None:
    """No janitor needed: starting an upload clears the expired ones first."""
    upload_id = start(kb, {"filename": "stale.txt", "total_size": 100})
    send(kb, upload_id, 0, b"stale")
    store = kb.services.uploads.uploads
    session = store.get("default", upload_id)
    store.put(session.model_copy(update={"expires_at": utcnow() - timedelta(seconds=1)}))
    assert "not found" in rpc_error(kb, "kb_upload_finish", {"upload_id": upload_id})  # expired on read
    assert len(staged_files(kb.services, upload_id)) == 1
    start(kb, {"filename": "fresh.txt", "total_size": 100})
    assert staged_files(kb.services, upload_id) == []
    assert store.expired(utcnow()) == []


def test_an_upload_survives_a_server_restart(kb: ContractClient, kb_data: Path) -> None:
    text = "# Restart\n\n" + "The capybara restart test survives a server restart.\n" * 200
    data = text.encode()
    parts = parts_of(data, 2048)
    upload_id = start(kb, {"filename": "restart.md", "total_size": len(data), "tags": ["restart"]})
    half = len(parts) // 2
    for index in range(half):
        send(kb, upload_id, index, parts[index])

    restarted = build_services(Settings(data_dir=kb_data / "index", host="testserver", open=True))
    app = create_app(restarted, build_registry(restarted))
    with TestClient(app, base_url="http://testserver") as http:
        again = ContractClient(http, restarted)
        for index in range(half, len(parts)):
            stored = send(again, upload_id, index, parts[index])
        assert (stored["chunks_received"], stored["bytes_received"]) == (len(parts), len(data))
        finished = ok(again, "kb_upload_finish", {"upload_id": upload_id})
        restarted.tasks.join()
        done = job(again, finished["job_id"])
        assert done["status"] == "succeeded", done
        hits = assert_hits(ok(again, "kb_search", {"query": "capybara restart", "fts_only": True}))
        assert hits[0]["document_id"] == done["document_ids"][0]
        assert (hits[0]["collection"], hits[0]["tags"]) == ("documents", ["restart"])
    assert staged_files(kb.services, upload_id) == []


# --- Status and jobs tools ------------------------------------------------------------------


def test_status(kb: ContractClient, notes: dict) -> None:
    status = ok(kb, "kb_status", {})
    services = kb.services
    assert status["status"] == "ok" and status["version"] == ragmcp.__version__
    assert status["embedding_model"] == services.embedder.model_id
    assert status["embedding_dimension"] == services.embedder.dimension == 384
    assert status["device"] == "cpu"
    counts = status["counts"]
    assert counts["documents"] == len(services.documents.list("default"))
    assert counts["chunks"] == services.index.count_chunks("default") > 0
    assert sum(counts["collections"].values()) == counts["documents"]
    assert {"documents", "memory", "ops"} <= set(counts["collections"])
    assert counts["jobs"]["succeeded"] >= len(notes)
    assert status["queue"] == {"state": "idle", "depth": 0, "queued": 0, "running": 0}
    rpc_error(kb, "kb_status", {"verbose": True})


def test_jobs(kb: ContractClient, notes: dict) -> None:
    listed = ok(kb, "kb_jobs", {})
    assert listed["count"] == len(listed["jobs"]) > 0
    created = [j["created_at"] for j in listed["jobs"]]
    assert created == sorted(created, reverse=True)
    assert {n["job_id"] for n in notes.values()} <= {j["job_id"] for j in ok(kb, "kb_jobs", {"limit": 500})["jobs"]}


def test_jobs_filtered_by_status(kb: ContractClient) -> None:
    data = b"%PDF-1.4 still no pdf"
    upload_id = start(kb, {"filename": "broken-again.pdf", "total_size": len(data)})
    send(kb, upload_id, 0, data)
    finished = ok(kb, "kb_upload_finish", {"upload_id": upload_id})
    kb.services.tasks.join()
    failed = ok(kb, "kb_jobs", {"status": "failed"})
    assert failed["jobs"] and {j["status"] for j in failed["jobs"]} == {"failed"}
    assert finished["job_id"] in {j["job_id"] for j in failed["jobs"]}
    succeeded = ok(kb, "kb_jobs", {"status": "succeeded"})
    assert succeeded["jobs"] and {j["status"] for j in succeeded["jobs"]} == {"succeeded"}
    assert ok(kb, "kb_jobs", {"job_id": finished["job_id"], "status": "succeeded"}) == {"jobs": [], "count": 0}


@pytest.mark.parametrize(
    "arguments", [{"status": "bogus"}, {"status": 1}, {"limit": 0}, {"limit": 501}, {"job_id": "nope"}]
)
def test_jobs_rejects_bad_arguments(kb: ContractClient, arguments: dict) -> None:
    rpc_error(kb, "kb_jobs", arguments)

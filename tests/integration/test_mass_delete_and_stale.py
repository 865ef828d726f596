"""No mass delete by accident, and the last good version kept visibly.

A sync (or a watched folder's batch) that would delete all of a source's documents, or more than
the set share, holds the deletions: logged, shown in /healthz and rag.admin.stats, applied only
when allowed. A file whose new version cannot be read keeps its last good passages, marked
stale with the reason in list_documents, kb_get, rag.get_docs and verify_document_access.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docx
import pytest
from starlette.testclient import TestClient

from ragmcp.adapters.local.watcher import FolderWatcher
from ragmcp.bootstrap import Services, build_registry, build_services
from ragmcp.domain.models import Principal, Source
from ragmcp.http import create_app
from ragmcp.retrieval.service import SearchRequest
from ragmcp.settings import Settings

NOTES = {
    f"note-{n}.md": f"# Note {n}\n\nThe {word} inventory is counted every {n + 2} weeks by the warehouse team.\n"
    for n, word in enumerate(["copper", "zinc", "tin", "nickel"])
}


@dataclass
class App:
    services: Services = field(repr=False)
    http: TestClient = field(repr=False)
    folder: Path
    source: Source

    def call(self, path: str, tool: str, arguments: dict[str, Any], **headers: str) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
        answer = self.http.post(path, json=body, headers=headers).json()
        assert "result" in answer, answer
        return json.loads(answer["result"]["content"][0]["text"])


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    folder = tmp_path / "notes"
    folder.mkdir()
    for name, text in NOTES.items():
        (folder / name).write_text(text)
    services = build_services(Settings(data_dir=tmp_path / "data", host="testserver", open=True))
    source = services.register_folder("default", "notes", str(folder))
    assert services.ingest.sync(source).ingested == len(NOTES)
    with TestClient(create_app(services, build_registry(services)), base_url="http://testserver") as http:
        yield App(services, http, folder, source)


def paths(services: Services) -> set[str]:
    return {d.path for d in services.documents.list("default", "notes")}


def held_stats(app: App) -> dict[str, Any]:
    stats = app.call("/mcp/proxysql", "rag.admin.stats", {})
    [row] = [s for s in stats["sources"] if s["source_name"] == "notes"]
    return row


def test_a_sync_that_would_delete_every_document_holds_the_deletions(app: App, caplog) -> None:
    for name in NOTES:
        (app.folder / name).unlink()
    with caplog.at_level(logging.WARNING, logger="ragmcp.ingest.pipeline"):
        report = app.services.ingest.sync(app.source)
    assert report.line() == "0 ingested, 0 updated, 0 unchanged, 0 deleted, 4 held, 0 failed"
    assert paths(app.services) == set(NOTES)
    assert any("holding deletions of source 'notes'" in r.message and "note-0.md" in r.message for r in caplog.records)
    hits = app.services.search.search(Principal(), SearchRequest(phrases=["zinc inventory"], mode="fts", top_k=3))
    assert hits.hits and hits.hits[0].document.path == "note-1.md"
    row = held_stats(app)
    assert row["held_deletions"] == 4 and row["held_paths"] == sorted(NOTES) and row["docs"] == 4
    assert "4 of 4 documents' files vanished at once" in row["held_reason"]

    accepted = app.call("/mcp/proxysql", "rag.admin.sync", {"source_names": ["notes"], "allow_mass_delete": True})
    assert accepted["accepted"] is True and set(accepted) == {"accepted", "job_id"}
    app.services.tasks.join()
    job = app.services.jobs.get("default", accepted["job_id"])
    assert job.status == "succeeded" and job.counts["deleted"] == 4 and job.counts["held"] == 0
    assert paths(app.services) == set()
    row = held_stats(app)
    assert set(row) == {"source_id", "source_name", "docs", "chunks", "last_sync"} and row["docs"] == 0


def test_more_than_the_set_share_is_held_and_less_is_applied(app: App, tmp_path: Path) -> None:
    for name in ["note-0.md", "note-1.md", "note-2.md"]:
        (app.folder / name).unlink()
    held = app.services.ingest.sync(app.source)
    assert (held.deleted, held.held) == (0, 3) and paths(app.services) == set(NOTES)
    (app.folder / "note-0.md").write_text(NOTES["note-0.md"])
    (app.folder / "note-1.md").write_text(NOTES["note-1.md"])
    applied = app.services.ingest.sync(app.source)
    assert (applied.deleted, applied.held, applied.unchanged) == (1, 0, 3)
    assert paths(app.services) == set(NOTES) - {"note-2.md"}
    assert "held_deletions" not in held_stats(app)

    looser = build_services(Settings(data_dir=tmp_path / "data", mass_delete_share=0.8))
    for name in ["note-0.md", "note-1.md"]:
        (app.folder / name).unlink()
    assert looser.ingest.sync(app.source).deleted == 2  # 2 of 3 is within 80%
    assert paths(app.services) == {"note-3.md"}
    (app.folder / "note-3.md").unlink()
    last = looser.ingest.sync(app.source)  # the last document is all of them: held whatever the share
    assert (last.deleted, last.held) == (0, 1)


def test_a_watched_folder_emptied_at_once_keeps_its_documents(app: App) -> None:
    synced = threading.Event()
    watcher = FolderWatcher(app.services.ingest, app.source, on_synced=synced.set)
    app.http.app.state.serve.watcher = watcher
    watcher.start()
    try:
        # The watch is set up before the first sync starts (FolderWatcher._run), so once that sync is
        # done every later change is seen.
        assert synced.wait(60), "the first sync did not finish"
        deadline = time.monotonic() + 60
        for name in NOTES:
            (app.folder / name).unlink()
        while watcher.status.as_dict()["held"] < len(NOTES) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert watcher.status.as_dict()["held"] == len(NOTES)
        assert paths(app.services) == set(NOTES)
        health = app.http.get("/healthz").json()
        assert health["ingest"]["held_deletions"]["count"] == len(NOTES)
        assert health["ingest"]["held_deletions"]["paths"] == sorted(NOTES)
        assert "--allow-mass-delete" in health["ingest"]["held_deletions"]["reason"]
    finally:
        watcher.stop()


def test_ingest_states_every_count_and_applies_held_deletions_when_allowed(app: App) -> None:
    for name in NOTES:
        (app.folder / name).unlink()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMCP_")}
    command = [sys.executable, "-m", "ragmcp.cli", "--data-dir", str(app.services.settings.server.data_dir), "ingest"]
    command += [str(app.folder), "--source", "notes"]
    first = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "0 ingested, 0 updated, 0 unchanged, 0 deleted, 4 held, 0 failed"
    assert "--allow-mass-delete" in first.stderr and paths(app.services) == set(NOTES)
    allowed = subprocess.run(
        [*command, "--allow-mass-delete"], env=env, capture_output=True, text=True, timeout=180, check=False
    )
    assert allowed.stdout.strip() == "0 ingested, 0 updated, 0 unchanged, 4 deleted, 0 held, 0 failed"
    assert paths(app.services) == set()


def write_docx(path: Path, paragraphs: list[str]) -> None:
    document = docx.Document()
    for text in paragraphs:
        document.add_paragraph(text)
    document.save(str(path))


def test_a_file_that_turns_unreadable_keeps_its_last_good_passages_marked_stale(app: App) -> None:
    manual = app.folder / "manual.docx"
    write_docx(manual, ["The centrifuge must be balanced before every run.", "Wear goggles in the lab."])
    assert app.services.ingest.sync(app.source).ingested == 1
    good = manual.read_bytes()
    manual.write_bytes(b"PK\x03\x04 this is no longer a zip archive" + os.urandom(64))
    report = app.services.ingest.sync(app.source)
    assert (report.failed, report.unchanged) == (1, 4)
    [failed] = [j for j in report.jobs if j.status == "failed"]
    reason = failed.error
    assert "docx" in reason.lower() and failed.counts == {"kept_stale": 1}

    [doc] = app.services.documents.by_path("default", "notes", "manual.docx")
    assert doc.stale and doc.stale_reason == reason and doc.chunk_count >= 1
    hits = app.services.search.search(Principal(), SearchRequest(phrases=["balance the centrifuge"], top_k=1))
    assert hits.hits[0].document.doc_id == doc.doc_id
    segment = hits.hits[0].chunk.chunk_id

    listed = app.call("/mcp/ragbox", "list_documents", {"limit": 50})
    [row] = [d for d in listed["documents"] if d["id"] == doc.doc_id]
    assert (row["indexed"], row["stale"], row["stale_reason"]) == (True, True, reason)
    got = app.call("/mcp/kb", "kb_get", {"document_id": doc.number})
    assert (got["stale"], got["stale_reason"]) == (True, reason)
    docs = app.call("/mcp/proxysql", "rag.get_docs", {"doc_ids": [doc.doc_id]})
    assert (docs["docs"][0]["stale"], docs["docs"][0]["stale_reason"]) == (True, reason)
    assert "centrifuge" in docs["docs"][0]["body"]
    verified = app.call("/mcp/mindset", "verify_document_access", {"segment_uid": segment})
    assert verified["has_access"] is True and (verified["stale"], verified["stale_reason"]) == (True, reason)

    fresh = [n for n in listed["documents"] if n["id"] != doc.doc_id]
    assert fresh and not any("stale" in n or "stale_reason" in n for n in fresh)  # the contract's fields only

    manual.write_bytes(good)
    restored = app.services.ingest.sync(app.source)
    assert (restored.updated, restored.failed) == (1, 0)
    [doc] = app.services.documents.by_path("default", "notes", "manual.docx")
    assert (doc.stale, doc.stale_reason) == (False, None)
    got = app.call("/mcp/kb", "kb_get", {"document_id": doc.number})
    assert "stale" not in got and "stale_reason" not in got


def test_an_emptied_file_is_stale_too_and_a_deleted_one_is_not_kept(app: App) -> None:
    (app.folder / "note-3.md").write_bytes(b"")
    report = app.services.ingest.sync(app.source)
    assert report.failed == 1
    [doc] = app.services.documents.by_path("default", "notes", "note-3.md")
    assert doc.stale and doc.stale_reason == "empty file"
    (app.folder / "note-3.md").unlink()
    assert app.services.ingest.sync(app.source).deleted == 1
    assert app.services.documents.by_path("default", "notes", "note-3.md") == []


def test_rag_admin_sync_keeps_its_contract_shape(app: App) -> None:
    shutil.rmtree(app.folder)
    accepted = app.call("/mcp/proxysql", "rag.admin.sync", {"source_names": ["notes"]})
    assert set(accepted) == {"accepted", "job_id"} and accepted["job_id"].startswith("sync-")
    app.services.tasks.join()
    job = app.services.jobs.get("default", accepted["job_id"])
    assert job.counts == {"sources": 1, "ingested": 0, "updated": 0, "deleted": 0, "held": 4, "failed": 0}
    assert paths(app.services) == set(NOTES)

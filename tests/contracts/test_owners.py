"""Issue 25, the data side, over the kb and ragbox profiles of a real app with keys: notes, uploads
and upload sessions have owners (M2), conversation memory is keyed by user (M3), kb_jobs and
kb_status say nothing of documents the caller may not read, and kb document numbers say nothing
of how many documents are hidden.

Each test replays what the review did: a user of the same tenant (through a platform key, as a
user missing from the directory or present in it) tries to change another's note, replace their
upload, continue their upload session, reuse their conversation id, or learn of hidden files.
"""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from ragmcp.adapters.local.database import Database
from ragmcp.adapters.local.sqlite_stores import SqliteConversationStore
from ragmcp.bootstrap import Services, build_registry, build_services
from ragmcp.domain.models import DOCUMENT_NUMBERS, Tier, Turn, UserRecord
from ragmcp.http import create_app
from ragmcp.ingest.dropfolder import NOTES
from ragmcp.ingest.pipeline import SIDECAR_SUFFIX
from ragmcp.mcp.errors import UNAUTHORIZED
from ragmcp.security.keys import CreatedKey
from ragmcp.security.models import RateLimits
from ragmcp.settings import Settings
from ragmcp.synthesis.models import SynthesisRequest

pytestmark = pytest.mark.slow  # ingests with the ONNX model

TENANT = "acme"
KB = "/mcp/kb"
RAGBOX = "/mcp/ragbox"
UNLIMITED = RateLimits(per_minute=1_000_000, synthesis_per_minute=1_000_000, concurrent=10_000)
_ids = itertools.count(1)


@dataclass
class World:
    services: Services
    http: TestClient
    keys: dict[str, CreatedKey]
    hidden: Path

    def headers(self, user: str | None) -> dict[str, str]:
        """As `user` through the platform key (read, write), or as the admin ("ops", read, write, admin)."""
        if user == "ops":
            return {"authorization": f"Bearer {self.keys['admin'].secret}"}
        return {"authorization": f"Bearer {self.keys['app'].secret}", **({"x-user-id": user} if user else {})}

    def call(self, user: str | None, tool: str, arguments: dict, path: str = KB) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": next(_ids), "method": "tools/call"}
        body["params"] = {"name": tool, "arguments": arguments}
        return self.http.post(path, json=body, headers=self.headers(user)).json()

    def ok(self, user: str | None, tool: str, arguments: dict, path: str = KB) -> dict[str, Any]:
        body = self.call(user, tool, arguments, path)
        assert "result" in body and body["result"].get("isError") is not True, body
        return json.loads(body["result"]["content"][0]["text"])

    def forbidden(self, user: str | None, tool: str, arguments: dict) -> str:
        body = self.call(user, tool, arguments)
        assert "result" not in body, body
        assert body["error"]["code"] == UNAUTHORIZED and body["error"]["data"]["code"] == "FORBIDDEN", body
        return body["error"]["message"]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("owners")
    shared = root / "shared"
    shared.mkdir()
    (shared / "capybara.md").write_text("# Capybaras\n\nCapybaras graze on the river banks at dusk.\n")
    (shared / "quokka.md").write_text("# Quokkas\n\nQuokkas live on Rottnest Island and smile for photos.\n")
    hidden = root / "hidden"
    hidden.mkdir()
    (hidden / ".source.json").write_text(json.dumps({"groups": ["finance"]}))
    (hidden / "merger-plan.md").write_text("# Merger\n\nHIDDENMARK the merger plan of the board.\n")
    (hidden / "layoffs-2027.pdf").write_bytes(b"%PDF-1.7 HIDDENMARK not a pdf at all")
    services = build_services(Settings(data_dir=root / "data", host="testserver", relevance_floor=0))
    for source_id, location in (("shared", shared), ("hidden", hidden)):
        services.ingest.sync(services.register_folder(TENANT, source_id, str(location)))
    for user in ("alice", "bob"):
        services.users.put(UserRecord(tenant=TENANT, user_id=user))
    services.users.put(UserRecord(tenant=TENANT, user_id="fin", groups=("finance",), max_tier=Tier.standard))
    keys = {
        "app": services.keys.create(TENANT, name="app", platform=True, limits=UNLIMITED),
        "admin": services.keys.create(
            TENANT, name="ops", user="ops", scopes=("read", "write", "admin"), limits=UNLIMITED
        ),
    }
    with TestClient(create_app(services, build_registry(services)), base_url="http://testserver") as http:
        yield World(services, http, keys, hidden)


def add_note(world: World, user: str, text: str) -> dict[str, Any]:
    added = world.ok(user, "kb_addnote", {"text": text})
    world.services.tasks.join()
    return added


def note_text(world: World, user: str, document_id: int) -> str:
    return world.ok(user, "kb_get", {"document_id": document_id})["chunks"][0]["text"]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def upload(world: World, user: str, name: str, data: bytes) -> dict[str, Any]:
    upload_id = world.ok(user, "kb_upload_start", {"filename": name, "total_size": len(data)})["upload_id"]
    world.ok(user, "kb_upload_chunk", {"upload_id": upload_id, "data": b64(data), "chunk_index": 0})
    finished = world.ok(user, "kb_upload_finish", {"upload_id": upload_id})
    world.services.tasks.join()
    return finished


def uploaded_text(world: World, user: str, name: str) -> str:
    found = world.ok(user, "kb_get", {"source_path": f"uploads/{name}"})["documents"]
    return " ".join(c["text"] for c in found[0]["chunks"])


# --- M2: owners -------------------------------------------------------------------------------


def test_a_note_is_changed_only_by_its_owner_or_an_admin(world: World) -> None:
    note = add_note(world, "alice", "Alice's standing order: the weekly report goes out on Fridays.")
    number = note["document_id"]
    # Others of the tenant read it (no ACL: the whole tenant) ...
    assert "Fridays" in note_text(world, "bob", number)
    # ... but neither another directory user nor a user missing from the directory may change it.
    for intruder in ("bob", "mallory"):
        message = world.forbidden(intruder, "kb_update_note", {"document_id": number, "text": f"{intruder} was here"})
        assert "only they or an admin" in message
    assert "Fridays" in note_text(world, "alice", number)
    # Its owner may, and so may an admin, after whom it is still the owner's.
    world.ok("alice", "kb_update_note", {"document_id": number, "text": "Alice's order: reports go out on Mondays."})
    assert "Mondays" in note_text(world, "bob", number)
    world.ok("ops", "kb_update_note", {"document_id": number, "text": "Reports go out on Tuesdays (ops)."})
    world.ok("alice", "kb_update_note", {"document_id": number, "text": "Reports go out on Wednesdays."})
    assert "Wednesdays" in note_text(world, "bob", number)
    doc = world.services.documents.get_by_number(TENANT, number)
    assert doc is not None and doc.owner == "alice"
    world.forbidden("bob", "kb_update_note", {"document_id": number, "text": "bob again"})


def test_a_note_from_before_owners_is_changed_only_by_an_admin(world: World) -> None:
    """A note written before owners were kept has a sidecar without `owner`: nobody's, so admin-only."""
    note = add_note(world, "alice", "An old note about the capybara feeding rota.")
    doc = world.services.documents.get_by_number(TENANT, note["document_id"])
    location = Path(world.services.sources.get(TENANT, NOTES).location)
    sidecar = location / (doc.path + SIDECAR_SUFFIX)
    sidecar.write_text(json.dumps({"tags": list(doc.tags)}))  # as written before this change
    world.forbidden("alice", "kb_update_note", {"document_id": note["document_id"], "text": "mine now"})
    world.ok("ops", "kb_update_note", {"document_id": note["document_id"], "text": "The rota moved to Thursdays."})
    assert world.services.documents.get_by_number(TENANT, note["document_id"]).owner is None


def test_an_upload_replaces_a_file_only_for_its_owner_or_an_admin(world: World) -> None:
    upload(world, "alice", "report.md", b"# Report\n\nAlice's quarterly report: revenue grew.\n")
    # Bob cannot start an upload of that name ...
    message = world.forbidden("bob", "kb_upload_start", {"filename": "report.md", "total_size": 10})
    assert "uploads/report.md" in message
    # ... nor finish one he began before Alice's file was there.
    race = b"# Race\n\nBob's text.\n"
    bobs = world.ok("bob", "kb_upload_start", {"filename": "race.md", "total_size": len(race)})["upload_id"]
    world.ok("bob", "kb_upload_chunk", {"upload_id": bobs, "data": b64(race), "chunk_index": 0})
    upload(world, "alice", "race.md", b"# Race\n\nAlice's race notes.\n")
    world.forbidden("bob", "kb_upload_finish", {"upload_id": bobs})
    assert "Alice's race notes" in uploaded_text(world, "bob", "race.md")
    assert "revenue grew" in uploaded_text(world, "bob", "report.md")
    # Alice replaces her own; an admin may replace it too, and it stays hers.
    upload(world, "alice", "report.md", b"# Report\n\nAlice's corrected report: revenue fell.\n")
    assert "revenue fell" in uploaded_text(world, "bob", "report.md")
    upload(world, "ops", "report.md", b"# Report\n\nThe report, withdrawn by ops.\n")
    upload(world, "alice", "report.md", b"# Report\n\nAlice's final report.\n")
    docs = world.services.documents.by_path(TENANT, "uploads", "report.md")
    assert [d.owner for d in docs] == ["alice"]
    assert "final report" in uploaded_text(world, "bob", "report.md")


def test_an_upload_session_is_continued_only_by_who_started_it_or_an_admin(world: World) -> None:
    data = b"# Session\n\nPart one. Part two.\n"
    upload_id = world.ok("alice", "kb_upload_start", {"filename": "session.md", "total_size": len(data)})["upload_id"]
    world.ok("alice", "kb_upload_chunk", {"upload_id": upload_id, "data": b64(data[:10]), "chunk_index": 0})
    for intruder in ("bob", "mallory"):
        world.forbidden(intruder, "kb_upload_chunk", {"upload_id": upload_id, "data": b64(b"evil"), "chunk_index": 1})
        world.forbidden(intruder, "kb_upload_finish", {"upload_id": upload_id})
    assert world.services.uploads.uploads.get(TENANT, upload_id).parts == {0: 10}
    world.ok("ops", "kb_upload_chunk", {"upload_id": upload_id, "data": b64(data[10:]), "chunk_index": 1})
    finished = world.ok("alice", "kb_upload_finish", {"upload_id": upload_id})
    world.services.tasks.join()
    assert world.ok("alice", "kb_jobs", {"job_id": finished["job_id"]})["jobs"][0]["status"] == "succeeded"
    assert "Part two" in uploaded_text(world, "bob", "session.md")


# --- M3: conversations ------------------------------------------------------------------------


def test_conversation_memory_is_kept_per_user(world: World) -> None:
    seen: list[SynthesisRequest] = []
    synthesis = world.services.synthesis
    runner = synthesis.runner

    class Recording:
        """The real runner, each request it gets recorded on the way in."""

        model_id = runner.model_id

        def run(self, request: SynthesisRequest):
            seen.append(request)
            return runner.run(request)

    synthesis.runner = Recording()
    try:
        ask = {"query": "Where do capybaras graze?", "conversation_id": "shared-id"}
        world.ok("alice", "query_knowledge", ask, RAGBOX)
        world.ok("bob", "query_knowledge", {"query": "Where do quokkas live?", "conversation_id": "shared-id"}, RAGBOX)
        world.ok("alice", "query_knowledge", {"query": "And when?", "conversation_id": "shared-id"}, RAGBOX)
    finally:
        synthesis.runner = runner
    assert [r.history for r in seen] == [[], [], ["Where do capybaras graze?"]]


# --- lows: jobs, status, numbers --------------------------------------------------------------


def test_jobs_and_status_show_only_what_the_caller_may_read(world: World) -> None:
    def job_text(user: str) -> str:
        return json.dumps(world.ok(user, "kb_jobs", {"limit": 500}))

    for user in ("bob", "mallory"):
        listed = job_text(user)
        assert "merger-plan" not in listed and "layoffs-2027" not in listed, listed
        failed = world.ok(user, "kb_jobs", {"status": "failed"})
        assert all("layoffs" not in (j["target"] + (j["error"] or "")) for j in failed["jobs"])
        status = world.ok(user, "kb_status", {})
        assert status["counts"]["jobs"]["failed"] == failed["count"]
        assert status["counts"]["jobs"]["succeeded"] == world.ok(user, "kb_jobs", {"status": "succeeded"})["count"]
    # A member of the group reads the merger plan, so sees its job; the failed file has no document:
    # only an admin sees it, and only an admin who may see its source.
    assert "merger-plan" in job_text("fin") and "layoffs-2027" not in job_text("fin")
    assert "layoffs-2027" not in job_text("ops")
    world.services.users.put(UserRecord(tenant=TENANT, user_id="ops", groups=("finance",)))
    admin = world.ok("ops", "kb_jobs", {"status": "failed"})
    assert any(j["target"] == "layoffs-2027.pdf" for j in admin["jobs"])
    hidden_job = next(j for j in admin["jobs"] if j["target"] == "layoffs-2027.pdf")
    assert world.call("bob", "kb_jobs", {"job_id": hidden_job["job_id"]})["error"]["data"]["code"] == "NOT_FOUND"
    # Bob's own upload that failed is his to see.
    failed_upload = upload(world, "bob", "broken.pdf", b"%PDF-1.4 broken")
    assert failed_upload["job_id"] in {j["job_id"] for j in world.ok("bob", "kb_jobs", {"status": "failed"})["jobs"]}
    assert failed_upload["job_id"] not in {j["job_id"] for j in world.ok("alice", "kb_jobs", {})["jobs"]}


def test_document_numbers_say_nothing_of_hidden_documents(world: World) -> None:
    numbers = [add_note(world, "alice", f"Numbered note {n}: the heron count.")["document_id"] for n in range(12)]
    assert len(set(numbers)) == len(numbers)
    assert all(1 <= n <= DOCUMENT_NUMBERS for n in numbers)
    # Numbered one after another, a tenant's documents would fill a short run (1, 2, 3 ...), and a
    # gap in what a caller sees would count the documents hidden from it; drawn at random, they do not.
    assert max(numbers) - min(numbers) > 1000 * len(numbers)
    for number in numbers:
        assert world.ok("bob", "kb_get", {"document_id": number})["document_id"] == number


def test_a_database_with_conversations_keyed_by_id_alone_is_migrated(tmp_path: Path) -> None:
    """The old table (tenant, conversation_id) is replaced at start: its turns had no user to key them by."""
    path = tmp_path / "ragmcp.db"
    with Database(path).write() as conn:
        conn.execute("DROP TABLE conversations")
        conn.execute(
            "CREATE TABLE conversations(tenant TEXT NOT NULL, conversation_id TEXT NOT NULL,"
            " expires_at TEXT NOT NULL, turns_json TEXT NOT NULL, PRIMARY KEY(tenant, conversation_id))"
        )
        old = Turn(question="Whose question was this?", answer="Nobody knows.").model_dump_json()
        conn.execute("INSERT INTO conversations VALUES (?, 'c1', '2999-01-01T00:00:00+00:00', ?)", (TENANT, f"[{old}]"))
    store = SqliteConversationStore(Database(path))
    store.append(TENANT, "alice", "c1", Turn(question="Where do capybaras graze?", answer="On river banks."), 600)
    store.append(TENANT, "bob", "c1", Turn(question="Where do quokkas live?", answer="On Rottnest."), 600)
    assert [t.question for t in store.get(TENANT, "alice", "c1")] == ["Where do capybaras graze?"]
    assert [t.question for t in store.get(TENANT, "bob", "c1")] == ["Where do quokkas live?"]
    assert store.get(TENANT, "", "c1") == []

"""The red team's leaks within a tenant, replayed: each call below leaked on the code before
security/identity.py (identity headers and `username` taken as sent, the directory applied by
mindset and chat only, get_document ignoring privilege_mode, links serving raw originals for 24 h
whatever happened to the key or the ACL afterwards). Now none of them does."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from starlette.testclient import TestClient

from ragmcp.bootstrap import Services, build_registry, build_services
from ragmcp.domain.errors import InvalidArgument
from ragmcp.domain.models import Tier, UserRecord
from ragmcp.http import create_app
from ragmcp.ingest.redaction import find_pii
from ragmcp.security.keys import CreatedKey
from ragmcp.security.models import RateLimits
from ragmcp.settings import Settings

REPO = Path(__file__).resolve().parents[2]
TENANT = "acme"
UNLIMITED = RateLimits(per_minute=1_000_000, synthesis_per_minute=1_000_000, concurrent=10_000)
UNAUTHORIZED = -32000
_ids = itertools.count(1)

DOCS = {
    "finance.md": ({"groups": ["finance"]}, "FINANCEMARK the quarterly ledger shows the finance reserve."),
    "alice.md": ({"users": ["alice"]}, "ALICEMARK the quarterly ledger note written for alice alone."),
    "confidential.md": ({"tier": "confidential"}, "CONFMARK the quarterly ledger of the confidential merger."),
    "privileged.md": ({"tier": "privileged"}, "PRIVMARK the quarterly ledger of the privileged board minutes."),
    "open.md": ({}, "OPENMARK the quarterly ledger summary everyone may read."),
}
SECRET_MARKS = ("FINANCEMARK", "ALICEMARK", "CONFMARK", "PRIVMARK")


def pii_document() -> tuple[str, list[str]]:
    """Sentences of the labelled PII set (their items exactly as the redactor finds them), 42 items in all."""
    lines, values = [], []
    for raw in (REPO / "tests" / "data" / "pii_labelled.jsonl").read_text().splitlines():
        item = json.loads(raw)
        found = [item["text"][f.start : f.end] for f in find_pii(item["text"])]
        labelled = [p["value"] for p in item["pii"]]
        if not labelled or sorted(found) != sorted(labelled) or len(values) + len(labelled) > 42:
            continue
        lines.append(item["text"])
        values += labelled
        if len(values) == 42:
            break
    for n in range(42 - len(values)):  # the labelled set holds fewer: e-mail addresses make up the rest
        address = f"escalation{n}@example.net"
        lines.append(f"Escalations go to {address} around the clock.")
        values.append(address)
    assert len(values) == 42 and len(find_pii("\n".join(lines))) == 42
    return "Customer contacts\n\n" + "\n\n".join(lines) + "\n", values


@dataclass
class World:
    services: Services
    http: TestClient
    folder: Path
    pii: list[str]
    keys: dict[str, CreatedKey]

    def headers(self, key: str, **extra: str) -> dict[str, str]:
        return {"authorization": f"Bearer {self.keys[key].secret}", **extra}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("identity")
    folder = root / "vault"
    folder.mkdir()
    for name, (sidecar, text) in DOCS.items():
        (folder / name).write_text(f"# {name}\n\n{text}\n")
        if sidecar:
            (folder / f"{name}.metadata.json").write_text(json.dumps(sidecar))
    text, values = pii_document()
    (folder / "contacts.txt").write_text(text)
    raw = root / "raw"
    raw.mkdir()
    (raw / "contacts.txt").write_text(text)
    (raw / ".source.json").write_text('{"serve_originals": "raw"}')
    rows = root / "rows"
    rows.mkdir()
    (rows / "parts.csv").write_text(
        "id,name,price,secret,owner\n"
        "p1,Gearbox,1200,SECRETVALUE one,OWNERVALUE ana\n"
        "p2,Rotor blade,800,SECRETVALUE two,OWNERVALUE bob\n"
    )
    (rows / ".source.json").write_text(
        json.dumps({"fetch_columns": ["id", "name", "price", "owner"], "hidden_columns": ["owner"]})
    )
    services = build_services(Settings(data_dir=root / "data", host="testserver"))
    for source_id, location in (("vault", folder), ("raw", raw), ("rows", rows)):
        report = services.ingest.sync(services.register_folder(TENANT, source_id, str(location)))
        assert report.failed == 0, report.jobs
    directory = {
        "ana": ((), Tier.standard),
        "fin": (("finance",), Tier.confidential),
        "alice": ((), Tier.standard),
    }
    for user, (groups, tier) in directory.items():
        services.users.put(UserRecord(tenant=TENANT, user_id=user, groups=groups, max_tier=tier))
    create = services.keys.create
    keys = {
        "reader": create(TENANT, name="reader", scopes=("read",), limits=UNLIMITED),
        "privileged": create(TENANT, name="ops", max_tier=Tier.privileged, limits=UNLIMITED),
        "platform": create(TENANT, name="agents", max_tier=Tier.privileged, platform=True, limits=UNLIMITED),
        "fin": create(TENANT, name="fin-laptop", user="fin", max_tier=Tier.privileged, limits=UNLIMITED),
    }
    with TestClient(create_app(services, build_registry(services)), base_url="http://testserver") as http:
        yield World(services, http, folder, values, keys)


def call(world: World, profile: str, tool: str, arguments: dict[str, Any], headers: dict[str, str]) -> dict:
    body = {
        "jsonrpc": "2.0",
        "id": next(_ids),
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    return world.http.post(f"/mcp/{profile}", json=body, headers=headers).json()


def payload(answer: dict) -> Any:
    assert "result" in answer and not answer["result"].get("isError"), answer
    return json.loads(answer["result"]["content"][0]["text"])


def everything(world: World, headers: dict[str, str], username: str | None = None) -> str:
    """All the text every reading tool of every profile returns to this caller, as one string."""
    q = "quarterly ledger"
    ids = [f"vault:{name}" for name in DOCS]
    out = [
        payload(call(world, "mindset", "rag_search", {"search_phrases": [q]}, headers)),
        payload(
            call(world, "proxysql", "rag.search_hybrid", {"query": q, "return": {"include_snippets": True}}, headers)
        ),
        payload(call(world, "proxysql", "rag.get_docs", {"doc_ids": ids}, headers)),
        payload(call(world, "proxysql", "rag.get_chunks", {"chunk_ids": [f"{i}#0" for i in ids]}, headers)),
        payload(call(world, "kb", "kb_search", {"query": q, "top": 20}, headers)),
        payload(call(world, "ragbox", "search_documents", {"query": q, "limit": 20}, headers)),
        payload(call(world, "ragbox", "query_knowledge", {"query": "what does the quarterly ledger show?"}, headers)),
        payload(call(world, "ragbox", "list_documents", {}, headers)),
    ]
    for doc_id in ids:
        out.append(call(world, "ragbox", "get_document", {"document_id": doc_id, "include_content": True}, headers))
        out.append(call(world, "kb", "kb_get", {"document_id": doc_id}, headers))
    if username is not None:
        chat = {"username": username, "query": q, "top_k": 20}
        out.append(payload(call(world, "chat", "rag_get_raw_results", chat, headers)))
        out.append(payload(call(world, "chat", "rag_get_synthesized_results", {**chat, "top_k": 10}, headers)))
    return json.dumps(out)


def test_a_key_may_not_claim_another_user(world: World) -> None:
    for header in ({"x-user-id": "alice"}, {"x-user-id": "fin"}):
        answer = call(world, "mindset", "rag_search", {"search_phrases": ["ledger"]}, world.headers("reader", **header))
        assert answer["error"]["code"] == UNAUTHORIZED and "own user" in answer["error"]["message"]
    for user in ("alice", "fin"):
        args = {"username": user, "query": "ledger"}
        answer = call(world, "chat", "rag_get_raw_results", args, world.headers("reader"))
        assert answer["error"]["code"] == UNAUTHORIZED
    reader = f"key:{world.keys['reader'].key.key_id}"  # a key made without --user is its own user
    own = call(world, "chat", "rag_get_raw_results", {"username": reader, "query": "ledger"}, world.headers("reader"))
    assert "result" in own


def test_a_key_without_a_user_is_no_directory_users_namesake(world: World) -> None:
    """A key named `alice`, made without --user, used to act as the user `alice` and read what her
    ACL grants; now it is `key:<its id>`, a name no directory user, asserted user or token may take."""
    services = world.services
    namesake = services.keys.create(TENANT, name="alice", limits=UNLIMITED)
    headers = {"authorization": f"Bearer {namesake.secret}"}
    seen = everything(world, headers)
    assert "OPENMARK" in seen and "ALICEMARK" not in seen
    refused = call(world, "chat", "rag_get_raw_results", {"username": "alice", "query": "ledger"}, headers)
    assert refused["error"]["code"] == UNAUTHORIZED
    # Its own name is reserved: a platform may not assert it, and no key may be bound to it ...
    identity = f"key:{namesake.key.key_id}"
    asserted = call(world, "kb", "kb_search", {"query": "ledger"}, world.headers("platform", **{"x-user-id": identity}))
    assert asserted["error"]["code"] == UNAUTHORIZED and "key:" in asserted["error"]["message"]
    with pytest.raises(InvalidArgument, match="reserved"):
        services.keys.create(TENANT, user=identity)
    # ... and an ACL naming it grants that key, and no one else, the document.
    (world.folder / "robot.md").write_text("# robot.md\n\nROBOTMARK the quarterly ledger for one key alone.\n")
    (world.folder / "robot.md.metadata.json").write_text(json.dumps({"users": [identity]}))
    services.ingest.sync(services.sources.get(TENANT, "vault"))
    try:
        hits = payload(call(world, "kb", "kb_search", {"query": "ROBOTMARK ledger", "fts_only": True}, headers))
        assert [h["doc_id"] for h in hits["results"]][:1] == ["vault:robot.md"]
        assert "ROBOTMARK" not in everything(world, world.headers("platform", **{"x-user-id": "alice"}))
    finally:
        (world.folder / "robot.md").unlink()
        (world.folder / "robot.md.metadata.json").unlink()
        services.ingest.sync(services.sources.get(TENANT, "vault"))


def test_session_tags_never_add_groups(world: World) -> None:
    tags = json.dumps(["finance", "legal", "alice"])
    seen = everything(world, world.headers("reader", **{"x-session-tags": tags}))
    assert "OPENMARK" in seen and not [m for m in SECRET_MARKS if m in seen]
    asserted = world.headers("platform", **{"x-user-id": "mallory", "x-session-tags": tags})
    seen = everything(world, asserted)
    assert "OPENMARK" in seen and not [m for m in SECRET_MARKS if m in seen]


def test_every_profile_applies_the_asserted_users_directory_entry(world: World) -> None:
    as_ana = everything(world, world.headers("platform", **{"x-user-id": "ana"}), username="ana")
    assert "OPENMARK" in as_ana and not [m for m in SECRET_MARKS if m in as_ana]
    as_fin = everything(world, world.headers("platform", **{"x-user-id": "fin"}), username="fin")
    assert {"OPENMARK", "FINANCEMARK", "CONFMARK"} <= {m for m in ("OPENMARK", *SECRET_MARKS) if m in as_fin}
    assert "PRIVMARK" not in as_fin and "ALICEMARK" not in as_fin
    narrowed = everything(world, world.headers("platform", **{"x-user-id": "fin", "x-session-tags": '["sales"]'}))
    assert "FINANCEMARK" not in narrowed and "CONFMARK" in narrowed


def test_a_privileged_key_naming_a_standard_user_reads_as_that_user(world: World) -> None:
    refused = call(
        world, "proxysql", "rag.search_fts", {"query": "ledger"}, world.headers("privileged", **{"x-user-id": "ana"})
    )
    assert refused["error"]["code"] == UNAUTHORIZED
    seen = everything(world, world.headers("platform", **{"x-user-id": "ana"}))
    assert "CONFMARK" not in seen and "PRIVMARK" not in seen


def test_a_key_bound_to_a_user_reads_as_that_user_only(world: World) -> None:
    seen = everything(world, world.headers("fin"), username="fin")
    assert "FINANCEMARK" in seen and "CONFMARK" in seen and "PRIVMARK" not in seen
    answer = call(world, "kb", "kb_search", {"query": "ledger"}, world.headers("fin", **{"x-user-id": "ana"}))
    assert answer["error"]["code"] == UNAUTHORIZED
    same = call(world, "kb", "kb_search", {"query": "ledger"}, world.headers("fin", **{"x-user-id": "fin"}))
    assert "result" in same


def test_get_document_needs_privilege_mode(world: World) -> None:
    headers = world.headers("privileged")
    hidden = call(
        world, "ragbox", "get_document", {"document_id": "vault:privileged.md", "include_content": True}, headers
    )
    assert hidden["error"]["code"] == -32602 and "not found" in hidden["error"]["message"]
    opened = call(
        world,
        "ragbox",
        "get_document",
        {"document_id": "vault:privileged.md", "include_content": True, "privilege_mode": True},
        headers,
    )
    assert "PRIVMARK" in payload(opened)["content"]


# -- links to originals --------------------------------------------------------------------------------


def link_to(world: World, headers: dict[str, str], doc_id: str) -> str:
    """The link kb_get gives this caller to the document's original."""
    return payload(call(world, "kb", "kb_get", {"document_id": doc_id}, headers))["url"]


def download(world: World, url: str):
    parts = urlsplit(url)
    return world.http.get(f"{parts.path}?{parts.query}")


def test_a_link_serves_the_redacted_text_never_the_42_pii_items(world: World) -> None:
    url = link_to(world, world.headers("platform", **{"x-user-id": "ana"}), "vault:contacts.txt")
    got = download(world, url)
    assert got.status_code == 200 and got.headers["content-type"].startswith("text/plain")
    text = got.text
    assert [v for v in world.pii if v in text] == []
    placeholders = sum(text.count(f"[{kind}]") for kind in ("EMAIL", "PHONE", "CARD", "SSN", "IBAN"))
    assert placeholders == 42
    assert text.startswith("Customer contacts")
    raw = download(world, link_to(world, world.headers("platform"), "raw:contacts.txt"))
    assert raw.status_code == 200 and all(v in raw.text for v in world.pii)  # the source opted in


def test_links_live_15_minutes_by_default(world: World) -> None:
    url = link_to(world, world.headers("reader"), "vault:open.md")
    expires = int(parse_qs(urlsplit(url).query)["expires"][0])
    assert 15 * 60 - 5 <= expires - time.time() <= 15 * 60


def test_a_download_rechecks_revocation_and_access_now(world: World) -> None:
    services = world.services
    doomed = services.keys.create(TENANT, name="doomed", limits=UNLIMITED)
    url = link_to(world, {"authorization": f"Bearer {doomed.secret}"}, "vault:open.md")
    assert download(world, url).status_code == 200
    services.keys.revoke(doomed.key.key_id)
    assert download(world, url).status_code == 403
    last = list(services.audit.store.records(TENANT))[-1]
    assert (last.tool, last.key_id, last.outcome) == ("GET /files", doomed.key.key_id, "refused 403")

    moving = services.keys.create(TENANT, name="mover", user="mover", limits=UNLIMITED)
    services.users.put(UserRecord(tenant=TENANT, user_id="mover", groups=("finance",)))
    url = link_to(world, {"authorization": f"Bearer {moving.secret}"}, "vault:finance.md")
    assert download(world, url).status_code == 200
    services.users.put(UserRecord(tenant=TENANT, user_id="mover", groups=("sales",)))  # left finance
    assert download(world, url).status_code == 404

    services.users.put(UserRecord(tenant=TENANT, user_id="mover", groups=("finance",)))
    url = link_to(world, {"authorization": f"Bearer {moving.secret}"}, "vault:finance.md")
    (world.folder / "finance.md.metadata.json").write_text('{"groups": ["board"]}')  # the ACL changes
    services.ingest.sync(services.sources.get(TENANT, "vault"))
    try:
        assert download(world, url).status_code == 404
    finally:
        (world.folder / "finance.md.metadata.json").write_text('{"groups": ["finance"]}')
        services.ingest.sync(services.sources.get(TENANT, "vault"))


def test_a_link_cannot_be_stretched_to_another_user_or_document(world: World) -> None:
    url = link_to(world, world.headers("platform", **{"x-user-id": "ana"}), "vault:open.md")
    query = parse_qs(urlsplit(url).query)
    fin_url = link_to(world, world.headers("fin"), "vault:finance.md")
    fin_grant = parse_qs(urlsplit(fin_url).query)["grant"][0]
    forged = f"/files/{TENANT}/vault%3Afinance.md?expires={query['expires'][0]}&grant={fin_grant}&sig={query['sig'][0]}"
    assert world.http.get(forged).status_code == 403
    other_doc = urlsplit(url).path.replace("open.md", "finance.md") + "?" + urlsplit(url).query
    assert world.http.get(other_doc).status_code == 403
    later = url.replace(f"expires={query['expires'][0]}", f"expires={int(query['expires'][0]) + 86400}")
    assert download(world, later).status_code == 403


def test_only_whitelisted_columns_leave_through_any_tool(world: World) -> None:
    """`fetch_columns` and `hidden_columns` decide what any tool returns: metadata, snippets, fetches."""
    headers = world.headers("platform", **{"x-user-id": "ana"})
    q = "Gearbox rotor blade"
    ids = ["rows:p1", "rows:p2"]
    shape = {"include_title": True, "include_metadata": True, "include_snippets": True}
    out = [
        call(world, "mindset", "rag_search", {"search_phrases": [q]}, headers),
        call(world, "proxysql", "rag.search_hybrid", {"query": q, "return": shape}, headers),
        call(world, "proxysql", "rag.search_fts", {"query": "Gearbox", "return": shape}, headers),
        call(world, "proxysql", "rag.get_docs", {"doc_ids": ids}, headers),
        call(world, "proxysql", "rag.get_chunks", {"chunk_ids": [f"{i}#0" for i in ids]}, headers),
        call(world, "proxysql", "rag.fetch_from_source", {"doc_ids": ids}, headers),
        call(world, "kb", "kb_search", {"query": q}, headers),
        call(world, "kb", "kb_get", {"document_id": "rows:p1"}, headers),
        call(world, "ragbox", "search_documents", {"query": q}, headers),
        call(world, "ragbox", "get_document", {"document_id": "rows:p1", "include_content": True}, headers),
        call(world, "chat", "rag_get_raw_results", {"username": "ana", "query": q}, headers),
    ]
    seen = json.dumps(out)
    assert "Gearbox" in seen and "1200" in seen
    assert "SECRETVALUE" not in seen and "OWNERVALUE" not in seen
    assert '"secret"' not in seen and '"owner"' not in seen
    fetched = payload(out[5])["rows"]
    assert [r["row"] for r in fetched] == [
        {"id": "p1", "name": "Gearbox", "price": "1200"},
        {"id": "p2", "name": "Rotor blade", "price": "800"},
    ]
    for column in ("owner", "secret"):
        refused = call(world, "proxysql", "rag.fetch_from_source", {"doc_ids": ids, "columns": [column]}, headers)
        assert refused["error"]["code"] == -32602 and column in refused["error"]["message"]


def test_a_document_without_its_rendition_serves_nothing(world: World, tmp_path: Path) -> None:
    url = link_to(world, world.headers("platform", **{"x-user-id": "ana"}), "vault:contacts.txt")
    rendition = world.services.originals.stored(world.services.documents.get(TENANT, "vault:contacts.txt"))
    stored = Path(rendition.location) / rendition.path
    kept = stored.read_bytes()
    stored.unlink()
    try:
        missing = download(world, url)
        assert missing.status_code == 404 and "no redacted rendition" in missing.json()["error"]
        assert not [v for v in world.pii if v in missing.text]
    finally:
        stored.write_bytes(kept)


def test_a_rendition_that_cannot_be_stored_leaves_the_link_empty_not_raw(tmp_path: Path) -> None:
    services = build_services(Settings(data_dir=tmp_path / "data", host="testserver"))
    folder = tmp_path / "docs"
    folder.mkdir()
    text, values = pii_document()
    (folder / "contacts.txt").write_text(text)
    (tmp_path / "data" / "renditions").write_text("a file where the renditions' folder would be")
    report = services.ingest.sync(services.register_folder(TENANT, "docs", str(folder)))
    assert [j.status for j in report.jobs] == ["succeeded"] and report.jobs[0].counts["renditions_failed"] == 1
    key = services.keys.create(TENANT, name="reader", limits=UNLIMITED)
    with TestClient(create_app(services, build_registry(services)), base_url="http://testserver") as http:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "kb_get", "arguments": {"document_id": "docs:contacts.txt"}},
        }
        got = http.post("/mcp/kb", json=body, headers={"authorization": f"Bearer {key.secret}"}).json()
        url = urlsplit(json.loads(got["result"]["content"][0]["text"])["url"])
        served = http.get(f"{url.path}?{url.query}")
    assert served.status_code == 404 and not [v for v in values if v in served.text]

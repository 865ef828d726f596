"""The audit trail: every tool call, refused request (401, 429) and download through the real HTTP
app appends one record to its tenant's HMAC chain, checkpoints are written outside the database,
and `ragmcp audit verify` (the real CLI, on the data directory) finds each of ten tamperings.

The tampering is done the way an intruder with full write access to the database would: with SQL
on a consistent copy of it (SQLite's backup API), one copy per kind, all checked at once. The
intruder knows the record format and can compute any hash, but cannot read the key file or write
the checkpoint file, which are copied beside each tampered database unchanged.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import sqlean
from starlette.testclient import TestClient

from ragmcp.adapters.local.checkpoints import FileCheckpointStore
from ragmcp.adapters.local.database import Database
from ragmcp.adapters.local.sqlite_stores import SqliteAuditStore
from ragmcp.bootstrap import Services, build_registry, build_services
from ragmcp.domain.models import Principal
from ragmcp.http import create_app
from ragmcp.security.audit import GENESIS, UNAUTHENTICATED, AuditLog, Checkpointer, digest, record_mac, verify
from ragmcp.security.identity import key_credential
from ragmcp.security.models import AuditCheckpoint, AuditRecord, RateLimits
from ragmcp.settings import Settings

REPO = Path(__file__).resolve().parents[2]
_ids = itertools.count(1)
ATTACKER_KEY = b"the intruder's own key, not ours"


@dataclass
class Call:
    """One tool call as made, and the answer it got."""

    tenant: str
    key_id: str
    user: str | None
    tool: str
    arguments: dict[str, Any]
    answer: dict[str, Any] = field(repr=False)


@dataclass
class Audited:
    services: Services = field(repr=False)
    root: Path
    calls: list[Call]
    limited_key: str
    refused: list[int]
    downloads: list[int]


def tool_call(http: TestClient, path: str, secret: str, tool: str, arguments: Any, **headers: str) -> Any:
    body = {
        "jsonrpc": "2.0",
        "id": next(_ids),
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    return http.post(path, json=body, headers={"authorization": f"Bearer {secret}", **headers})


def local_part(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Audited]:
    """An app over the samples with four keys; the tool calls (good and bad), refused requests and
    downloads made through it; then the app shut down (which writes the last checkpoint)."""
    root = tmp_path_factory.mktemp("audit")
    docs = root / "docs"
    shutil.copytree(REPO / "samples" / "docs", docs)
    services = build_services(Settings(data_dir=root / "data", host="testserver"))
    report = services.ingest.sync(services.register_folder("default", "docs", str(docs)))
    assert report.ingested >= 3 and report.failed == 0
    # Platform keys: they name the end user in x-user-id (security/identity.py).
    writer = services.keys.create("default", name="writer", scopes=("read", "write", "admin"), platform=True)
    reader = services.keys.create("default", name="reader", scopes=("read",), platform=True)
    stranger = services.keys.create("other", name="stranger", platform=True)
    limited = services.keys.create("default", name="limited", limits=RateLimits(per_minute=1))
    plan = [
        (writer, "/mcp/mindset", "rag_search", {"search_phrases": ["getting started", "install"]}, "alice"),
        (writer, "/mcp/proxysql", "rag.get_docs", {"doc_ids": ["docs:getting-started.md", "docs:nope.md"]}, None),
        (reader, "/mcp/mindset", "rag_search", {"search_phrases": []}, "bob"),
        (reader, "/mcp/kb", "kb_addnote", {"text": "a note the reader may not add"}, None),
        (stranger, "/mcp/ragbox", "get_document", {"document_id": "docs:getting-started.md"}, "carol"),
        (writer, "/mcp/kb", "kb_search", {"query": "security", "top": 3}, "alice"),
        (writer, "/mcp/ragbox", "list_documents", {"limit": 2}, None),
    ]
    calls = []
    with TestClient(create_app(services, build_registry(services)), base_url="http://testserver") as http:
        for key, path, tool, arguments, user in plan:
            headers = {"x-user-id": user} if user else {}
            answer = tool_call(http, path, key.secret, tool, arguments, **headers).json()
            calls.append(Call(key.key.tenant, key.key.key_id, user, tool, arguments, answer))
            http.post(
                path,
                json={"jsonrpc": "2.0", "id": 0, "method": "tools/list"},
                headers={"authorization": f"Bearer {key.secret}"},
            )
        refused = [
            tool_call(http, "/mcp/kb", "rmcp_live_" + "0" * 64, "kb_search", {"query": "secrets"}).status_code,
            tool_call(http, "/mcp/ragbox", limited.secret, "list_documents", {"limit": 1}).status_code,
            tool_call(http, "/mcp/ragbox", limited.secret, "list_documents", {"limit": 2}).status_code,
        ]
        minter = services.identities.principal(key_credential(writer.key))
        doc = services.documents.get("default", "docs:getting-started.md")
        link = local_part(services.links.url(minter, doc))
        downloads = [
            http.get(link),
            http.get(link.replace("sig=", "sig=0")),
            http.get(local_part(services.links.url(minter, doc.model_copy(update={"doc_id": "docs:nope.md"})))),
        ]
    yield Audited(services, root, calls, limited.key.key_id, refused, [d.status_code for d in downloads])


def chain(services: Services, tenant: str = "default") -> list[AuditRecord]:
    return list(services.audit.store.records(tenant))


def payload(answer: dict[str, Any]) -> Any:
    return json.loads(answer["result"]["content"][0]["text"])


def test_every_tool_call_appends_one_record_of_who_did_what_to_its_tenants_chain(audited: Audited) -> None:
    default = [c for c in audited.calls if c.tenant == "default"]
    trail = chain(audited.services)[: len(default)]  # tools/list is not a tool call
    assert [r.tool for r in trail] == [c.tool for c in default]
    for record, call in zip(trail, default, strict=True):
        assert (record.tenant, record.key_id, record.user) == (call.tenant, call.key_id, call.user)
        assert record.args_digest == digest(call.arguments)
        answered = "ok" if "result" in call.answer else f"error {call.answer['error']['code']}"
        assert record.outcome == answered
    assert [r.outcome for r in trail] == ["ok", "ok", "error -32602", "error -32000", "ok", "ok"]
    (foreign,) = chain(audited.services, "other")
    assert (foreign.seq, foreign.tool, foreign.outcome, foreign.user) == (1, "get_document", "error -32602", "carol")


def test_records_hold_the_ids_each_call_returned(audited: Audited) -> None:
    trail = chain(audited.services)
    search, _docs, bad, refused, foreign, kb, listed = audited.calls
    segments = [s["segment_uid"] for s in search.answer["result"]["segments"]]
    assert segments and trail[0].returned_ids == segments
    assert trail[1].returned_ids == ["docs:getting-started.md"]
    assert [r.returned_ids for r in trail[2:4]] == [[], []]
    assert foreign.answer["error"]["message"] == "document docs:getting-started.md not found"
    hits = payload(kb.answer)["results"]
    assert hits and set(trail[4].returned_ids) >= {h["chunk_id"] for h in hits}
    assert trail[5].returned_ids == [d["id"] for d in payload(listed.answer)["documents"]]
    assert refused.answer["error"]["code"] == -32000 and bad.answer["error"]["code"] == -32602


def test_refused_requests_are_audited(audited: Audited) -> None:
    assert audited.refused == [401, 200, 429]
    (unknown, bad_link) = chain(audited.services, UNAUTHENTICATED)
    assert (unknown.tool, unknown.outcome, unknown.key_id) == ("kb_search", "refused 401", None)
    assert unknown.args_digest == digest({"query": "secrets"})
    limited = [r for r in chain(audited.services) if r.key_id == audited.limited_key]
    assert [(r.tool, r.outcome) for r in limited] == [("list_documents", "ok"), ("list_documents", "refused 429")]
    assert limited[1].args_digest == digest({"limit": 2})
    assert (bad_link.tool, bad_link.outcome, bad_link.returned_ids) == ("GET /files", "refused 403", [])


def test_downloads_are_audited(audited: Audited) -> None:
    assert audited.downloads == [200, 403, 404]
    downloads = [r for r in chain(audited.services) if r.tool == "GET /files"]
    assert [(r.outcome, r.returned_ids) for r in downloads] == [("ok", ["docs:getting-started.md"]), ("error 404", [])]


def test_records_are_chained_by_an_hmac_from_genesis_to_the_head(audited: Audited) -> None:
    key = (audited.root / "data" / "audit.key").read_bytes()
    for tenant in audited.services.audit.store.tenants():
        trail = chain(audited.services, tenant)
        assert [r.seq for r in trail] == list(range(1, len(trail) + 1))
        assert [r.prev_hash for r in trail] == [GENESIS, *(r.hash for r in trail[:-1])]
        assert all(record_mac(key, r) == r.hash for r in trail)
        assert all(record_mac(ATTACKER_KEY, r) != r.hash for r in trail)
        assert audited.services.audit.store.head(tenant) == (len(trail), trail[-1].hash)
    assert audited.services.audit.store.tenants() == sorted(["default", "other", UNAUTHENTICATED])


def test_the_key_and_checkpoints_live_outside_the_database_owner_only(audited: Audited) -> None:
    data = audited.root / "data"
    key, checkpoints = data / "audit.key", data / "audit-checkpoints.jsonl"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_bytes()) == 32
    assert stat.S_IMODE(checkpoints.stat().st_mode) == 0o600
    db = sqlean.connect(str(audited.services.settings.server.db_path))
    tables = ("audit_records", "audit_heads", "meta")
    blobs = [v for t in tables for row in db.execute(f"SELECT * FROM {t}") for v in row]
    db.close()
    assert not any(key.read_bytes().hex() in str(v) for v in blobs)
    last = AuditCheckpoint.model_validate_json(checkpoints.read_text().splitlines()[-1])
    assert {t: tuple(h) for t, h in last.heads.items()} == {
        t: audited.services.audit.store.head(t) for t in audited.services.audit.store.tenants()
    }


def reseal(records: list[dict[str, Any]], start_hash: str) -> list[dict[str, Any]]:
    """What an intruder can do without the key: renumber, re-link and re-MAC records with a key of their own."""
    prev, out = start_hash, []
    for record in records:
        model = AuditRecord.model_validate({**record, "prev_hash": prev})
        model = model.model_copy(update={"hash": record_mac(ATTACKER_KEY, model)})
        out.append(model.model_dump(mode="json"))
        prev = model.hash
    return out


def rows(conn: sqlean.Connection, tenant: str = "default") -> list[dict[str, Any]]:
    sql = "SELECT record_json FROM audit_records WHERE tenant = ? ORDER BY seq"
    return [json.loads(raw) for (raw,) in conn.execute(sql, (tenant,))]


def rewrite(conn: sqlean.Connection, records: list[dict[str, Any]], tenant: str = "default", head: bool = True) -> None:
    conn.execute("DELETE FROM audit_records WHERE tenant = ?", (tenant,))
    for record in records:
        conn.execute(
            "INSERT INTO audit_records(tenant, seq, record_json) VALUES (?, ?, ?)",
            (tenant, record["seq"], json.dumps(record)),
        )
    if head:
        last = records[-1] if records else {"seq": 0, "hash": GENESIS}
        conn.execute("UPDATE audit_heads SET seq = ?, hash = ? WHERE tenant = ?", (last["seq"], last["hash"], tenant))


def edited(record: dict[str, Any]) -> dict[str, Any]:
    return {**record, "outcome": "ok", "returned_ids": []}


def tamper_edit(conn: sqlean.Connection) -> None:
    trail = rows(conn)
    trail[2] = edited(trail[2])
    rewrite(conn, trail, head=False)


def tamper_edit_and_rechain(conn: sqlean.Connection) -> None:
    trail = rows(conn)
    trail[2] = edited(trail[2])
    rewrite(conn, trail[:2] + reseal(trail[2:], trail[1]["hash"]))


def tamper_delete_middle(conn: sqlean.Connection) -> None:
    conn.execute("DELETE FROM audit_records WHERE tenant = 'default' AND seq = 3")


def tamper_delete_middle_and_rechain(conn: sqlean.Connection) -> None:
    trail = rows(conn)
    later = [{**r, "seq": r["seq"] - 1} for r in trail[3:]]
    rewrite(conn, trail[:2] + reseal(later, trail[1]["hash"]))


def tamper_delete_last(conn: sqlean.Connection) -> None:
    conn.execute("DELETE FROM audit_records WHERE tenant = 'default' AND seq = (SELECT MAX(seq) FROM audit_records)")


def tamper_delete_last_and_fix_head(conn: sqlean.Connection) -> None:
    rewrite(conn, rows(conn)[:-1])


def tamper_delete_first(conn: sqlean.Connection) -> None:
    conn.execute("DELETE FROM audit_records WHERE tenant = 'default' AND seq = 1")


def tamper_swap(conn: sqlean.Connection) -> None:
    trail = rows(conn)
    trail[1], trail[3] = trail[3], trail[1]
    conn.execute("DELETE FROM audit_records WHERE tenant = 'default'")
    for seq, record in enumerate(trail, start=1):
        conn.execute(
            "INSERT INTO audit_records(tenant, seq, record_json) VALUES ('default', ?, ?)", (seq, json.dumps(record))
        )


def tamper_wipe(conn: sqlean.Connection) -> None:
    conn.execute("DELETE FROM audit_records")
    conn.execute("DELETE FROM audit_heads")


def tamper_forge_append(conn: sqlean.Connection) -> None:
    """A forged record that chains onto the last one, with the head moved to it."""
    trail = rows(conn)
    last = trail[-1]
    forged = {**last, "seq": last["seq"] + 1, "tool": "kb_addnote", "outcome": "ok"}
    rewrite(conn, trail + reseal([forged], last["hash"]))


@dataclass(frozen=True)
class Tampering:
    act: Callable[[sqlean.Connection], None]
    problem: str


def last_seq(audited: Audited) -> int:
    return len(chain(audited.services))


TAMPERING: dict[str, Callable[[int], Tampering]] = {
    "edited": lambda n: Tampering(tamper_edit, "'default', record 3: its MAC does not match"),
    "edited and re-chained": lambda n: Tampering(
        tamper_edit_and_rechain, "'default', record 3: its MAC does not match"
    ),
    "middle deleted": lambda n: Tampering(tamper_delete_middle, "'default', record 4: expected record 3"),
    "middle deleted and re-chained": lambda n: Tampering(
        tamper_delete_middle_and_rechain, "'default', record 3: its MAC does not match"
    ),
    "last deleted": lambda n: Tampering(
        tamper_delete_last, f"'default': the chain ends at record {n - 1}, but its head says {n}"
    ),
    "last deleted and head fixed": lambda n: Tampering(
        tamper_delete_last_and_fix_head,
        f"'default': the chain ends at record {n - 1}, but checkpoint 1 vouches for {n}",
    ),
    "first deleted": lambda n: Tampering(tamper_delete_first, "'default', record 2: expected record 1"),
    "swapped": lambda n: Tampering(tamper_swap, "'default', record 4: expected record 2"),
    "everything wiped": lambda n: Tampering(
        tamper_wipe, "'(unauthenticated)': the chain ends at record 0, but checkpoint 1 vouches for 2"
    ),
    "forged at the end": lambda n: Tampering(
        tamper_forge_append, f"'default', record {n + 1}: its MAC does not match"
    ),
}


@dataclass
class Verdict:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture(scope="module")
def verdicts(audited: Audited) -> dict[str, Verdict]:
    """`ragmcp audit verify` on an intact copy and on one tampered copy per kind, run concurrently;
    each copy has the original key file and checkpoint file beside it."""
    data = audited.root / "data"
    source = sqlean.connect(str(audited.services.settings.server.db_path))
    copies: dict[str, Path] = {}
    try:
        for case in ("intact", *TAMPERING):
            data_dir = audited.root / "copies" / case.replace(" ", "-")
            data_dir.mkdir(parents=True)
            for name in ("audit.key", "audit-checkpoints.jsonl"):
                shutil.copy2(data / name, data_dir / name)
            target = sqlean.connect(str(data_dir / "ragmcp.db"))
            source.backup(target)
            if case in TAMPERING:
                with target:
                    TAMPERING[case](last_seq(audited)).act(target)
            target.close()
            copies[case] = data_dir
    finally:
        source.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMCP_")}
    running = {
        case: subprocess.Popen(
            [sys.executable, "-m", "ragmcp.cli", "--data-dir", str(data_dir), "audit", "verify"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for case, data_dir in copies.items()
    }
    results = {}
    for case, process in running.items():
        out, err = process.communicate(timeout=180)
        results[case] = Verdict(process.returncode, out, err)
    return results


def test_cli_verify_passes_an_intact_trail(verdicts: dict[str, Verdict], audited: Audited) -> None:
    verdict = verdicts["intact"]
    assert verdict.returncode == 0, verdict.stderr
    total = sum(len(chain(audited.services, t)) for t in audited.services.audit.store.tenants())
    expected = f"audit trail intact: {total} records in 3 chains, 1 checkpoints; 0 records newer than the last"
    assert verdict.stdout.strip() == f"{expected} checkpoint"


@pytest.mark.parametrize("case", list(TAMPERING))
def test_cli_verify_finds_the_tampering(verdicts: dict[str, Verdict], audited: Audited, case: str) -> None:
    verdict = verdicts[case]
    assert verdict.returncode == 1, (verdict.stdout, verdict.stderr)
    assert f"audit trail BROKEN: tenant {TAMPERING[case](last_seq(audited)).problem}" in verdict.stderr
    assert "intact" not in verdict.stdout


def small_log(tmp_path: Path, checkpoints: Any, interval: float = 3600.0) -> AuditLog:
    key = b"k" * 32
    store = SqliteAuditStore(Database(tmp_path / "a.db"))
    return AuditLog(store, lambda: key, Checkpointer(checkpoints, lambda: key, interval))


class BlockingCheckpoints:
    """A checkpoint store that holds every write until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.written: list[AuditCheckpoint] = []

    def append(self, checkpoint: AuditCheckpoint) -> None:
        self.entered.set()
        assert self.release.wait(10)
        self.written.append(checkpoint)

    def all(self) -> Iterator[AuditCheckpoint]:
        return iter(list(self.written))


def test_checkpoints_are_written_at_the_interval_off_the_request_path(tmp_path: Path) -> None:
    store = BlockingCheckpoints()
    log = small_log(tmp_path, store, interval=0.05)
    log.append(Principal(tenant="a"), "kb_search", {}, None, "ok")
    assert store.entered.wait(5)  # the interval passed: the thread is writing, and blocked
    started = time.monotonic()
    for n in range(20):
        log.append(Principal(tenant="a" if n % 2 else "b"), "kb_search", {"n": n}, None, "ok")
    assert time.monotonic() - started < 2.0 and store.written == []  # appends never waited for it
    store.release.set()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not any(len(c.heads) == 2 for c in store.written):
        time.sleep(0.02)
    assert store.written[0].heads == {"a": (1, chain_of(log, "a")[0].hash)}
    assert store.written[-1].heads["a"][0] == 11 and store.written[-1].heads["b"][0] == 10
    count = len(store.written)
    log.close()  # nothing moved since: nothing more to vouch for
    assert len(store.written) == count
    log.append(Principal(tenant="b"), "kb_status", {}, None, "ok")
    log.close()
    assert len(store.written) == count + 1 and store.written[-1].heads["b"][0] == 11
    assert log.verify().ok and log.verify().unvouched == 0


def chain_of(log: AuditLog, tenant: str) -> list[AuditRecord]:
    return list(log.store.records(tenant))


def test_records_after_the_last_checkpoint_are_counted_as_unvouched(tmp_path: Path) -> None:
    log = small_log(tmp_path, FileCheckpointStore(tmp_path / "cp.jsonl"))
    log.append(Principal(tenant="a"), "kb_search", {}, None, "ok")
    log.close()
    log.append(Principal(tenant="a"), "kb_search", {}, None, "ok")
    check = log.verify()
    assert check.ok and (check.records, check.checkpoints, check.unvouched) == (2, 1, 1)


def test_an_edited_or_unreadable_checkpoint_file_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "cp.jsonl"
    log = small_log(tmp_path, FileCheckpointStore(path))
    log.append(Principal(tenant="a"), "kb_search", {}, None, "ok")
    log.close()
    line = json.loads(path.read_text())
    path.write_text(json.dumps({**line, "heads": {"a": [0, GENESIS]}}) + "\n")
    assert log.verify().problem == f"checkpoint 1 ({line['at'][:19]}Z): its signature does not match"
    path.write_text("not json\n")
    assert log.verify().problem == f"audit checkpoint file {path}, line 1: unreadable"


def test_a_trail_whose_key_file_is_gone_is_refused_not_rekeyed(tmp_path: Path) -> None:
    services = build_services(Settings(data_dir=tmp_path / "data"))
    services.audit.append(Principal(tenant="a"), "kb_search", {}, None, "ok")
    (tmp_path / "data" / "audit.key").unlink()
    process = subprocess.run(
        [sys.executable, "-m", "ragmcp.cli", "--data-dir", str(tmp_path / "data"), "audit", "verify"],
        env={k: v for k, v in os.environ.items() if not k.startswith("RAGMCP_")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert process.returncode == 2 and "audit.key is missing but the audit trail is not empty" in process.stderr
    assert not (tmp_path / "data" / "audit.key").exists()


def test_verify_needs_the_key_a_guess_fails(tmp_path: Path) -> None:
    log = small_log(tmp_path, FileCheckpointStore(tmp_path / "cp.jsonl"))
    log.append(Principal(tenant="a"), "kb_search", {}, None, "ok")
    log.close()
    assert not verify(log.store, log.checkpoints.store.all(), ATTACKER_KEY).ok


def test_an_append_is_one_write_transaction_of_three_statements(tmp_path: Path) -> None:
    """The MAC and the per-tenant head add no round trip: read the head, insert the record, move the head."""
    log = small_log(tmp_path, FileCheckpointStore(tmp_path / "cp.jsonl"))
    log.append(Principal(tenant="a"), "kb_search", {}, None, "ok")  # the connection and key exist from here on
    statements: list[str] = []
    log.store.db.conn().set_trace_callback(statements.append)
    log.append(Principal(tenant="a"), "kb_search", {"n": 2}, None, "ok")
    log.append(Principal(tenant="b"), "kb_search", {"n": 3}, None, "ok")
    log.store.db.conn().set_trace_callback(None)
    words = [s.split()[0].upper() for s in statements]
    assert words == ["BEGIN", "SELECT", "INSERT", "INSERT", "COMMIT"] * 2, statements
    log.close()

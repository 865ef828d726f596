"""The audit trail: every tool call through the real HTTP app appends one hash-chained record, and
`ragmcp audit verify` (the real CLI, on the data directory) finds an edited, deleted, swapped or
forged record and names it.

The tampering is done the way an intruder with the database file would: with SQL on a consistent
copy of the database (SQLite's backup API), one copy per kind of tampering, all checked at once.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlean
from starlette.testclient import TestClient

from ragmcp.bootstrap import Services, build_services
from ragmcp.http import create_app
from ragmcp.mcp.server import build_registry
from ragmcp.security.audit import GENESIS, digest, record_hash, verify
from ragmcp.security.models import AuditRecord
from ragmcp.settings import Settings

REPO = Path(__file__).resolve().parents[2]
_ids = itertools.count(1)


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


def tool_call(http: TestClient, path: str, secret: str, tool: str, arguments: Any, **headers: str) -> dict[str, Any]:
    body = {
        "jsonrpc": "2.0",
        "id": next(_ids),
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    return http.post(path, json=body, headers={"authorization": f"Bearer {secret}", **headers}).json()


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Audited]:
    """An app over the samples with three keys, and the tool calls (good and bad) made through it."""
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
            answer = tool_call(http, path, key.secret, tool, arguments, **headers)
            calls.append(Call(key.key.tenant, key.key.key_id, user, tool, arguments, answer))
            http.post(
                path,
                json={"jsonrpc": "2.0", "id": 0, "method": "tools/list"},
                headers={"authorization": f"Bearer {key.secret}"},
            )
        yield Audited(services, root, calls)


def records(services: Services) -> list[AuditRecord]:
    return list(services.audit.store.records())


def payload(answer: dict[str, Any]) -> Any:
    return json.loads(answer["result"]["content"][0]["text"])


def test_every_tool_call_appends_one_record_of_who_did_what(audited: Audited) -> None:
    trail = records(audited.services)
    assert [r.tool for r in trail] == [c.tool for c in audited.calls]  # tools/list is not a tool call
    for record, call in zip(trail, audited.calls, strict=True):
        assert (record.tenant, record.key_id, record.user) == (call.tenant, call.key_id, call.user)
        assert record.args_digest == digest(call.arguments)
        answered = "ok" if "result" in call.answer else f"error {call.answer['error']['code']}"
        assert record.outcome == answered
    outcomes = [r.outcome for r in trail]
    assert outcomes == ["ok", "ok", "error -32602", "error -32000", "error -32602", "ok", "ok"]


def test_records_hold_the_ids_each_call_returned(audited: Audited) -> None:
    trail = records(audited.services)
    search, docs, bad, refused, foreign, kb, listed = audited.calls
    segments = [s["segment_uid"] for s in search.answer["result"]["segments"]]
    assert segments and trail[0].returned_ids == segments
    assert trail[1].returned_ids == ["docs:getting-started.md"]
    assert [r.returned_ids for r in trail[2:5]] == [[], [], []]
    assert foreign.answer["error"]["message"] == "document docs:getting-started.md not found"
    hits = payload(kb.answer)["results"]
    assert hits and set(trail[5].returned_ids) >= {h["chunk_id"] for h in hits}
    assert trail[6].returned_ids == [d["id"] for d in payload(listed.answer)["documents"]]
    assert refused.answer["error"]["code"] == -32000 and bad.answer["error"]["code"] == -32602
    assert docs.answer["result"]["docs"][0]["doc_id"] == "docs:getting-started.md"


def test_records_are_chained_from_genesis_to_the_head(audited: Audited) -> None:
    trail = records(audited.services)
    assert [r.seq for r in trail] == list(range(1, len(trail) + 1))
    assert [r.prev_hash for r in trail] == [GENESIS, *(r.hash for r in trail[:-1])]
    assert all(record_hash(r) == r.hash for r in trail)
    assert audited.services.audit.store.head() == (len(trail), trail[-1].hash)
    assert verify(trail, audited.services.audit.store.head()).ok


@pytest.mark.parametrize(
    ("field_name", "value", "problem"),
    [
        ("tenant", "other", "record 2: contents do not match its hash (edited)"),
        ("key_id", None, "record 2: contents do not match its hash (edited)"),
        ("user", "mallory", "record 2: contents do not match its hash (edited)"),
        ("tool", "kb_status", "record 2: contents do not match its hash (edited)"),
        ("args_digest", "0" * 64, "record 2: contents do not match its hash (edited)"),
        ("returned_ids", [], "record 2: contents do not match its hash (edited)"),
        ("outcome", "error -32602", "record 2: contents do not match its hash (edited)"),
        ("prev_hash", "f" * 64, "record 2: does not follow the record before it"),
        ("seq", 9, "record 9: expected record 2 (deleted or reordered)"),
    ],
)
def test_verify_finds_an_edit_of_any_field(audited: Audited, field_name: str, value: Any, problem: str) -> None:
    trail = records(audited.services)
    trail[1] = trail[1].model_copy(update={field_name: value})
    check = verify(trail, audited.services.audit.store.head())
    assert not check.ok and check.problem == problem


def edit(record: dict[str, Any]) -> dict[str, Any]:
    return {**record, "outcome": "ok", "returned_ids": []}


def rehash(record: dict[str, Any]) -> dict[str, Any]:
    edited = AuditRecord.model_validate(edit(record))
    return {**edited.model_dump(mode="json"), "hash": record_hash(edited)}


def tamper_edit(conn: sqlean.Connection, rehashed: bool) -> None:
    (raw,) = conn.execute("SELECT record_json FROM audit WHERE seq = 3").fetchone()
    changed = (rehash if rehashed else edit)(json.loads(raw))
    conn.execute("UPDATE audit SET record_json = ? WHERE seq = 3", (json.dumps(changed),))


def tamper_swap(conn: sqlean.Connection) -> None:
    rows = dict(conn.execute("SELECT seq, record_json FROM audit WHERE seq IN (2, 4)").fetchall())
    conn.execute("UPDATE audit SET record_json = ? WHERE seq = 2", (rows[4],))
    conn.execute("UPDATE audit SET record_json = ? WHERE seq = 4", (rows[2],))


def tamper_append(conn: sqlean.Connection) -> None:
    """A forged record that chains correctly onto the last one (only the head knows better)."""
    (raw,) = conn.execute("SELECT record_json FROM audit ORDER BY seq DESC LIMIT 1").fetchone()
    last = AuditRecord.model_validate_json(raw)
    forged = last.model_copy(update={"seq": last.seq + 1, "prev_hash": last.hash, "tool": "kb_addnote"})
    forged = forged.model_copy(update={"hash": record_hash(forged)})
    conn.execute("INSERT INTO audit(seq, record_json) VALUES (?, ?)", (forged.seq, forged.model_dump_json()))


TAMPERING: dict[str, tuple[Callable[[sqlean.Connection], None], str]] = {
    "edited": (lambda c: tamper_edit(c, rehashed=False), "record 3: contents do not match its hash (edited)"),
    "edited and rehashed": (lambda c: tamper_edit(c, rehashed=True), "record 4: does not follow the record before it"),
    "middle deleted": (
        lambda c: c.execute("DELETE FROM audit WHERE seq = 3"),
        "record 4: expected record 3 (deleted or reordered)",
    ),
    "last deleted": (
        lambda c: c.execute("DELETE FROM audit WHERE seq = (SELECT MAX(seq) FROM audit)"),
        "the chain ends at record 6, but 7 were written",
    ),
    "first deleted": (
        lambda c: c.execute("DELETE FROM audit WHERE seq = 1"),
        "record 2: expected record 1 (deleted or reordered)",
    ),
    "swapped": (tamper_swap, "record 4: expected record 2 (deleted or reordered)"),
    "forged at the end": (tamper_append, "the chain ends at record 8, but 7 were written"),
}


@dataclass
class Verdict:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture(scope="module")
def verdicts(audited: Audited) -> dict[str, Verdict]:
    """`ragmcp audit verify` on an intact copy and on one tampered copy per kind, run concurrently."""
    source = sqlean.connect(str(audited.services.settings.db_path))
    copies: dict[str, Path] = {}
    try:
        for case in ("intact", *TAMPERING):
            data_dir = audited.root / "copies" / case.replace(" ", "-")
            data_dir.mkdir(parents=True)
            target = sqlean.connect(str(data_dir / "ragmcp.db"))
            source.backup(target)
            if case in TAMPERING:
                with target:
                    TAMPERING[case][0](target)
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
    assert verdict.stdout.strip() == f"audit trail intact: {len(audited.calls)} records"


@pytest.mark.parametrize("case", list(TAMPERING))
def test_cli_verify_names_the_tampered_record(verdicts: dict[str, Verdict], case: str) -> None:
    verdict = verdicts[case]
    assert verdict.returncode == 1, (verdict.stdout, verdict.stderr)
    assert f"audit trail BROKEN: {TAMPERING[case][1]}" in verdict.stderr
    assert "intact" not in verdict.stdout

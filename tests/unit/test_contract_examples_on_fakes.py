"""Every profile's tools through an in-process MCP client over the in-memory fakes (tests/fakes.py):
each request example of the contracts (../shared/contracts/*.md, read for their examples only) is
sent by the MCP SDK's client to the profile's server object over the SDK's in-memory transport, in
the contract's order, and each answer is checked twice: against the contract's response schema
(tests/contracts/schemas) and against what the small corpus of tests/contract_examples.py holds.
No model, no server, no SQLite file: part of `make test-fast`. The slow contract tests replay the
same examples over HTTP on the shared documents with the real index and model."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import anyio
import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError

from ragmcp.bootstrap import build_registry, build_services
from ragmcp.mcp.registry import Caller, ToolRegistry, current_caller
from ragmcp.mcp.server import build_server
from ragmcp.security.identity import open_credential
from ragmcp.services import Services
from tests import fakes
from tests.contract_examples import (
    CONTRACTS,
    FILES,
    TENANT,
    Example,
    contract_requests,
    contracts_present,
    write_corpus,
)
from tests.contracts.response_schemas import assert_valid

if not contracts_present():
    pytest.skip(f"contract documents not found under {CONTRACTS}", allow_module_level=True)


@dataclass
class World:
    services: Services
    registry: ToolRegistry
    runner: fakes.StateMachineRunner


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    """The services on the fakes, with two ports of the AWS deployment (a reranker; synthesis run as
    its state machine runs it), over a handbook only the group `users` reads, an open folder and a
    CSV row source."""
    settings = fakes.settings(tmp_path_factory.mktemp("nothing-written") / "data")
    # The jobs run as they are submitted (no change events are delivered here; test_fakes_services.py
    # drives ObjectEventQueue with them).
    remote = fakes.adapters(remote=True)
    plain = replace(remote, tasks=fakes.InlineTaskQueue(remote.jobs), object_jobs=None)
    adapters = fakes.with_state_machine(plain, lambda: build_services(settings, plain).synthesis_steps)
    services = build_services(settings, adapters)
    assert isinstance(adapters.remote_synthesis, fakes.StateMachineRunner)
    write_corpus(adapters, services)
    return World(services, build_registry(services), adapters.remote_synthesis)


@dataclass
class Outcome:
    payload: Any = None
    error: MCPError | None = None


def _caller(world: World, headers: dict[str, str]) -> Caller:
    tags = headers.get("x-session-tags")
    return Caller(
        credential=open_credential(TENANT),
        identities=world.services.identities,
        user=headers.get("x-user-id"),
        session_tags=tuple(json.loads(tags)) if tags else None,
        human_uid=headers.get("x-human-uid"),
    )


Fill = Callable[[Example, list["Outcome"]], Example]


async def _replay(world: World, examples: list[Example], fill: Fill) -> list[Outcome]:
    """Each example through an MCP client session on its profile's server, in order."""
    outcomes: list[Outcome] = []
    profile = examples[0].profile
    async with Client(build_server(world.registry, profile)) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        for example in examples:
            example = fill(example, outcomes)
            current_caller.set(_caller(world, example.headers))
            try:
                result = await client.call_tool(example.tool, example.arguments)
            except MCPError as exc:
                outcomes.append(Outcome(error=exc))
                continue
            assert not result.is_error, (example, result)
            payload = json.loads(result.content[0].text)
            if listed[example.tool].output_schema is not None:
                assert result.structured_content == payload
            outcomes.append(Outcome(payload=payload))
    return outcomes


REPORT = b"%PDF-1.4 not a whole report: the contract's upload declares 5 MiB"


def placeholders(example: Example, outcomes: list[Outcome]) -> Example:
    """The example with its placeholders (`<uuid>`, `<base64-encoded-data>`) and the ids it shows for
    a document of the contract's own (`42`, `doc_abc123`) replaced by what the calls before it made
    or found: the upload it started, the first note it added, the first document it found."""
    made = [o.payload for o in outcomes if isinstance(o.payload, dict)]
    found = [o.payload for o in outcomes if isinstance(o.payload, list) and o.payload]
    args = dict(example.arguments)
    if args.get("upload_id") == "<uuid>":
        args["upload_id"] = next(p["upload_id"] for p in made if "upload_id" in p)
    if args.get("data") == "<base64-encoded-data>":
        args["data"] = base64.b64encode(REPORT).decode()
    if args.get("document_id") == 42:
        args["document_id"] = next(p["document_id"] for p in made if "document_id" in p)
    if args.get("document_id") == "doc_abc123":
        args["document_id"] = found[0][0]["id"]
    return replace(example, arguments=args)


def _as_is(example: Example, _outcomes: list[Outcome]) -> Example:
    return example


def replay(world: World, profile: str, fill: Fill = _as_is) -> list[Outcome]:
    examples = contract_requests(profile)
    assert examples, f"no request examples found in {FILES[profile]}"
    return anyio.run(_replay, world, examples, fill)


def ok(outcome: Outcome, profile: str, tool: str) -> Any:
    """The payload of a call that succeeded, valid against its contract's response schema."""
    assert outcome.error is None, f"{profile}/{tool}: {outcome.error!r}"
    assert_valid(outcome.payload, profile, tool)
    return outcome.payload


def refused(outcome: Outcome, code: int, data_code: str, words: str) -> None:
    """A JSON-RPC error with the contracts' code, the service's code in `data`, and a message saying why."""
    assert outcome.error is not None, f"expected an error, got {outcome.payload!r}"
    assert outcome.error.error.code == code
    assert (outcome.error.error.data or {}).get("code") == data_code
    assert words in outcome.error.error.message


def _link_opens(world: World, uri: str, doc_id: str) -> None:
    """A link a tool answered with is one this server minted, for that document."""
    query = dict(part.split("=", 1) for part in uri.split("?", 1)[1].split("&"))
    principal = world.services.links.verify(
        TENANT, doc_id, int(query["expires"]), query["grant"], query["sig"]
    )
    assert principal is not None and principal.tenant == TENANT


def test_chat_examples(world: World) -> None:
    resources, raw, synthesized = replay(world, "chat", placeholders)
    listed = ok(resources, "chat", "rag_discover_resources")["results"]["resources"]
    names = {r["id"]: r["name"] for r in listed}
    assert names == {"handbook": "Employee Handbook", "office": "office", "posts": "stack_posts"}
    assert next(r for r in listed if r["id"] == "handbook")["groups"] == ["users"]

    hits = ok(raw, "chat", "rag_get_raw_results")["results"]["hits"]
    assert [(h["resourceId"], h["title"]) for h in hits] == [("handbook", "Leave policy")]
    assert "25 days of paid time off" in hits[0]["snippet"]
    _link_opens(world, hits[0]["uri"], "handbook:leave-policy.md")

    answer = ok(synthesized, "chat", "rag_get_synthesized_results")["results"]
    assert "25 days of paid time off" in answer["answer"] and "cancellation" not in answer["answer"]
    assert [c["resourceId"] for c in answer["citations"]] == ["handbook"]
    assert world.runner.executions >= 1  # the answer came through the state machine's tasks


def test_ragbox_examples(world: World) -> None:
    search, document, knowledge, listing = replay(world, "ragbox", placeholders)
    hits = ok(search, "ragbox", "search_documents")
    assert hits[0]["id"] == "office:cancellation.md" and len(hits) <= 3
    assert "24-hour cancellation policy" in hits[0]["snippet"]
    assert all(h["id"] != "handbook:leave-policy.md" for h in hits)  # ragbox's vault: no group, no handbook

    shown = ok(document, "ragbox", "get_document")
    assert shown["id"] == "office:cancellation.md" and "content" not in shown  # include_content: false

    answer = ok(knowledge, "ragbox", "query_knowledge")
    assert "40 euros" in answer["answer"] and answer["silence"] is False
    assert answer["sources"][0]["document"] == "Office Policies"

    assert listing.error is None
    documents = listing.payload["documents"]
    readable = {"office:cancellation.md", "office:product-x.md", "posts:12345", "posts:9876"}
    assert {d["id"] for d in documents} == readable
    assert listing.payload["total"] == 4 and listing.payload["limit"] == 10


def test_mindset_examples(world: World) -> None:
    outcomes = replay(world, "mindset", placeholders)
    assert len(outcomes) == 2  # the request under "Tool call" and the one of the curl example
    for outcome in outcomes:
        found = ok(outcome, "mindset", "rag_search")
        assert found["status"] == "success"
        assert found["segments"][0]["segment_uid"] == "office:product-x.md#0"
        assert "GPU acceleration" in found["segments"][0]["raw_text"]
        assert all(not s["segment_uid"].startswith("handbook:") for s in found["segments"])
    uid = outcomes[0].payload["segments"][0]["segment_uid"]
    curl = contract_requests("mindset")[-1]
    (verified,) = anyio.run(
        _replay, world, [Example("mindset", "verify_document_access", {"segment_uid": uid}, curl.headers)], _as_is
    )
    access = ok(verified, "mindset", "verify_document_access")
    assert access["has_access"] is True
    _link_opens(world, access["refreshed_url"], "office:product-x.md")


def test_proxysql_examples(world: World) -> None:
    fts, vector, fused, reranked, chunks, docs, rows, stats, sync = replay(world, "proxysql", placeholders)
    for outcome, tool in ((fts, "rag.search_fts"), (fused, "rag.search_hybrid"), (reranked, "rag.search_hybrid")):
        found = ok(outcome, "proxysql", tool)
        assert next(r["chunk_id"] for r in found["results"]) == "posts:12345#0"
        assert found["results"][0]["source_name"] == "stack_posts" and found["truncated"] is False
    assert ok(fused, "proxysql", "rag.search_hybrid")["stats"]["mode"] == "fuse"
    assert reranked.payload["stats"]["mode"] == "fts_then_vec"
    nearest = ok(vector, "proxysql", "rag.search_vector")["results"]
    assert {r["doc_id"] for r in nearest} >= {"posts:12345", "posts:9876"}
    assert all(not r["doc_id"].startswith("handbook:") for r in nearest)

    bodies = ok(chunks, "proxysql", "rag.get_chunks")["chunks"]
    assert [c["chunk_id"] for c in bodies] == ["posts:12345#0"]  # posts:9876 has one chunk: #1 is not there
    assert "JSON_EXTRACT" in bodies[0]["body"] and bodies[0]["chunk_metadata"]["chunk_index"] == 0
    (doc,) = ok(docs, "proxysql", "rag.get_docs")["docs"]
    assert doc["pk_json"] == {"Id": "12345"} and doc["metadata"]["Score"] == "12"
    (row,) = ok(rows, "proxysql", "rag.fetch_from_source")["rows"]
    assert row["row"]["Title"] == "How to parse JSON in MySQL 8?"
    sources = {s["source_name"]: s for s in ok(stats, "proxysql", "rag.admin.stats")["sources"]}
    assert (sources["stack_posts"]["docs"], sources["stack_posts"]["chunks"]) == (2, 2)
    accepted = ok(sync, "proxysql", "rag.admin.sync")
    assert accepted["accepted"] is True
    job = world.services.jobs.get(TENANT, accepted["job_id"])
    assert job is not None and job.status == "succeeded"


EMAIL_NOTE = "Feedback on email preferences: a weekly digest."


def test_kb_examples(world: World) -> None:
    email = {"text": EMAIL_NOTE, "collection": "memory", "tags": ["email"]}
    seed = [
        Example("kb", "kb_addnote", {"text": "Pension revaluation happens every April at the CPI rate."}),
        Example("kb", "kb_addnote", email),
        Example("kb", "kb_addnote", {"text": "The error log rotates at midnight."}),
    ]
    assert all(o.payload["status"] == "succeeded" for o in anyio.run(_replay, world, seed, _as_is))
    (pension, email, feedback, errors, note, memory, other, start, part, finish, update, by_id, by_path) = (
        outcomes := replay(world, "kb", placeholders)
    )[:13]
    status, every_job, failed_jobs, bad = outcomes[13:]
    assert "Pension revaluation" in ok(pension, "kb", "kb_search")["results"][0]["text"]
    for outcome in (email, feedback):
        results = ok(outcome, "kb", "kb_search")["results"]
        assert [r["text"] for r in results] == [EMAIL_NOTE]
        assert results[0]["collection"] == "memory" and results[0]["tags"] == ["email"]
    assert ok(errors, "kb", "kb_search")["mode"] == "fts"
    assert "error log" in errors.payload["results"][0]["text"]

    assert ok(note, "kb", "kb_addnote")["status"] == "succeeded" and note.payload["collection"] == "documents"
    assert ok(memory, "kb", "kb_addnote")["collection"] == "memory"
    assert ok(other, "kb", "kb_addnote")["collection"] == "memory"

    assert ok(start, "kb", "kb_upload_start")["upload_id"]
    assert ok(part, "kb", "kb_upload_chunk")["bytes_received"] == len(REPORT)
    refused(finish, -32602, "INVALID_ARGUMENT", "5242880")  # 5 MiB declared, one short part sent

    updated = ok(update, "kb", "kb_update_note")
    assert updated["document_id"] == note.payload["document_id"]
    shown = ok(by_id, "kb", "kb_get")
    assert shown["document_id"] == updated["document_id"]
    assert [c["text"] for c in shown["chunks"]] == ["Updated preference: user prefers bullet points"]
    refused(by_path, -32602, "NOT_FOUND", "memory/feedback_testing.md")
    health = ok(status, "kb", "kb_status")
    assert health["embedding_model"] == fakes.HashEmbedder.model_id and health["embedding_dimension"] == 1024
    listed = ok(every_job, "kb", "kb_jobs")
    assert listed["count"] == len(listed["jobs"]) >= 6  # the notes' and the upload's
    assert ok(failed_jobs, "kb", "kb_jobs") == {"jobs": [], "count": 0}
    refused(bad, -32602, "INVALID_ARGUMENT", "text: Field required")


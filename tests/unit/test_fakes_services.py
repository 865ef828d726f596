"""The services on the in-memory fakes (tests/fakes.py): the real services, tools and MCP server
over fake ports, with no database file, embedding model or HTTP server, in milliseconds."""

from __future__ import annotations

import base64
import json
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from mcp.client import Client

from ragmcp.bootstrap import build_registry, build_services
from ragmcp.domain.errors import IndexMismatch
from ragmcp.domain.models import Acl, Chunk, Document, Job, Principal, SearchFilter, Tier
from ragmcp.ingest.events import SOURCES_PREFIX, ObjectChange
from ragmcp.mcp.caller import Caller, current_caller
from ragmcp.mcp.server import build_server
from ragmcp.retrieval.service import SearchRequest
from ragmcp.security.identity import open_credential
from ragmcp.services import Services
from tests import fakes


@pytest.fixture
def services(tmp_path: Path) -> Services:
    return build_services(fakes.settings(tmp_path / "data"), fakes.adapters())


async def _calls(services: Services, *calls: tuple[str, dict[str, Any]], tenant: str = "default") -> list[Any]:
    """Each tool call's JSON payload, through an MCP client session on the kb profile's server."""
    current_caller.set(Caller(credential=open_credential(tenant), identities=services.identities))
    payloads: list[Any] = []
    async with Client(build_server(build_registry(services), "kb")) as client:
        for name, arguments in calls:
            if arguments.get("upload_id") == "{id}":  # the upload kb_upload_start began
                arguments = {**arguments, "upload_id": payloads[0]["upload_id"]}
            result = await client.call_tool(name, arguments)
            assert not result.is_error, result
            payloads.append(json.loads(result.content[0].text))
    return payloads


def test_kb_search_finds_a_note_kb_addnote_added(services: Services, tmp_path: Path) -> None:
    added, found, missed = anyio.run(
        _calls,
        services,
        ("kb_addnote", {"text": "The heron nests in the reed beds of the estuary every spring.", "tags": ["birds"]}),
        ("kb_search", {"query": "where does the heron nest", "tags": ["birds"]}),
        ("kb_search", {"query": "heron nest", "tags": ["fish"]}),
    )
    assert added["status"] == "succeeded"
    assert found["results"][0]["text"].startswith("The heron nests in the reed beds")
    assert found["results"][0]["document_id"] == added["document_id"]
    assert missed["results"] == []
    assert not (tmp_path / "data").exists()  # no SQLite file, no key file: everything stayed in memory
    assert [r.tool for r in services.audit.store.records("default")] == ["kb_addnote", "kb_search", "kb_search"]


def test_an_upload_in_parts_is_ingested_and_only_its_tenant_finds_it(services: Services) -> None:
    text = b"# Tide tables\n\nHigh water at the harbour mouth comes forty minutes after the bar.\n"
    _start, _first, second, finish, found = anyio.run(
        _calls,
        services,
        ("kb_upload_start", {"filename": "tides.md", "total_size": len(text), "tags": ["harbour"]}),
        ("kb_upload_chunk", {"upload_id": "{id}", "data": base64.b64encode(text[:30]).decode(), "chunk_index": 0}),
        ("kb_upload_chunk", {"upload_id": "{id}", "data": base64.b64encode(text[30:]).decode(), "chunk_index": 1}),
        ("kb_upload_finish", {"upload_id": "{id}"}),
        ("kb_search", {"query": "high water harbour mouth"}),
    )
    assert second["bytes_received"] == len(text)
    assert finish["status"] == "succeeded"
    assert found["results"][0]["file_name"] == "tides.md"
    assert "forty minutes after the bar" in found["results"][0]["text"]
    search = ("kb_search", {"query": "high water harbour mouth"})
    (elsewhere,) = anyio.run(partial(_calls, tenant="other"), services, search)
    assert elsewhere["results"] == []


def _doc(tenant: str, doc_id: str, **fields: Any) -> Document:
    return Document(
        tenant=tenant,
        doc_id=doc_id,
        source="s",
        path=f"{doc_id}.md",
        title=doc_id,
        file_name=f"{doc_id}.md",
        file_type="md",
        content_hash=doc_id,
        **fields,
    )


def _index(services: Services, doc: Document, text: str) -> None:
    chunk = Chunk(chunk_id=f"{doc.doc_id}#0", doc_id=doc.doc_id, ordinal=0, text=text, headline="", summary="")
    services.index.replace_document(doc, [chunk], services.embedder.embed([text]))


def test_the_fake_index_filters_inside_the_search(services: Services) -> None:
    """Tenant, tier, ACL and filter hold for keyword and vector search alike, as in the real indexes."""
    text = "copper cathode prices rose in March"
    _index(services, _doc("a", "open"), text)
    _index(services, _doc("a", "secret", tier=Tier.privileged), text)
    _index(services, _doc("a", "finance", acl=Acl(groups=("finance",))), text)
    _index(services, _doc("a", "tagged", tags=("metals",)), text)
    _index(services, _doc("b", "other-tenant"), text)
    reader = Principal(tenant="a", max_tier=Tier.standard)
    everything = SearchFilter()

    def found(principal: Principal, flt: SearchFilter = everything) -> dict[str, set[str]]:
        vector = services.embedder.embed_queries([text])[0]
        return {
            "fts": {h.chunk_id.split("#")[0] for h in services.index.search_fts(principal, text, flt, 10)},
            "vector": {h.chunk_id.split("#")[0] for h in services.index.search_vector(principal, vector, flt, 10)},
        }

    assert found(reader) == {"fts": {"open", "tagged"}, "vector": {"open", "tagged"}}
    finance = reader.model_copy(update={"groups": ("finance",), "max_tier": Tier.privileged})
    assert found(finance)["fts"] == {"open", "secret", "finance", "tagged"}
    assert found(reader, SearchFilter(tags_all=("metals",))) == {"fts": {"tagged"}, "vector": {"tagged"}}
    assert found(Principal(tenant="b")) == {"fts": {"other-tenant"}, "vector": {"other-tenant"}}
    assert services.index.count_chunks("a") == 4


def test_the_fake_index_ranks_by_overlap_and_by_cosine(services: Services) -> None:
    _index(services, _doc("a", "both"), "tidal energy from the estuary")
    _index(services, _doc("a", "one"), "energy prices in winter")
    _index(services, _doc("a", "none"), "a recipe for bread")
    principal = Principal(tenant="a")
    keyword = services.index.search_fts(principal, "estuary energy", SearchFilter(), 10)
    assert [h.chunk_id for h in keyword] == ["both#0", "one#0"]
    assert keyword[0].raw_score > keyword[1].raw_score
    vector = services.embedder.embed_queries(["tidal energy from the estuary"])[0]
    nearest = services.index.search_vector(principal, vector, SearchFilter(), 3)
    assert [h.chunk_id for h in nearest][:2] == ["both#0", "one#0"]
    assert nearest[0].raw_score == pytest.approx(1.0, abs=1e-5)
    hits = services.search.search(principal, SearchRequest(phrases=["estuary energy"], top_k=2)).hits
    assert next(h.chunk.chunk_id for h in hits) == "both#0"


def test_the_fake_embedder_is_deterministic_and_normalised() -> None:
    embedder = fakes.HashEmbedder()
    first, again = embedder.embed(["heron reed estuary"]), embedder.embed(["heron reed estuary"])
    assert np.array_equal(first, again)
    assert np.linalg.norm(first[0]) == pytest.approx(1.0)
    near, far = embedder.embed(["heron in the reed", "bread recipe"])
    assert float(first[0] @ near) > float(first[0] @ far)


def test_an_index_built_with_another_embedder_is_refused(tmp_path: Path) -> None:
    adapters = fakes.adapters()
    adapters.index.ensure_model("another-model", 384)
    with pytest.raises(IndexMismatch):
        build_services(fakes.settings(tmp_path), adapters)


def test_a_note_waits_for_its_object_event_as_on_aws(tmp_path: Path) -> None:
    """The AWS deployment's ports on fakes: kb_addnote's job stays queued until the change event of the
    note's object is applied (ObjectEventQueue as TaskQueue and ObjectJobs), then it has succeeded."""
    adapters = fakes.adapters(remote=True)
    services = build_services(fakes.settings(tmp_path / "data"), adapters)
    assert services.drop_events is not None
    (added,) = anyio.run(_calls, services, ("kb_addnote", {"text": "The osprey returns to the loch in April."}))
    assert added["status"] == "queued"
    source, _, path = added["doc_id"].partition(":")
    key = f"{SOURCES_PREFIX}default/{source}/{path}"
    outcome = services.drop_events.apply(ObjectChange(bucket="drop", key=key, version="1", removed=False))
    assert outcome.action == "ingested" and outcome.counts["chunks"] == 1
    job = services.jobs.get("default", added["job_id"])
    assert job is not None and (job.status, job.counts["chunks"]) == ("succeeded", 1)
    (found,) = anyio.run(_calls, services, ("kb_search", {"query": "osprey loch"}))
    assert found["results"][0]["doc_id"] == added["doc_id"]


def test_an_outcome_recorded_before_its_job_completes_the_job_when_submitted() -> None:
    """An event processed before the MCP side recorded its job still completes it (an outcome older
    than the job is another write's)."""
    jobs = fakes.MemoryJobStore()
    queue = fakes.ObjectEventQueue(jobs)
    job = Job(job_id="j", tenant="t", type="ingest", target="a.md", source="notes")  # made before its object
    queue.finished("t", "notes", "a.md", {"chunks": 2}, None)  # the object's event, processed first
    done = queue.submit(job, lambda: {"never": 1})
    assert (done.status, done.counts) == ("succeeded", {"chunks": 2})
    assert queue.depth() == 0


def test_the_state_machine_runner_answers_as_the_steps_do(tmp_path: Path) -> None:
    """Synthesis through the state machine's tasks (JSON events, evidence by stash reference) gives
    the answer the steps give in process, with the reranker in the path."""
    settings = fakes.settings(tmp_path / "data")
    plain = fakes.adapters(remote=True)
    in_process = build_services(settings, plain)
    remote = fakes.with_state_machine(plain, lambda: in_process.synthesis_steps)
    services = build_services(settings, remote)
    doc = _doc("default", "tides")
    _index(services, doc, "High water at the harbour mouth comes forty minutes after the bar.")
    principal = Principal(tenant="default")
    question = "when is high water at the harbour mouth"
    direct = in_process.synthesis.answer(principal, question)
    through = services.synthesis.answer(principal, question)
    assert isinstance(remote.remote_synthesis, fakes.StateMachineRunner)
    assert remote.remote_synthesis.executions == 1
    assert through.text == direct.text and "forty minutes" in through.text
    assert through.citations == direct.citations
    assert plain.blobs.list(plain.staging_location)  # the evidence and the answer went by reference
    assert isinstance(plain.reranker, fakes.WordOverlapReranker) and plain.reranker.calls

def test_the_services_are_frozen_and_the_registry_is_bound_from_them_at_any_time(tmp_path: Path) -> None:
    """Services are built once, complete (what only `serve` knows, the first sync's progress, is given
    when they are built): no entry point sets a field afterwards, and binding the tools needs no order."""
    import dataclasses

    from ragmcp.bootstrap import DEPS_PROVIDERS
    from ragmcp.mcp.server import tool_specs
    from ragmcp.progress import Progress

    sync = Progress("files")
    services = build_services(fakes.settings(tmp_path / "data"), fakes.adapters(), first_sync=sync)
    with pytest.raises(dataclasses.FrozenInstanceError):
        services.first_sync = None  # type: ignore[misc]
    assert {spec.deps_type.__name__ for spec in tool_specs()} == set(DEPS_PROVIDERS)  # one for each profile
    registry = build_registry(services)
    for spec in registry.tools.values():
        deps = spec.deps
        assert isinstance(deps, spec.deps_type)
        for part in dataclasses.fields(deps):  # each part is the services' own (no copy, nothing left unset)
            given = getattr(deps, part.name)
            assert given is getattr(services, part.name) or given == getattr(services, part.name), part.name
    assert registry.tools["kb_search"].deps.first_sync is sync
    assert build_registry(services).tools["rag_discover_resources"].deps.first_sync is sync  # again: the same parts

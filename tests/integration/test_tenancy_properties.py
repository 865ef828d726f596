"""Property tests: no search hit, count, fetch or verification ever crosses a tenant or an ACL.

Each example ingests small Markdown files (with `.metadata.json` sidecars carrying groups, users
and tier) through the real pipeline into fresh tenants of one SQLite index, and asks as random
callers: through SearchService in every mode, and through the MCP tools of every profile over
the real HTTP app with an API key of the caller's tenant. The index keeps every earlier
example's documents, all made of the same few words, so other tenants always hold many
documents that match as well as the caller's own: a search that filtered after its top-k would
come back short, and one that did not filter would return them.

Every document's text and title carry a unique marker, so each returned item is traced to the
exact document (and tenant) it came from, even where two tenants use the same doc_id.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from ragmcp.bootstrap import Services, build_registry, build_services
from ragmcp.domain.models import Document, Principal, Tier, UserRecord
from ragmcp.http import create_app
from ragmcp.retrieval.service import SearchRequest
from ragmcp.security.models import RateLimits
from ragmcp.security.policy import can_read
from ragmcp.settings import Settings

VOCAB = ("apple", "river", "copper", "violet", "falcon", "glacier", "lantern", "meadow")
NO_MATCH = "zeppelin"
GROUPS = ("eng", "hr", "legal")
USERS = ("alice", "bob", "carol")
NAMES = ("n0", "n1", "n2", "n3", "n4", "n5")
SOURCES = ("s1", "s2")
TENANTS = 4  # tenant 3 of each example never holds a document
MINDSET_SEGMENTS = 8
UNLIMITED = RateLimits(per_minute=1_000_000, synthesis_per_minute=1_000_000, concurrent=10_000)
PROPERTY = settings(max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
_ids = count(1)


@dataclass(frozen=True)
class DocSpec:
    tenant: int
    source: str
    name: str
    words: frozenset[str]
    groups: frozenset[str]
    users: frozenset[str]
    tier: Tier


@dataclass(frozen=True)
class CallerSpec:
    tenant: int
    user: str | None
    groups: frozenset[str]
    tier: Tier


@dataclass(frozen=True)
class Doc:
    spec: DocSpec
    tenant: str
    marker: str
    stored: Document

    @property
    def doc_id(self) -> str:
        return f"{self.spec.source}:{self.spec.name}.md"

    @property
    def chunk_id(self) -> str:
        return f"{self.doc_id}#0"


@dataclass
class World:
    tenants: list[str]
    docs: list[Doc]

    def by_marker(self, text: str) -> Doc:
        """The one document of this example whose marker the text carries (a foreign one fails)."""
        found = [d for d in self.docs if d.marker in text]
        assert len(found) == 1, f"{text!r} is not the text of exactly one document of this example"
        return found[0]

    def tenant_docs(self, tenant: str) -> list[Doc]:
        return [d for d in self.docs if d.tenant == tenant]


def readable(doc: Doc, tenant: str, user: str | None, groups: frozenset[str], tier: Tier) -> bool:
    """The policy, spelled out on the generated ACL: own tenant, tier within reach, and an open
    ACL, the user named, or a shared group."""
    spec = doc.spec
    if doc.tenant != tenant or spec.tier.rank > tier.rank:
        return False
    return (not spec.groups and not spec.users) or user in spec.users or bool(spec.groups & groups)


doc_specs = st.lists(
    st.builds(
        DocSpec,
        tenant=st.integers(0, TENANTS - 2),
        source=st.sampled_from(SOURCES),
        name=st.sampled_from(NAMES),
        words=st.frozensets(st.sampled_from(VOCAB), min_size=1, max_size=3),
        groups=st.frozensets(st.sampled_from(GROUPS), max_size=2),
        users=st.frozensets(st.sampled_from(USERS), max_size=2),
        tier=st.sampled_from(list(Tier)),
    ),
    min_size=2,
    max_size=12,
    unique_by=lambda d: (d.tenant, d.source, d.name),
)
caller_specs = st.lists(
    st.builds(
        CallerSpec,
        tenant=st.integers(0, TENANTS - 1),
        user=st.sampled_from((None, *USERS)),
        groups=st.frozensets(st.sampled_from(GROUPS), max_size=3),
        tier=st.sampled_from(list(Tier)),
    ),
    min_size=1,
    max_size=2,
)
phrase = st.lists(st.sampled_from((*VOCAB, NO_MATCH)), min_size=1, max_size=3).map(" ".join)
directories = st.dictionaries(
    st.sampled_from(USERS), st.tuples(st.frozensets(st.sampled_from(GROUPS), max_size=2), st.sampled_from(list(Tier)))
)


@dataclass
class Env:
    services: Services = field(repr=False)
    http: TestClient = field(repr=False)
    root: Path

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(f"Env({self.root})")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    root = tmp_path_factory.mktemp("tenancy")
    # The relevance floor off: a short top-k must mean filtering after the search, not a weak match.
    services = build_services(Settings(data_dir=root / "data", host="testserver", relevance_floor=0))
    app = create_app(services, build_registry(services))
    with TestClient(app, base_url="http://testserver") as http:
        yield Env(services, http, root)


def letters(hex_digits: str) -> str:
    return "".join(chr(ord("a") + int(c, 16)) for c in hex_digits)


def build_world(env: Env, specs: list[DocSpec]) -> World:
    """Ingest the documents through the real pipeline, into tenants no other example uses."""
    run = uuid.uuid4().hex[:10]
    tenants = [f"t{run}-{i}" for i in range(TENANTS)]
    markers = {spec: "mk" + letters(uuid.uuid4().hex[:12]) for spec in specs}
    folders: dict[tuple[int, str], Path] = {}
    for spec in specs:
        folder = folders.setdefault((spec.tenant, spec.source), env.root / run / str(spec.tenant) / spec.source)
        folder.mkdir(parents=True, exist_ok=True)
        marker = markers[spec]
        (folder / f"{spec.name}.md").write_text(f"{' '.join(sorted(spec.words))} {marker}\n")
        sidecar = {
            "title": f"Doc {marker}",
            "groups": sorted(spec.groups),
            "users": sorted(spec.users),
            "tier": spec.tier.value,
        }
        (folder / f"{spec.name}.md.metadata.json").write_text(json.dumps(sidecar))
    for (tenant, source_id), folder in folders.items():
        source = env.services.register_folder(tenants[tenant], source_id, str(folder))
        report = env.services.ingest.sync(source)
        assert report.failed == 0 and report.ingested == len(list(folder.glob("*.md"))), report
    docs = []
    for spec in specs:
        stored = env.services.documents.get(tenants[spec.tenant], f"{spec.source}:{spec.name}.md")
        assert stored is not None and stored.chunk_count == 1
        docs.append(Doc(spec, tenants[spec.tenant], markers[spec], stored))
    return World(tenants, docs)


def rpc(env: Env, profile: str, tool: str, arguments: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
    body = {
        "jsonrpc": "2.0",
        "id": next(_ids),
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    response = env.http.post(f"/mcp/{profile}", json=body, headers=headers)
    answer = response.json()
    assert answer["jsonrpc"] == "2.0" and answer["id"] == body["id"], answer
    return answer


def payload(answer: dict[str, Any]) -> Any:
    assert "result" in answer and not answer["result"].get("isError"), answer
    return json.loads(answer["result"]["content"][0]["text"])


def normalised_error(answer: dict[str, Any], ref: str | int) -> tuple[int, str, Any]:
    """The error with the id the caller asked for replaced, to compare answers for different ids."""
    error = answer["error"]
    return error["code"], error["message"].replace(str(ref), "<ref>"), error.get("data")


@dataclass
class Caller:
    """A caller of one example: the key's principal, its HTTP headers, and the mindset user view."""

    principal: Principal
    headers: dict[str, str]
    mindset_groups: frozenset[str]
    mindset_tier: Tier

    @property
    def tenant(self) -> str:
        return self.principal.tenant

    def reads(self, doc: Doc) -> bool:
        p = self.principal
        return readable(doc, p.tenant, p.user_id, frozenset(p.groups), p.max_tier)

    def reads_in_mindset(self, doc: Doc) -> bool:
        return readable(doc, self.tenant, self.principal.user_id, self.mindset_groups, self.mindset_tier)


def make_caller(env: Env, world: World, spec: CallerSpec, directory: dict[str, tuple[frozenset[str], Tier]]) -> Caller:
    """A platform key of the caller's tenant and tier, the user directory of the tenant, and the
    headers naming the user and session tags. Every profile sees the user as the directory knows
    them (security/identity.py): its groups, narrowed to the session tags when there are any, and
    the lower of its tier (standard when unknown) and the key's."""
    tenant = world.tenants[spec.tenant]
    for user_id, (groups, tier) in directory.items():
        env.services.users.put(UserRecord(tenant=tenant, user_id=user_id, groups=tuple(sorted(groups)), max_tier=tier))
    created = env.services.keys.create(
        tenant, scopes=("read", "write", "admin"), max_tier=spec.tier, limits=UNLIMITED, platform=True
    )
    headers = {"authorization": f"Bearer {created.secret}", "x-session-tags": json.dumps(sorted(spec.groups))}
    if spec.user is not None:
        headers["x-user-id"] = spec.user
    record = directory.get(spec.user) if spec.user is not None else None
    user_groups, user_tier = record if record else (frozenset(), Tier.standard)
    groups = user_groups & spec.groups if spec.groups else user_groups
    tier = min(user_tier, spec.tier, key=lambda t: t.rank)
    principal = Principal(
        tenant=tenant, key_id=created.key.key_id, user_id=spec.user, groups=tuple(sorted(groups)), max_tier=tier
    )
    return Caller(principal, headers, groups, tier)


def matching(docs: list[Doc], phrases: list[str]) -> list[Doc]:
    words = {w for p in phrases for w in p.split()}
    return [d for d in docs if d.spec.words & words]


@PROPERTY
@given(
    specs=doc_specs, callers=caller_specs, phrases=st.lists(phrase, min_size=1, max_size=3), top_k=st.integers(1, 12)
)
def test_search_service_stays_in_tenant_and_acl(
    env: Env, specs: list[DocSpec], callers: list[CallerSpec], phrases: list[str], top_k: int
) -> None:
    world = build_world(env, specs)
    for spec in callers:
        tenant = world.tenants[spec.tenant]
        principal = Principal(tenant=tenant, user_id=spec.user, groups=tuple(sorted(spec.groups)), max_tier=spec.tier)
        readable_docs = [d for d in world.docs if readable(d, tenant, spec.user, spec.groups, spec.tier)]
        for doc in world.docs:
            assert can_read(principal, doc.stored) == (doc in readable_docs), (principal, doc)
        for mode in ("fts", "vector", "hybrid", "fts_then_vec"):
            result = env.services.search.search(principal, SearchRequest(phrases=phrases, mode=mode, top_k=top_k))
            for hit in result.hits:
                doc = world.by_marker(hit.chunk.text)
                assert doc in readable_docs, (mode, principal, doc)
                assert hit.document.tenant == tenant and hit.chunk.chunk_id == doc.chunk_id
            candidates = matching(readable_docs, phrases) if mode in ("fts", "fts_then_vec") else readable_docs
            assert len(result.hits) == min(top_k, len(candidates)), (mode, phrases, top_k)


@PROPERTY
@given(
    specs=doc_specs,
    callers=caller_specs,
    directory=directories,
    query=phrase,
    k=st.integers(1, 12),
)
def test_mcp_searches_and_counts_stay_in_tenant_and_acl(
    env: Env,
    specs: list[DocSpec],
    callers: list[CallerSpec],
    directory: dict[str, tuple[frozenset[str], Tier]],
    query: str,
    k: int,
) -> None:
    world = build_world(env, specs)
    for spec in callers:
        caller = make_caller(env, world, spec, directory)
        own = world.tenant_docs(caller.tenant)
        readable_docs = [d for d in own if caller.reads(d)]

        segments = payload(rpc(env, "mindset", "rag_search", {"search_phrases": [query]}, caller.headers))["segments"]
        in_mindset = [d for d in own if caller.reads_in_mindset(d)]
        for segment in segments:
            doc = world.by_marker(segment["raw_text"])
            assert doc in in_mindset and segment["segment_uid"] == doc.chunk_id, (caller, doc)
        assert len(segments) == min(MINDSET_SEGMENTS, len(in_mindset))

        shape = {"include_title": True, "include_snippets": True}
        searches = {
            "rag.search_fts": ({"query": query, "k": k, "return": shape}, matching(readable_docs, [query])),
            "rag.search_vector": ({"query_text": query, "k": k, "return": shape}, readable_docs),
            "rag.search_hybrid": ({"query": query, "k": k, "return": shape}, readable_docs),
        }
        for tool, (arguments, candidates) in searches.items():
            rows = payload(rpc(env, "proxysql", tool, arguments, caller.headers))["results"]
            for row in rows:
                doc = world.by_marker(row["title"])
                assert doc in readable_docs and (row["doc_id"], row["chunk_id"]) == (doc.doc_id, doc.chunk_id), tool
                assert doc.marker in row["snippet"]
            assert len(rows) == min(k, len(candidates)), (tool, query, k)

        stats = payload(rpc(env, "proxysql", "rag.admin.stats", {}, caller.headers))["sources"]
        expected_sources = sorted({d.spec.source for d in own})
        assert sorted(s["source_name"] for s in stats) == expected_sources
        for row in stats:
            in_source = [d for d in readable_docs if d.spec.source == row["source_name"]]
            assert (row["docs"], row["chunks"]) == (len(in_source), len(in_source)), row

        counts = payload(rpc(env, "kb", "kb_status", {}, caller.headers))["counts"]
        assert counts["documents"] == len(readable_docs) and counts["chunks"] == len(readable_docs)
        assert sum(counts["jobs"].values()) == len(readable_docs)  # no count betrays a hidden file's job
        jobs = payload(rpc(env, "kb", "kb_jobs", {"limit": 500}, caller.headers))["jobs"]
        expected_jobs = sorted((d.spec.source, d.stored.path) for d in readable_docs)
        assert sorted((j["source"], j["target"]) for j in jobs) == expected_jobs

        listed = payload(rpc(env, "ragbox", "list_documents", {"limit": 100}, caller.headers))
        below_privileged = [d for d in readable_docs if d.spec.tier is not Tier.privileged]
        assert listed["total"] == len(below_privileged)
        assert sorted(world.by_marker(d["title"]).marker for d in listed["documents"]) == sorted(
            d.marker for d in below_privileged
        )

        found = payload(rpc(env, "ragbox", "search_documents", {"query": query, "limit": 20}, caller.headers))
        for result in found:
            assert world.by_marker(result["title"]) in below_privileged
        assert len(found) == min(20, len(below_privileged))


@PROPERTY
@given(specs=doc_specs, callers=caller_specs, directory=directories)
def test_fetches_and_verification_stay_in_tenant_and_acl(
    env: Env, specs: list[DocSpec], callers: list[CallerSpec], directory: dict[str, tuple[frozenset[str], Tier]]
) -> None:
    world = build_world(env, specs)
    never = f"s1:never-{uuid.uuid4().hex}.md"
    for spec in callers:
        caller = make_caller(env, world, spec, directory)
        readable_docs = [d for d in world.docs if caller.reads(d)]
        expected = sorted(d.marker for d in readable_docs)
        all_doc_ids = sorted({d.doc_id for d in world.docs} | {never})
        all_chunk_ids = sorted({d.chunk_id for d in world.docs} | {f"{never}#0"})

        chunks = payload(rpc(env, "proxysql", "rag.get_chunks", {"chunk_ids": all_chunk_ids}, caller.headers))
        assert sorted(world.by_marker(c["body"]).marker for c in chunks["chunks"]) == expected
        assert all(world.by_marker(c["body"]).chunk_id == c["chunk_id"] for c in chunks["chunks"])

        docs = payload(rpc(env, "proxysql", "rag.get_docs", {"doc_ids": all_doc_ids}, caller.headers))
        assert sorted(world.by_marker(d["body"]).marker for d in docs["docs"]) == expected
        assert all(world.by_marker(d["title"]).doc_id == d["doc_id"] for d in docs["docs"])

        fetched = payload(
            rpc(
                env,
                "proxysql",
                "rag.fetch_from_source",
                {"doc_ids": all_doc_ids, "columns": ["title"], "limits": {"max_rows": 100}},
                caller.headers,
            )
        )
        assert sorted(world.by_marker(r["row"]["title"]).marker for r in fetched["rows"]) == expected

        missing_doc = normalised_error(
            rpc(env, "ragbox", "get_document", {"document_id": never}, caller.headers), never
        )
        missing_number = 10**12 + next(_ids)
        missing_kb = normalised_error(
            rpc(env, "kb", "kb_get", {"document_id": missing_number}, caller.headers), missing_number
        )
        missing_kb_id = normalised_error(rpc(env, "kb", "kb_get", {"document_id": never}, caller.headers), never)
        missing_verify = payload(
            rpc(env, "mindset", "verify_document_access", {"segment_uid": f"{never}#0"}, caller.headers)
        )
        assert missing_verify == {"has_access": False, "refreshed_url": None, "error": "Document not found"}

        missing_job_id = uuid.uuid4().hex
        missing_job = normalised_error(
            rpc(env, "kb", "kb_jobs", {"job_id": missing_job_id}, caller.headers), missing_job_id
        )
        readable_paths = {(d.spec.source, d.stored.path) for d in readable_docs}
        for tenant in world.tenants:
            for job in env.services.jobs.list(tenant):
                answer = rpc(env, "kb", "kb_jobs", {"job_id": job.job_id}, caller.headers)
                if tenant == caller.tenant and (job.source, job.target) in readable_paths:
                    assert [j["job_id"] for j in payload(answer)["jobs"]] == [job.job_id]
                else:  # another tenant's job, or the ingest of a document the caller may not read
                    assert normalised_error(answer, job.job_id) == missing_job

        own_by_id = {d.doc_id: d for d in world.tenant_docs(caller.tenant)}
        own_by_number = {d.stored.number: d for d in world.tenant_docs(caller.tenant)}
        assert len(own_by_number) == len(own_by_id)  # drawn at random, never two alike in a tenant
        for doc in world.docs:
            named = own_by_id.get(doc.doc_id)  # what the doc_id names in the caller's own tenant
            # ragbox opens a privileged document only in privilege_mode, which a caller below privileged may not use.
            elevated = {"privilege_mode": True} if caller.principal.max_tier is Tier.privileged else {}
            got = rpc(
                env,
                "ragbox",
                "get_document",
                {"document_id": doc.doc_id, "include_content": True, **elevated},
                caller.headers,
            )
            by_id = rpc(env, "kb", "kb_get", {"document_id": doc.doc_id}, caller.headers)
            if named is not None and caller.reads(named):
                assert named.marker in payload(got)["content"]
                assert world.by_marker(payload(by_id)["title"]) == named
            else:
                assert normalised_error(got, doc.doc_id) == missing_doc
                assert normalised_error(by_id, doc.doc_id) == missing_kb_id

            # Numbers are per tenant: what this number names in the caller's own tenant, never another's.
            numbered = own_by_number.get(doc.stored.number)
            by_number = rpc(env, "kb", "kb_get", {"document_id": doc.stored.number}, caller.headers)
            if numbered is not None and caller.reads(numbered):
                assert world.by_marker(payload(by_number)["title"]) == numbered
            else:
                assert normalised_error(by_number, doc.stored.number) == missing_kb

            verified = payload(
                rpc(env, "mindset", "verify_document_access", {"segment_uid": doc.chunk_id}, caller.headers)
            )
            if named is None:
                assert verified == missing_verify
            elif caller.reads_in_mindset(named):
                assert verified["has_access"] is True and verified["refreshed_url"]
            else:
                assert verified["has_access"] is False and verified["refreshed_url"] is None


def test_keyword_scores_say_nothing_of_other_tenants_words(env: Env) -> None:
    """Issue 25 M1 through the tools, as the review probed it: a tenant's note holds a probe word and
    a control word once each, and its keyword scores for them (rag.search_fts's `score_fts_raw` under
    a doc_ids filter, kb_search's `fts_score`) are the same before and after another tenant stores
    hidden documents full of the probe word, and the same as each other: nothing tells the tenant
    that the probe word exists elsewhere on the server."""
    run = uuid.uuid4().hex[:10]
    mine, theirs = f"t{run}-mine", f"t{run}-theirs"
    probe, control = "pr" + letters(uuid.uuid4().hex[:10]), "co" + letters(uuid.uuid4().hex[:10])
    notes = env.root / run / "notes"
    notes.mkdir(parents=True)
    (notes / "note.md").write_text(f"Plans for the week: {probe} then {control}, then the usual review.\n")
    (notes / "other.md").write_text("The canteen menu changes on Mondays.\n")
    report = env.services.ingest.sync(env.services.register_folder(mine, "notes", str(notes)))
    assert report.failed == 0 and report.ingested == 2, report
    key = env.services.keys.create(mine, scopes=("read",), limits=UNLIMITED, platform=True)
    headers = {"authorization": f"Bearer {key.secret}"}

    def scores() -> dict[str, tuple[float, float]]:
        found = {}
        for word in (probe, control):
            arguments = {"query": word, "k": 5, "filters": {"doc_ids": ["notes:note.md"]}}
            rows = payload(rpc(env, "proxysql", "rag.search_fts", arguments, headers))["results"]
            hits = payload(rpc(env, "kb", "kb_search", {"query": word, "fts_only": True}, headers))["results"]
            assert [r["chunk_id"] for r in rows] == [h["chunk_id"] for h in hits] == ["notes:note.md#0"]
            found[word] = (rows[0]["score_fts_raw"], hits[0]["fts_score"])
        return found

    alone = scores()
    hidden = env.root / run / "hidden"
    hidden.mkdir()
    for n in range(12):
        (hidden / f"h{n}.md").write_text(f"{probe} " * (n % 3 + 1) + "quarterly figures of the board.\n")
        sidecar = {"groups": ["board"], "tier": Tier.privileged.value}
        (hidden / f"h{n}.md.metadata.json").write_text(json.dumps(sidecar))
    report = env.services.ingest.sync(env.services.register_folder(theirs, "hidden", str(hidden)))
    assert report.failed == 0 and report.ingested == 12, report
    assert scores() == alone
    assert alone[probe] == alone[control]

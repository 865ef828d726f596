"""One access policy for every tool: a hypothesis property over all 26 tools of the five profiles.

A corpus is built once: one document for each combination of document ACL (groups among g1 and
g2, the user u1 or nobody) and tier, in two sources, each with a unique marker in its title and
text. Each example draws a credential (a key that is its own user, a key bound to a directory
user, a platform key asserting a user, an access token with or without group and tier claims),
its tier cap and scopes, the user directory's entries, an asserted user and session tags, and one
tool with its arguments, and calls the tool in process through the tool registry (the same path as
HTTP, without the transport). The documents the tool reaches (by marker, id or count) must equal
what the policy allows, spelled out here independently of ragmcp's own code: capped searches
return allowed documents only and are never short; a synthesized answer quotes only passages the
caller may read; a credential asked to act for another user is refused.

The same draws then go through the other ways out of the server: the MCP resources (the whole
server's and ragbox's, which keeps privileged documents out as its tools do), a download by link
(minted for the caller, opened through the re-check at download time) and the console (as an admin
caller: its documents page, its open, and its search as a directory user, capped at the admin's own
tier); each must reach exactly what the policy allows.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import anyio
import mcp_types as types
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.shared.exceptions import MCPError

from ragmcp.bootstrap import Services, build_registry, build_services
from ragmcp.console import data as console
from ragmcp.domain.errors import Forbidden
from ragmcp.domain.models import Document, Tier, UserRecord
from ragmcp.mcp.caller import Caller, current_caller
from ragmcp.mcp.registry import ToolRegistry
from ragmcp.mcp.resources import SCHEME, DocumentResources
from ragmcp.mcp.server import RESOURCE_READERS, tool_specs
from ragmcp.security.identity import Credential
from ragmcp.security.models import ApiKey
from ragmcp.settings import Settings

TENANT = "props"
GROUPS = ("g1", "g2")
USERS = ("u1", "u2")
SOURCES = ("s1", "s2")
WORD = "heron"
EXAMPLES = 2000
SEGMENTS = 20
RAGBOX_CAP = Tier.confidential
UNAUTHORIZED = -32000
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@dataclass(frozen=True)
class CorpusDoc:
    doc_id: str
    source: str
    marker: str
    groups: frozenset[str]
    users: frozenset[str]
    tier: Tier


def corpus_docs() -> list[CorpusDoc]:
    docs = []
    n = 0
    for groups in ((), ("g1",), ("g2",), ("g1", "g2")):
        for users in ((), ("u1",)):
            for tier in Tier:
                source = SOURCES[n % 2]
                marker = f"MARK{n:02d}X"
                docs.append(
                    CorpusDoc(f"{source}:d{n:02d}.md", source, marker, frozenset(groups), frozenset(users), tier)
                )
                n += 1
    return docs


CORPUS = corpus_docs()


@dataclass
class Env:
    services: Services
    registry: ToolRegistry
    numbers: dict[str, int]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    root = tmp_path_factory.mktemp("policy")
    # The relevance floor off: the corpus is marker words, and the property is about access, not relevance.
    services = build_services(
        Settings(data_dir=root / "data", host="testserver", mindset_segments=SEGMENTS, relevance_floor=0)
    )
    for source in SOURCES:
        folder = root / source
        folder.mkdir()
        for doc in (d for d in CORPUS if d.source == source):
            name = doc.doc_id.split(":", 1)[1]
            (folder / name).write_text(f"# {doc.marker} {WORD}\n\n{doc.marker} the {WORD} waded in the reeds.\n")
            sidecar = {
                "groups": sorted(doc.groups),
                "users": sorted(doc.users),
                "tier": doc.tier.value,
                "tags": ["collection:corpus"],
            }
            (folder / f"{name}.metadata.json").write_text(json.dumps(sidecar))
        report = services.ingest.sync(services.register_folder(TENANT, source, str(folder)))
        assert report.failed == 0 and report.ingested == len([d for d in CORPUS if d.source == source])
    numbers = {d.doc_id: services.documents.get(TENANT, d.doc_id).number for d in CORPUS}
    yield Env(services, build_registry(services), numbers)


# -- the policy, spelled out -----------------------------------------------------------------------


@dataclass(frozen=True)
class Who:
    """Whom the call must be decided for, or `forbidden` when the credential may not act so."""

    user: str | None
    groups: frozenset[str]
    tier: Tier
    forbidden: bool = False


def reads(who: Who, groups: frozenset[str], users: frozenset[str], tier: Tier) -> bool:
    if tier.rank > who.tier.rank:
        return False
    return (not groups and not users) or (who.user is not None and who.user in users) or bool(groups & who.groups)


def reads_doc(who: Who, doc: Document) -> bool:
    return reads(who, frozenset(doc.acl.groups), frozenset(doc.acl.users), doc.tier)


def capped(who: Who, tier: Tier) -> Who:
    return Who(who.user, who.groups, min(who.tier, tier, key=lambda t: t.rank))


@dataclass(frozen=True)
class Draw:
    kind: str  # self | bound | platform | token
    key_tier: Tier
    scopes: tuple[str, ...]
    directory: dict[str, tuple[frozenset[str], Tier]]
    bound: str
    asserted: str | None
    tags: tuple[str, ...] | None
    claim_groups: frozenset[str] | None
    claim_tier: Tier | None

    def credential(self) -> Credential:
        base = dict(tenant=TENANT, max_tier=self.key_tier, scopes=self.scopes)
        if self.kind == "self":
            return Credential(**base, via="key", subject="k-self", user_id="robot", groups=(), tier=self.key_tier)
        if self.kind == "bound":
            return Credential(**base, via="key", subject="k-bound", user_id=self.bound, groups=None, tier=None)
        if self.kind == "platform":
            return Credential(
                **base, via="key", subject="k-plat", user_id=None, groups=(), tier=Tier.standard, platform=True
            )
        groups = tuple(sorted(self.claim_groups)) if self.claim_groups is not None else None
        return Credential(
            tenant=TENANT,
            via="token",
            subject=f"oauth:{self.bound}",
            user_id=self.bound,
            groups=groups,
            tier=self.claim_tier,
            max_tier=Tier.privileged,
            scopes=self.scopes,
            expires_at=int(time.time()) + 600,
        )

    def expected(self) -> Who:
        own = {"self": "robot", "bound": self.bound, "token": self.bound}.get(self.kind)
        if self.kind != "platform" and self.asserted is not None and self.asserted != own:
            return Who(None, frozenset(), Tier.standard, forbidden=True)
        user = self.asserted if self.kind == "platform" else own
        entry = self.directory.get(user) if user else None
        groups, tier = entry if entry else (frozenset(), Tier.standard)
        if self.kind == "platform" and user is None:
            groups, tier = frozenset(), Tier.standard
        if self.kind == "self":
            groups, tier = frozenset(), self.key_tier
        if self.kind == "token":
            groups = self.claim_groups if self.claim_groups is not None else groups
            tier = self.claim_tier or tier
        if self.tags:
            groups = groups & set(self.tags)
        cap = Tier.privileged if self.kind == "token" else self.key_tier
        return Who(user, frozenset(groups), min(tier, cap, key=lambda t: t.rank))


tiers = st.sampled_from(list(Tier))
group_sets = st.frozensets(st.sampled_from(GROUPS))
draws = st.builds(
    Draw,
    kind=st.sampled_from(("self", "bound", "platform", "token")),
    key_tier=tiers,
    scopes=st.sampled_from((("read",), ("read", "write"), ("read", "write", "admin"))),
    directory=st.dictionaries(st.sampled_from(USERS), st.tuples(group_sets, tiers), max_size=2),
    bound=st.sampled_from(("u1", "u2", "u9")),
    asserted=st.one_of(st.none(), st.sampled_from(("u1", "u2", "u9"))),
    tags=st.one_of(st.none(), st.lists(st.sampled_from((*GROUPS, "other")), max_size=3).map(tuple)),
    claim_groups=st.one_of(st.none(), group_sets),
    claim_tier=st.one_of(st.none(), tiers),
)


# -- calling a tool in process ------------------------------------------------------------------


class Refused(Exception):
    """The call was refused as it had to be: the credential may not act for the user asserted."""


def invoke(env: Env, draw: Draw, tool: str, arguments: dict[str, Any]) -> Any:
    """The tool's JSON payload, or the MCPError it raised; raises Refused when the draw's credential
    may not act for the asserted user (after checking the tool refused it so)."""
    caller = Caller(
        credential=draw.credential(),
        identities=env.services.identities,
        user=draw.asserted if tool not in CHAT else None,
        session_tags=draw.tags,
    )

    async def run() -> Any:
        token = current_caller.set(caller)
        try:
            result = await env.registry.call(tool, arguments, set(env.registry.tools))
        finally:
            current_caller.reset(token)
        return json.loads(result.content[0].text)

    try:
        got = anyio.run(run)
    except MCPError as error:
        got = error
    if draw.expected().forbidden:
        assert isinstance(got, MCPError) and got.error.code == UNAUTHORIZED, got
        raise Refused
    return got


def markers(value: Any) -> set[str]:
    text = value.error.message if isinstance(value, MCPError) else json.dumps(value)
    return {d.marker for d in CORPUS if d.marker in text}


def allowed_markers(who: Who, tier_cap: Tier = Tier.privileged, source: str | None = None) -> set[str]:
    limited = capped(who, tier_cap)
    return {
        d.marker for d in CORPUS if reads(limited, d.groups, d.users, d.tier) and (source is None or d.source == source)
    }


def readable_in_tenant(env: Env, who: Who) -> list[Document]:
    return [d for d in env.services.documents.list(TENANT) if reads_doc(who, d)]


def wait_idle(env: Env) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        busy = env.services.jobs.list(TENANT, "queued") + env.services.jobs.list(TENANT, "running")
        if not busy and env.services.tasks.depth() == 0:
            return
        time.sleep(0.01)
    raise AssertionError("background jobs did not finish")


CHAT = ("rag_discover_resources", "rag_get_raw_results", "rag_get_synthesized_results")
ALL_DOC_IDS = [d.doc_id for d in CORPUS]


def check(env: Env, draw: Draw, who: Who, tool: str, pick: CorpusDoc) -> None:
    username = draw.asserted or {"self": "robot", "bound": draw.bound, "token": draw.bound}.get(draw.kind) or "u9"
    if tool in CHAT and draw.kind == "platform" and draw.asserted is None:
        who = TOOL_WHO_FOR_CHAT(draw, username)
    q = f"{WORD} reeds"
    if tool == "rag_search":
        got = invoke(env, draw, tool, {"search_phrases": [q]})
        ok = allowed_markers(who)
        assert markers(got) <= ok and len(got["segments"]) == min(SEGMENTS, len(readable_in_tenant(env, who)))
    elif tool == "verify_document_access":
        got = invoke(env, draw, tool, {"segment_uid": f"{pick.doc_id}#0"})
        assert got["has_access"] is (pick.marker in allowed_markers(who))
    elif tool == "rag_discover_resources":
        got = invoke(env, draw, tool, {"username": username})
        assert {r["id"] for r in got["results"]["resources"]} >= set(SOURCES)  # the corpus sources have no groups
    elif tool == "rag_get_raw_results":
        got = invoke(env, draw, tool, {"username": username, "query": q, "top_k": 50, "sources": list(SOURCES)})
        assert markers(got) == allowed_markers(who)
    elif tool == "rag_get_synthesized_results":
        got = invoke(
            env,
            draw,
            tool,
            {"username": username, "query": f"where did the {WORD} wade?", "top_k": 20, "sources": list(SOURCES)},
        )
        assert markers(got) <= allowed_markers(who)
    elif tool in ("rag.search_fts", "rag.search_vector", "rag.search_hybrid"):
        key = "query_text" if tool == "rag.search_vector" else "query"
        shape = {"include_title": True, "include_snippets": True}
        got = invoke(env, draw, tool, {key: q, "k": 50, "filters": {"source_names": list(SOURCES)}, "return": shape})
        assert markers(got) == allowed_markers(who)
    elif tool == "rag.get_chunks":
        got = invoke(env, draw, tool, {"chunk_ids": [f"{i}#0" for i in ALL_DOC_IDS]})
        assert markers(got) == allowed_markers(who)
    elif tool == "rag.get_docs":
        assert markers(invoke(env, draw, tool, {"doc_ids": ALL_DOC_IDS})) == allowed_markers(who)
    elif tool == "rag.fetch_from_source":
        got = invoke(env, draw, tool, {"doc_ids": ALL_DOC_IDS, "columns": ["title"], "limits": {"max_rows": 100}})
        assert markers(got) == allowed_markers(who)
    elif tool == "rag.admin.stats":
        got = invoke(env, draw, tool, {})
        if "admin" not in draw.scopes:
            assert isinstance(got, MCPError) and got.error.code == UNAUTHORIZED
            return
        counts = {s["source_name"]: s["docs"] for s in got["sources"]}
        readable = readable_in_tenant(env, who)
        for source in SOURCES:
            assert counts[source] == len([d for d in readable if d.source == source])
    elif tool == "rag.admin.sync":
        got = invoke(env, draw, tool, {"source_names": [SOURCES[0]]})
        if "admin" not in draw.scopes:
            assert isinstance(got, MCPError) and got.error.code == UNAUTHORIZED
        else:
            assert got["accepted"] is True and not markers(got)
            wait_idle(env)
    elif tool == "kb_search":
        got = invoke(env, draw, tool, {"query": q, "top": 100, "collection": "corpus"})
        assert markers(got) == allowed_markers(who)
    elif tool == "kb_get":
        by_number = invoke(env, draw, tool, {"document_id": env.numbers[pick.doc_id]})
        by_id = invoke(env, draw, tool, {"document_id": pick.doc_id})
        readable = pick.marker in allowed_markers(who)
        for got in (by_number, by_id):
            assert (not isinstance(got, MCPError) and pick.marker in markers(got)) is readable
            assert markers(got) <= {pick.marker}
    elif tool == "kb_update_note":
        got = invoke(env, draw, tool, {"document_id": pick.doc_id, "text": "replaced"})
        assert isinstance(got, MCPError)
        if "write" not in draw.scopes:
            assert got.error.code == UNAUTHORIZED
        elif pick.marker in allowed_markers(who):
            assert "only notes" in got.error.message  # reached it (a file, not a note): nothing written
        else:
            assert "not found" in got.error.message
    elif tool == "kb_addnote":
        got = invoke(env, draw, tool, {"text": "a scratch note without the corpus words", "collection": "scratch"})
        if "write" not in draw.scopes:
            assert isinstance(got, MCPError) and got.error.code == UNAUTHORIZED
        else:
            assert not markers(got)
            wait_idle(env)
    elif tool == "kb_upload_start":
        got = invoke(env, draw, tool, {"filename": "scratch.txt", "total_size": 5})
        assert isinstance(got, MCPError) if "write" not in draw.scopes else set(got) == {"upload_id"}
    elif tool in ("kb_upload_chunk", "kb_upload_finish"):
        arguments = {
            "upload_id": "f" * 32,
            **({"data": "aGVsbG8=", "chunk_index": 0} if tool == "kb_upload_chunk" else {}),
        }
        got = invoke(env, draw, tool, arguments)
        assert isinstance(got, MCPError) and not markers(str(got.error))
    elif tool == "kb_status":
        counts = invoke(env, draw, tool, {})["counts"]
        readable = readable_in_tenant(env, who)
        assert counts["documents"] == len(readable)
        assert counts["chunks"] == sum(d.chunk_count for d in readable)
    elif tool == "kb_jobs":
        got = invoke(env, draw, tool, {"limit": 500})
        shown = {j["target"] for j in got["jobs"] if j["source"] in SOURCES and j["type"] == "ingest"}
        assert shown == {d.doc_id.split(":", 1)[1] for d in CORPUS if d.marker in allowed_markers(who)}
    elif tool == "search_documents":
        got = invoke(env, draw, tool, {"query": q, "limit": 20})
        ok = allowed_markers(who, RAGBOX_CAP)
        below = [d for d in readable_in_tenant(env, capped(who, RAGBOX_CAP))]
        assert markers(got) <= ok and len(got) == min(20, len(below))
    elif tool == "get_document":
        got = invoke(env, draw, tool, {"document_id": pick.doc_id, "include_content": True})
        assert (not isinstance(got, MCPError)) is (pick.marker in allowed_markers(who, RAGBOX_CAP))
        elevated = invoke(env, draw, tool, {"document_id": pick.doc_id, "privilege_mode": True})
        if who.tier is Tier.privileged:
            assert (not isinstance(elevated, MCPError)) is (pick.marker in allowed_markers(who))
        else:
            assert isinstance(elevated, MCPError) and elevated.error.code == UNAUTHORIZED
    elif tool == "query_knowledge":
        got = invoke(env, draw, tool, {"query": f"where did the {WORD} wade?"})
        assert markers(got) <= allowed_markers(who, RAGBOX_CAP)
    elif tool == "list_documents":
        # Every page: the notes and uploads other probes add can take the tenant past one page of 100.
        pages = [invoke(env, draw, tool, {"limit": 100})]
        while pages[-1]["offset"] + 100 < pages[-1]["total"]:
            pages.append(invoke(env, draw, tool, {"limit": 100, "offset": pages[-1]["offset"] + 100}))
        below = readable_in_tenant(env, capped(who, RAGBOX_CAP))
        assert markers(pages) == allowed_markers(who, RAGBOX_CAP) and pages[0]["total"] == len(below)
    else:
        raise AssertionError(f"no probe for {tool}")


def TOOL_WHO_FOR_CHAT(draw: Draw, username: str) -> Who:  # noqa: N802
    """A platform key with no asserted header user acts in chat for the `username` argument."""
    return Draw(**{**draw.__dict__, "asserted": username}).expected()


PROBED = sorted(spec.name for spec in tool_specs())
"""Every tool of every profile, as registered: `probe` fails on one it has no probe for."""


@PROPERTY
@given(draw=draws, tool=st.sampled_from(PROBED), pick=st.sampled_from(CORPUS))
def test_every_tool_reaches_exactly_what_the_policy_allows(env: Env, draw: Draw, tool: str, pick: CorpusDoc) -> None:
    for user, (groups, tier) in draw.directory.items():
        env.services.users.put(UserRecord(tenant=TENANT, user_id=user, groups=tuple(sorted(groups)), max_tier=tier))
    for user in set(USERS) - set(draw.directory):
        env.services.users.put(UserRecord(tenant=TENANT, user_id=user, groups=(), max_tier=Tier.standard))
    with contextlib.suppress(Refused):
        check(env, draw, draw.expected(), tool, pick)


# -- the other ways out: resources, downloads, the console ----------------------------------------

SURFACE_EXAMPLES = 300


def stored_key(draw: Draw) -> ApiKey | None:
    """The key store's record of a key draw (a download re-checks its minter's key); None for a token."""
    if draw.kind == "token":
        return None
    key = {"self": "k-self", "bound": "k-bound", "platform": "k-plat"}[draw.kind]
    scopes = (*draw.scopes, "assert-identity") if draw.kind == "platform" else draw.scopes
    user = draw.bound if draw.kind == "bound" else None
    name = "robot" if draw.kind == "self" else key
    return ApiKey(key_id=key, tenant=TENANT, name=name, scopes=scopes, max_tier=draw.key_tier, user=user, key_hash="-")


def listed_resources(resources: DocumentResources) -> set[str]:
    async def run() -> set[str]:
        uris: set[str] = set()
        cursor = None
        while True:
            page = await resources.list_resources(None, types.PaginatedRequestParams(cursor=cursor))
            uris |= {unquote(str(r.uri).removeprefix(SCHEME)) for r in page.resources}
            cursor = page.next_cursor
            if cursor is None:
                return uris

    return anyio.run(run)


def doc_markers(doc_ids: set[str]) -> set[str]:
    return {d.marker for d in CORPUS if d.doc_id in doc_ids}


def check_surfaces(env: Env, draw: Draw, who: Who, pick: CorpusDoc) -> None:
    caller = Caller(
        credential=draw.credential(), identities=env.services.identities, user=draw.asserted, session_tags=draw.tags
    )
    token = current_caller.set(caller)
    try:
        try:
            principal = caller.require()
        except Forbidden:
            assert who.forbidden
            return
        assert not who.forbidden
        # Resources: the whole server's, and each profile's with its tools' rules.
        base = DocumentResources(env.services.catalog, env.services.audit, 25)
        for profile, cap in ((None, Tier.privileged), ("ragbox", RAGBOX_CAP)):
            resources = base.reading_as(RESOURCE_READERS[profile]) if profile in RESOURCE_READERS else base
            assert doc_markers(listed_resources(resources)) == allowed_markers(who, cap), profile
            try:
                text = resources._read(SCHEME + pick.doc_id.replace(":", "%3A")).text
            except MCPError:
                text = None
            assert (text is not None and pick.marker in text) is (pick.marker in allowed_markers(who, cap)), profile
    finally:
        current_caller.reset(token)

    # A download: a link minted for the caller (as every tool mints it) serves the document only
    # when the caller may read it, re-checked when it is opened.
    key = stored_key(draw)
    if key is not None:
        env.services.keys.store.put(key)
    doc = env.services.documents.get(TENANT, pick.doc_id)
    url = urlsplit(env.services.links.url(principal, doc))
    query = {k: v[0] for k, v in parse_qs(url.query).items()}
    got = env.services.downloads.open(TENANT, pick.doc_id, int(query["expires"]), query["grant"], query["sig"])
    assert (got.status == 200) is (pick.marker in allowed_markers(who)), got
    assert got.status in (200, 404)

    # The console, for an admin caller: what it lists, opens and searches is the admin's own.
    if "admin" not in draw.scopes:
        return
    rows = console.document_rows(env.services, principal)
    assert {d.marker for d in CORPUS if any(r.document and r.document.doc_id == d.doc_id for r in rows)} == (
        allowed_markers(who)
    )
    opened = console.original(env.services, principal, pick.doc_id)
    assert (opened.status == 200) is (pick.marker in allowed_markers(who))
    user = draw.asserted or "u9"
    groups, tier = draw.directory.get(user, (frozenset(), Tier.standard))
    as_user = Who(user, frozenset(groups), min(tier, who.tier, key=lambda t: t.rank))
    found = console.search_as(env.services, principal, user, f"{pick.marker} {WORD}", top_k=50)
    assert doc_markers({h.doc_id for h in found.hits}) <= allowed_markers(as_user)
    assert (pick.marker in doc_markers({h.doc_id for h in found.hits})) is (pick.marker in allowed_markers(as_user))
    assert (found.capped is not None) is (tier.rank > who.tier.rank)
    cited = console.original(env.services, principal, pick.doc_id, user)
    assert (cited.status == 200) is (pick.marker in allowed_markers(as_user))


@settings(PROPERTY, max_examples=SURFACE_EXAMPLES)
@given(draw=draws, pick=st.sampled_from(CORPUS))
def test_resources_downloads_and_the_console_reach_exactly_what_the_policy_allows(
    env: Env, draw: Draw, pick: CorpusDoc
) -> None:
    for user, (groups, tier) in draw.directory.items():
        env.services.users.put(UserRecord(tenant=TENANT, user_id=user, groups=tuple(sorted(groups)), max_tier=tier))
    for user in set(USERS) - set(draw.directory):
        env.services.users.put(UserRecord(tenant=TENANT, user_id=user, groups=(), max_tier=Tier.standard))
    check_surfaces(env, draw, draw.expected(), pick)

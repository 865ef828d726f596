"""What the console shows and does, as plain functions over the services: no HTTP here.

Every page and action is the signed-in admin's own principal's (the one policy function): the
documents and jobs it lists and the originals it opens are those the admin may read; the search
playground searches as a chosen user through the same policy and index query the tools use, never
above the admin's own tier (and says so when that cap applied); a key it mints and a user it saves
never exceed the admin's own tier, nor a key its scopes. Every action is audited.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ragmcp.domain.errors import Forbidden, InvalidArgument, NotFound
from ragmcp.domain.models import Document, Job, Principal, Source, Tier, UserRecord, utcnow
from ragmcp.ingest.pipeline import SyncReport
from ragmcp.retrieval.service import SearchRequest
from ragmcp.security.identity import Credential
from ragmcp.security.keys import CreatedKey
from ragmcp.security.originals import Download
from ragmcp.security.policy import can_read, can_see_source
from ragmcp.services import Services
from ragmcp.web.state import ServeState

RETRYABLE = frozenset({"ingest", "upload", "note"})
HELD_PATHS_SHOWN = 20


@dataclass
class DocumentRow:
    document: Document | None
    path: str
    source: str
    state: str
    """indexed, failed (the latest ingest of the file failed) or stale (indexed, but its latest
    ingest failed, so the index keeps the last good version)."""
    reason: str | None = None


@dataclass
class Hit:
    rank: int
    title: str
    doc_id: str
    page: int | None
    score: float
    keyword_rank: int | None
    vector_rank: int | None
    text: str
    link: str


@dataclass
class Verification:
    at: datetime
    ok: bool
    summary: str
    problem: str | None


@dataclass
class ConsoleState:
    """What the console remembers between requests: the audit trail's last verification."""

    verification: Verification | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


def latest_jobs_by_path(jobs: list[Job]) -> dict[tuple[str | None, str], Job]:
    latest: dict[tuple[str | None, str], Job] = {}
    for job in sorted(jobs, key=lambda j: j.updated_at):
        if job.type in RETRYABLE:
            latest[(job.source, job.target)] = job
    return latest


def document_rows(services: Services, admin: Principal, limit: int = 500) -> list[DocumentRow]:
    tenant = admin.tenant
    latest = latest_jobs_by_path(services.jobs.list(tenant, limit=limit))
    rows: list[DocumentRow] = []
    seen: set[tuple[str | None, str]] = set()
    readable = (d for d in services.documents.list(tenant) if can_read(admin, d))
    for doc in sorted(readable, key=lambda d: (d.source, d.path, d.doc_id)):
        job = latest.get((doc.source, doc.path))
        failed = job is not None and job.status == "failed"
        state = "stale" if failed else "indexed"
        rows.append(DocumentRow(doc, doc.path, doc.source, state, job.error if failed and job else None))
        seen.add((doc.source, doc.path))
    for (source, path), job in sorted(latest.items(), key=lambda kv: (kv[0][0] or "", kv[0][1])):
        if (source, path) not in seen and job.status == "failed" and shows_job(services, admin, job):
            rows.append(DocumentRow(None, path, source or "", "failed", job.error))
    return rows


def shows_job(services: Services, admin: Principal, job: Job) -> bool:
    """A job names a file: shown unless the file's documents are all ones the admin may not read."""
    docs = services.documents.by_path(job.tenant, job.source, job.target) if job.source else []
    return not docs or any(can_read(admin, d) for d in docs)


def recent_jobs(services: Services, admin: Principal, limit: int = 100) -> list[Job]:
    jobs = [j for j in services.jobs.list(admin.tenant, limit=limit) if shows_job(services, admin, j)]
    return sorted(jobs, key=lambda j: j.updated_at, reverse=True)


def retry(services: Services, admin: Principal, job_id: str) -> Job:
    """Ingest a failed job's file again, now (a new job records the outcome)."""
    job = services.jobs.get(admin.tenant, job_id)
    if job is None or not shows_job(services, admin, job):
        raise NotFound(f"job {job_id} not found")
    if job.status != "failed" or job.type not in RETRYABLE or not job.source:
        raise InvalidArgument(f"job {job_id} is not a failed file ingest")
    source = services.sources.get(admin.tenant, job.source)
    if source is None or not can_see_source(admin, source):
        raise NotFound(f"source {job.source} not found")
    again = services.ingest.ingest(source, job.target)
    services.audit.append(admin, "POST /console/jobs/retry", {"job_id": job_id[:64]}, {"job_id": job_id}, "ok")
    if again is None:  # already indexed with the same content since
        return job.model_copy(update={"status": "succeeded", "error": None})
    return again


def sources(services: Services, admin: Principal) -> list[Source]:
    """The tenant's sources the admin may see (their groups and tier, as rag_discover_resources')."""
    return [s for s in services.sources.list(admin.tenant) if can_see_source(admin, s)]


def held_deletions(services: Services, admin: Principal) -> list[Source]:
    """The admin's sources on which a sync holds deletions (too many files vanished at once)."""
    return sorted((s for s in sources(services, admin) if s.held_deletions), key=lambda s: s.source_id)


def confirm_deletions(services: Services, admin: Principal, source_id: str) -> SyncReport:
    """Apply a source's held deletions: the sync `rag.admin.sync allow_mass_delete` runs, which
    removes the vanished files' documents and clears the hold; audited."""
    source = services.sources.get(admin.tenant, source_id)
    if source is None or not can_see_source(admin, source):
        raise NotFound(f"source {source_id} not found")
    if not source.held_deletions:
        raise InvalidArgument(f"source {source_id} holds no deletions")
    report = services.ingest.sync(source, allow_mass_delete=True)
    services.audit.append(
        admin,
        "POST /console/sources/held/confirm",
        {"source_id": source_id[:512], "held": len(source.held_deletions)},
        {"jobs": [{"job_id": job.job_id} for job in report.jobs]},
        "ok",
    )
    return report


def as_user(services: Services, admin: Principal, user_id: str) -> Principal:
    """The chosen user as the one policy function sees them when a platform asserts them: the user
    directory's groups and tier, never above the admin's own tier."""
    acting = Credential(
        tenant=admin.tenant,
        via="key",
        subject=admin.key_id,
        user_id=None,
        groups=(),
        tier=Tier.standard,
        max_tier=admin.max_tier,
        scopes=("read",),
        platform=True,
    )
    return services.identities.principal(acting, user=user_id)


@dataclass
class SearchAs:
    hits: list[Hit]
    capped: str | None
    """Said when the admin's own tier capped the search below the user's."""


def search_as(services: Services, admin: Principal, user_id: str, query: str, top_k: int = 10) -> SearchAs:
    if not user_id:
        raise InvalidArgument("choose the user to search as")
    principal = as_user(services, admin, user_id)
    request = SearchRequest(phrases=[query], top_k=top_k, **services.settings.search.defaults())
    result = services.search.search(principal, request)
    record = services.users.get(admin.tenant, user_id)
    own = record.max_tier if record else Tier.standard
    capped = None
    if own.rank > admin.max_tier.rank:
        capped = (
            f"Your own tier ({admin.max_tier.value}) capped this search: {user_id} may read up to {own.value}, "
            f"but documents above {admin.max_tier.value} were not searched."
        )
    services.audit.append(
        admin,
        "GET /console/search",
        {"user_id": user_id[:256], "query": query[:512]},
        [{"doc_id": h.document.doc_id} for h in result.hits],
        "ok",
    )
    hits = [
        Hit(
            rank=n,
            title=h.document.title,
            doc_id=h.document.doc_id,
            page=h.chunk.page_start,
            score=round(h.score, 4),
            keyword_rank=h.fts_rank,
            vector_rank=h.vec_rank,
            text=h.chunk.text[:400],
            link=services.source_url(principal, h.document, h.chunk.page_start),
        )
        for n, h in enumerate(result.hits, 1)
    ]
    return SearchAs(hits, capped)


def users(services: Services, admin: Principal) -> list[UserRecord]:
    return sorted(services.users.list(admin.tenant), key=lambda u: u.user_id)


def put_user(services: Services, admin: Principal, user_id: str, groups: str, max_tier: str) -> UserRecord:
    user_id = user_id.strip()
    if not user_id or len(user_id) > 256:
        raise InvalidArgument("user id: 1 to 256 characters")
    record = UserRecord(
        tenant=admin.tenant,
        user_id=user_id,
        groups=tuple(dict.fromkeys(g.strip() for g in groups.split(",") if g.strip())),
        max_tier=Tier(max_tier),
    )
    arguments = {"user_id": user_id, "groups": list(record.groups), "max_tier": max_tier}
    existing = services.users.get(admin.tenant, user_id)
    if record.max_tier.rank > admin.max_tier.rank or (existing and existing.max_tier.rank > admin.max_tier.rank):
        message = f"a user's tier may not exceed your own ({admin.max_tier.value})"
        raise refused(services, admin, "POST /console/users", arguments, message)
    services.users.put(record)
    services.audit.append(admin, "POST /console/users", arguments, None, "ok")
    return record


def create_key(
    services: Services,
    admin: Principal,
    name: str,
    scopes: tuple[str, ...],
    max_tier: Tier,
    user: str | None,
    platform: bool,
) -> CreatedKey:
    """A key of the admin's tenant, never above the admin's own tier nor beyond its scopes (a platform
    key's assert-identity is within an admin's reach: an admin may mint a key for any user of its tenant)."""
    arguments = {
        "name": name[:200],
        "scopes": list(scopes),
        "max_tier": max_tier.value,
        "user": user,
        "platform": platform,
    }
    if max_tier.rank > admin.max_tier.rank:
        message = f"a key's tier may not exceed your own ({admin.max_tier.value})"
        raise refused(services, admin, "POST /console/keys", arguments, message)
    beyond = [s for s in scopes if s not in admin.scopes]
    if beyond:
        message = f"a key's scopes may not exceed your own: {', '.join(beyond)}"
        raise refused(services, admin, "POST /console/keys", arguments, message)
    created = services.keys.create(
        admin.tenant, name=name, scopes=scopes, max_tier=max_tier, user=user, platform=platform
    )
    services.audit.append(admin, "POST /console/keys", arguments, {"id": created.key.key_id}, "ok")
    return created


def revoke_key(services: Services, admin: Principal, key_id: str) -> None:
    stored = services.keys.store.get(key_id)
    if stored is None or stored.tenant != admin.tenant:
        raise NotFound("no such key")
    if stored.max_tier.rank > admin.max_tier.rank:
        message = f"a key above your own tier ({admin.max_tier.value}) is not yours to revoke"
        raise refused(services, admin, "POST /console/keys/revoke", {"key_id": key_id[:64]}, message)
    services.keys.revoke(key_id)
    services.audit.append(admin, "POST /console/keys/revoke", {"key_id": key_id[:64]}, None, "ok")


def refused(services: Services, admin: Principal, action: str, arguments: dict[str, Any], message: str) -> Forbidden:
    """The Forbidden an action beyond the admin's own limits raises, its refusal audited first."""
    services.audit.append(admin, action, arguments, None, "refused 403")
    return Forbidden(message)


def verify_audit(services: Services, admin: Principal, state: ConsoleState) -> Verification:
    """`ragmcp audit verify`'s check (every chain against every checkpoint), remembered for the page."""
    check = services.audit.verify()
    services.audit.append(admin, "POST /console/audit/verify", {}, None, "ok" if check.ok else "broken")
    summary = f"{check.records} records in {check.chains} chains, {check.checkpoints} checkpoints"
    result = Verification(utcnow(), check.ok, summary, check.problem)
    with state.lock:
        state.verification = result
    return result


def health(services: Services, serve: ServeState) -> dict[str, Any]:
    watcher, graph = serve.watcher, serve.vector_graph
    return {
        "embedding_model": services.embedder.model_id,
        "ingest": watcher.status.as_dict() if watcher else None,
        "vector_graph": graph.status() if graph else None,
        "queue_depth": services.tasks.depth(),
    }


def original(services: Services, admin: Principal, doc_id: str, user_id: str = "") -> Download:
    """What a citation opens for the admin, as a link would serve it to them: the original, the
    redacted rendition of a source that redacts (never rawer than the index), or a row's own
    rendition. A document the admin may not read is not found; with `user_id` (a citation of a
    search as that user), one that user may read, never above the admin's own tier. Audited."""
    reader = as_user(services, admin, user_id) if user_id else admin
    doc = services.documents.get(admin.tenant, doc_id)
    if doc is None or not can_read(reader, doc):
        found = Download(404, error="document not found")
    else:
        found = services.originals.read(doc)
    outcome = "ok" if found.status == 200 else f"error {found.status}"
    returned = {"doc_id": doc_id[:512]} if found.status == 200 else None
    arguments = {"doc_id": doc_id[:512], **({"user_id": user_id[:256]} if user_id else {})}
    services.audit.append(admin, "GET /console/open", arguments, returned, outcome)
    return found

"""The kb profile (contracts/kb-mcp-server.md): search, notes, chunked uploads, documents, status, jobs.

Collections are tags (`collection:<name>`), one per document. A caller never sees or sends that
tag: it names the collection in a `collection` argument, and every document and search hit
carries a separate `collection` field with `collection:*` taken out of its `tags`.

Documents are named by `document_id`, the short stable number the document store assigns
(the contract's engine uses integers: `{"document_id": 42}`); the string `doc_id`
(`<source>:<path>`) is given alongside and accepted wherever a `document_id` is.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import anyio
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    StringConstraints,
    field_validator,
)

from ragmcp import __version__
from ragmcp.domain.errors import InvalidArgument, NotFound
from ragmcp.domain.models import (
    COLLECTION_PREFIX,
    DEFAULT_COLLECTION,
    Chunk,
    Document,
    Job,
    JobStatus,
    Principal,
    ScoredChunk,
    SearchFilter,
    collection_of,
)
from ragmcp.ingest.dropfolder import UPLOADS
from ragmcp.ingest.notes import NoteService
from ragmcp.ingest.poisoning import warning_fields
from ragmcp.ingest.uploads import UploadService
from ragmcp.mcp.caller import Caller, current_reporter
from ragmcp.mcp.following import follow
from ragmcp.mcp.helpers import check_phrase_bytes, stale_fields
from ragmcp.mcp.registry import tool
from ragmcp.ports import DocumentStore, Embedder, JobStore
from ragmcp.progress import Progress, filling_warning
from ragmcp.retrieval.catalog import Catalog
from ragmcp.retrieval.service import SearchRequest, SearchService
from ragmcp.security.policy import can_read, can_see_source, owner_of
from ragmcp.settings import Settings

PROFILE = "kb"
GET_TEXT_BYTES_MAX = 4_000_000
"""kb_get's chunk text at most (JSON-escaped), all its documents together: the answer stays within the
5 MB of a response the ProxySQL contract sets; the chunks past it are left out and `truncated` says so."""

JOB_STATUSES: tuple[JobStatus, ...] = ("queued", "running", "succeeded", "failed", "interrupted")

Collection = Annotated[
    str,
    StringConstraints(strict=True, pattern=r"^\w[\w.\-]{0,63}$"),
    Field(description="A collection name: letters, digits, '_', '.', '-' (at most 64), e.g. documents, memory."),
]
Tag = Annotated[str, StringConstraints(strict=True, strip_whitespace=True, min_length=1, max_length=128)]
DocumentRef = Annotated[
    StrictInt | StrictStr,
    Field(description="The document's number (as kb_search and kb_get give it), or its string doc_id."),
]


def _plain_tags(tags: list[str]) -> list[str]:
    """Tags as given, without duplicates; a collection is named by the `collection` argument only."""
    for tag in tags:
        if tag.startswith(COLLECTION_PREFIX):
            raise ValueError(f"give the collection in the `collection` argument, not as a {COLLECTION_PREFIX}* tag")
    return list(dict.fromkeys(tags))


Tags = Annotated[list[Tag], Field(max_length=32), AfterValidator(_plain_tags)]


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SearchArgs(_Args):
    query: str = Field(min_length=1, description="What to look for, in natural language or keywords.")
    top: int = Field(default=10, ge=1, le=100, description="How many results to return (1-100).")
    collection: Collection | None = Field(default=None, description="Only search this collection.")
    tags: Tags = Field(default_factory=list, description="Only documents carrying every one of these tags.")
    fts_only: bool = Field(default=False, description="Keyword (full-text) search only, no semantic search.")

    @field_validator("query")
    @classmethod
    def _query_not_blank(cls, query: str) -> str:
        if not query.strip():
            raise ValueError("query must not be blank")
        return query


class AddNoteArgs(_Args):
    text: str = Field(min_length=1, max_length=200_000, description="The note, plain text or Markdown.")
    collection: Collection = Field(default=DEFAULT_COLLECTION, description="The note's collection.")
    tags: Tags = Field(default_factory=list, description="Tags to attach to the note.")


class UploadStartArgs(_Args):
    filename: str = Field(min_length=1, max_length=255, description="The file's name; its extension sets its type.")
    total_size: int = Field(gt=0, description="The file's exact size in bytes (before base64 encoding).")
    tags: Tags = Field(default_factory=list, description="Tags to attach to the document.")
    collection: Collection = Field(default=DEFAULT_COLLECTION, description="The document's collection.")


class UploadChunkArgs(_Args):
    upload_id: str = Field(min_length=1, max_length=64, description="The id kb_upload_start returned.")
    data: str = Field(description="This part of the file, base64-encoded.")
    chunk_index: int = Field(ge=0, description="The part's position, from 0; parts may arrive in any order.")


class UploadFinishArgs(_Args):
    upload_id: str = Field(min_length=1, max_length=64, description="The id kb_upload_start returned.")


class UpdateNoteArgs(_Args):
    document_id: DocumentRef
    text: str = Field(min_length=1, max_length=200_000, description="The note's new text; it replaces the old.")
    collection: Collection | None = Field(
        default=None, description="Move the note to this collection (it leaves its current one)."
    )


class GetArgs(_Args):
    document_id: StrictInt | StrictStr | None = Field(
        default=None, description="The document's number (as kb_search gives it), or its string doc_id."
    )
    source_path: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        description="The document's path in its source (as `source_path` in results), or `<source>/<path>`.",
    )
    max_chunks: int = Field(default=200, ge=0, le=2000, description="Return at most this many of its chunks.")


class StatusArgs(_Args):
    pass


class JobsArgs(_Args):
    status: Literal["queued", "running", "succeeded", "failed", "interrupted"] | None = Field(
        default=None, description="Only jobs in this state (interrupted: its process died; the file was re-queued)."
    )
    job_id: str | None = Field(default=None, min_length=1, max_length=64, description="Only this job.")
    limit: int = Field(default=50, ge=1, le=500, description="Most recent first; at most this many.")


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def _document_ref(ref: int | str) -> int | str:
    """A number given as a string ("42") is a number: doc_ids always hold a ':'."""
    if isinstance(ref, str) and ref.strip().isdigit():
        return int(ref.strip())
    return ref


@dataclass(frozen=True)
class KbDeps:
    """What the kb tools use."""

    settings: Settings
    search: SearchService
    catalog: Catalog
    documents: DocumentStore
    jobs: JobStore
    notes: NoteService
    uploads: UploadService
    embedder: Embedder
    source_url: Callable[..., str]
    first_sync: Progress | None = None

    @property
    def part_kib(self) -> int:
        return self.settings.ingest.max_part_bytes // 1024

    @property
    def upload_mib(self) -> int:
        return self.settings.ingest.max_upload_bytes // (1024 * 1024)

    @property
    def upload_minutes(self) -> int:
        return self.settings.ingest.upload_ttl_seconds // 60


def number(deps: KbDeps, doc: Document) -> int:
    return doc.number if doc.number is not None else deps.documents.number_for(doc.tenant, doc.doc_id)


def chunk_view(chunk: Chunk) -> dict[str, Any]:
    return {
        "chunk_id": chunk.chunk_id,
        "index": chunk.ordinal,
        "page": chunk.page_start,
        "page_end": chunk.page_end,
        "headline": chunk.headline,
        "text": chunk.text,
    }


def document_view(
    deps: KbDeps, principal: Principal, doc: Document, chunks: list[Chunk] | None = None
) -> dict[str, Any]:
    collection, tags = collection_of(doc.tags)
    view: dict[str, Any] = {
        "document_id": number(deps, doc),
        "doc_id": doc.doc_id,
        "title": doc.title,
        "source": doc.source,
        "source_path": doc.path,
        "file_name": doc.file_name,
        "file_type": doc.file_type,
        "kind": doc.kind,
        "collection": collection,
        "tags": tags,
        "metadata": doc.metadata,
        "pages": doc.pages,
        "size_bytes": doc.size_bytes,
        "url": deps.source_url(principal, doc),
        "created_at": _iso(doc.created_at),
        "updated_at": _iso(doc.updated_at),
        "chunk_count": doc.chunk_count,
        **stale_fields(doc),
    }
    if chunks is not None:
        view["chunks"] = [chunk_view(c) for c in chunks]
        view["truncated"] = len(chunks) < doc.chunk_count
    return view


def hit_view(deps: KbDeps, principal: Principal, hit: ScoredChunk) -> dict[str, Any]:
    doc, chunk = hit.document, hit.chunk
    collection, tags = collection_of(doc.tags)
    return {
        "document_id": number(deps, doc),
        "doc_id": doc.doc_id,
        "title": doc.title,
        "source_path": doc.path,
        "file_name": doc.file_name,
        "file_type": doc.file_type,
        "chunk_id": chunk.chunk_id,
        "text": chunk.text,
        "score": hit.score,
        "fts_score": hit.fts_score,
        "vector_score": hit.vec_score,
        "page": chunk.page_start,
        "collection": collection,
        "tags": tags,
        "metadata": doc.metadata,
        "url": deps.source_url(principal, doc, chunk.page_start),
        **warning_fields(chunk.flags),
    }


def job_source(job: Job) -> str | None:
    return job.source or (UPLOADS if job.type == "upload" else None)


def at_path(deps: KbDeps, job: Job) -> list[Document]:
    """The documents at the job's file now, whatever the job's state."""
    source = job_source(job)
    return deps.documents.by_path(job.tenant, source, job.target) if source and job.target else []


def job_documents(job: Job, docs: list[Document]) -> list[Document]:
    """The documents a job made: those at its file (`docs`), once it succeeded."""
    return docs if job.status == "succeeded" and job.type in ("note", "upload", "ingest") else []


def job_view(deps: KbDeps, job: Job, docs: list[Document]) -> dict[str, Any]:
    return {
        "job_id": job.job_id,
        "type": job.type,
        "status": job.status,
        "target": job.target,
        "source": job_source(job),
        "counts": job.counts,
        "error": job.error,
        "created_at": _iso(job.created_at),
        "updated_at": _iso(job.updated_at),
        "document_ids": [number(deps, d) for d in docs],
    }


def job_visible(deps: KbDeps, principal: Principal, job: Job, docs: list[Document]) -> bool:
    """Whether the caller may see a job (its target names a file, its error may quote it): when its
    file has documents, if the caller may read one of them; when it has none (queued, failed,
    deleted), if the caller started it (a note, an upload, a sync) or is an admin who may see its
    source. `docs`: the documents at its file."""
    if docs:
        return any(can_read(principal, d) for d in docs)
    if job.owner is not None and job.owner == owner_of(principal):
        return True
    if "admin" not in principal.scopes:
        return False
    named = [job_source(job)] if job_source(job) else job.target.split(",") if job.type == "sync" else []
    sources = [deps.catalog.sources.get(principal.tenant, s) for s in named if s]
    return all(s is None or can_see_source(principal, s) for s in sources)


def visible_jobs(deps: KbDeps, principal: Principal, jobs: list[Job]) -> list[dict[str, Any]]:
    """Jobs as this caller may see them (job_visible); the document ids shown are readable ones."""
    views = []
    for job in jobs:
        docs = at_path(deps, job)
        if job_visible(deps, principal, job, docs):
            readable = [d for d in job_documents(job, docs) if can_read(principal, d)]
            views.append(job_view(deps, job, readable))
    return views


def find_document(deps: KbDeps, principal: Principal, ref: int | str) -> Document:
    return deps.catalog.document(principal, _document_ref(ref))


def by_source_path(deps: KbDeps, principal: Principal, path: str) -> list[Document]:
    docs = deps.catalog.by_path(principal, path)
    if not docs and "/" in path:
        source, rest = path.split("/", 1)
        docs = [d for d in deps.documents.by_path(principal.tenant, source, rest) if can_read(principal, d)]
    return docs


@tool(
    "kb_search",
    profile=PROFILE,
    title="Search the knowledge base",
    description=(
        "Searches the knowledge base (hybrid keyword + semantic search; `fts_only` for keywords only) and "
        "returns matching chunks with their text, scores, document metadata, collection and tags. "
        "`collection` and `tags` narrow the search to documents in that collection carrying all those tags."
    ),
)
async def kb_search(deps: KbDeps, caller: Caller, args: SearchArgs) -> dict[str, Any]:
    principal = caller.require()
    check_phrase_bytes("query", args.query, deps.settings.search.max_phrase_bytes)
    tags_all = [*args.tags, *([COLLECTION_PREFIX + args.collection] if args.collection else [])]
    request = SearchRequest(
        phrases=[args.query],
        top_k=args.top,
        filter=SearchFilter(tags_all=tuple(tags_all)),
        **{
            **deps.settings.search.defaults(),
            **({"mode": "fts"} if args.fts_only else {}),
            "fts_k": max(deps.settings.search.fts_k, args.top),
            "vec_k": max(deps.settings.search.vec_k, args.top),
        },
    )
    # In line, as rag_search: the registry already runs this body on a tool thread of its own (offloop.py).
    result = deps.search.search(principal, request)
    return {
        "results": [hit_view(deps, principal, h) for h in result.hits],
        "count": len(result.hits),
        "mode": request.mode,
        "elapsed_ms": round(result.elapsed_ms, 2),
        **({"warning": warning} if (warning := filling_warning(deps.first_sync)) else {}),
    }


@tool(
    "kb_addnote",
    profile=PROFILE,
    title="Add a note",
    description=(
        "Adds a text note to the knowledge base (collection `documents` unless another is given). The note "
        "is ingested in the background: the answer holds its job_id (see kb_jobs) and its document_id."
    ),
    scope="write",
    idempotent=False,
)
async def kb_addnote(deps: KbDeps, caller: Caller, args: AddNoteArgs) -> dict[str, Any]:
    principal = caller.require()

    def add() -> dict[str, Any]:
        job = deps.notes.add(principal, args.text, args.collection, args.tags)
        doc_id = f"{job.source}:{job.target}"
        return {
            "job_id": job.job_id,
            "status": job.status,
            # The number is assigned now and kept: the ingest job gives the document the same one.
            "document_id": deps.documents.number_for(principal.tenant, doc_id),
            "doc_id": doc_id,
            "collection": args.collection,
        }

    return await anyio.to_thread.run_sync(add)


@tool(
    "kb_upload_start",
    profile=PROFILE,
    title="Start a file upload",
    description=(
        "Starts a chunked file upload (up to {deps.upload_mib} MiB; PDF, Word, PowerPoint, Excel, HTML, Markdown, "
        "text, CSV). Send the parts with kb_upload_chunk, then call kb_upload_finish within {deps.upload_minutes} "
        "minutes; an upload left unfinished is discarded. Answers {{upload_id}}."
    ),
    scope="write",
    idempotent=False,
)
async def kb_upload_start(deps: KbDeps, caller: Caller, args: UploadStartArgs) -> dict[str, Any]:
    principal = caller.require()

    def start() -> dict[str, Any]:
        deps.uploads.sweep()  # abandoned uploads go, whether or not a janitor runs
        session = deps.uploads.start(principal, args.filename, args.total_size, args.tags, args.collection)
        return {"upload_id": session.upload_id}

    return await anyio.to_thread.run_sync(start)


@tool(
    "kb_upload_chunk",
    profile=PROFILE,
    title="Upload one part of a file",
    description=(
        "Stores one base64-encoded part (at most {deps.part_kib} KiB decoded) of an upload begun with "
        "kb_upload_start. Parts are numbered from 0 by chunk_index and may arrive in any order; sending the "
        "same chunk_index again replaces that part."
    ),
    scope="write",
    idempotent=True,
)
async def kb_upload_chunk(deps: KbDeps, caller: Caller, args: UploadChunkArgs) -> dict[str, Any]:
    principal = caller.require()
    data = "".join(args.data.split())  # base64 wrapped over lines is still base64
    if not data:
        raise InvalidArgument("data: an empty part")
    session = await anyio.to_thread.run_sync(deps.uploads.add_part, principal, args.upload_id, data, args.chunk_index)
    return {
        "upload_id": session.upload_id,
        "chunk_index": args.chunk_index,
        "size": session.parts[args.chunk_index],
        "chunks_received": len(session.parts),
        "bytes_received": sum(session.parts.values()),
        "total_size": session.total_size,
    }


@tool(
    "kb_upload_finish",
    profile=PROFILE,
    title="Finish a file upload",
    description=(
        "Puts the parts together in chunk_index order, checks the size against total_size and ingests the "
        "file in the background with the tags and collection given to kb_upload_start. Answers its job_id; "
        "a call with a progressToken waits for the ingest, with progress notifications."
    ),
    scope="write",
    idempotent=False,
    reports_progress=True,
)
async def kb_upload_finish(deps: KbDeps, caller: Caller, args: UploadFinishArgs) -> dict[str, Any]:
    principal = caller.require()
    job = await anyio.to_thread.run_sync(deps.uploads.finish, principal, args.upload_id)
    report = current_reporter.get()
    if report is not None:  # the client asked for progress: wait for the ingest, telling it each step
        job = await follow(deps.jobs, principal.tenant, job.job_id, report)
    return {"job_id": job.job_id, "status": job.status, "filename": job.target}


@tool(
    "kb_update_note",
    profile=PROFILE,
    title="Update a note",
    description=(
        "Replaces the text of a note (only notes can be updated) and re-indexes it at once; `collection` "
        "moves it to another collection. Answers the updated document."
    ),
    scope="write",
    idempotent=True,
)
async def kb_update_note(deps: KbDeps, caller: Caller, args: UpdateNoteArgs) -> dict[str, Any]:
    principal = caller.require()

    def update() -> dict[str, Any]:
        doc = find_document(deps, principal, args.document_id)
        updated = deps.notes.update(principal, doc, args.text, args.collection)
        return document_view(deps, principal, updated, deps.catalog.chunks_of(updated, 200))

    return await anyio.to_thread.run_sync(update)


@tool(
    "kb_get",
    profile=PROFILE,
    title="Get a document",
    description="Returns a document with its chunks, by document_id, or the documents at a source_path.",
)
async def kb_get(deps: KbDeps, caller: Caller, args: GetArgs) -> dict[str, Any]:
    principal = caller.require()
    if (args.document_id is None) == (args.source_path is None):
        raise InvalidArgument("give either document_id or source_path")

    room = [GET_TEXT_BYTES_MAX]

    def chunks_of(doc: Document) -> list[Chunk]:
        kept = []
        for chunk in deps.catalog.chunks_of(doc, args.max_chunks):
            room[0] -= len(json.dumps(chunk.text))
            if room[0] < 0:
                break
            kept.append(chunk)
        return kept

    def get() -> dict[str, Any]:
        if args.document_id is not None:
            doc = find_document(deps, principal, args.document_id)
            return document_view(deps, principal, doc, chunks_of(doc))
        path = args.source_path.strip().lstrip("/")
        docs = by_source_path(deps, principal, path)
        if not docs:
            raise NotFound(f"no document at source_path {path!r}")
        views = [document_view(deps, principal, d, chunks_of(d)) for d in docs]
        return {"documents": views, "count": len(views)}

    return await anyio.to_thread.run_sync(get)


@tool(
    "kb_status",
    profile=PROFILE,
    title="Knowledge base status",
    description=(
        "Returns the server version, embedding model and device, document, chunk and job counts, and the "
        "state of the ingestion queue (counting only the documents and jobs the caller may see)."
    ),
)
async def kb_status(deps: KbDeps, caller: Caller, args: StatusArgs) -> dict[str, Any]:
    principal = caller.require()

    def status() -> dict[str, Any]:
        tenant = principal.tenant
        every = deps.documents.list(tenant)
        docs = [d for d in every if can_read(principal, d)]
        collections = Counter(collection_of(d.tags)[0] or DEFAULT_COLLECTION for d in docs)
        by_path: dict[tuple[str | None, str], list[Document]] = {}
        for doc in every:
            by_path.setdefault((doc.source, doc.path), []).append(doc)
        # Only the jobs this caller may see are counted: the tenant's others, and the server's queue
        # of every tenant, say nothing to it (a count of hidden jobs would betray hidden files).
        seen = Counter(
            job.status
            for job in deps.jobs.list(tenant, limit=10_000_000)
            if job_visible(deps, principal, job, by_path.get((job_source(job), job.target), []))
        )
        jobs = {s: seen[s] for s in JOB_STATUSES}
        depth = jobs["queued"]
        return {
            "status": "ok",
            "version": __version__,
            "embedding_model": deps.embedder.model_id,
            "embedding_dimension": deps.embedder.dimension,
            "device": getattr(deps.embedder, "device", "cpu"),
            "counts": {
                "documents": len(docs),
                "chunks": sum(d.chunk_count for d in docs),
                "collections": dict(sorted(collections.items())),
                "jobs": jobs,
            },
            "queue": {
                "state": "busy" if depth or jobs["queued"] or jobs["running"] else "idle",
                "depth": depth,
                "queued": jobs["queued"],
                "running": jobs["running"],
            },
        }

    return await anyio.to_thread.run_sync(status)


@tool(
    "kb_jobs",
    profile=PROFILE,
    title="List ingestion jobs",
    description=(
        "Lists recent ingestion jobs (newest first), optionally only those with a given status "
        "(queued, running, succeeded, failed) or one job by job_id."
    ),
)
async def kb_jobs(deps: KbDeps, caller: Caller, args: JobsArgs) -> dict[str, Any]:
    principal = caller.require()

    def jobs() -> dict[str, Any]:
        if args.job_id is not None:
            job = deps.jobs.get(principal.tenant, args.job_id)
            if job is None:
                raise NotFound(f"job {args.job_id} not found")
            found = [job] if args.status in (None, job.status) else []
        else:
            found = deps.jobs.list(principal.tenant, args.status, limit=args.limit)
        views = visible_jobs(deps, principal, found)
        if args.job_id is not None and found and not views:
            raise NotFound(f"job {args.job_id} not found")
        return {"jobs": views, "count": len(views)}

    return await anyio.to_thread.run_sync(jobs)

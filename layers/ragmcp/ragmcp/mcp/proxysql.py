"""The proxysql profile (contracts/proxysql-rag-mcp.md): the eight `rag.*` tools.

Retrieval returns identifiers and scores, fetch returns content, refetch returns the
authoritative row. Every cap is enforced whatever the caller asks, and `truncated` is
true exactly when a cap cut the output.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Annotated, Any, Literal, TypeVar

import anyio
import numpy as np
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from ragmcp.bootstrap import Services
from ragmcp.domain.errors import InvalidArgument, LimitExceeded
from ragmcp.domain.models import Document, Job, Principal, ScoredChunk, SearchFilter, Source, utcnow
from ragmcp.ingest.poisoning import warning_fields
from ragmcp.mcp.following import follow
from ragmcp.mcp.registry import INTERNAL_ERROR, Caller, ToolSpec, current_reporter, stale_fields
from ragmcp.progress import Progress
from ragmcp.retrieval.catalog import FILE_FIELDS
from ragmcp.retrieval.service import SearchRequest, SearchResult

PROFILE = "proxysql"

K_MAX = 50
CANDIDATES_MAX = 500
QUERY_MAX_BYTES = 8192
RESPONSE_MAX_BYTES = 5_000_000
CHUNK_BYTES_MAX = 2_000_000
ROWS_MAX = 100
ROW_BYTES_MAX = 1_000_000
IDS_MAX = 500
HELD_PATHS_SHOWN = 20
TIMEOUT_MS = {"search": 2000, "fetch": 1000, "source": 2000, "admin": 1000}
SNIPPET_CHARS = 300

T = TypeVar("T")
Id = Annotated[str, StringConstraints(min_length=1, max_length=1024)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Filters(Strict):
    source_ids: list[int] | None = Field(default=None, max_length=IDS_MAX, description="Numeric source ids.")
    source_names: list[str] | None = Field(
        default=None, max_length=IDS_MAX, description="Source names; with source_ids, only sources in both."
    )
    doc_ids: list[Id] | None = Field(default=None, max_length=IDS_MAX, description="Only these documents.")
    min_score: float | None = Field(default=None, ge=0, description="Minimum normalised relevance score (0-1).")
    post_type_ids: list[int] | None = Field(
        default=None, max_length=IDS_MAX, description="Only documents whose PostTypeId metadata is one of these."
    )
    tags_any: list[str] | None = Field(default=None, max_length=IDS_MAX, description="At least one of these tags.")
    tags_all: list[str] | None = Field(default=None, max_length=64, description="Every one of these tags.")
    created_after: datetime | None = Field(default=None, description="Documents created at or after (ISO-8601).")
    created_before: datetime | None = Field(default=None, description="Documents created before (ISO-8601).")
    metadata: dict[str, str | int | float | bool] | None = Field(
        default=None, max_length=32, description="Document metadata fields that must equal these values."
    )


class SearchReturn(Strict):
    include_title: bool = True
    include_metadata: bool = True
    include_snippets: bool = Field(default=False, description="Add a short snippet of each chunk (bounded).")


class SearchFtsArgs(Strict):
    query: str = Field(min_length=1, description="Keywords to match in the indexed text.")
    k: int = Field(default=10, ge=1, description=f"How many chunks to return (at most {K_MAX}).")
    offset: int = Field(default=0, ge=0, le=CANDIDATES_MAX, description="Skip this many best matches first.")
    filters: Filters = Field(default_factory=Filters)
    return_: SearchReturn = Field(default_factory=SearchReturn, alias="return")


class QueryEmbedding(Strict):
    dim: int = Field(ge=1, le=8192, description="Number of float32 values.")
    values_b64: str = Field(min_length=1, description="float32 array, little-endian, packed and base64-encoded.")


class EmbeddingChoice(Strict):
    model: str | None = Field(default=None, description="Embedding model; the index's own model is always used.")


class SearchVectorArgs(Strict):
    query_text: str | None = Field(default=None, min_length=1, description="Text to embed and search with.")
    query_embedding: QueryEmbedding | None = Field(default=None, description="A precomputed query vector.")
    k: int = Field(default=10, ge=1, description=f"How many chunks to return (at most {K_MAX}).")
    filters: Filters = Field(default_factory=Filters)
    embedding: EmbeddingChoice = Field(default_factory=EmbeddingChoice)
    return_: SearchReturn = Field(default_factory=SearchReturn, alias="return")

    @model_validator(mode="after")
    def _one_query(self) -> SearchVectorArgs:
        if (self.query_text is None) == (self.query_embedding is None):
            raise ValueError("give exactly one of query_text and query_embedding")
        return self


class FuseParams(Strict):
    fts_k: int = Field(default=50, ge=1, description=f"FTS candidates (at most {CANDIDATES_MAX}).")
    vec_k: int = Field(default=50, ge=1, description=f"Vector candidates (at most {CANDIDATES_MAX}).")
    rrf_k0: int = Field(default=60, ge=1, le=10_000, description="Reciprocal rank fusion constant.")
    w_fts: float = Field(default=1.0, ge=0, le=100, description="Weight of the FTS ranking.")
    w_vec: float = Field(default=1.0, ge=0, le=100, description="Weight of the vector ranking.")


class FtsThenVecParams(Strict):
    candidates_k: int = Field(default=200, ge=1, description=f"FTS candidates (at most {CANDIDATES_MAX}).")
    rerank_k: int = Field(default=50, ge=1, description="Candidates kept after the vector rerank.")
    vec_metric: Literal["cosine"] = "cosine"


class SearchHybridArgs(Strict):
    query: str = Field(min_length=1, description="The question or keywords.")
    k: int = Field(default=10, ge=1, description=f"How many chunks to return (at most {K_MAX}).")
    filters: Filters = Field(default_factory=Filters)
    mode: Literal["fuse", "fts_then_vec"] = Field(
        default="fuse", description="fuse: FTS and vectors in parallel, RRF; fts_then_vec: FTS candidates reranked."
    )
    fuse: FuseParams = Field(default_factory=FuseParams)
    fts_then_vec: FtsThenVecParams = Field(default_factory=FtsThenVecParams)
    return_: SearchReturn = Field(default_factory=SearchReturn, alias="return")


class ChunkReturn(Strict):
    include_title: bool = True
    include_doc_metadata: bool = True
    include_chunk_metadata: bool = True


class GetChunksArgs(Strict):
    chunk_ids: list[Id] = Field(min_length=1, max_length=IDS_MAX, description="Chunk ids from a search.")
    return_: ChunkReturn = Field(default_factory=ChunkReturn, alias="return")


class DocReturn(Strict):
    include_body: bool = True
    include_metadata: bool = True


class GetDocsArgs(Strict):
    doc_ids: list[Id] = Field(min_length=1, max_length=IDS_MAX, description="Document ids from a search.")
    return_: DocReturn = Field(default_factory=DocReturn, alias="return")


class FetchLimits(Strict):
    max_rows: int = Field(default=10, ge=1, description=f"At most this many rows (never more than {ROWS_MAX}).")
    max_bytes: int = Field(
        default=200_000, ge=1, description=f"At most this many bytes (never more than {ROW_BYTES_MAX})."
    )


class FetchArgs(Strict):
    doc_ids: list[Id] = Field(min_length=1, max_length=IDS_MAX, description="Documents to re-read from source.")
    columns: list[str] | None = Field(
        default=None, max_length=256, description="Columns to return; only the source's whitelisted columns."
    )
    limits: FetchLimits = Field(default_factory=FetchLimits)


class StatsArgs(Strict):
    pass


class SyncArgs(Strict):
    source_names: list[str] | None = Field(
        default=None, max_length=IDS_MAX, description="Sources to re-scan; all if omitted."
    )
    allow_mass_delete: bool = Field(
        default=False,
        description="Apply deletions even when most of a source's files vanished at once; without it such "
        "deletions are held and listed by rag.admin.stats (held_deletions).",
    )


def _ms(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)


def _fit(items: list[T], budget: int, size: Callable[[T], int]) -> tuple[list[T], bool]:
    """The longest prefix of items whose sizes fit in the budget, and whether anything was cut."""
    kept, used = [], 0
    for item in items:
        used += size(item)
        if used > budget:
            return kept, True
        kept.append(item)
    return kept, False


def _json_size(item: Any) -> int:
    return len(json.dumps(item, ensure_ascii=False, default=str).encode())


def tools(services: Services) -> list[ToolSpec]:
    async def run(kind: str, fn: Callable[..., T], *args: Any) -> T:
        limit = TIMEOUT_MS[kind]
        try:
            with anyio.fail_after(limit / 1000):
                return await anyio.to_thread.run_sync(partial(fn, *args), abandon_on_cancel=True)
        except TimeoutError:
            raise MCPError(INTERNAL_ERROR, f"timed out after {limit} ms", {"code": "INTERNAL"}) from None

    def sources_by(principal: Principal) -> dict[str, Source]:
        return {s.source_id: s for s in services.sources.list(principal.tenant)}

    def search_filter(principal: Principal, filters: Filters) -> SearchFilter:
        chosen: tuple[str, ...] | None = None
        if filters.source_ids is not None or filters.source_names is not None:
            known = sources_by(principal).values()
            by_id = {s.source_id for s in known if filters.source_ids is None or s.number in filters.source_ids}
            by_name = {s.source_id for s in known if filters.source_names is None or s.name in filters.source_names}
            chosen = tuple(sorted(by_id & by_name))
        metadata = {k: (str(v),) for k, v in (filters.metadata or {}).items()}
        if filters.post_type_ids is not None:
            metadata["PostTypeId"] = tuple(str(i) for i in filters.post_type_ids)
        return SearchFilter(
            sources=chosen,
            doc_ids=tuple(filters.doc_ids) if filters.doc_ids is not None else None,
            tags_any=tuple(filters.tags_any or ()),
            tags_all=tuple(filters.tags_all or ()),
            created_after=filters.created_after,
            created_before=filters.created_before,
            metadata=metadata,
        )

    def check_query(text: str | None) -> None:
        if text is not None and len(text.encode()) > QUERY_MAX_BYTES:
            raise LimitExceeded(f"query is longer than query_max_bytes ({QUERY_MAX_BYTES})")

    def base_row(hit: ScoredChunk, sources: dict[str, Source], shape: SearchReturn) -> dict[str, Any]:
        source = sources.get(hit.document.source)
        row: dict[str, Any] = {
            "chunk_id": hit.chunk.chunk_id,
            "doc_id": hit.document.doc_id,
            "source_id": source.number if source else None,
            "source_name": source.name if source else hit.document.source,
        }
        if shape.include_title:
            row["title"] = hit.document.title
        if shape.include_metadata:
            row["metadata"] = hit.document.metadata
        if shape.include_snippets:
            row["snippet"] = hit.chunk.summary or hit.chunk.text[:SNIPPET_CHARS]
        return {**row, **warning_fields(hit.chunk.flags)}

    async def search(
        caller: Caller,
        request: SearchRequest,
        k: int,
        offset: int,
        min_score: float | None,
        shape: SearchReturn,
        score: Callable[[ScoredChunk], dict[str, Any]],
        extra_stats: dict[str, Any],
    ) -> dict[str, Any]:
        started = time.perf_counter()
        principal = caller.require()
        kept_k = min(k, K_MAX)
        result: SearchResult = await run("search", services.search.search, principal, request)
        hits = [h for h in result.hits if min_score is None or h.score >= min_score][offset : offset + kept_k]
        available = min(result.total_candidates, request.top_k) - offset
        sources = sources_by(principal)
        rows = [{**base_row(h, sources, shape), **score(h)} for h in hits]
        rows, cut = _fit(rows, RESPONSE_MAX_BYTES, _json_size)
        truncated = cut or (k > K_MAX and available > K_MAX)
        below = sum(1 for h in hits[: len(rows)] if h.floor_score is not None and h.floor_score < request.floor)
        floor = {"floor": request.floor, "below_floor": below}
        stats = {**extra_stats, **floor, "k_requested": k, "k_returned": len(rows), "ms": _ms(started)}
        return {"results": rows, "truncated": truncated, "stats": stats}

    def request_for(phrase: str, k: int, offset: int, flt: SearchFilter, **kw: Any) -> SearchRequest:
        top = min(offset + min(k, K_MAX) + (1 if k > K_MAX else 0), CANDIDATES_MAX)
        floor = {"floor": services.settings.relevance_floor, "floor_coverage": services.settings.floor_coverage}
        return SearchRequest(phrases=[phrase], top_k=top, filter=flt, drop_below_floor=False, **floor, **kw)

    async def search_fts(caller: Caller, args: SearchFtsArgs) -> dict[str, Any]:
        check_query(args.query)
        flt = search_filter(caller.require(), args.filters)
        request = request_for(args.query, args.k, args.offset, flt, mode="fts", fts_k=CANDIDATES_MAX)
        return await search(
            caller,
            request,
            args.k,
            args.offset,
            args.filters.min_score,
            args.return_,
            lambda h: {"score_fts": h.score, "score_fts_raw": h.fts_score},
            {},
        )

    def query_vector(embedding: QueryEmbedding) -> list[float]:
        expected = services.embedder.dimension
        if embedding.dim != expected:
            raise InvalidArgument(f"query_embedding.dim is {embedding.dim}, but this index has dimension {expected}")
        try:
            raw = base64.b64decode(embedding.values_b64, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidArgument("query_embedding.values_b64 is not valid base64") from None
        if len(raw) != 4 * embedding.dim:
            held = len(raw) // 4
            raise InvalidArgument(f"query_embedding.values_b64 holds {held} float32 values, not {embedding.dim}")
        vector = np.frombuffer(raw, dtype="<f4").astype(np.float32)
        norm = float(np.linalg.norm(vector))
        if not np.isfinite(norm) or norm == 0:
            raise InvalidArgument("query_embedding must be a finite, non-zero vector")
        return (vector / norm).tolist()

    async def search_vector(caller: Caller, args: SearchVectorArgs) -> dict[str, Any]:
        check_query(args.query_text)
        flt = search_filter(caller.require(), args.filters)
        vectors = [query_vector(args.query_embedding)] if args.query_embedding else None
        phrase = args.query_text or "(vector)"
        request = request_for(phrase, args.k, 0, flt, mode="vector", vec_k=CANDIDATES_MAX, query_vectors=vectors)
        return await search(
            caller,
            request,
            args.k,
            0,
            args.filters.min_score,
            args.return_,
            lambda h: {"score_vec": h.vec_score},
            {"embedding_model": services.embedder.model_id},
        )

    async def search_hybrid(caller: Caller, args: SearchHybridArgs) -> dict[str, Any]:
        check_query(args.query)
        flt = search_filter(caller.require(), args.filters)
        if args.mode == "fuse":
            knobs = dict(
                mode="hybrid",
                fts_k=min(args.fuse.fts_k, CANDIDATES_MAX),
                vec_k=min(args.fuse.vec_k, CANDIDATES_MAX),
                rrf_k0=args.fuse.rrf_k0,
                fts_weight=args.fuse.w_fts,
                vec_weight=args.fuse.w_vec,
            )
        else:
            candidates = min(args.fts_then_vec.candidates_k, CANDIDATES_MAX)
            knobs = dict(mode="fts_then_vec", fts_k=candidates, vec_k=min(args.fts_then_vec.rerank_k, candidates))
        request = request_for(args.query, args.k, 0, flt, **knobs)

        def scores(h: ScoredChunk) -> dict[str, Any]:
            return {
                "score": h.score,
                "score_fts": h.fts_score,
                "score_vec": h.vec_score,
                "debug": {"rank_fts": h.fts_rank, "rank_vec": h.vec_rank},
            }

        return await search(
            caller, request, args.k, 0, args.filters.min_score, args.return_, scores, {"mode": args.mode}
        )

    async def get_chunks(caller: Caller, args: GetChunksArgs) -> dict[str, Any]:
        started = time.perf_counter()
        found = await run("fetch", services.catalog.chunks, caller.require(), args.chunk_ids)
        shape = args.return_
        rows = []
        for chunk, doc in found:
            row: dict[str, Any] = {"chunk_id": chunk.chunk_id, "doc_id": doc.doc_id}
            if shape.include_title:
                row["title"] = doc.title
            row["body"] = chunk.text
            if shape.include_doc_metadata:
                row["doc_metadata"] = doc.metadata
            if shape.include_chunk_metadata:
                row["chunk_metadata"] = {
                    "chunk_index": chunk.ordinal,
                    "headline": chunk.headline,
                    "page_start": chunk.page_start,
                    "page_end": chunk.page_end,
                }
            rows.append(row)
        rows, truncated = _fit(rows, CHUNK_BYTES_MAX, _json_size)
        return {"chunks": rows, "truncated": truncated, "stats": {"ms": _ms(started)}}

    def doc_rows(principal: Principal, doc_ids: list[str], shape: DocReturn) -> list[dict[str, Any]]:
        sources = sources_by(principal)
        rows = []
        for doc in services.catalog.find_documents(principal, doc_ids):
            source = sources.get(doc.source)
            row: dict[str, Any] = {
                "doc_id": doc.doc_id,
                "source_id": source.number if source else None,
                "source_name": source.name if source else doc.source,
                "pk_json": pk_json(doc, source),
                "title": doc.title,
                **stale_fields(doc),
            }
            if shape.include_body:
                row["body"] = services.catalog.text_of(doc)
            if shape.include_metadata:
                row["metadata"] = doc.metadata
            rows.append(row)
        return rows

    async def get_docs(caller: Caller, args: GetDocsArgs) -> dict[str, Any]:
        started = time.perf_counter()
        rows = await run("fetch", doc_rows, caller.require(), args.doc_ids, args.return_)
        rows, truncated = _fit(rows, CHUNK_BYTES_MAX, _json_size)
        return {"docs": rows, "truncated": truncated, "stats": {"ms": _ms(started)}}

    def source_rows(principal: Principal, args: FetchArgs) -> tuple[list[dict[str, Any]], bool]:
        sources = sources_by(principal)
        docs = services.catalog.find_documents(principal, args.doc_ids)
        for doc in docs:
            source = sources.get(doc.source)
            allowed = set(source.fetchable_columns() if source and doc.kind == "row" else FILE_FIELDS)
            refused = [c for c in args.columns or () if c not in allowed]
            if refused:
                raise InvalidArgument(f"columns not fetchable from {doc.doc_id}: {', '.join(sorted(refused)[:10])}")
        max_rows = min(args.limits.max_rows, ROWS_MAX)
        rows = [
            {
                "doc_id": doc.doc_id,
                "source_name": sources[doc.source].name if doc.source in sources else doc.source,
                "row": services.catalog.source_row(doc, args.columns),
            }
            for doc in docs[:max_rows]
        ]
        kept, cut = _fit(rows, min(args.limits.max_bytes, ROW_BYTES_MAX), _json_size)
        return kept, cut or len(docs) > max_rows

    async def fetch_from_source(caller: Caller, args: FetchArgs) -> dict[str, Any]:
        started = time.perf_counter()
        rows, truncated = await run("source", source_rows, caller.require(), args)
        return {"rows": rows, "truncated": truncated, "stats": {"ms": _ms(started)}}

    async def admin_stats(caller: Caller, args: StatsArgs) -> dict[str, Any]:
        started = time.perf_counter()
        stats = await run("admin", services.catalog.stats, caller.require())
        return {
            "sources": [
                {
                    "source_id": s.source.number,
                    "source_name": s.source.name,
                    "docs": s.docs,
                    "chunks": s.chunks,
                    "last_sync": s.source.last_sync.isoformat() if s.source.last_sync else None,
                    **held_fields(s.source),
                }
                for s in stats
            ],
            "stats": {"ms": _ms(started)},
        }

    async def admin_sync(caller: Caller, args: SyncArgs) -> dict[str, Any]:
        principal = caller.require()
        known = list(sources_by(principal).values())
        if args.source_names is None:
            chosen = known
        else:
            chosen = [s for s in known if s.name in args.source_names]
            missing = sorted(set(args.source_names) - {s.name for s in chosen})
            if missing:
                raise InvalidArgument(f"unknown source_names: {', '.join(missing[:10])}")

        files = Progress("files")
        before = {"files": 0}

        def sync_all() -> dict[str, int]:
            totals = dict.fromkeys(("ingested", "updated", "deleted", "held", "failed"), 0)
            for source in chosen:
                report = services.ingest.sync(source, files, allow_mass_delete=args.allow_mass_delete)
                before["files"] += files.total
                for name in totals:
                    totals[name] += getattr(report, name)
            return {"sources": len(chosen), **totals}

        def measure(_job: Job) -> tuple[float, float | None, str]:
            s = files.snapshot()
            done = before["files"] + (s["done"] if files.running else 0)
            now = f", now {s['current']}" if s["current"] else ""
            return float(done), float(s["total"]) if len(chosen) == 1 else None, f"{done} files synced{now}"

        job_id = f"sync-{utcnow():%Y-%m-%dT%H:%M:%SZ}-{uuid.uuid4().hex[:8]}"
        job = Job(job_id=job_id, tenant=principal.tenant, type="sync", target=",".join(s.source_id for s in chosen))
        services.tasks.submit(job, sync_all)
        report = current_reporter.get()
        if report is not None:  # the client asked for progress: it is told while the sync runs
            await follow(services.jobs, principal.tenant, job_id, report, measure)
        return {"accepted": True, "job_id": job_id}

    spec = partial(ToolSpec, profile=PROFILE)
    return [
        spec(
            name="rag.search_fts",
            description="Keyword (BM25) search over the indexed chunks. Returns chunk ids, scores and titles; "
            "fetch text with rag.get_chunks.",
            args=SearchFtsArgs,
            handler=search_fts,
        ),
        spec(
            name="rag.search_vector",
            description="Semantic search: give query_text (embedded by the server) or a precomputed "
            "query_embedding. Returns chunk ids and similarity scores.",
            args=SearchVectorArgs,
            handler=search_vector,
        ),
        spec(
            name="rag.search_hybrid",
            description="Hybrid search: mode fuse runs keyword and vector search in parallel and fuses them with "
            "reciprocal rank fusion; mode fts_then_vec reranks keyword candidates by vector similarity.",
            args=SearchHybridArgs,
            handler=search_hybrid,
        ),
        spec(
            name="rag.get_chunks",
            description="Fetch chunk bodies by chunk_id: the grounding text for an answer. Bounded in bytes.",
            args=GetChunksArgs,
            handler=get_chunks,
        ),
        spec(
            name="rag.get_docs",
            description="Fetch whole documents by doc_id, with their text and metadata. Bounded in bytes.",
            args=GetDocsArgs,
            handler=get_docs,
        ),
        spec(
            name="rag.fetch_from_source",
            description="Re-read the authoritative row of each document from its stored original, by primary "
            "key; only whitelisted columns. For files: the original's metadata fields.",
            args=FetchArgs,
            handler=fetch_from_source,
        ),
        spec(
            name="rag.admin.stats",
            description="Per source: documents, chunks, the time of the last sync, and the deletions a sync "
            "held because too many of the source's files vanished at once.",
            args=StatsArgs,
            handler=admin_stats,
            scope="admin",
        ),
        spec(
            name="rag.admin.sync",
            description="Re-scan sources (all, or those named): new and changed files are ingested, vanished "
            "ones removed (held when they are most of a source, unless allow_mass_delete). Runs in the "
            "background; answers a job id (a call with a progressToken waits for the sync, with progress "
            "notifications).",
            args=SyncArgs,
            handler=admin_sync,
            scope="admin",
            idempotent=False,
            reports_progress=True,
        ),
    ]



def held_fields(source: Source) -> dict[str, Any]:
    """The deletions a sync held on the source (too many of its files vanished at once): added to
    its rag.admin.stats row only when there are some, so other rows keep the contract's fields."""
    if not source.held_deletions:
        return {}
    return {
        "held_deletions": len(source.held_deletions),
        "held_paths": list(source.held_deletions[:HELD_PATHS_SHOWN]),
        "held_reason": source.held_reason,
    }


def pk_json(doc: Document, source: Source | None) -> dict[str, Any]:
    if doc.kind == "row" and doc.pk is not None:
        return {source.pk_column if source else "id": doc.pk}
    return {"path": doc.path}

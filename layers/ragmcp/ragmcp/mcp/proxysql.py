"""The proxysql profile (contracts/proxysql-rag-mcp.md): the eight `rag.*` tools.

Retrieval returns identifiers and scores, fetch returns content, refetch returns the
authoritative row. Every cap is enforced whatever the caller asks, and `truncated` is
true exactly when a cap cut the output.

A number the contract caps (k, candidate counts, rows, bytes) declares its cap as the schema's
`maximum`, but a larger value is not refused: it is cut to the cap and `truncated` says so (the
contract: caps hold "regardless of caller input"). A query longer than query_max_bytes is refused
with LIMIT_EXCEEDED; its schema's `maxLength` is that many characters, an upper bound on the bytes.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Annotated, Any, Literal, TypeVar

import anyio
import numpy as np
from mcp.shared.exceptions import MCPError
from mcp.types import INTERNAL_ERROR
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from ragmcp.domain.errors import DeadlineExceeded, InvalidArgument, LimitExceeded
from ragmcp.domain.models import Chunk, Document, Job, Principal, ScoredChunk, SearchFilter, Source, utcnow
from ragmcp.ingest.pipeline import IngestService
from ragmcp.ingest.poisoning import warning_fields
from ragmcp.mcp.caller import Caller, current_reporter
from ragmcp.mcp.following import follow
from ragmcp.mcp.helpers import stale_fields
from ragmcp.mcp.registry import tool
from ragmcp.ports import Embedder, JobStore, SourceStore, TaskQueue
from ragmcp.progress import Progress
from ragmcp.retrieval.catalog import FILE_FIELDS, Catalog, SourceStats
from ragmcp.retrieval.service import SearchRequest, SearchResult, SearchService
from ragmcp.settings import Settings

PROFILE = "proxysql"

K_MAX = 50
CANDIDATES_MAX = 500
QUERY_MAX_BYTES = 8192
RESPONSE_MAX_BYTES = 5_000_000
CHUNK_BYTES_MAX = 2_000_000
ROWS_MAX = 100
ROW_BYTES_MAX = 1_000_000
IDS_MAX = 500
TAGS_ALL_MAX = 64
METADATA_MAX = 32
COLUMNS_MAX = 256
HELD_PATHS_SHOWN = 20
TIMEOUT_MS = {"search": 2000, "fetch": 1000, "source": 2000, "admin": 1000}
SNIPPET_CHARS = 300

T = TypeVar("T")
Id = Annotated[str, StringConstraints(min_length=1, max_length=1024)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def query_field(description: str, **constraints: Any) -> Any:
    """A search text: at most QUERY_MAX_BYTES bytes (UTF-8), refused with LIMIT_EXCEEDED beyond."""
    return Field(
        min_length=1,
        json_schema_extra={"maxLength": QUERY_MAX_BYTES},
        description=f"{description} At most {QUERY_MAX_BYTES} bytes (UTF-8); a longer one is LIMIT_EXCEEDED.",
        **constraints,
    )


def k_field() -> Any:
    return Field(
        default=10,
        ge=1,
        json_schema_extra={"maximum": K_MAX},
        description=f"How many chunks to return (1-{K_MAX}); a larger k is cut to {K_MAX} and `truncated` is true "
        "when more matched.",
    )


def candidates_field(default: int, description: str) -> Any:
    return Field(
        default=default,
        ge=1,
        json_schema_extra={"maximum": CANDIDATES_MAX},
        description=f"{description} (1-{CANDIDATES_MAX}; a larger value is cut to {CANDIDATES_MAX}).",
    )


class Filters(Strict):
    """Restrictions every search applies before ranking; omitted ones restrict nothing."""

    source_ids: list[int] | None = Field(
        default=None,
        max_length=IDS_MAX,
        description="Only chunks of these sources, by the numeric source_id search results and rag.admin.stats give.",
    )
    source_names: list[str] | None = Field(
        default=None,
        max_length=IDS_MAX,
        description="Only chunks of these sources, by source_name; given with source_ids, only sources in both.",
    )
    doc_ids: list[Id] | None = Field(
        default=None, max_length=IDS_MAX, description="Only chunks of these documents (doc_ids from a search)."
    )
    min_score: float | None = Field(
        default=None, ge=0, description="Only results whose normalised score (0-1, higher is better) is at least this."
    )
    post_type_ids: list[int] | None = Field(
        default=None, max_length=IDS_MAX, description="Only documents whose PostTypeId metadata is one of these."
    )
    tags_any: list[str] | None = Field(
        default=None, max_length=IDS_MAX, description="Only documents carrying at least one of these tags."
    )
    tags_all: list[str] | None = Field(
        default=None, max_length=TAGS_ALL_MAX, description="Only documents carrying every one of these tags."
    )
    created_after: datetime | None = Field(
        default=None, description="Only documents created at or after this time (ISO-8601, e.g. 2022-01-01T00:00:00Z)."
    )
    created_before: datetime | None = Field(
        default=None, description="Only documents created before this time (ISO-8601, e.g. 2025-01-01T00:00:00Z)."
    )
    metadata: dict[str, str | int | float | bool] | None = Field(
        default=None,
        max_length=METADATA_MAX,
        description='Only documents whose metadata fields equal these values (compared as text), e.g. {"Score": 12}.',
    )


FILTERS_DESCRIPTION = "Restrict the search (sources, documents, tags, creation time, metadata); {} for none."


class SearchReturn(Strict):
    """What each search result carries besides its ids and scores."""

    include_title: bool = Field(default=True, description="Add the document's title.")
    include_metadata: bool = Field(default=True, description="Add the document's metadata fields.")
    include_snippets: bool = Field(
        default=False,
        description=f"Add a snippet of each chunk (its summary, or its first {SNIPPET_CHARS} characters).",
    )


RETURN_DESCRIPTION = "Which fields each result carries besides its ids and scores."


class SearchFtsArgs(Strict):
    query: str = query_field("Keywords to match in the indexed text (BM25).")
    k: int = k_field()
    offset: int = Field(
        default=0, ge=0, le=CANDIDATES_MAX, description=f"Skip this many best matches first (0-{CANDIDATES_MAX})."
    )
    filters: Filters = Field(default_factory=Filters, description=FILTERS_DESCRIPTION)
    return_: SearchReturn = Field(default_factory=SearchReturn, alias="return", description=RETURN_DESCRIPTION)


class QueryEmbedding(Strict):
    """A query vector computed by the caller with the index's embedding model."""

    dim: int = Field(
        ge=1, le=8192, description="Number of float32 values; it must equal the index's embedding dimension."
    )
    values_b64: str = Field(
        min_length=1, description="The vector as float32 values, little-endian, packed and base64-encoded."
    )


class EmbeddingChoice(Strict):
    """The embedding model of a query_text; accepted for the contract, the index's own model is always used."""

    model: str | None = Field(
        default=None, description="Embedding model name; ignored: query_text is embedded with the index's model."
    )


class SearchVectorArgs(Strict):
    query_text: str | None = query_field("Text to embed and search with (give this or query_embedding).", default=None)
    query_embedding: QueryEmbedding | None = Field(
        default=None, description="A precomputed query vector (give this or query_text)."
    )
    k: int = k_field()
    filters: Filters = Field(default_factory=Filters, description=FILTERS_DESCRIPTION)
    embedding: EmbeddingChoice = Field(
        default_factory=EmbeddingChoice, description="The embedding model; the index's own model is always used."
    )
    return_: SearchReturn = Field(default_factory=SearchReturn, alias="return", description=RETURN_DESCRIPTION)

    @model_validator(mode="after")
    def _one_query(self) -> SearchVectorArgs:
        if (self.query_text is None) == (self.query_embedding is None):
            raise ValueError("give exactly one of query_text and query_embedding")
        return self


class FuseParams(Strict):
    """mode fuse: keyword and vector candidates ranked separately, then fused by reciprocal rank."""

    fts_k: int = candidates_field(50, "Keyword (FTS) candidates to fuse")
    vec_k: int = candidates_field(50, "Vector candidates to fuse")
    rrf_k0: int = Field(
        default=60, ge=1, le=10_000, description="Reciprocal rank fusion constant k0: a result scores 1/(k0+rank)."
    )
    w_fts: float = Field(default=1.0, ge=0, le=100, description="Weight of the keyword ranking in the fusion (0-100).")
    w_vec: float = Field(default=1.0, ge=0, le=100, description="Weight of the vector ranking in the fusion (0-100).")


class FtsThenVecParams(Strict):
    """mode fts_then_vec: keyword candidates reranked by vector similarity."""

    candidates_k: int = candidates_field(200, "Keyword (FTS) candidates to rerank")
    rerank_k: int = Field(
        default=50,
        ge=1,
        json_schema_extra={"maximum": CANDIDATES_MAX},
        description="Candidates kept after the vector rerank (at most candidates_k; a larger value is cut to it).",
    )
    vec_metric: Literal["cosine"] = Field(default="cosine", description="Vector similarity used to rerank: cosine.")


class SearchHybridArgs(Strict):
    query: str = query_field("The question or keywords.")
    k: int = k_field()
    filters: Filters = Field(default_factory=Filters, description=FILTERS_DESCRIPTION)
    mode: Literal["fuse", "fts_then_vec"] = Field(
        default="fuse", description="fuse: FTS and vectors in parallel, RRF; fts_then_vec: FTS candidates reranked."
    )
    fuse: FuseParams = Field(default_factory=FuseParams, description="Settings of mode fuse (ignored otherwise).")
    fts_then_vec: FtsThenVecParams = Field(
        default_factory=FtsThenVecParams, description="Settings of mode fts_then_vec (ignored otherwise)."
    )
    return_: SearchReturn = Field(default_factory=SearchReturn, alias="return", description=RETURN_DESCRIPTION)


class ChunkReturn(Strict):
    """What each chunk carries besides its ids and body."""

    include_title: bool = Field(default=True, description="Add the document's title.")
    include_doc_metadata: bool = Field(default=True, description="Add the document's metadata fields.")
    include_chunk_metadata: bool = Field(
        default=True, description="Add the chunk's position: chunk_index, headline, page_start, page_end."
    )


class GetChunksArgs(Strict):
    chunk_ids: list[Id] = Field(min_length=1, max_length=IDS_MAX, description=f"Chunk ids from a search (1-{IDS_MAX}).")
    return_: ChunkReturn = Field(
        default_factory=ChunkReturn, alias="return", description="Which fields each chunk carries besides its body."
    )


class DocReturn(Strict):
    """What each document carries besides its ids, pk_json and title."""

    include_body: bool = Field(default=True, description="Add the document's whole text.")
    include_metadata: bool = Field(default=True, description="Add the document's metadata fields.")


class GetDocsArgs(Strict):
    doc_ids: list[Id] = Field(
        min_length=1, max_length=IDS_MAX, description=f"Document ids from a search (1-{IDS_MAX})."
    )
    return_: DocReturn = Field(
        default_factory=DocReturn, alias="return", description="Whether each document carries its body and metadata."
    )


class FetchLimits(Strict):
    """Bounds of the rows returned; `truncated` is true when they cut the answer."""

    max_rows: int = Field(
        default=10,
        ge=1,
        json_schema_extra={"maximum": ROWS_MAX},
        description=f"At most this many rows (1-{ROWS_MAX}; a larger value is cut to {ROWS_MAX}).",
    )
    max_bytes: int = Field(
        default=200_000,
        ge=1,
        json_schema_extra={"maximum": ROW_BYTES_MAX},
        description=f"At most this many bytes of rows (1-{ROW_BYTES_MAX}; a larger value is cut to {ROW_BYTES_MAX}).",
    )


class FetchArgs(Strict):
    doc_ids: list[Id] = Field(
        min_length=1, max_length=IDS_MAX, description=f"Documents to re-read from their source (1-{IDS_MAX})."
    )
    columns: list[str] | None = Field(
        default=None,
        max_length=COLUMNS_MAX,
        description="Columns to return, from the source's whitelisted columns (for files: the original's metadata "
        "fields); all of them if omitted. A column not allowed is INVALID_ARGUMENT.",
    )
    limits: FetchLimits = Field(default_factory=FetchLimits, description="Bounds on the rows and bytes returned.")


class StatsArgs(Strict):
    pass


class SyncArgs(Strict):
    source_names: list[str] | None = Field(
        default=None, max_length=IDS_MAX, description="Sources to re-scan, by source_name; all if omitted."
    )
    allow_mass_delete: bool = Field(
        default=False,
        description="Apply deletions even when most of a source's files vanished at once; without it such "
        "deletions are held and listed by rag.admin.stats (held_deletions).",
    )


SearchArgs = SearchFtsArgs | SearchVectorArgs | SearchHybridArgs


@dataclass(frozen=True)
class ProxysqlDeps:
    """What the proxysql tools use."""

    settings: Settings
    search: SearchService
    catalog: Catalog
    sources: SourceStore
    embedder: Embedder
    ingest: IngestService
    tasks: TaskQueue
    jobs: JobStore


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


def timed_out(limit: int) -> MCPError:
    return MCPError(INTERNAL_ERROR, f"timed out after {limit} ms", {"code": "INTERNAL"})


async def bounded(kind: str, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` on a worker thread, given up (INTERNAL) after the contract's timeout for its kind of tool."""
    limit = TIMEOUT_MS[kind]
    try:
        with anyio.fail_after(limit / 1000):
            return await anyio.to_thread.run_sync(partial(fn, *args), abandon_on_cancel=True)
    except TimeoutError:
        raise timed_out(limit) from None


async def searched(deps: ProxysqlDeps, principal: Principal, request: SearchRequest) -> SearchResult:
    """The search, with the contract's search timeout as its deadline: the search itself stops there
    (INTERNAL), so its thread ends instead of being abandoned while it runs on."""
    limit = TIMEOUT_MS["search"]
    timed = request.model_copy(update={"deadline": time.monotonic() + limit / 1000})
    try:
        return await anyio.to_thread.run_sync(deps.search.search, principal, timed)
    except DeadlineExceeded:
        raise timed_out(limit) from None


def sources_by(deps: ProxysqlDeps, principal: Principal) -> dict[str, Source]:
    return {s.source_id: s for s in deps.sources.list(principal.tenant)}


def check_query(text: str | None) -> None:
    if text is not None and len(text.encode()) > QUERY_MAX_BYTES:
        raise LimitExceeded(f"query is longer than query_max_bytes ({QUERY_MAX_BYTES})")


def search_filter(deps: ProxysqlDeps, principal: Principal, filters: Filters) -> SearchFilter:
    chosen: tuple[str, ...] | None = None
    if filters.source_ids is not None or filters.source_names is not None:
        known = sources_by(deps, principal).values()
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


def request_for(deps: ProxysqlDeps, phrase: str, k: int, offset: int, flt: SearchFilter, **kw: Any) -> SearchRequest:
    """The search for `k` results after `offset`, one more when k is over the cap (to tell whether the
    cap cut anything); hits under the relevance floor are kept and counted, as the contract has no floor."""
    top = min(offset + min(k, K_MAX) + (1 if k > K_MAX else 0), CANDIDATES_MAX)
    floor = {"floor": deps.settings.search.relevance_floor, "floor_coverage": deps.settings.search.floor_coverage}
    return SearchRequest(phrases=[phrase], top_k=top, filter=flt, drop_below_floor=False, **floor, **kw)


def result_row(hit: ScoredChunk, sources: dict[str, Source], shape: SearchReturn) -> dict[str, Any]:
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


async def ranked(
    deps: ProxysqlDeps,
    principal: Principal,
    request: SearchRequest,
    args: SearchArgs,
    score: Callable[[ScoredChunk], dict[str, Any]],
    extra_stats: dict[str, Any],
    offset: int = 0,
) -> dict[str, Any]:
    """A search tool's answer: the rows of `request`'s hits from `offset` (each with its `score` fields),
    cut to k, to the cap and to the response budget, with `truncated` and the stats."""
    started = time.perf_counter()
    k, min_score = args.k, args.filters.min_score
    kept_k = min(k, K_MAX)
    result = await searched(deps, principal, request)
    hits = [h for h in result.hits if min_score is None or h.score >= min_score][offset : offset + kept_k]
    available = min(result.total_candidates, request.top_k) - offset
    sources = sources_by(deps, principal)
    rows = [{**result_row(h, sources, args.return_), **score(h)} for h in hits]
    rows, cut = _fit(rows, RESPONSE_MAX_BYTES, _json_size)
    truncated = cut or (k > K_MAX and available > K_MAX)
    below = len(rows) if result.below_floor else 0  # the floor silences a whole query or none of it
    floor = {"floor": request.floor, "below_floor": below}
    stats = {**extra_stats, **floor, "k_requested": k, "k_returned": len(rows), "ms": _ms(started)}
    return {"results": rows, "truncated": truncated, "stats": stats}


def fts_scores(hit: ScoredChunk) -> dict[str, Any]:
    return {"score_fts": hit.score, "score_fts_raw": hit.fts_score}


def vector_scores(hit: ScoredChunk) -> dict[str, Any]:
    return {"score_vec": hit.vec_score, "distance_raw": distance(hit.vec_score)}


def fts_normalised(rank: int | None) -> float | None:
    """rag.search_fts's score_fts of the chunk the keyword search ranked `rank`: its reciprocal rank
    over the one list, normalised so that the first is 1 (the search's own fusion of that list)."""
    k0 = SearchRequest.model_fields["rrf_k0"].default
    return None if rank is None else round((k0 + 1) / (k0 + rank), 6)


def distance(similarity: float | None) -> float | None:
    """The cosine distance the vector index ranks by (lower is better) of a cosine similarity."""
    return None if similarity is None else round(1.0 - similarity, 6)


def hybrid_scores(hit: ScoredChunk) -> dict[str, Any]:
    """The fused score and, as §1.2 asks, each search's score normalised as rag.search_fts and
    rag.search_vector give it (higher is better), the raw values beside them."""
    return {
        "score": hit.score,
        "score_fts": fts_normalised(hit.fts_rank),
        "score_fts_raw": hit.fts_score,
        "score_vec": hit.vec_score,
        "distance_raw": distance(hit.vec_score),
        "debug": {"rank_fts": hit.fts_rank, "rank_vec": hit.vec_rank},
    }


def query_vector(deps: ProxysqlDeps, embedding: QueryEmbedding) -> list[float]:
    """The caller's vector, checked against the index's dimension and normalised."""
    expected = deps.embedder.dimension
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


def hybrid_knobs(args: SearchHybridArgs) -> dict[str, Any]:
    """The search settings of the hybrid mode asked for, with its candidate counts capped."""
    if args.mode == "fuse":
        return {
            "mode": "hybrid",
            "fts_k": min(args.fuse.fts_k, CANDIDATES_MAX),
            "vec_k": min(args.fuse.vec_k, CANDIDATES_MAX),
            "rrf_k0": args.fuse.rrf_k0,
            "fts_weight": args.fuse.w_fts,
            "vec_weight": args.fuse.w_vec,
        }
    candidates = min(args.fts_then_vec.candidates_k, CANDIDATES_MAX)
    return {"mode": "fts_then_vec", "fts_k": candidates, "vec_k": min(args.fts_then_vec.rerank_k, candidates)}


@tool(
    "rag.search_fts",
    profile=PROFILE,
    description="Keyword (BM25) search over the indexed chunks. Returns chunk ids, scores and titles; "
    "fetch text with rag.get_chunks.",
)
async def search_fts(deps: ProxysqlDeps, caller: Caller, args: SearchFtsArgs) -> dict[str, Any]:
    check_query(args.query)
    principal = caller.require()
    flt = search_filter(deps, principal, args.filters)
    request = request_for(deps, args.query, args.k, args.offset, flt, mode="fts", fts_k=CANDIDATES_MAX)
    return await ranked(deps, principal, request, args, fts_scores, {}, offset=args.offset)


@tool(
    "rag.search_vector",
    profile=PROFILE,
    description="Semantic search: give query_text (embedded by the server) or a precomputed "
    "query_embedding. Returns chunk ids and similarity scores.",
)
async def search_vector(deps: ProxysqlDeps, caller: Caller, args: SearchVectorArgs) -> dict[str, Any]:
    check_query(args.query_text)
    principal = caller.require()
    flt = search_filter(deps, principal, args.filters)
    vectors = [query_vector(deps, args.query_embedding)] if args.query_embedding else None
    phrase = args.query_text or "(vector)"
    request = request_for(deps, phrase, args.k, 0, flt, mode="vector", vec_k=CANDIDATES_MAX, query_vectors=vectors)
    return await ranked(deps, principal, request, args, vector_scores, {"embedding_model": deps.embedder.model_id})


@tool(
    "rag.search_hybrid",
    profile=PROFILE,
    description="Hybrid search: mode fuse runs keyword and vector search in parallel and fuses them with "
    "reciprocal rank fusion; mode fts_then_vec reranks keyword candidates by vector similarity. Higher is "
    "better for every score: score_fts and score_vec are what rag.search_fts and rag.search_vector give the "
    "chunk, with score_fts_raw (bm25) and distance_raw (cosine distance) beside them.",
)
async def search_hybrid(deps: ProxysqlDeps, caller: Caller, args: SearchHybridArgs) -> dict[str, Any]:
    check_query(args.query)
    principal = caller.require()
    flt = search_filter(deps, principal, args.filters)
    request = request_for(deps, args.query, args.k, 0, flt, **hybrid_knobs(args))
    return await ranked(deps, principal, request, args, hybrid_scores, {"mode": args.mode})


def chunk_row(chunk: Chunk, doc: Document, shape: ChunkReturn) -> dict[str, Any]:
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
    return row


@tool(
    "rag.get_chunks",
    profile=PROFILE,
    description="Fetch chunk bodies by chunk_id: the grounding text for an answer. Bounded in bytes.",
)
async def get_chunks(deps: ProxysqlDeps, caller: Caller, args: GetChunksArgs) -> dict[str, Any]:
    started = time.perf_counter()
    found = await bounded("fetch", deps.catalog.chunks, caller.require(), args.chunk_ids)
    rows, truncated = _fit([chunk_row(c, d, args.return_) for c, d in found], CHUNK_BYTES_MAX, _json_size)
    return {"chunks": rows, "truncated": truncated, "stats": {"ms": _ms(started)}}


def pk_json(doc: Document, source: Source | None) -> dict[str, Any]:
    if doc.kind == "row" and doc.pk is not None:
        return {source.pk_column if source else "id": doc.pk}
    return {"path": doc.path}


def _json_text_size(text: str) -> int:
    """The bytes `text` takes inside a JSON string of the answer (without its quotes)."""
    return len(json.dumps(text, ensure_ascii=False).encode()) - 2


def doc_rows(
    deps: ProxysqlDeps, principal: Principal, doc_ids: list[str], shape: DocReturn
) -> tuple[list[dict[str, Any]], bool]:
    """The documents' rows within CHUNK_BYTES_MAX all together, and whether the limit cut them: a
    body is read no further than the room left (`Catalog.text_within`), then cut there, and the
    documents after it are left out."""
    sources = sources_by(deps, principal)
    rows: list[dict[str, Any]] = []
    room = CHUNK_BYTES_MAX
    for doc in deps.catalog.find_documents(principal, doc_ids):
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
            row["body"] = ""
        if shape.include_metadata:
            row["metadata"] = doc.metadata
        room -= _json_size(row)
        if room < 0:
            return rows, True
        rows.append(row)
        if shape.include_body:
            body = deps.catalog.text_within(doc, room, size=_json_text_size)
            row["body"] = body.text
            room -= _json_text_size(body.text)
            if body.truncated:
                return rows, True
    return rows, False


@tool(
    "rag.get_docs",
    profile=PROFILE,
    description="Fetch whole documents by doc_id, with their text and metadata. Bounded in bytes.",
)
async def get_docs(deps: ProxysqlDeps, caller: Caller, args: GetDocsArgs) -> dict[str, Any]:
    started = time.perf_counter()
    rows, truncated = await bounded("fetch", doc_rows, deps, caller.require(), args.doc_ids, args.return_)
    return {"docs": rows, "truncated": truncated, "stats": {"ms": _ms(started)}}


def check_columns(doc: Document, source: Source | None, columns: list[str] | None) -> None:
    """Only the source's whitelisted columns of a row (a file's fields for a file) may be fetched."""
    allowed = set(source.fetchable_columns() if source and doc.kind == "row" else FILE_FIELDS)
    refused = [c for c in columns or () if c not in allowed]
    if refused:
        raise InvalidArgument(f"columns not fetchable from {doc.doc_id}: {', '.join(sorted(refused)[:10])}")


def source_rows(deps: ProxysqlDeps, principal: Principal, args: FetchArgs) -> tuple[list[dict[str, Any]], bool]:
    """The authoritative rows of the documents, within the limits, and whether the limits cut them."""
    sources = sources_by(deps, principal)
    docs = deps.catalog.find_documents(principal, args.doc_ids)
    for doc in docs:
        check_columns(doc, sources.get(doc.source), args.columns)
    max_rows = min(args.limits.max_rows, ROWS_MAX)
    rows = [
        {
            "doc_id": doc.doc_id,
            "source_name": sources[doc.source].name if doc.source in sources else doc.source,
            "row": deps.catalog.source_row(doc, args.columns),
        }
        for doc in docs[:max_rows]
    ]
    kept, cut = _fit(rows, min(args.limits.max_bytes, ROW_BYTES_MAX), _json_size)
    return kept, cut or len(docs) > max_rows


@tool(
    "rag.fetch_from_source",
    profile=PROFILE,
    description="Re-read the authoritative row of each document from its stored original, by primary "
    "key; only whitelisted columns. For files: the original's metadata fields.",
)
async def fetch_from_source(deps: ProxysqlDeps, caller: Caller, args: FetchArgs) -> dict[str, Any]:
    started = time.perf_counter()
    rows, truncated = await bounded("source", source_rows, deps, caller.require(), args)
    return {"rows": rows, "truncated": truncated, "stats": {"ms": _ms(started)}}


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


def stats_row(stats: SourceStats) -> dict[str, Any]:
    source = stats.source
    return {
        "source_id": source.number,
        "source_name": source.name,
        "docs": stats.docs,
        "chunks": stats.chunks,
        "last_sync": source.last_sync.isoformat() if source.last_sync else None,
        **held_fields(source),
    }


@tool(
    "rag.admin.stats",
    profile=PROFILE,
    description="Per source: documents, chunks, the time of the last sync, and the deletions a sync "
    "held because too many of the source's files vanished at once.",
    scope="admin",
)
async def admin_stats(deps: ProxysqlDeps, caller: Caller, args: StatsArgs) -> dict[str, Any]:
    started = time.perf_counter()
    stats = await bounded("admin", deps.catalog.stats, caller.require())
    return {"sources": [stats_row(s) for s in stats], "stats": {"ms": _ms(started)}}


def chosen_sources(deps: ProxysqlDeps, principal: Principal, names: list[str] | None) -> list[Source]:
    """The sources named (every one must exist), or all of the tenant's."""
    known = list(sources_by(deps, principal).values())
    if names is None:
        return known
    chosen = [s for s in known if s.name in names]
    missing = sorted(set(names) - {s.name for s in chosen})
    if missing:
        raise InvalidArgument(f"unknown source_names: {', '.join(missing[:10])}")
    return chosen


@dataclass
class SyncRun:
    """One rag.admin.sync job: syncs its sources one after another, and says how far it is."""

    ingest: IngestService
    sources: list[Source]
    allow_mass_delete: bool
    files: Progress = field(default_factory=lambda: Progress("files"))
    files_before: int = 0
    """Files of the sources already synced."""

    def __call__(self) -> dict[str, int]:
        totals = dict.fromkeys(("ingested", "updated", "deleted", "held", "failed"), 0)
        for source in self.sources:
            report = self.ingest.sync(source, self.files, allow_mass_delete=self.allow_mass_delete)
            self.files_before += self.files.total
            for name in totals:
                totals[name] += getattr(report, name)
        return {"sources": len(self.sources), **totals}

    def measure(self, _job: Job) -> tuple[float, float | None, str]:
        """Files synced so far, out of how many (known only when one source syncs), for progress."""
        s = self.files.snapshot()
        done = self.files_before + (s["done"] if self.files.running else 0)
        now = f", now {s['current']}" if s["current"] else ""
        return float(done), float(s["total"]) if len(self.sources) == 1 else None, f"{done} files synced{now}"


@tool(
    "rag.admin.sync",
    profile=PROFILE,
    description="Re-scan sources (all, or those named): new and changed files are ingested, vanished "
    "ones removed (held when they are most of a source, unless allow_mass_delete). Runs in the "
    "background; answers a job id (a call with a progressToken waits for the sync, with progress "
    "notifications).",
    scope="admin",
    idempotent=False,
    reports_progress=True,
)
async def admin_sync(deps: ProxysqlDeps, caller: Caller, args: SyncArgs) -> dict[str, Any]:
    principal = caller.require()
    chosen = chosen_sources(deps, principal, args.source_names)
    sync = SyncRun(deps.ingest, chosen, args.allow_mass_delete)
    job_id = f"sync-{utcnow():%Y-%m-%dT%H:%M:%SZ}-{uuid.uuid4().hex[:8]}"
    job = Job(job_id=job_id, tenant=principal.tenant, type="sync", target=",".join(s.source_id for s in chosen))
    deps.tasks.submit(job, sync)
    report = current_reporter.get()
    if report is not None:  # the client asked for progress: it is told while the sync runs
        await follow(deps.jobs, principal.tenant, job_id, report, sync.measure)
    return {"accepted": True, "job_id": job_id}

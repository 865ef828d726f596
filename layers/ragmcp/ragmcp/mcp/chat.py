"""The chat profile (contracts/chat-app-rag-mcp.md): rag_discover_resources, rag_get_raw_results,
rag_get_synthesized_results.

The chat app injects the `username` argument: a platform key may name any user (whose directory
entry decides groups and tier), a key bound to a user only its own (security/identity.py). Every
call resolves that user and the sources they may see afresh: access is re-checked on each call.
A resource (source) the user may not see is reported exactly like one that does not exist, as an
invalid argument (-32602) naming it, so an error never reveals that a hidden source exists, and a
requested source is never silently dropped.

Every response is the contract's v2 envelope: `results`, `meta_data` and, when the full `results`
would exceed RESULT_BUDGET_BYTES, `artifacts` holding the complete `results` as base64 JSON while
`results` keeps what fits.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import anyio
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StringConstraints,
    model_validator,
)

from ragmcp.domain.errors import InvalidArgument
from ragmcp.domain.models import Principal, ScoredChunk, SearchFilter, Source
from ragmcp.ingest.poisoning import warning_fields
from ragmcp.mcp.caller import Caller
from ragmcp.mcp.helpers import check_phrase_bytes
from ragmcp.mcp.registry import tool
from ragmcp.progress import Progress, filling_warning
from ragmcp.retrieval.catalog import Catalog
from ragmcp.retrieval.service import SearchRequest, SearchService
from ragmcp.settings import Settings
from ragmcp.synthesis.models import Passage
from ragmcp.synthesis.service import SynthesisService

PROFILE = "chat"
PROVIDER = "ragmcp"
SNIPPET_CHARS = 300
RESULT_BUDGET_BYTES = 16 * 1024
ANSWER_PREVIEW_CHARS = 2000
ARTIFACT_MIME = "application/json"
_NAMED_AT_MOST = 5


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


def _web_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc or any(c.isspace() for c in value):
        raise ValueError("must be an http or https URL")
    return value


def _as_utc(value: datetime) -> datetime:
    """A time without a zone is taken as UTC; every time is compared in UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


NonBlank = AfterValidator(_not_blank)
Username = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=320), NonBlank]
Query = Annotated[str, StringConstraints(strict=True, min_length=1), NonBlank]
Name = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=256), NonBlank]
DocId = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=1024), NonBlank]
Snippet = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=20_000), NonBlank]
WebUrl = Annotated[str, StringConstraints(strict=True, max_length=2048), AfterValidator(_web_url)]
Instant = Annotated[datetime, AfterValidator(_as_utc)]


class ChatFilters(BaseModel):
    """Restrictions on the documents searched; every one given must hold."""

    model_config = ConfigDict(extra="forbid")

    tags_any: list[Name] = Field(
        default_factory=list, max_length=20, description="Only documents carrying at least one of these tags."
    )
    tags_all: list[Name] = Field(
        default_factory=list, max_length=20, description="Only documents carrying every one of these tags."
    )
    doc_ids: list[DocId] = Field(
        default_factory=list,
        max_length=100,
        description="Only these documents (ids look like `<resource id>:<path>`). Empty means no restriction.",
    )
    created_after: Instant | None = Field(
        default=None, description="Only documents first indexed at or after this ISO 8601 time (UTC if no zone)."
    )
    created_before: Instant | None = Field(
        default=None, description="Only documents first indexed before this ISO 8601 time (UTC if no zone)."
    )

    @model_validator(mode="after")
    def _ordered(self) -> ChatFilters:
        if self.created_after and self.created_before and self.created_after >= self.created_before:
            raise ValueError("created_after must be earlier than created_before")
        return self


class ChatRanking(BaseModel):
    """How hits are ranked; omitted fields take the server's defaults."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["fts", "vector", "hybrid"] | None = Field(
        default=None,
        description=(
            "`fts`: exact words (BM25); `vector`: meaning (embeddings); `hybrid`: both, fused. "
            "Omit for the server's default (hybrid)."
        ),
    )
    fts_weight: StrictFloat | None = Field(
        default=None, ge=0.0, le=10.0, description="Weight of the word ranking when fusing in hybrid mode (0-10)."
    )
    vec_weight: StrictFloat | None = Field(
        default=None, ge=0.0, le=10.0, description="Weight of the meaning ranking when fusing in hybrid mode (0-10)."
    )

    @model_validator(mode="after")
    def _some_weight(self) -> ChatRanking:
        if self.fts_weight == 0 and self.vec_weight == 0:
            raise ValueError("fts_weight and vec_weight must not both be 0")
        return self


class SynthesisParams(BaseModel):
    """How the answer is written."""

    model_config = ConfigDict(extra="forbid")

    style: Literal["short", "default", "detailed"] = Field(
        default="default",
        description="Answer length: `short` (a sentence or two), `default`, or `detailed` (a fuller answer).",
    )


class ProvidedHit(BaseModel):
    """A hit as rag_get_raw_results returns it."""

    model_config = ConfigDict(extra="forbid")

    resourceId: Name = Field(description="The resource the hit came from; it must be one this call may use.")
    title: str = Field(default="", max_length=1000, description="The document's title.")
    snippet: Snippet = Field(description="The text to answer from.")
    uri: WebUrl = Field(description="Link to the original (http or https).")
    score: StrictFloat = Field(default=0.0, ge=0.0, le=1.0, description="The hit's relevance (0-1).")


class ProvidedContext(BaseModel):
    """Passages to answer from instead of searching."""

    model_config = ConfigDict(extra="forbid")

    hits: list[ProvidedHit] = Field(
        default_factory=list,
        max_length=50,
        description=(
            "Hits (as rag_get_raw_results returns them) to answer from instead of searching; "
            "the first `top_k` are used. Empty means: search."
        ),
    )


class UserArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    username: Username = Field(
        description="The user the chat app acts for; only resources this user may read are used or listed."
    )


class QueryArgs(UserArgs):
    query: Query = Field(description="The user's question or search terms, in their own words.")
    sources: list[Name] | None = Field(
        default=None,
        max_length=50,
        description=(
            "Ids of the resources to use (the `id`s rag_discover_resources lists). Omit or pass [] for every "
            "resource the user may read. A resource the user may not read is an error."
        ),
    )


class RawArgs(QueryArgs):
    top_k: StrictInt = Field(default=8, ge=1, le=50, description="How many hits to return (1-50).")
    filters: ChatFilters | None = Field(
        default=None,
        description="Optional restrictions: tags_any, tags_all, doc_ids, created_after, created_before.",
    )
    ranking: ChatRanking | None = Field(
        default=None, description="Optional ranking: mode (fts | vector | hybrid), fts_weight, vec_weight."
    )


class SynthArgs(QueryArgs):
    top_k: StrictInt = Field(
        default=5,
        ge=1,
        le=20,
        description="How many passages to answer from (1-20): the best search matches, or the first provided hits.",
    )
    synthesis_params: SynthesisParams | None = Field(
        default=None, description="Optional: style (short | default | detailed)."
    )
    provided_context: ProvidedContext | None = Field(
        default=None,
        description="Optional: {hits: [...]} from rag_get_raw_results to answer from, without a new search.",
    )


def clip(text: str, limit: int) -> str:
    """`text` on one line, cut at a word boundary to at most `limit` characters (an ellipsis marks the cut)."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    if " " in cut:
        cut = cut.rsplit(" ", 1)[0]
    return cut.rstrip(",;:") + "…"


def resource(source: Source) -> dict[str, Any]:
    return {
        "id": source.source_id,
        "name": source.name,
        "description": source.description,
        "authRequired": True,
        "groups": list(source.groups),
        "defaultSelected": source.default_selected,
    }


def require_known(wanted: Iterable[str], allowed: Collection[str], where: str, reason: str) -> None:
    """InvalidArgument naming every id of `wanted` outside `allowed`; nothing is dropped silently."""
    missing = [s for s in dict.fromkeys(wanted) if s not in allowed]
    if missing:
        names = ", ".join(repr(s) for s in missing[:_NAMED_AT_MOST])
        more = f" and {len(missing) - _NAMED_AT_MOST} more" if len(missing) > _NAMED_AT_MOST else ""
        raise InvalidArgument(f"{where}: {names}{more} {reason}")


def search_filter(sources: tuple[str, ...], filters: ChatFilters | None) -> SearchFilter:
    if filters is None:
        return SearchFilter(sources=sources)
    return SearchFilter(
        sources=sources,
        doc_ids=tuple(filters.doc_ids) or None,
        tags_any=tuple(filters.tags_any),
        tags_all=tuple(filters.tags_all),
        created_after=filters.created_after,
        created_before=filters.created_before,
    )


def provided_passage(n: int, hit: ProvidedHit) -> Passage:
    return Passage(
        passage_id=f"provided:{n}",
        text=hit.snippet,
        title=hit.title,
        source=hit.resourceId,
        uri=hit.uri,
        relevance=hit.score,
    )


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def fit(results: dict[str, Any], items: str, head: dict[str, Any]) -> dict[str, Any]:
    """`results` (and `artifacts`) of the envelope: `results` itself when its JSON fits the budget; else
    `head` (`results` with its other fields shortened) with as many leading `results[items]` as fit, and
    the complete `results` as a JSON artifact."""
    full = _json(results)
    if len(full) <= RESULT_BUDGET_BYTES:
        return {"results": results}
    kept: list[Any] = []
    size = len(_json({**head, items: []}))
    for item in results[items]:
        size += len(_json(item)) + 1
        if size > RESULT_BUDGET_BYTES:
            break
        kept.append(item)
    return {
        "results": {key: kept if key == items else head[key] for key in results},
        "artifacts": [{"mime": ARTIFACT_MIME, "b64": base64.b64encode(full).decode("ascii")}],
    }


def envelope(fitted: dict[str, Any], started: float, **meta: Any) -> dict[str, Any]:
    """The contract's envelope; `meta` entries that are None are left out."""
    elapsed_ms = round((time.perf_counter() - started) * 1000)
    meta = {k: v for k, v in meta.items() if v is not None}
    return {**fitted, "meta_data": {"provider": PROVIDER, **meta, "elapsed_ms": elapsed_ms}}


@dataclass(frozen=True)
class ChatDeps:
    """What the chat tools use."""

    settings: Settings
    catalog: Catalog
    search: SearchService
    synthesis: SynthesisService
    source_url: Callable[..., str]
    first_sync: Progress | None = None


def user_scope(deps: ChatDeps, caller: Caller, username: str) -> tuple[Principal, list[Source]]:
    """The user (as the credential may name them; security/identity.py), and the sources they may see now."""
    principal = caller.require(username)
    return principal, deps.catalog.visible_sources(principal)


def search_scope(deps: ChatDeps, caller: Caller, args: QueryArgs) -> tuple[Principal, tuple[str, ...]]:
    """The user and the sources of this call: those asked for (each checked), else all they may see."""
    check_phrase_bytes("query", args.query, deps.settings.search.max_phrase_bytes)
    principal, visible = user_scope(deps, caller, args.username)
    ids = [s.source_id for s in visible]
    if not args.sources:
        return principal, tuple(ids)
    require_known(args.sources, ids, "sources", "unknown (or not available to this user)")
    return principal, tuple(dict.fromkeys(args.sources))


def hit(deps: ChatDeps, principal: Principal, scored: ScoredChunk) -> dict[str, Any]:
    doc, chunk = scored.document, scored.chunk
    return {
        "resourceId": doc.source,
        "title": doc.title,
        "snippet": clip(chunk.summary or chunk.text, SNIPPET_CHARS),
        "score": scored.score,
        "uri": deps.source_url(principal, doc, chunk.page_start),
        **warning_fields(chunk.flags),
    }


def discover(deps: ChatDeps, caller: Caller, args: UserArgs) -> dict[str, Any]:
    _, visible = user_scope(deps, caller, args.username)
    results = {"resources": [resource(s) for s in visible]}
    return fit(results, "resources", {})


def raw(deps: ChatDeps, caller: Caller, args: RawArgs) -> dict[str, Any]:
    principal, sources = search_scope(deps, caller, args)
    ranking = args.ranking or ChatRanking()
    request = SearchRequest(
        phrases=[args.query],
        top_k=args.top_k,
        filter=search_filter(sources, args.filters),
        **{**deps.settings.search.defaults(), **ranking.model_dump(exclude_none=True)},
    )
    result = deps.search.search(principal, request)
    stats = {"total_found": result.total_candidates, "top_k": args.top_k}
    results = {"hits": [hit(deps, principal, h) for h in result.hits], "stats": stats}
    return fit(results, "hits", {"stats": stats})


def synthesize(deps: ChatDeps, caller: Caller, args: SynthArgs) -> tuple[dict[str, Any], str]:
    """The fitted results of an answer, and the model that wrote it."""
    principal, sources = search_scope(deps, caller, args)
    provided = args.provided_context.hits if args.provided_context else []
    where = "provided_context.hits.resourceId"
    require_known((h.resourceId for h in provided), sources, where, "not among the resources of this call")
    style = (args.synthesis_params or SynthesisParams()).style
    answer = deps.synthesis.answer(
        principal,
        args.query,
        flt=SearchFilter(sources=sources),
        top_k=args.top_k,
        style=style,
        provided=[provided_passage(n, h) for n, h in enumerate(provided)] or None,
    )
    text = (answer.silence_reason or "") if answer.silence else answer.text
    citations = [{"resourceId": c.passage.source, "uri": c.passage.uri, "snippet": c.snippet} for c in answer.citations]
    truncated = answer.truncated or len(provided) > args.top_k
    results = {"answer": text, "citations": citations, "limits": {"truncated": truncated}}
    head = {"answer": clip(text, ANSWER_PREVIEW_CHARS), "citations": [], "limits": {"truncated": True}}
    return fit(results, "citations", head), answer.model


@tool(
    "rag_discover_resources",
    profile=PROFILE,
    title="List the document resources a user may search",
    description=(
        "Lists the document collections (resources) the given user may search: id, name, description, "
        "the groups that may read it, and whether it is selected by default. Pass the `id`s as `sources` "
        "to rag_get_raw_results or rag_get_synthesized_results."
    ),
)
async def rag_discover_resources(deps: ChatDeps, caller: Caller, args: UserArgs) -> dict[str, Any]:
    started = time.perf_counter()
    fitted = await anyio.to_thread.run_sync(discover, deps, caller, args)
    return envelope(fitted, started)


@tool(
    "rag_get_raw_results",
    profile=PROFILE,
    title="Search documents",
    description=(
        "Searches the user's documents and returns the best-matching passages (hits), best first: "
        "resourceId, title, a short snippet, a 0-1 score and a link (uri) to the original. "
        "stats.total_found counts every candidate found before the top_k cut. When the hits would not "
        "fit in a small response, `results` keeps the first ones and `artifacts` holds all of them "
        "(base64 JSON)."
    ),
)
async def rag_get_raw_results(deps: ChatDeps, caller: Caller, args: RawArgs) -> dict[str, Any]:
    started = time.perf_counter()
    fitted = await anyio.to_thread.run_sync(raw, deps, caller, args)
    return envelope(fitted, started, warning=filling_warning(deps.first_sync))


@tool(
    "rag_get_synthesized_results",
    profile=PROFILE,
    title="Answer a question from documents",
    description=(
        "Answers the question from the user's documents (or from provided_context.hits, without "
        "searching) with citations (resourceId, uri, snippet) for the passages the answer rests on. "
        "When the documents do not answer the question, `answer` says so and `citations` is empty. "
        "limits.truncated is true when more material existed than was used or shown. When the answer "
        "and citations would not fit in a small response, `results` holds a shortened answer and the "
        "first citations, and `artifacts` holds the complete results (base64 JSON)."
    ),
    synthesis=True,
)
async def rag_get_synthesized_results(deps: ChatDeps, caller: Caller, args: SynthArgs) -> dict[str, Any]:
    started = time.perf_counter()
    fitted, model = await anyio.to_thread.run_sync(synthesize, deps, caller, args)
    return envelope(fitted, started, model=model, warning=filling_warning(deps.first_sync))

"""The ragbox profile (contracts/ragbox-mcp.md): search_documents, get_document, query_knowledge, list_documents.

Every result is one text content item holding the contract's JSON, and nothing else (no
structuredContent: the contract's result is `content` alone, and search_documents' JSON is an array).
Errors carry the contract's codes, -32002 for internal ones; the HTTP layer gives them its statuses.

The contract's response for list_documents is not shown; it answers
`{"documents": [<get_document's fields, without content>], "total", "limit", "offset"}`.

Privileged documents appear only when asked for, with `privilege_mode` (which needs a caller who may
read them: search_documents, and get_document, where it is an optional argument beyond the
contract's). list_documents and query_knowledge see standard and confidential documents.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC
from functools import partial
from typing import Annotated, Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic.json_schema import SkipJsonSchema

from ragmcp.domain.errors import Forbidden
from ragmcp.domain.models import Document, Principal, ScoredChunk, Tier
from ragmcp.ingest.poisoning import warning_fields
from ragmcp.mcp.caller import Caller
from ragmcp.mcp.helpers import check_phrase_bytes, stale_fields
from ragmcp.mcp.registry import tool
from ragmcp.retrieval.catalog import Catalog, DocumentSort
from ragmcp.retrieval.service import SearchRequest, SearchService
from ragmcp.settings import Settings
from ragmcp.synthesis.models import Passage
from ragmcp.synthesis.service import SynthesisService

PROFILE = "ragbox"
INTERNAL_ERROR = -32002
SEARCH_CANDIDATES = 100
"""Passages search_documents takes from the search before keeping each document's best one: every
candidate a hybrid search fuses (50 by words, 50 by meaning), so one long document cannot crowd
the others out of the `limit` documents returned."""
ANSWER_PASSAGES = 5

Text = Annotated[str, StringConstraints(strict=True, min_length=1, pattern=r"\S")]
ConversationId = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=200)]


def _optional(schema: dict[str, Any]) -> None:
    """An optional argument the contract shows without a default: no `"default": null` in its schema."""
    schema.pop("default", None)


class SearchDocumentsArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: Text = Field(description="Natural language search query: the topic or question, in the user's own words.")
    limit: int = Field(
        default=5,
        ge=1,
        le=20,
        strict=True,
        description="Maximum results to return (1-20, default 5). Each result is a different document.",
    )
    privilege_mode: bool = Field(
        default=False,
        strict=True,
        description=(
            "Include privileged documents (requires elevated access). Leave false unless the user asks for "
            "privileged material; an API key without access to privileged documents is refused."
        ),
    )


class GetDocumentArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    document_id: Text = Field(description="The document ID (from search results or list), exactly as returned.")
    include_content: bool = Field(
        default=False,
        strict=True,
        description=(
            "Include full text content (default: false for metadata only). The text can be long: ask for it "
            "only when the whole document is needed."
        ),
    )
    privilege_mode: bool = Field(
        default=False,
        strict=True,
        description="Open a privileged document (requires elevated access), as search_documents' privilege_mode.",
    )


class QueryKnowledgeArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: Text = Field(description="Natural language question to ask against the vault, as the user asked it.")
    conversation_id: ConversationId | SkipJsonSchema[None] = Field(
        default=None,
        json_schema_extra=_optional,
        description=(
            "Optional conversation ID for multi-turn context: any string you choose, the same for every "
            "question of one conversation, so that a follow-up question is understood in its context."
        ),
    )
    model: Literal["gemini-1.5-flash", "claude-3.5-sonnet", "gpt-4o"] | SkipJsonSchema[None] = Field(
        default=None,
        json_schema_extra=_optional,
        description=(
            "LLM model override (default: user's configured model). Accepted for compatibility only: this "
            "server always answers with its own configured generator (by default extractive, quoting the "
            "documents), so the value does not change the answer."
        ),
    )


class ListDocumentsArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    limit: int = Field(default=50, ge=1, le=100, strict=True, description="Maximum results (1-100, default 50).")
    offset: int = Field(
        default=0,
        ge=0,
        strict=True,
        description="Pagination offset: how many documents to skip (the next page starts at offset + limit).",
    )
    sort: DocumentSort = Field(
        default="uploaded_at",
        description="Sort field: title (A to Z), uploaded_at (newest first) or size (largest first).",
    )


def iso_utc(doc: Document) -> str:
    return doc.created_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def document_fields(doc: Document) -> dict[str, Any]:
    """get_document's metadata; `pages` is null for formats without pages (Word, HTML, Markdown, text)."""
    return {
        "id": doc.doc_id,
        "title": doc.title,
        "filename": doc.file_name,
        "size_bytes": doc.size_bytes,
        "pages": doc.pages,
        "chunks": doc.chunk_count,
        "security_tier": doc.tier.value,
        "indexed": doc.chunk_count > 0,
        "uploaded_at": iso_utc(doc),
        **stale_fields(doc),
    }


def search_result(hit: ScoredChunk) -> dict[str, Any]:
    return {
        "id": hit.document.doc_id,
        "title": hit.document.title,
        "relevance": round(hit.score, 2),
        "snippet": hit.chunk.summary,
        "security_tier": hit.document.tier.value,
        **warning_fields(hit.chunk.flags),
    }


def best_per_document(hits: list[ScoredChunk], limit: int) -> list[ScoredChunk]:
    """The first (best) passage of each document, in the search's order, at most `limit` documents."""
    best: dict[str, ScoredChunk] = {}
    for hit in hits:
        best.setdefault(hit.document.doc_id, hit)
    return list(best.values())[:limit]


def source(passage: Passage) -> dict[str, Any]:
    """A citation; `page` is null for formats without pages."""
    return {
        "document": passage.title,
        "page": passage.page,
        "section": passage.section,
        "relevance": round(passage.relevance, 2),
    }


def vault_principal(caller: Caller, privilege_mode: bool = False) -> Principal:
    """The caller's principal, below privileged unless privilege_mode asks for it and the caller may."""
    principal = caller.require()
    if privilege_mode and principal.max_tier is not Tier.privileged:
        raise Forbidden("privilege_mode needs an API key with access to privileged documents")
    ceiling = Tier.privileged if privilege_mode else Tier.confidential
    return principal.model_copy(update={"max_tier": min(principal.max_tier, ceiling, key=lambda t: t.rank)})


@dataclass(frozen=True)
class RagboxDeps:
    """What the ragbox tools use."""

    settings: Settings
    search: SearchService
    catalog: Catalog
    synthesis: SynthesisService


ragbox_tool = partial(tool, profile=PROFILE, internal_error_code=INTERNAL_ERROR, structured=False)
"""The contract's tools answer with text content only, and name internal errors -32002."""


def check_query(deps: RagboxDeps, query: str) -> None:
    check_phrase_bytes("query", query, deps.settings.search.max_phrase_bytes)


@ragbox_tool(
    "search_documents",
    title="Search the document vault",
    description=(
        "Search the document vault using semantic similarity. Returns a JSON array of the most relevant "
        "documents, best first, one entry per document: id, title, relevance (0-1), snippet and "
        "security_tier. Pass an id to get_document for its metadata or full text; use query_knowledge "
        "for a cited answer to a question."
    ),
)
async def search_documents(deps: RagboxDeps, caller: Caller, args: SearchDocumentsArgs) -> list[dict[str, Any]]:
    principal = vault_principal(caller, args.privilege_mode)
    check_query(deps, args.query)
    request = SearchRequest(phrases=[args.query], top_k=SEARCH_CANDIDATES, **deps.settings.search.defaults())
    # In line, as rag_search: the registry already runs this body on a tool thread of its own (offloop.py).
    result = deps.search.search(principal, request)
    return [search_result(hit) for hit in best_per_document(result.hits, args.limit)]


@ragbox_tool(
    "get_document",
    title="Get a document",
    description=(
        "Get a specific document by ID with full metadata: title, filename, size_bytes, pages, chunks, "
        "security_tier, indexed, uploaded_at, and its full text as `content` when include_content is true."
    ),
)
async def get_document(deps: RagboxDeps, caller: Caller, args: GetDocumentArgs) -> dict[str, Any]:
    principal = vault_principal(caller, args.privilege_mode)
    doc = await anyio.to_thread.run_sync(deps.catalog.document, principal, args.document_id)
    fields = document_fields(doc)
    if args.include_content:
        fields["content"] = await anyio.to_thread.run_sync(deps.catalog.text_of, doc)
    return fields


@ragbox_tool(
    "query_knowledge",
    title="Ask the document vault",
    description=(
        "Ask a question and get a cited answer from the document vault. Returns answer with source "
        "citations, or a structured refusal if confidence is insufficient. The result has answer, "
        "confidence (0-1), sources (document, page, section, relevance) and silence; when the vault "
        "does not support an answer, silence is true, answer and sources are empty and silence_reason "
        "says why: tell the user the documents do not cover it rather than answering from elsewhere."
    ),
    synthesis=True,
)
async def query_knowledge(deps: RagboxDeps, caller: Caller, args: QueryKnowledgeArgs) -> dict[str, Any]:
    principal = vault_principal(caller)
    check_query(deps, args.query)
    ask = partial(
        deps.synthesis.answer,
        principal,
        args.query,
        top_k=ANSWER_PASSAGES,
        conversation_id=args.conversation_id,
    )
    answer = await anyio.to_thread.run_sync(ask)
    result: dict[str, Any] = {
        "answer": answer.text,
        "confidence": round(answer.confidence, 2),
        "sources": [source(c.passage) for c in answer.citations],
        "silence": answer.silence,
    }
    if answer.silence:
        result["silence_reason"] = answer.silence_reason
    return result


@ragbox_tool(
    "list_documents",
    title="List the documents in the vault",
    description=(
        "List all documents in the vault with metadata. Returns {{documents, total, limit, offset}}; each "
        "document has the fields of get_document (without content). Page through with offset."
    ),
)
async def list_documents(deps: RagboxDeps, caller: Caller, args: ListDocumentsArgs) -> dict[str, Any]:
    principal = vault_principal(caller)
    page = partial(deps.catalog.list_documents, principal, sort=args.sort, limit=args.limit, offset=args.offset)
    docs, total = await anyio.to_thread.run_sync(page)
    return {
        "documents": [document_fields(d) for d in docs],
        "total": total,
        "limit": args.limit,
        "offset": args.offset,
    }

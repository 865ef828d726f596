"""The mindset profile (contracts/mindset-rag-mcp.md): rag_search and verify_document_access."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import anyio
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from ragmcp.domain.models import Principal, ScoredChunk
from ragmcp.ingest.poisoning import warning_fields
from ragmcp.mcp.caller import Caller
from ragmcp.mcp.helpers import check_phrase_bytes, stale_fields
from ragmcp.mcp.registry import tool
from ragmcp.retrieval.catalog import Catalog
from ragmcp.retrieval.service import SearchRequest, SearchService
from ragmcp.settings import Settings

PROFILE = "mindset"

Phrase = Annotated[str, StringConstraints(strict=True, min_length=1)]


class RagSearchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    search_phrases: list[Phrase] = Field(
        min_length=1,
        max_length=5,
        description=(
            "1-5 search phrases for semantic retrieval. The first is the user's own words, unmodified; "
            "the others are interpretations of the question with more or less context."
        ),
    )

    @field_validator("search_phrases")
    @classmethod
    def _not_blank(cls, phrases: list[str]) -> list[str]:
        if any(not p.strip() for p in phrases):
            raise ValueError("search phrases must not be blank")
        return phrases


class VerifyAccessArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    segment_uid: str = Field(
        min_length=1,
        max_length=1024,
        description="The unique segment identifier originally provided by your RAG server",
    )


@dataclass(frozen=True)
class MindsetDeps:
    """What the mindset tools use."""

    settings: Settings
    search: SearchService
    catalog: Catalog
    source_url: Callable[..., str]


def segment(deps: MindsetDeps, principal: Principal, hit: ScoredChunk) -> dict[str, Any]:
    doc, chunk = hit.document, hit.chunk
    return {
        "segment_uid": chunk.chunk_id,
        "source_file_name": doc.file_name,
        "source_file_type": doc.file_type,
        "headline": chunk.headline,
        "segment_summary": chunk.summary,
        "raw_text": chunk.text,
        "source_url": deps.source_url(principal, doc, chunk.page_start),
        **warning_fields(chunk.flags),
    }


@tool(
    "rag_search",
    profile=PROFILE,
    lift_result=True,
    title="Search the knowledge base",
    description="Searches the knowledge base for relevant information using semantic search",
)
async def rag_search(deps: MindsetDeps, caller: Caller, args: RagSearchArgs) -> dict[str, Any]:
    principal = caller.require()
    for i, phrase in enumerate(args.search_phrases):
        check_phrase_bytes(f"search_phrases.{i}", phrase, deps.settings.search.max_phrase_bytes)
    request = SearchRequest(
        phrases=args.search_phrases,
        top_k=deps.settings.search.mindset_segments,
        **deps.settings.search.defaults(),
    )
    # In line: the registry runs this body on a tool thread of its own (offloop.py), off the server's
    # loop, so a hand-off to another thread would only add its cost to every search.
    result = deps.search.search(principal, request)
    return {"status": "success", "segments": [segment(deps, principal, h) for h in result.hits]}


@tool(
    "verify_document_access",
    profile=PROFILE,
    lift_result=True,
    title="Verify access to a cited document",
    description=(
        "Will verify user access to a document and optionally provide a refreshed URL with current "
        "credentials. Decided for the current user's headers, not those of the original search."
    ),
)
async def verify_document_access(deps: MindsetDeps, caller: Caller, args: VerifyAccessArgs) -> dict[str, Any]:
    principal = caller.require()
    check = await anyio.to_thread.run_sync(deps.catalog.check_access, principal, args.segment_uid)
    if not check.has_access or check.document is None:
        return {"has_access": False, "refreshed_url": None, "error": check.error}
    return {
        "has_access": True,
        "refreshed_url": deps.source_url(principal, check.document, check.page),
        "access_level": "view",
        "error": None,
        **stale_fields(check.document),
    }

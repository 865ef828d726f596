"""The data model of ARCHITECTURE.md section 3, as pydantic models."""

from __future__ import annotations

import enum
import secrets
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field


def utcnow() -> datetime:
    return datetime.now(UTC)


DOCUMENT_NUMBERS = 999_999_999
"""Documents are numbered at random from 1 to this (nine digits at most), so that a number says
nothing of how many documents a tenant holds or how many of them a caller may not see."""


def random_document_number() -> int:
    return secrets.randbelow(DOCUMENT_NUMBERS) + 1


class Tier(enum.StrEnum):
    standard = "standard"
    confidential = "confidential"
    privileged = "privileged"

    @property
    def rank(self) -> int:
        return _TIER_RANK[self]


_TIER_RANK = {Tier.standard: 0, Tier.confidential: 1, Tier.privileged: 2}

DocKind = Literal["file", "note", "row"]


class Acl(BaseModel):
    """Who may read a document. Empty lists mean: the whole tenant."""

    model_config = ConfigDict(frozen=True)

    groups: tuple[str, ...] = ()
    users: tuple[str, ...] = ()

    @property
    def is_open(self) -> bool:
        return not self.groups and not self.users


class Document(BaseModel):
    tenant: str
    doc_id: str
    number: int | None = Field(
        default=None, description="A short numeric id the document store assigns once, at random."
    )
    source: str
    path: str
    title: str
    file_name: str
    file_type: str
    kind: DocKind = "file"
    source_url: str | None = None
    content_hash: str
    parser_version: int = Field(default=1, description="The version of its type's parser that read the file.")
    version: str | None = None
    tags: tuple[str, ...] = ()
    acl: Acl = Acl()
    tier: Tier = Tier.standard
    metadata: dict[str, Any] = Field(default_factory=dict)
    pk: str | None = None
    pages: int | None = None
    chunk_count: int = 0
    size_bytes: int = 0
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    stale: bool = Field(
        default=False, description="The file's newest version could not be read: these are its last good passages."
    )
    stale_reason: str | None = Field(default=None, description="Why the newest version could not be read.")
    owner: str | None = Field(
        default=None,
        description="Who wrote it over MCP (a note, an upload; security.policy.owner_of): only they or an admin "
        "may change it. None: written by a sync, or before owners were kept (then only an admin may).",
    )


class Chunk(BaseModel):
    chunk_id: str
    doc_id: str
    ordinal: int
    text: str
    headline: str
    summary: str
    page_start: int | None = None
    page_end: int | None = None
    char_start: int = 0
    char_end: int = 0
    locator: str | None = None
    flags: tuple[str, ...] = Field(default=(), description="Poisoning flags, e.g. prompt_injection.")


JobType = Literal["ingest", "delete", "sync", "note", "upload"]
JobStatus = Literal["queued", "running", "succeeded", "failed", "interrupted"]


class Job(BaseModel):
    job_id: str
    tenant: str
    type: JobType
    status: JobStatus = "queued"
    target: str = ""
    source: str | None = None
    counts: dict[str, int] = Field(default_factory=dict)
    error: str | None = None
    owner: str | None = Field(default=None, description="Who started it (a note, an upload); None: a sync.")
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)


class Principal(BaseModel):
    """Who is calling, as security.identity.principal_of resolved it: the tenant, user, groups and
    tier every access decision uses. `key_id` names the credential (an API key's id, or
    `oauth:<sub>` for an access token); `via` says which kind."""

    model_config = ConfigDict(frozen=True)

    tenant: str = "default"
    via: Literal["key", "token", "open"] = "open"
    key_id: str | None = None
    user_id: str | None = None
    human_uid: str | None = None
    groups: tuple[str, ...] = ()
    max_tier: Tier = Tier.privileged
    scopes: tuple[str, ...] = ("read", "write", "admin")
    expires_at: int | None = Field(default=None, description="When the credential ends (a token's exp), epoch.")
    from_directory: tuple[Literal["groups", "tier"], ...] = Field(
        default=(), description="What the user directory decided rather than the credential: a download re-reads it."
    )


class SearchFilter(BaseModel):
    """Restrictions applied inside the index query, never after the top-k."""

    model_config = ConfigDict(frozen=True)

    sources: tuple[str, ...] | None = None
    doc_ids: tuple[str, ...] | None = None
    chunk_ids: tuple[str, ...] | None = None
    tags_any: tuple[str, ...] = ()
    tags_all: tuple[str, ...] = ()
    created_after: datetime | None = None
    created_before: datetime | None = None
    kinds: tuple[str, ...] | None = None
    metadata: dict[str, tuple[str, ...]] = Field(
        default_factory=dict, description="Document metadata: for each key, the value must be one of these."
    )


SearchMode = Literal["fts", "vector", "hybrid", "hybrid_scores", "fts_then_vec"]


class IndexHit(NamedTuple):
    """One chunk as an index returns it: its raw score in that index's own scale. A named (id, score)
    pair, not a pydantic model nor a dataclass: an index makes hundreds a search, from values it already
    typed, and never hands them over a boundary; the fusion reads them as the pairs they are (a copied pair
    a hit was a thousand more objects a search at 100 candidates a side, and the garbage collector's young
    generation, run by object counts, was most of that search's extra CPU)."""

    chunk_id: str
    raw_score: float


class ScoredChunk(BaseModel):
    """A fused result: normalised score (higher is better, 0..1), the raw scores and ranks behind it."""

    chunk: Chunk
    document: Document
    score: float
    fts_score: float | None = None
    vec_score: float | None = None
    fts_rank: int | None = None
    vec_rank: int | None = None
    similarity: float | None = Field(
        default=None, description="Cosine similarity to the nearest search phrase (None when no phrase was embedded)."
    )
    floor_score: float | None = Field(
        default=None, description="What the relevance floor compares: similarity plus the weighted word coverage."
    )


class Source(BaseModel):
    """A collection of documents (a profile calls it resource or collection) and its settings."""

    tenant: str = "default"
    source_id: str
    name: str
    description: str = ""
    location: str = Field(description="Local folder (embedded) or S3 prefix (AWS) holding the originals.")
    kind: DocKind = "file"
    groups: tuple[str, ...] = ()
    tier: Tier = Tier.standard
    number: int | None = Field(default=None, description="A short numeric id the source store assigns once.")
    pk_column: str = "id"
    text_columns: tuple[str, ...] = Field(
        default=(),
        description="Columns whose values, in this order and without their names, are a row's text; "
        "empty: every column as a 'name: value' line.",
    )
    fetch_columns: tuple[str, ...] = Field(
        default=(),
        description="Columns of a row source that any tool may return (a whitelist; empty: every column): "
        "in fetches, metadata and the indexed text that snippets quote.",
    )
    hidden_columns: tuple[str, ...] = Field(
        default=(), description="Columns of a row source that no tool returns and the index never holds."
    )
    default_selected: bool = True
    redact_pii: bool = Field(default=True, description="Replace PII with typed placeholders at ingest.")
    serve_originals: Literal["redacted", "raw"] = Field(
        default="redacted",
        description="What a link to a document of a redacting source serves: its redacted text, or the raw file.",
    )
    injection_policy: Literal["warn", "exclude"] = Field(
        default="warn", description="Chunks flagged as prompt injection: served with a warning, or not indexed."
    )
    last_sync: datetime | None = None
    held_deletions: tuple[str, ...] = Field(
        default=(), description="Paths whose documents a sync would delete, held as a mass deletion."
    )
    held_reason: str | None = None

    def shows_column(self, column: str) -> bool:
        """Whether a row column may reach a caller: whitelisted (when a whitelist is set) and not hidden."""
        return column not in self.hidden_columns and (not self.fetch_columns or column in self.fetch_columns)

    def fetchable_columns(self) -> tuple[str, ...]:
        """The columns rag.fetch_from_source may return: the whitelist, without hidden ones."""
        return tuple(c for c in self.fetch_columns if c not in self.hidden_columns)


class UserRecord(BaseModel):
    """An entry of the user directory: the groups a user belongs to and the highest tier they may read."""

    tenant: str = "default"
    user_id: str
    groups: tuple[str, ...] = ()
    max_tier: Tier = Tier.standard


class UploadSession(BaseModel):
    """A chunked upload in progress; its parts are staged as blobs until it is finished or expires."""

    tenant: str
    upload_id: str
    filename: str
    total_size: int
    tags: tuple[str, ...] = ()
    collection: str = "documents"
    parts: dict[int, int] = Field(default_factory=dict, description="part index -> size in bytes")
    owner: str | None = Field(default=None, description="Who started it: only they or an admin add to or finish it.")
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime


class Turn(BaseModel):
    """One question and answer of a conversation, kept for multi-turn context."""

    question: str
    answer: str
    at: datetime = Field(default_factory=utcnow)


COLLECTION_PREFIX = "collection:"
DEFAULT_COLLECTION = "documents"


def one_collection(tags: tuple[str, ...] | list[str], default: str = DEFAULT_COLLECTION) -> tuple[str, ...]:
    """The tags with exactly one `collection:` tag: the last one given, else the default collection."""
    collections = [t for t in tags if t.startswith(COLLECTION_PREFIX) and len(t) > len(COLLECTION_PREFIX)]
    plain = [t for t in dict.fromkeys(tags) if not t.startswith(COLLECTION_PREFIX)]
    chosen = collections[-1] if collections else COLLECTION_PREFIX + default
    return (*plain, chosen)


def collection_of(tags: tuple[str, ...]) -> tuple[str | None, list[str]]:
    """(collection, the other tags), as the kb profile presents them."""
    collection = next((t[len(COLLECTION_PREFIX) :] for t in tags if t.startswith(COLLECTION_PREFIX)), None)
    return collection, [t for t in tags if not t.startswith(COLLECTION_PREFIX)]

"""The seams between the plain-Python core and its storage, models and clouds.

Each Protocol has an embedded adapter (adapters/local) and an AWS adapter (adapters/aws). The
seams that carry a package's own records sit in that package: security/ports.py (keys, audit,
rate limits) and synthesis/ports.py (generators, synthesis runners). This module imports only
the domain, so that every package may import it and it imports none of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import NamedTuple, Protocol

import numpy as np

from ragmcp.domain.models import (
    Chunk,
    Document,
    IndexHit,
    Job,
    JobStatus,
    Principal,
    SearchFilter,
    Source,
    Turn,
    UploadSession,
    UserRecord,
)


class Embedder(Protocol):
    model_id: str
    model_sha256: str
    dimension: int
    multilingual: bool
    """Whether its vectors place text of other languages and scripts (Korean, Chinese, Japanese) by meaning as
    they place English: an English-only model's vector of a CJK phrase is noise, so the search leads such a
    phrase by its keyword side (`retrieval.service.vector_share`); a multilingual model's is not led."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised float32 vectors, one row per text."""

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of search phrases, in the space of `embed`; possibly by a faster path."""


class Reranker(Protocol):
    """Scores passages against a question, higher meaning more relevant: one score per text, in order."""

    model_id: str

    def rerank(self, query: str, texts: Sequence[str]) -> list[float]: ...


class EmbeddingCache(Protocol):
    def get_many(self, model_sha256: str, text_sha256s: Sequence[str]) -> dict[str, np.ndarray]: ...

    def put_many(self, model_sha256: str, items: Iterable[tuple[str, np.ndarray]]) -> None: ...


class SearchIndex(Protocol):
    """Chunks with their document's filter fields; every search filters inside the query."""

    def ensure_model(self, model_id: str, dimension: int) -> None:
        """Record the embedding model on first use; raise IndexMismatch if it differs."""

    def ensure_schema(self, rebuild: bool = False) -> bool:
        """Check that the index was built with this server's schema (keyword analysis included);
        raise IndexOutdated if not, or with `rebuild` bring it up to date keeping every document.
        True when it rebuilt something."""

    def replace_document(self, doc: Document, chunks: Sequence[Chunk], vectors: np.ndarray) -> None:
        """Swap all chunks of `doc` for these, atomically from a searcher's view."""

    def delete_document(self, tenant: str, doc_id: str) -> bool: ...

    def search_fts(
        self, principal: Principal, query: str, flt: SearchFilter, k: int, *, deadline: float | None = None
    ) -> list[IndexHit]:
        """The k best chunks for the query's words. With a `deadline` (a time.monotonic()), the search stops
        there, a statement or request still running included, and raises DeadlineExceeded."""

    def search_vector(
        self, principal: Principal, vector: np.ndarray, flt: SearchFilter, k: int, *, deadline: float | None = None
    ) -> list[IndexHit]:
        """The k nearest chunks; a `deadline` stops it as it stops search_fts."""

    def score_chunks(
        self, principal: Principal, flt: SearchFilter, asked: Sequence[ScoresAsked], *, deadline: float | None = None
    ) -> list[tuple[dict[str, float], dict[str, float]]]:
        """For each ask, the scores its searches would give the chunks it names: the bm25 for its query's
        words of the chunks of `bm25_of` that hold any of them, and the cosine to its vector of the chunks of
        `cosine_of`; a chunk the filter hides (or gone) is left out. One call a request (a fusion scores
        every phrase's candidates on both sides): what searches restricted to those chunks would give."""

    def get_chunks(self, tenant: str, chunk_ids: Sequence[str]) -> dict[str, tuple[Chunk, Document]]: ...

    def count_chunks(self, tenant: str) -> int: ...


class ScoresAsked(NamedTuple):
    """One phrase's candidates to score on the side that did not fetch them (`SearchIndex.score_chunks`):
    the bm25 for the words of `query` of the chunks of `bm25_of`, the cosine to `vector` of those of
    `cosine_of` (a named tuple, as IndexHit: made in the search's own loop, never across a boundary)."""

    query: str
    vector: np.ndarray
    bm25_of: Sequence[str]
    cosine_of: Sequence[str]


class DocumentStore(Protocol):
    def number_for(self, tenant: str, doc_id: str) -> int:
        """The document's short numeric id: assigned on first use, the same ever after."""

    def put(self, doc: Document) -> None: ...

    def get(self, tenant: str, doc_id: str) -> Document | None: ...

    def get_by_number(self, tenant: str, number: int) -> Document | None: ...

    def known(self, tenant: str, doc_id: str) -> bool:
        """Whether the tenant ever had this document (so a missing one was deleted, not mistyped)."""

    def delete(self, tenant: str, doc_id: str) -> None: ...

    def by_path(self, tenant: str, source: str, path: str) -> list[Document]: ...

    def list(self, tenant: str, source: str | None = None) -> list[Document]: ...

    def count(self, tenant: str, source: str | None = None) -> int:
        """How many documents the tenant (or one of its sources) holds."""


class JobStore(Protocol):
    def put(self, job: Job) -> None: ...

    def get(self, tenant: str, job_id: str) -> Job | None: ...

    def list(self, tenant: str, status: JobStatus | None = None, limit: int = 100) -> list[Job]: ...


class SourceStore(Protocol):
    def put(self, source: Source) -> None: ...

    def get(self, tenant: str, source_id: str) -> Source | None: ...

    def list(self, tenant: str) -> list[Source]: ...


class BlobStore(Protocol):
    """Originals and staged upload parts, addressed by a location and a path inside it."""

    def read(self, location: str, path: str) -> bytes: ...

    def size(self, location: str, path: str) -> int: ...

    def list(self, location: str) -> list[str]: ...

    def write(self, location: str, path: str, data: bytes) -> None:
        """Write whole: a reader sees the old object or the new one, never a part."""

    def delete(self, location: str, path: str) -> None: ...


class Links(Protocol):
    """Expiring links that open what a document's original may show (security/originals.py)."""

    def url(self, principal: Principal, doc: Document, page: int | None = None) -> str:
        """A link for a caller who may read `doc` (the caller checks; an adapter may check again)."""

    def verify(self, tenant: str, doc_id: str, expires: int, grant: str, signature: str) -> Principal | None:
        """The principal a genuine, unexpired link to this server's /files/ was minted for."""


class UserDirectory(Protocol):
    def get(self, tenant: str, user_id: str) -> UserRecord | None: ...

    def put(self, user: UserRecord) -> None: ...

    def list(self, tenant: str) -> list[UserRecord]: ...


class UploadStore(Protocol):
    def put(self, session: UploadSession) -> None: ...

    def get(self, tenant: str, upload_id: str) -> UploadSession | None:
        """The session, or None when unknown or expired (expiry is checked on read)."""

    def add_part(self, tenant: str, upload_id: str, index: int, size: int) -> UploadSession | None:
        """Record a part atomically; None when the session is unknown or expired."""

    def delete(self, tenant: str, upload_id: str) -> None: ...

    def expired(self, now: datetime) -> list[UploadSession]: ...


class ConversationStore(Protocol):
    """Conversations keyed by tenant, user and the id the caller chose: two users reusing an id
    never share one."""

    def get(self, tenant: str, user: str, conversation_id: str) -> list[Turn]: ...

    def append(self, tenant: str, user: str, conversation_id: str, turn: Turn, ttl_seconds: int) -> None: ...


class ObjectJobs(Protocol):
    """Jobs that wrote an object into a source and wait for the ingestion of its change event."""

    def hold(self, tenant: str, source: str, path: str) -> AbstractContextManager[None]:
        """One ingest of the object at a time: the next waits for it (so it reads a version at least
        as new, and an older version never replaces a newer one)."""

    def started(self, tenant: str, source: str, path: str) -> None:
        """The object's change is being ingested: its waiting job, if any, is running."""

    def finished(self, tenant: str, source: str, path: str, counts: dict[str, int], error: str | None) -> None:
        """Record the outcome on the waiting job, or keep it for the job about to wait for it."""


class TaskQueue(Protocol):
    """Runs jobs in the background, in order; the job record tracks queued -> running -> done."""

    def submit(self, job: Job, work: Callable[[], dict[str, int]]) -> Job: ...

    def depth(self) -> int: ...

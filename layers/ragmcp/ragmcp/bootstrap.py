"""The composition root: settings -> adapters -> services. Nothing else builds adapters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from ragmcp.domain.errors import InvalidArgument
from ragmcp.domain.models import Document, Principal, Source, Tier
from ragmcp.ingest.dropfolder import UPLOADS, DropFolder
from ragmcp.ingest.notes import NoteService
from ragmcp.ingest.pipeline import IngestService
from ragmcp.ingest.uploads import UploadService
from ragmcp.ports import (
    BlobStore,
    DocumentStore,
    Embedder,
    JobStore,
    RateLimiter,
    SearchIndex,
    SourceStore,
    TaskQueue,
    UserDirectory,
)
from ragmcp.retrieval.catalog import Catalog
from ragmcp.retrieval.service import SearchService
from ragmcp.security.audit import AuditLog
from ragmcp.security.keys import KeyService
from ragmcp.security.links import LinkSigner
from ragmcp.settings import Settings
from ragmcp.synthesis.service import SynthesisService

SOURCE_SETTINGS_FILE = ".source.json"


class SourceSettings(BaseModel):
    """A folder's `.source.json`: how its documents are described, protected and fetched."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    description: str | None = None
    groups: tuple[str, ...] | None = None
    tier: Tier | None = None
    pk_column: str | None = None
    fetch_columns: tuple[str, ...] | None = None
    default_selected: bool | None = None
    redact_pii: bool | None = None
    injection_policy: Literal["warn", "exclude"] | None = None


def document_url(links: LinkSigner, doc: Document, page: int | None = None) -> str:
    """A link that opens the original: the sidecar's own URL, else a signed link to this server."""
    if doc.source_url:
        return doc.source_url
    return links.url(doc.tenant, doc.doc_id, page if doc.file_type == "pdf" else None)


@dataclass
class Services:
    settings: Settings
    index: SearchIndex
    documents: DocumentStore
    jobs: JobStore
    sources: SourceStore
    blobs: BlobStore
    embedder: Embedder
    ingest: IngestService
    search: SearchService
    links: LinkSigner
    catalog: Catalog
    tasks: TaskQueue
    users: UserDirectory
    drop: DropFolder
    uploads: UploadService
    notes: NoteService
    synthesis: SynthesisService
    keys: KeyService
    limiter: RateLimiter
    audit: AuditLog

    def source_url(self, doc: Document, page: int | None = None) -> str:
        return document_url(self.links, doc, page)

    def principal_for_user(
        self, key: Principal, user_id: str | None, extra_groups: tuple[str, ...] = ()
    ) -> Principal:
        """The caller as the user directory knows them, within what the API key allows: the user's
        groups plus any given (session tags), and the lower of the user's and the key's tier."""
        record = self.users.get(key.tenant, user_id) if user_id else None
        groups = tuple(dict.fromkeys([*(record.groups if record else ()), *extra_groups]))
        user_tier = record.max_tier if record else Tier.standard
        max_tier = min(user_tier, key.max_tier, key=lambda t: t.rank)
        return key.model_copy(update={"user_id": user_id, "groups": groups, "max_tier": max_tier})

    def register_folder(self, tenant: str, source_id: str, folder: str) -> Source:
        """The source that a local folder feeds (created, or its folder updated), with the settings
        of the folder's `.source.json` when it has one."""
        source = self.sources.get(tenant, source_id) or Source(
            tenant=tenant, source_id=source_id, name=source_id, location=folder, pk_column=self.settings.row_pk_column
        )
        try:
            raw = self.blobs.read(folder, SOURCE_SETTINGS_FILE)
        except FileNotFoundError:
            raw = b"{}"
        try:
            declared = SourceSettings.model_validate_json(raw)
        except ValidationError as exc:
            problem = f"{SOURCE_SETTINGS_FILE} in {folder!r} is invalid: {exc.error_count()} errors"
            raise InvalidArgument(problem) from None
        update = {"location": folder, **declared.model_dump(exclude_unset=True)}
        self.sources.put(source.model_copy(update=update))
        return self.sources.get(tenant, source_id) or source


def build_services(settings: Settings) -> Services:
    if settings.backend != "local":
        raise ValueError(f"backend {settings.backend!r} is not available in this build")
    return _local_services(settings)


def _local_services(s: Settings) -> Services:
    """The embedded default: one SQLite database, local files, the ONNX embedder."""
    from ragmcp.adapters.local.database import Database
    from ragmcp.adapters.local.files import LocalBlobStore
    from ragmcp.adapters.local.onnx_embedder import OnnxEmbedder, load_tokenizer
    from ragmcp.adapters.local.sqlite_index import SqliteSearchIndex
    from ragmcp.adapters.local.sqlite_stores import (
        SqliteAuditStore,
        SqliteConversationStore,
        SqliteDocumentStore,
        SqliteEmbeddingCache,
        SqliteJobStore,
        SqliteKeyStore,
        SqliteSourceStore,
        SqliteUploadStore,
        SqliteUserDirectory,
    )
    from ragmcp.adapters.local.tasks import ThreadTaskQueue
    from ragmcp.ingest.chunking import Chunker
    from ragmcp.security.links import load_or_create_secret
    from ragmcp.security.ratelimit import InMemoryRateLimiter
    from ragmcp.synthesis.generators import ExtractiveGenerator, OpenAICompatibleGenerator

    db = Database(s.db_path)
    embedder = OnnxEmbedder(max_tokens=s.embed_max_tokens, batch_size=s.embed_batch, threads=s.embed_threads)
    index = SqliteSearchIndex(db)
    index.ensure_model(embedder.model_id, embedder.dimension)
    documents = SqliteDocumentStore(db)
    jobs = SqliteJobStore(db)
    sources = SqliteSourceStore(db)
    blobs = LocalBlobStore()
    tasks = ThreadTaskQueue(jobs)
    ingest = IngestService(
        index=index,
        documents=documents,
        jobs=jobs,
        sources=sources,
        blobs=blobs,
        embedder=embedder,
        cache=SqliteEmbeddingCache(db),
        chunker=Chunker(load_tokenizer(), max_tokens=s.chunk_tokens, overlap=s.chunk_overlap),
        max_file_bytes=s.max_file_bytes,
    )
    search = SearchService(index, embedder)
    drop = DropFolder(
        blobs=blobs,
        sources=sources,
        ingest=ingest,
        location_for=lambda tenant, source_id: str(s.data_dir / "sources" / tenant / source_id),
    )
    generator = (
        OpenAICompatibleGenerator(s.generator_url, s.generator_model, s.generator_api_key)
        if s.generator_url
        else ExtractiveGenerator(embedder)
    )
    links = LinkSigner(load_or_create_secret(s.data_dir / "signing.key"), s.base_url, s.link_ttl_seconds)
    synthesis = SynthesisService(
        search=search,
        embedder=embedder,
        generator=generator,
        conversations=SqliteConversationStore(db),
        link=lambda hit: document_url(links, hit.document, hit.chunk.page_start),
        threshold=s.silence_threshold,
        midpoint=s.confidence_midpoint,
        steepness=s.confidence_steepness,
        conversation_ttl_seconds=s.conversation_ttl_seconds,
    )
    return Services(
        settings=s,
        index=index,
        documents=documents,
        jobs=jobs,
        sources=sources,
        blobs=blobs,
        embedder=embedder,
        ingest=ingest,
        search=search,
        links=links,
        catalog=Catalog(index=index, documents=documents, sources=sources, blobs=blobs),
        tasks=tasks,
        users=SqliteUserDirectory(db),
        drop=drop,
        uploads=UploadService(
            uploads=SqliteUploadStore(db),
            blobs=blobs,
            tasks=tasks,
            staging_location=str(s.data_dir / "staging"),
            deliver=lambda principal, name, data, tags: drop.put(principal, UPLOADS, name, data, tags),
            max_upload_bytes=s.max_upload_bytes,
            max_part_bytes=s.max_part_bytes,
            ttl_seconds=s.upload_ttl_seconds,
        ),
        notes=NoteService(drop, documents, tasks),
        synthesis=synthesis,
        keys=KeyService(SqliteKeyStore(db), s.key_env),
        limiter=InMemoryRateLimiter(),
        audit=AuditLog(SqliteAuditStore(db)),
    )

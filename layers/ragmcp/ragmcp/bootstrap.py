"""The composition root: settings -> adapters -> services. Nothing else builds adapters."""

from __future__ import annotations

from dataclasses import dataclass

from ragmcp.domain.models import Document, Source
from ragmcp.ingest.pipeline import IngestService
from ragmcp.ports import BlobStore, DocumentStore, Embedder, JobStore, SearchIndex, SourceStore
from ragmcp.retrieval.service import SearchService
from ragmcp.security.links import LinkSigner
from ragmcp.settings import Settings



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

    def source_url(self, doc: Document, page: int | None = None) -> str:
        """A link that opens the original: the sidecar's own URL, else a signed link to this server."""
        if doc.source_url:
            return doc.source_url
        return self.links.url(doc.tenant, doc.doc_id, page if doc.file_type == "pdf" else None)

    def register_folder(self, tenant: str, source_id: str, folder: str) -> Source:
        """The source that a local folder feeds (created, or its folder updated)."""
        source = self.sources.get(tenant, source_id)
        if source is None:
            source = Source(
                tenant=tenant,
                source_id=source_id,
                name=source_id,
                location=folder,
                pk_column=self.settings.row_pk_column,
            )
        else:
            source = source.model_copy(update={"location": folder})
        self.sources.put(source)
        return source


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
        SqliteDocumentStore,
        SqliteEmbeddingCache,
        SqliteJobStore,
        SqliteSourceStore,
    )
    from ragmcp.ingest.chunking import Chunker
    from ragmcp.security.links import load_or_create_secret

    db = Database(s.db_path)
    embedder = OnnxEmbedder(max_tokens=s.embed_max_tokens, batch_size=s.embed_batch, threads=s.embed_threads)
    index = SqliteSearchIndex(db)
    index.ensure_model(embedder.model_id, embedder.dimension)
    documents = SqliteDocumentStore(db)
    jobs = SqliteJobStore(db)
    blobs = LocalBlobStore()
    ingest = IngestService(
        index=index,
        documents=documents,
        jobs=jobs,
        blobs=blobs,
        embedder=embedder,
        cache=SqliteEmbeddingCache(db),
        chunker=Chunker(load_tokenizer(), max_tokens=s.chunk_tokens, overlap=s.chunk_overlap),
        max_file_bytes=s.max_file_bytes,
    )
    return Services(
        settings=s,
        index=index,
        documents=documents,
        jobs=jobs,
        sources=SqliteSourceStore(db),
        blobs=blobs,
        embedder=embedder,
        ingest=ingest,
        search=SearchService(index, embedder),
        links=LinkSigner(load_or_create_secret(s.data_dir / "signing.key"), s.base_url, s.link_ttl_seconds),
    )

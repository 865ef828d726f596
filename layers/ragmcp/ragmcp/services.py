"""The services one deployment runs, as bootstrap.py wires them (the entry points ask it for them)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ragmcp.domain.models import Document, Principal, Source
from ragmcp.ingest.dropfolder import DropFolder
from ragmcp.ingest.notes import NoteService
from ragmcp.ingest.pipeline import IngestService
from ragmcp.ingest.sources import register_folder
from ragmcp.ingest.uploads import UploadService
from ragmcp.ports import (
    BlobStore,
    DocumentStore,
    Embedder,
    JobStore,
    Links,
    SearchIndex,
    SourceStore,
    TaskQueue,
    UserDirectory,
)
from ragmcp.progress import Progress
from ragmcp.retrieval.catalog import Catalog
from ragmcp.retrieval.service import SearchService
from ragmcp.security.audit import AuditLog
from ragmcp.security.identity import Identities
from ragmcp.security.keys import KeyService
from ragmcp.security.links import document_url
from ragmcp.security.originals import Downloads, Originals
from ragmcp.security.ports import RateLimiter
from ragmcp.settings import Settings
from ragmcp.synthesis.service import SynthesisService, SynthesisSteps

if TYPE_CHECKING:
    from ragmcp.adapters.local.database import Database
    from ragmcp.adapters.local.hnsw import HnswVectors
    from ragmcp.ingest.events import DropEvents


@dataclass(frozen=True)
class Services:
    """Built once by bootstrap.py and never changed after: what an entry point needs that is only known
    later (the first sync's progress) is given when it is built."""

    settings: Settings
    index: SearchIndex
    documents: DocumentStore
    jobs: JobStore
    sources: SourceStore
    blobs: BlobStore
    embedder: Embedder
    ingest: IngestService
    search: SearchService
    links: Links
    catalog: Catalog
    tasks: TaskQueue
    users: UserDirectory
    drop: DropFolder
    uploads: UploadService
    notes: NoteService
    synthesis: SynthesisService
    synthesis_steps: SynthesisSteps
    keys: KeyService
    identities: Identities
    limiter: RateLimiter
    audit: AuditLog
    originals: Originals
    downloads: Downloads
    drop_events: DropEvents | None = None
    """AWS: the drop bucket's change events applied to the index (the ingest function's work)."""
    vector_graph: HnswVectors | None = None
    """Embedded: the HNSW graph over the index's vectors, kept up to date by `ragmcp serve`."""
    database: Database | None = None
    """Embedded: the one SQLite database under the data directory (its checks run at start)."""
    first_sync: Progress | None = None
    """Embedded: the progress of `ragmcp serve`'s first sync of its folder; searches warn while it runs."""
    console_secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    """Signs the web console's session cookies and CSRF tokens: a file under data_dir locally (sessions
    outlive a restart), RAGMCP_CONSOLE_SECRET on AWS (else one per container: sign in by header)."""
    reindexed: bool = False
    """Whether building these services rebuilt an outdated index (`ragmcp reindex`)."""

    def source_url(self, principal: Principal, doc: Document, page: int | None = None) -> str:
        return document_url(self.links, principal, doc, page)

    def register_folder(self, tenant: str, source_id: str, folder: str) -> Source:
        """The source that a local folder feeds (ingest/sources.py)."""
        return register_folder(
            self.sources, self.blobs, tenant, source_id, folder, pk_column=self.settings.ingest.row_pk_column
        )

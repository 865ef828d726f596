"""Managed sources a tenant writes into over MCP (uploads, notes): write the object and its
sidecar, then ingest it through the same pipeline as every other file."""

from __future__ import annotations

import json
from collections.abc import Callable

from ragmcp.domain.errors import RagError
from ragmcp.domain.models import DocKind, Principal, Source
from ragmcp.ingest.pipeline import SIDECAR_SUFFIX, IngestService
from ragmcp.ports import BlobStore, SourceStore

UPLOADS = "uploads"
NOTES = "notes"


class DropFolder:
    def __init__(
        self,
        *,
        blobs: BlobStore,
        sources: SourceStore,
        ingest: IngestService,
        location_for: Callable[[str, str], str],
    ):
        self.blobs = blobs
        self.sources = sources
        self.ingest = ingest
        self.location_for = location_for

    def source(self, tenant: str, source_id: str, kind: DocKind = "file") -> Source:
        source = self.sources.get(tenant, source_id)
        if source is None:
            source = Source(
                tenant=tenant,
                source_id=source_id,
                name=source_id,
                description=f"{source_id} written over MCP",
                location=self.location_for(tenant, source_id),
                kind=kind,
            )
            self.sources.put(source)
        return source

    def put(
        self, principal: Principal, source_id: str, path: str, data: bytes, tags: list[str], kind: DocKind = "file"
    ) -> Callable[[], dict[str, int]]:
        """Store the object now; return the work that ingests it (run in the background or at once)."""
        source = self.source(principal.tenant, source_id, kind)
        self.blobs.write(source.location, path + SIDECAR_SUFFIX, json.dumps({"tags": tags}).encode())
        self.blobs.write(source.location, path, data)
        return lambda: self.ingest_now(source, path)

    def ingest_now(self, source: Source, path: str) -> dict[str, int]:
        job = self.ingest.ingest(source, path)
        if job is None:
            return {"documents": 0, "unchanged": 1}
        if job.status == "failed":
            raise RagError(job.error or "ingest failed")
        return job.counts

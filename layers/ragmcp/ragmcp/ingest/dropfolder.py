"""Managed sources a tenant writes into over MCP (uploads, notes): write the object and its
sidecar, then ingest it through the same pipeline as every other file.

The sidecar names the object's owner (security.policy.owner_of of who first wrote it): another
principal of the tenant may overwrite the object only as an admin, and the owner stays."""

from __future__ import annotations

import json
from collections.abc import Callable

from ragmcp.domain.errors import Forbidden, RagError
from ragmcp.domain.models import DocKind, Principal, Source
from ragmcp.ingest.pipeline import SIDECAR_SUFFIX, IngestService
from ragmcp.ports import BlobStore, SourceStore
from ragmcp.security.policy import may_change, owner_of

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
        self,
        principal: Principal,
        source_id: str,
        path: str,
        data: bytes,
        tags: list[str],
        kind: DocKind = "file",
        *,
        owner: str | None = None,
    ) -> Callable[[], dict[str, int]]:
        """Store the object now; return the work that ingests it (run in the background or at once).
        `owner`: whose a new object is when not the writer's (an admin finishing another's upload)."""
        source = self.source(principal.tenant, source_id, kind)
        owner = self.owner_after_write(principal, source, path, owner)
        sidecar = {"tags": tags, **({"owner": owner} if owner is not None else {})}
        self.blobs.write(source.location, path + SIDECAR_SUFFIX, json.dumps(sidecar).encode())
        self.blobs.write(source.location, path, data)
        return lambda: self.ingest_now(source, path)

    def check_write(self, principal: Principal, source_id: str, path: str) -> None:
        """Raise Forbidden unless the principal may write this object (before any work is done)."""
        source = self.sources.get(principal.tenant, source_id)
        if source is not None:
            self.owner_after_write(principal, source, path)

    def owner_after_write(
        self, principal: Principal, source: Source, path: str, new_owner: str | None = None
    ) -> str | None:
        """The object's owner once the principal has written it: a new object becomes the
        principal's; an existing one keeps its owner, and only they or an admin may overwrite it
        (one without an owner, written before owners were kept, only an admin)."""
        try:
            sidecar = json.loads(self.blobs.read(source.location, path + SIDECAR_SUFFIX))
        except FileNotFoundError:
            if not self._exists(source, path):
                return new_owner or owner_of(principal)  # a new object
            sidecar = {}
        except ValueError:
            sidecar = {}
        owner = sidecar.get("owner") if isinstance(sidecar, dict) else None
        if not may_change(principal, owner):
            raise Forbidden(f"{source.source_id}/{path} belongs to another user: only they or an admin may change it")
        return owner

    def _exists(self, source: Source, path: str) -> bool:
        try:
            self.blobs.size(source.location, path)
        except FileNotFoundError:
            return False
        return True

    def ingest_now(self, source: Source, path: str) -> dict[str, int]:
        job = self.ingest.ingest(source, path)
        if job is None:
            return {"documents": 0, "unchanged": 1}
        if job.status == "failed":
            raise RagError(job.error or "ingest failed")
        return job.counts

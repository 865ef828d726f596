"""Originals are never rawer than the index.

A source that redacts PII (the default) serves, behind a link, its redacted rendition: the text
the pipeline extracted and indexed, with the same placeholders, stored at ingest beside the
originals (a `renditions/` location the drop folder does not watch). Its raw bytes leave only when
the source opts in with `"serve_originals": "raw"` in `.source.json`; a source that does not
redact serves its original, which holds nothing the index does not. A row of a CSV or JSONL source
always serves its own rendition, the row as indexed (its source's column rules applied: hidden
columns never, the whitelist when there is one), never the file that holds every row.

A download is never active content on the server's origin (`download_headers`): no sniffing, a
sandboxing Content-Security-Policy, and anything but plain text, a PDF or a raster image is an
attachment, so an HTML or SVG original cannot run script next to the console.

A download re-checks, at download time, the access of the credential that minted the link
(security/identity.py, Identities.recheck) and the document's ACL and tier, and is audited.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import mimetypes
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote

from ragmcp.domain.models import Document, Principal, Source
from ragmcp.ports import BlobStore, DocumentStore, Links, SourceStore
from ragmcp.security.audit import UNAUTHENTICATED, AuditLog
from ragmcp.security.identity import Identities
from ragmcp.security.policy import can_read

log = logging.getLogger(__name__)

RENDITION_MEDIA_TYPE = "text/plain; charset=utf-8"
DOWNLOAD_TOOL = "GET /files"
DOWNLOAD_CSP = "sandbox; default-src 'none'"
SHOWN_INLINE = frozenset({"text/plain", "application/pdf"})


def shown_inline(media_type: str) -> bool:
    """Whether a browser may show a download in place: plain text, a PDF or a raster image (not SVG,
    which is a document that can hold script)."""
    kind = media_type.split(";", 1)[0].strip().lower()
    return kind in SHOWN_INLINE or (kind.startswith("image/") and kind != "image/svg+xml")


def download_headers(media_type: str, file_name: str) -> dict[str, str]:
    """The headers of every download (/files, /console/open): never sniffed into another type, sandboxed
    with nothing allowed to load, and an attachment unless `shown_inline`."""
    disposition = "inline" if shown_inline(media_type) else "attachment"
    return {
        "content-disposition": f"{disposition}; filename*=UTF-8''{quote(file_name)}",
        "content-security-policy": DOWNLOAD_CSP,
        "x-content-type-options": "nosniff",
        "referrer-policy": "no-referrer",
        "cache-control": "no-store",
    }


def rendition_path(doc_id: str) -> str:
    """A rendition's name: the hash of the doc_id (a row's pk or a path may hold anything)."""
    return hashlib.sha256(doc_id.encode()).hexdigest() + ".txt"


@dataclass(frozen=True, slots=True)
class Stored:
    """The object a link to a document serves."""

    location: str
    path: str
    media_type: str
    file_name: str


@dataclass(frozen=True, slots=True)
class Download:
    status: int
    data: bytes = b""
    media_type: str = ""
    file_name: str = ""
    error: str = ""


class Originals:
    def __init__(self, blobs: BlobStore, sources: SourceStore, renditions_for: Callable[[str, str], str]):
        self.blobs = blobs
        self.sources = sources
        self.renditions_for = renditions_for

    @staticmethod
    def serves_raw(source: Source) -> bool:
        return not source.redact_pii or source.serve_originals == "raw"

    @staticmethod
    def serves_rendition(source: Source, doc: Document) -> bool:
        """A row always (its link serves the row, not its file); any document of a source not serving raw."""
        return doc.kind == "row" or not Originals.serves_raw(source)

    def save_rendition(self, source: Source, doc: Document, text: str) -> bool:
        """Keep the indexed text of a document of a redacting source, or of a row (called at ingest). A
        rendition that cannot be written (a store refusing it) leaves its links serving nothing, not the
        original, and the document indexed: False, and a warning."""
        if not source.redact_pii and doc.kind != "row":
            return True
        location = self.renditions_for(doc.tenant, doc.source)
        try:
            self.blobs.write(location, rendition_path(doc.doc_id), text.encode())
        except Exception as exc:  # the store's own error type (OSError, botocore's ClientError)
            log.warning("no rendition of %r: %s: its links serve nothing", doc.doc_id, type(exc).__name__)
            return False
        return True

    def delete_rendition(self, doc: Document) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.blobs.delete(self.renditions_for(doc.tenant, doc.source), rendition_path(doc.doc_id))

    def stored(self, doc: Document) -> Stored | None:
        """What a link to `doc` serves: the original, or its redacted rendition; None without a source."""
        source = self.sources.get(doc.tenant, doc.source)
        if source is None:
            return None
        if not self.serves_rendition(source, doc):
            media_type = mimetypes.guess_type(doc.file_name)[0] or "application/octet-stream"
            return Stored(source.location, doc.path, media_type, doc.file_name)
        location = self.renditions_for(doc.tenant, doc.source)
        name = f"{doc.file_name}.{doc.pk}.txt" if doc.kind == "row" else f"{doc.file_name}.redacted.txt"
        return Stored(location, rendition_path(doc.doc_id), RENDITION_MEDIA_TYPE, name)

    def read(self, doc: Document) -> Download:
        """What a link to `doc` serves, read now (the caller has checked the reader's access)."""
        stored = self.stored(doc)
        if stored is None:
            return Download(404, error="document not found")
        try:
            data = self.blobs.read(stored.location, stored.path)
        except FileNotFoundError:
            missing = "document not found"
            if doc.kind == "row":
                missing = "no rendition of this row (re-ingest its file to make one)"
            elif stored.media_type == RENDITION_MEDIA_TYPE:
                missing = "no redacted rendition of this document (re-ingest it to make one)"
            return Download(404, error=missing)
        return Download(200, data, stored.media_type, stored.file_name)


class Downloads:
    """GET /files/...: the link checked, its minter's access re-checked now, the object read, audited."""

    def __init__(
        self, links: Links, identities: Identities, documents: DocumentStore, originals: Originals, audit: AuditLog
    ):
        self.links = links
        self.identities = identities
        self.documents = documents
        self.originals = originals
        self.audit = audit

    def open(self, tenant: str, doc_id: str, expires: int, grant: str, signature: str) -> Download:
        minted = self.links.verify(tenant, doc_id, expires, grant, signature)
        principal = self.identities.recheck(minted) if minted is not None else None
        if principal is None:
            download = Download(403, error="link invalid, expired or revoked")
            outcome = "refused 403"
        else:
            download = self._read(principal, tenant, doc_id)
            outcome = "ok" if download.status == 200 else f"error {download.status}"
        # A link that does not verify names its tenant on the caller's word: kept apart from the tenants' chains.
        who = principal or minted or Principal(tenant=UNAUTHENTICATED, scopes=())
        arguments = {"tenant": tenant, "doc_id": doc_id, "expires": expires}
        if principal is None:
            self.audit.refused(who, DOWNLOAD_TOOL, arguments, outcome)
        else:
            self.audit.append(who, DOWNLOAD_TOOL, arguments, {"doc_id": doc_id} if download.data else None, outcome)
        return download

    def _read(self, principal: Principal, tenant: str, doc_id: str) -> Download:
        doc = self.documents.get(tenant, doc_id)
        if doc is None or not can_read(principal, doc):
            return Download(404, error="document not found")
        return self.originals.read(doc)

"""What a caller may see besides search hits: sources, documents, chunks, rows, stats.

Every lookup applies the access policy; a document the caller may not read is reported
exactly like one that does not exist, so nothing leaks across tenants or ACLs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ragmcp.domain.errors import LimitExceeded, NotFound, ParseFailure, RagError
from ragmcp.domain.models import Chunk, Document, Principal, Source
from ragmcp.ingest.limits import is_over_limit
from ragmcp.ingest.pipeline import DocumentParser, parse_document
from ragmcp.ingest.redaction import redact_document
from ragmcp.ports import BlobStore, DocumentStore, SearchIndex, SourceStore
from ragmcp.security.policy import can_read, can_see_source

DocumentSort = Literal["title", "uploaded_at", "size"]
FILE_FIELDS = ("file_name", "file_type", "title", "size_bytes", "pages", "content_hash", "updated_at")
TEXT_BATCH = 64
"""Chunks read at a time when a document's text is put together within a budget (`Catalog.text_within`)."""
SEPARATOR = "\n\n"


def utf8_size(text: str) -> int:
    return len(text.encode())


def cut_to(text: str, room: int, size: Callable[[str], int]) -> str:
    """The longest prefix of `text` (whole characters) whose size is at most `room`, found in a few
    passes: `size` never counts a character as less than its UTF-8 bytes' share, so each pass only shortens."""
    prefix = text.encode()[: max(room, 0)].decode(errors="ignore")
    while prefix and (excess := size(prefix) - room) > 0:
        prefix = prefix[: len(prefix) - max(1, excess // 6)]
    return prefix


@dataclass(slots=True)
class AccessCheck:
    """Whether the caller may open the document behind a segment, decided now."""

    has_access: bool
    document: Document | None = None
    page: int | None = None
    error: str | None = None


@dataclass(slots=True)
class Excerpt:
    """Text of a document put together within a budget."""

    text: str
    chunks: int
    """How many of its chunks (of the page asked for) went into it, the one cut included."""
    truncated: bool


@dataclass(slots=True)
class SourceStats:
    source: Source
    docs: int
    chunks: int


class Catalog:
    def __init__(
        self,
        *,
        index: SearchIndex,
        documents: DocumentStore,
        sources: SourceStore,
        blobs: BlobStore,
        parser: DocumentParser = parse_document,
    ):
        self.index = index
        self.documents = documents
        self.sources = sources
        self.blobs = blobs
        self.parser = parser
        """Reads an original again (`source_row`): the ingest's, so a parse sandbox and its limits hold here too."""

    def visible_sources(self, principal: Principal) -> list[Source]:
        return [s for s in self.sources.list(principal.tenant) if can_see_source(principal, s)]

    def document(self, principal: Principal, ref: str | int) -> Document:
        """The document by doc_id or number, or NotFound (also when the caller may not read it)."""
        if isinstance(ref, int):
            doc = self.documents.get_by_number(principal.tenant, ref)
        else:
            doc = self.documents.get(principal.tenant, ref)
        if doc is None or not can_read(principal, doc):
            raise NotFound(f"document {ref!s} not found")
        return doc

    def find_documents(self, principal: Principal, refs: Sequence[str]) -> list[Document]:
        """The readable documents among `refs`, in the order asked; unknown ones are left out."""
        found = []
        for ref in dict.fromkeys(refs):
            doc = self.documents.get(principal.tenant, ref)
            if doc is not None and can_read(principal, doc):
                found.append(doc)
        return found

    def check_access(self, principal: Principal, segment_uid: str) -> AccessCheck:
        doc_id = segment_uid.rsplit("#", 1)[0]
        doc = self.documents.get(principal.tenant, doc_id)
        if doc is None:
            deleted = self.documents.known(principal.tenant, doc_id)
            return AccessCheck(False, error="Document has been deleted" if deleted else "Document not found")
        if not can_read(principal, doc):
            return AccessCheck(False, error="Access denied")
        found = self.index.get_chunks(principal.tenant, [segment_uid])
        page = found[segment_uid][0].page_start if segment_uid in found else None
        return AccessCheck(True, document=doc, page=page)

    def by_path(self, principal: Principal, path: str) -> list[Document]:
        tenant = principal.tenant
        docs = [d for s in self.sources.list(tenant) for d in self.documents.by_path(tenant, s.source_id, path)]
        return [d for d in docs if can_read(principal, d)]

    def list_documents(
        self, principal: Principal, sort: DocumentSort = "uploaded_at", limit: int = 50, offset: int = 0
    ) -> tuple[list[Document], int]:
        """A page of the readable documents, and how many there are in all."""
        docs = [d for d in self.documents.list(principal.tenant) if can_read(principal, d)]
        keys = {
            "title": lambda d: (d.title.lower(), d.doc_id),
            "uploaded_at": lambda d: (d.created_at, d.doc_id),
            "size": lambda d: (d.size_bytes, d.doc_id),
        }
        docs.sort(key=keys[sort], reverse=sort != "title")
        return docs[offset : offset + limit], len(docs)

    def chunks_of(self, doc: Document, limit: int | None = None) -> list[Chunk]:
        """The document's chunks in order (the first `limit` of them when given)."""
        count = doc.chunk_count if limit is None else min(doc.chunk_count, limit)
        ids = [f"{doc.doc_id}#{n}" for n in range(count)]
        found = self.index.get_chunks(doc.tenant, ids)
        return [found[i][0] for i in ids if i in found]

    def text_within(
        self, doc: Document, budget: int, *, page: int | None = None, size: Callable[[str], int] = utf8_size
    ) -> Excerpt:
        """The document's text (one page's when `page` is given), its chunks joined as `text_of`
        joins them, cut where `size` (UTF-8 bytes unless given) passes `budget`. The chunks are read
        TEXT_BATCH at a time and no further than the budget (or the page) reaches, so a document of
        any size costs at most the budget and one batch in memory."""
        parts: list[str] = []
        room, taken = budget, 0
        for start in range(0, doc.chunk_count, TEXT_BATCH):
            ids = [f"{doc.doc_id}#{n}" for n in range(start, min(start + TEXT_BATCH, doc.chunk_count))]
            found = self.index.get_chunks(doc.tenant, ids)
            for chunk in (found[i][0] for i in ids if i in found):
                if page is not None:
                    first = chunk.page_start or 1
                    if first > page:
                        return Excerpt("".join(parts), taken, False)
                    if (chunk.page_end or first) < page:
                        continue
                piece = (SEPARATOR if taken else "") + chunk.text
                taken += 1
                cost = size(piece)
                if cost > room:
                    parts.append(cut_to(piece, room, size))
                    return Excerpt("".join(parts), taken, True)
                parts.append(piece)
                room -= cost
        return Excerpt("".join(parts), taken, False)

    def chunks(self, principal: Principal, chunk_ids: Sequence[str]) -> list[tuple[Chunk, Document]]:
        """Readable chunks in the order asked; unknown or unreadable ones are left out."""
        found = self.index.get_chunks(principal.tenant, list(dict.fromkeys(chunk_ids)))
        return [found[c] for c in dict.fromkeys(chunk_ids) if c in found and can_read(principal, found[c][1])]

    def text_of(self, doc: Document) -> str:
        """The document's text, put back together from its chunks (overlaps included once per chunk)."""
        return "\n\n".join(c.text for c in self.chunks_of(doc))

    def stats(self, principal: Principal) -> list[SourceStats]:
        result = []
        for source in self.sources.list(principal.tenant):
            docs = [d for d in self.documents.list(principal.tenant, source.source_id) if can_read(principal, d)]
            result.append(SourceStats(source, len(docs), sum(d.chunk_count for d in docs)))
        return result

    def source_row(self, doc: Document, columns: Sequence[str] | None) -> dict[str, Any]:
        """Re-read the authoritative row (rows) or the original's metadata (files) from the stored original.

        Only the source's whitelisted columns are returned, whatever is asked.
        """
        source = self.sources.get(doc.tenant, doc.source)
        if source is None:
            raise NotFound(f"source of {doc.doc_id} not found")
        allowed = list(source.fetchable_columns())
        wanted = [c for c in (columns or allowed) if c in allowed]
        if doc.kind != "row":
            fields = {
                "file_name": doc.file_name,
                "file_type": doc.file_type,
                "title": doc.title,
                "size_bytes": self.blobs.size(source.location, doc.path),
                "pages": doc.pages,
                "content_hash": doc.content_hash,
                "updated_at": doc.updated_at.isoformat(),
            }
            return {k: fields[k] for k in (columns or FILE_FIELDS) if k in fields}
        data = self.blobs.read(source.location, doc.path)
        try:
            parsed = self.parser(data, doc.file_name, source, ocr=False)
        except ParseFailure as failure:
            error = LimitExceeded if is_over_limit(failure.message) else RagError
            raise error(f"the original of {doc.doc_id} cannot be read: {failure.message}") from None
        for item in parsed:
            if item.pk == doc.pk and item.row is not None:
                if source.redact_pii:
                    redact_document(item)
                return {c: item.row[c] for c in wanted if c in item.row}
        raise NotFound(f"row {doc.pk} is no longer in {doc.file_name}")

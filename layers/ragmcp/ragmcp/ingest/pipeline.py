"""One ingestion pipeline for `ragmcp ingest`, the watched folder, uploads and S3 events.

parse -> chunk -> embed (through the cache) -> replace the document's chunks in the index
in one step -> record the document. Idempotent on (path, content hash).

A file whose new version cannot be read keeps its last good passages, marked stale with the
reason. A sync (or a watched folder's batch of changes) that would delete more than
`mass_delete_share` of a source's documents, or all of them, holds the deletions on the source
until they are allowed: a folder that vanished or a typo never empties an index. The same share
guards the rows of a table: a new version that drops more than it of the file's row documents
(a CSV cut short) is held, its old rows kept and marked stale with the reason, until allowed.
A row whose key is already a row of another file is reported and skipped, never overwritten.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Protocol

import numpy as np
from pydantic import BaseModel, ValidationError

from ragmcp.domain.errors import ParseFailure
from ragmcp.domain.models import Acl, Chunk, Document, Job, Source, Tier, one_collection, utcnow
from ragmcp.ingest.filetypes import SUPPORTED_TYPES, file_type, parser_version
from ragmcp.ingest.jobs import out_of_space
from ragmcp.ingest.limits import ParseLimits
from ragmcp.ingest.parsed import ParsedDocument
from ragmcp.ingest.poisoning import flags_for
from ragmcp.ingest.redaction import redact_document
from ragmcp.ports import BlobStore, DocumentStore, Embedder, EmbeddingCache, JobStore, SearchIndex, SourceStore
from ragmcp.progress import Progress
from ragmcp.threadnames import name_native_thread

if TYPE_CHECKING:
    from ragmcp.ingest.chunking import Chunker
    from ragmcp.security.originals import Originals

log = logging.getLogger(__name__)

SIDECAR_SUFFIX = ".metadata.json"
EMBED_GROUP_CHUNKS = 64
"""Chunks of a file's documents embedded in one call: enough for the embedder to cut length-sorted
runs for every worker, while the previous group is written (rows of a table, abstracts of a JSONL)."""
SOURCE_SETTINGS_FILE = ".source.json"


class Sidecar(BaseModel):
    """`<file>.metadata.json`: per-file settings, as Bedrock Knowledge Bases users know them."""

    title: str | None = None
    tags: list[str] = []
    groups: list[str] = []
    users: list[str] = []
    tier: Tier | None = None
    source_url: str | None = None
    metadata: dict[str, str | int | float | bool] = {}
    owner: str | None = None
    """Who wrote the file over MCP (a note, an upload: ingest/dropfolder.py writes it)."""


@dataclass(slots=True)
class SyncReport:
    ingested: int = 0
    """Files indexed for the first time."""
    updated: int = 0
    """Files whose new version replaced the old one."""
    unchanged: int = 0
    deleted: int = 0
    held: int = 0
    """Deletions held back: too large a share of the source vanished at once."""
    failed: int = 0
    duplicates: int = 0
    """Rows skipped because their key is already a row of another file."""
    jobs: list[Job] = field(default_factory=list)

    def line(self) -> str:
        counts = (
            f"{self.ingested} ingested, {self.updated} updated, {self.unchanged} unchanged, "
            f"{self.deleted} deleted, {self.held} held, {self.failed} failed"
        )
        return counts + (f", {self.duplicates} duplicate keys" if self.duplicates else "")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_ingestible(path: str) -> bool:
    name = PurePosixPath(path).name
    if name.startswith(".") or name.endswith(SIDECAR_SUFFIX):
        return False
    return file_type(name) in SUPPORTED_TYPES


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A document ready to embed: its record, its text (for the rendition) and its chunks."""

    doc: Document
    text: str
    records: list[Chunk]


class DocumentParser(Protocol):
    def __call__(self, data: bytes, file_name: str, source: Source, *, ocr: bool = True) -> list[ParsedDocument]: ...


def parse_document(
    data: bytes, file_name: str, source: Source, *, ocr: bool = True, limits: ParseLimits | None = None
) -> list[ParsedDocument]:
    """Parse with the source's settings, reading scanned PDF pages by OCR when `ocr` (and installed),
    in this process, held to `limits`' format budgets (the defaults when None).
    The parsers' libraries (pypdfium2, python-docx, ...) load on the first parse, not at import: a function that
    never parses (the MCP API) never pays for them."""
    from ragmcp.ingest.ocr import page_ocr
    from ragmcp.ingest.parsers import parse

    return parse(
        data,
        file_name,
        pk_column=source.pk_column,
        text_columns=source.text_columns,
        column_shown=source.shows_column,
        ocr=page_ocr() if ocr else None,
        limits=limits,
    )


@contextmanager
def _readable(path: str) -> Iterator[None]:
    """A file that cannot be read becomes a ParseFailure naming the reason."""
    try:
        yield
    except FileNotFoundError:
        raise ParseFailure("file not found") from None
    except OSError as exc:
        name = "the file" if not path.endswith(SIDECAR_SUFFIX) else SIDECAR_SUFFIX
        raise ParseFailure(f"cannot read {name}: {exc.strerror or type(exc).__name__}") from None


def _doc_id(source: Source, path: str, item: ParsedDocument) -> str:
    """A row's document is named by its key, any other document by its file's path."""
    return f"{source.source_id}:{item.pk}" if item.pk is not None else f"{source.source_id}:{path}"


def one_line(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class RowsHeld(ParseFailure):
    """A file's new version would delete too many of its row documents at once."""

    def __init__(self, dropped: int, total: int, share: float):
        super().__init__(
            f"held: {dropped} of {total} rows vanished at once (more than {share:.0%}); apply with "
            "--allow-mass-delete or rag.admin.sync allow_mass_delete"
        )
        self.dropped = dropped


class IngestService:
    def __init__(
        self,
        *,
        index: SearchIndex,
        documents: DocumentStore,
        jobs: JobStore,
        sources: SourceStore,
        blobs: BlobStore,
        embedder: Embedder,
        cache: EmbeddingCache,
        chunker: Chunker,
        max_file_bytes: int,
        ocr: bool = True,
        originals: Originals | None = None,
        mass_delete_share: float = 0.5,
        transaction: Callable[[], AbstractContextManager[object]] = nullcontext,
        parser: DocumentParser = parse_document,
    ):
        self.index = index
        self.documents = documents
        self.jobs = jobs
        self.sources = sources
        self.blobs = blobs
        self.embedder = embedder
        self.cache = cache
        self.chunker = chunker
        self.max_file_bytes = max_file_bytes
        self.ocr = ocr
        self.originals = originals
        self.mass_delete_share = mass_delete_share
        self.parser = parser
        """Turns a file's bytes into documents: `parse_document`, or a `sandbox.ParseSandbox` running it
        in a worker process under limits."""
        self.transaction = transaction
        """One atomic write over the index and the document store (where they share a database):
        a crash never leaves a document in one and not the other."""

    def sync(
        self, source: Source, progress: Progress | None = None, *, allow_mass_delete: bool = False
    ) -> SyncReport:
        """Bring the index in line with the source: new and changed files in, vanished files out
        (unless too many vanished at once: those deletions are held, see `remove_vanished`);
        `progress` counts the files as they are done."""
        report = SyncReport()
        present = [p for p in self.blobs.list(source.location) if is_ingestible(p)]
        progress = progress or Progress("files")
        progress.begin(len(present))
        for path in present:
            progress.working_on(path)
            job = self.ingest(source, path, allow_mass_delete=allow_mass_delete)
            if job is None:
                report.unchanged += 1
            else:
                report.jobs.append(job)
                report.duplicates += job.counts.get("duplicate_keys", 0)
                if job.counts.get("held_rows"):
                    report.held += job.counts["held_rows"]
                elif job.status == "failed":
                    report.failed += 1
                elif job.counts.get("updated"):
                    report.updated += 1
                else:
                    report.ingested += 1
            progress.advance(failed=job is not None and job.status == "failed")
        known = {d.path for d in self.documents.list(source.tenant, source.source_id)}
        # A file missing from the listing is gone only if it cannot be found: one in a folder that
        # cannot be read is kept (never read as empty).
        vanished = [p for p in sorted(known - set(present)) if not self._exists(source, p)]
        removed, held = self.remove_vanished(source, vanished, allow=allow_mass_delete)
        report.jobs.extend(removed)
        report.deleted, report.held = len(removed), report.held + len(held)
        stored = self.sources.get(source.tenant, source.source_id) or source
        self.sources.put(stored.model_copy(update={"last_sync": utcnow()}))
        progress.end()
        return report

    def remove_vanished(
        self, source: Source, paths: Sequence[str], *, allow: bool = False
    ) -> tuple[list[Job], list[str]]:
        """Remove the documents of files that vanished, or hold the deletions when they are all of
        the source's documents or more than `mass_delete_share` of them. Returns (removal jobs,
        held paths); the held paths are kept on the source (for /healthz and rag.admin.stats) until
        a deletion is allowed or the files come back."""
        stored = self.sources.get(source.tenant, source.source_id) or source
        total = len({d.path for d in self.documents.list(source.tenant, source.source_id)})
        paths = list(dict.fromkeys(paths))
        if paths and not allow and (len(paths) >= total or len(paths) > self.mass_delete_share * total):
            reason = (
                f"{len(paths)} of {total} documents' files vanished at once (more than "
                f"{self.mass_delete_share:.0%}); apply with --allow-mass-delete or rag.admin.sync allow_mass_delete"
            )
            log.warning(
                "holding deletions of source %r: %s; held: %s%s",
                source.source_id,
                reason,
                ", ".join(repr(p) for p in paths[:20]),
                " ..." if len(paths) > 20 else "",
            )
            held = sorted({*stored.held_deletions, *paths})
            self.sources.put(stored.model_copy(update={"held_deletions": tuple(held), "held_reason": reason}))
            return [], paths
        jobs = [self.remove(source, path) for path in paths]
        still = tuple(p for p in stored.held_deletions if p not in paths and not self._exists(source, p))
        if still != stored.held_deletions:
            update = {"held_deletions": still, "held_reason": stored.held_reason if still else None}
            self.sources.put(stored.model_copy(update=update))
        return jobs, []

    def redo(self, source: Source, path: str) -> Job | None:
        """Redo an interrupted job on `path`: ingest it if it is there, else remove its documents
        (a mass deletion is held as always)."""
        if self._exists(source, path):
            return self.ingest(source, path)
        if not self.documents.by_path(source.tenant, source.source_id, path):
            return None
        removed, _held = self.remove_vanished(source, [path])
        return removed[0] if removed else None

    def _exists(self, source: Source, path: str) -> bool:
        """Whether the file is there; True when that cannot be told (its folder cannot be read)."""
        try:
            self.blobs.size(source.location, path)
        except FileNotFoundError:
            return False
        except OSError as exc:
            log.warning("cannot tell whether %r is still there (%s): its documents are kept", path, exc.strerror)
        return True

    def ingest(self, source: Source, path: str, *, allow_mass_delete: bool = False) -> Job | None:
        """Ingest one file; None when it is already indexed, not stale, with the same content by the
        same version of its parser. A file that cannot be read keeps its documents' last good
        version, marked stale with the reason."""
        existing = self.documents.by_path(source.tenant, source.source_id, path)
        try:
            data = self._read(source, path)
            sidecar_bytes = self._sidecar_bytes(source, path)
        except ParseFailure as failure:
            return self._failed(self._job(source, path), existing, failure.message)
        content_hash = sha256_hex(data + b"\0" + sidecar_bytes)
        version = parser_version(file_type(path))
        fresh = all(d.content_hash == content_hash and d.parser_version == version and not d.stale for d in existing)
        if existing and fresh:
            return None
        job = self._job(source, path)
        try:
            sidecar = self._sidecar(sidecar_bytes)
            parsed = self.parser(data, PurePosixPath(path).name, source, ocr=self.ocr)
            counts = self._index_all(
                source, path, parsed, sidecar, content_hash, len(data), existing, allow_mass_delete
            )
        except RowsHeld as held:
            job = self._failed(job, existing, held.message)
            job.counts["held_rows"] = held.dropped
            self.jobs.put(job)
            return job
        except ParseFailure as failure:
            return self._failed(job, existing, failure.message)
        except Exception as exc:  # a bad file must never stop the others
            if out_of_space(exc):
                raise  # not the file's fault: the caller waits for room and tries again
            log.exception("ingest of %r failed", path)
            return self._failed(job, existing, one_line(f"internal error: {type(exc).__name__}"))
        return self._finish(job, counts=counts, updated=bool(existing))

    def _failed(self, job: Job, existing: list[Document], reason: str) -> Job:
        """The job failed; the documents the file had keep their passages, marked stale."""
        for doc in existing:
            if (doc.stale, doc.stale_reason) != (True, reason):
                self.documents.put(doc.model_copy(update={"stale": True, "stale_reason": reason}))
        if existing:
            job.counts = {"kept_stale": len(existing)}
        return self._finish(job, counts=job.counts, error=reason)

    def remove(self, source: Source, path: str) -> Job:
        job = self._job(source, path, kind="delete")
        removed = 0
        for doc in self.documents.by_path(source.tenant, source.source_id, path):
            with self.transaction():
                self.index.delete_document(doc.tenant, doc.doc_id)
                self.documents.delete(doc.tenant, doc.doc_id)
            if self.originals:
                self.originals.delete_rendition(doc)
            removed += 1
        return self._finish(job, counts={"documents": removed})

    def _read(self, source: Source, path: str) -> bytes:
        """The file's bytes; a ParseFailure saying why when they cannot be had (missing, too
        large, empty, unreadable: the file fails alone, the others go on)."""
        with _readable(path):
            size = self.blobs.size(source.location, path)
            if size > self.max_file_bytes:
                raise ParseFailure(f"file too large: {size} bytes, the limit is {self.max_file_bytes}")
            if size == 0:
                raise ParseFailure("empty file")
            return self.blobs.read(source.location, path)

    def _sidecar_bytes(self, source: Source, path: str) -> bytes:
        try:
            with _readable(path + SIDECAR_SUFFIX):
                return self.blobs.read(source.location, path + SIDECAR_SUFFIX)
        except ParseFailure as failure:
            if failure.message == "file not found":
                return b""
            raise

    @staticmethod
    def _sidecar(raw: bytes) -> Sidecar:
        if not raw:
            return Sidecar()
        try:
            return Sidecar.model_validate(json.loads(raw))
        except (ValueError, ValidationError) as exc:
            raise ParseFailure(one_line(f"invalid {SIDECAR_SUFFIX}: {exc}")) from None

    def _index_all(
        self,
        source: Source,
        path: str,
        parsed: list[ParsedDocument],
        sidecar: Sidecar,
        content_hash: str,
        size: int,
        existing: list[Document],
        allow_mass_delete: bool = False,
    ) -> dict[str, int]:
        before = {d.doc_id: d for d in existing}
        counts: Counter[str] = Counter()
        kept: set[str] = set()
        parsed = self._without_duplicate_keys(source, path, parsed, counts)
        dropped = len(before.keys() - {_doc_id(source, path, item) for item in parsed})
        share = self.mass_delete_share
        if dropped and not allow_mass_delete and (dropped >= len(before) or dropped > share * len(before)):
            if any(d.kind == "row" for d in existing):
                raise RowsHeld(dropped, len(before), share)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed-feed", initializer=name_native_thread) as feed:
            waiting: list[tuple[list[_Prepared], Callable[[], np.ndarray]]] = []
            for group in self._groups(source, path, parsed, sidecar, content_hash, size, before, counts):
                # This group embeds while the previous one is written and the next one prepared.
                waiting.append((group, self._embed_later([c.text for p in group for c in p.records], feed)))
                if len(waiting) > 1:
                    self._write_group(source, *waiting.pop(0), kept, counts)
            for group, vectors in waiting:
                self._write_group(source, group, vectors, kept, counts)
        if counts["documents"] == 0:
            raise ParseFailure("no extractable text")
        for doc_id in before.keys() - kept:
            with self.transaction():
                self.index.delete_document(source.tenant, doc_id)
                self.documents.delete(source.tenant, doc_id)
        counts["updated"] = int(bool(before))
        return {k: v for k, v in counts.items() if v or k in ("documents", "chunks")}

    def _groups(
        self,
        source: Source,
        path: str,
        parsed: list[ParsedDocument],
        sidecar: Sidecar,
        content_hash: str,
        size: int,
        before: dict[str, Document],
        counts: Counter[str],
    ) -> Iterator[list[_Prepared]]:
        """The file's documents with their chunks, in groups of at least EMBED_GROUP_CHUNKS chunks
        (the last may be smaller): the embedder batches a group's chunks by length over its workers."""
        group: list[_Prepared] = []
        for item in parsed:
            if source.redact_pii:
                counts.update(redact_document(item))
            doc = self._document(source, path, item, sidecar, content_hash, size, before)
            records = self._chunks(doc, item, source, counts)
            if not records:
                continue
            doc.chunk_count = len(records)
            group.append(_Prepared(doc, item.text, records))
            if sum(len(p.records) for p in group) >= EMBED_GROUP_CHUNKS:
                yield group
                group = []
        if group:
            yield group

    def _write_group(
        self,
        source: Source,
        group: list[_Prepared],
        vectors_of: Callable[[], np.ndarray],
        kept: set[str],
        counts: Counter[str],
    ) -> None:
        """The group's documents with their chunks' vectors, in one atomic write (one commit a group,
        not one a document)."""
        vectors = vectors_of()
        for prepared in group:
            if self.originals and not self.originals.save_rendition(source, prepared.doc, prepared.text):
                counts["renditions_failed"] += 1
        with self.transaction():
            start = 0
            for prepared in group:
                doc, records = prepared.doc, prepared.records
                self.index.replace_document(doc, records, vectors[start : start + len(records)])
                self.documents.put(doc)
                start += len(records)
        for prepared in group:
            kept.add(prepared.doc.doc_id)
            counts["documents"] += 1
            counts["chunks"] += len(prepared.records)

    def _without_duplicate_keys(
        self, source: Source, path: str, parsed: list[ParsedDocument], counts: Counter[str]
    ) -> list[ParsedDocument]:
        """The rows whose key is not already a row of another file; the others are counted and
        logged, never written over the other file's row. A row of a file that is gone (renamed, or
        its rows moved here) is taken over: its file's deletion would otherwise take the row too."""
        kept = []
        for item in parsed:
            other = None
            if item.pk is not None:
                other = self.documents.get(source.tenant, _doc_id(source, path, item))
            if other is not None and other.path != path and self._exists(source, other.path):
                counts["duplicate_keys"] += 1
                log.warning(
                    "%s:%r: row key %r is already a row of %r: skipped", source.source_id, path, item.pk, other.path
                )
                continue
            kept.append(item)
        return kept

    def _chunks(self, doc: Document, item: ParsedDocument, source: Source, counts: Counter[str]) -> list[Chunk]:
        """The document's chunks, each flagged if it carries a prompt injection; flagged ones left
        out when the source excludes them."""
        drafts = self.chunker.chunk(item)
        flagged = [(d, flags_for(d.text)) for d in drafts]
        counts["flagged_chunks"] += sum(1 for _, f in flagged if f)
        kept = [(d, f) for d, f in flagged if not (f and source.injection_policy == "exclude")]
        return [
            Chunk(
                chunk_id=f"{doc.doc_id}#{n}",
                doc_id=doc.doc_id,
                ordinal=n,
                text=d.text,
                headline=d.headline,
                summary=d.summary,
                page_start=d.page_start,
                page_end=d.page_end,
                char_start=d.char_start,
                char_end=d.char_end,
                flags=f,
            )
            for n, (d, f) in enumerate(kept)
        ]

    def _document(
        self,
        source: Source,
        path: str,
        item: ParsedDocument,
        sidecar: Sidecar,
        content_hash: str,
        size: int,
        before: dict[str, Document],
    ) -> Document:
        name = PurePosixPath(path).name
        doc_id = _doc_id(source, path, item)
        previous = before.get(doc_id)
        metadata: dict[str, object] = dict(sidecar.metadata)
        if item.row is not None:
            metadata.update({k: v for k, v in item.row.items() if isinstance(v, str | int | float | bool)})
        return Document(
            tenant=source.tenant,
            doc_id=doc_id,
            number=self.documents.number_for(source.tenant, doc_id),
            source=source.source_id,
            path=path,
            title=sidecar.title or item.title or name,
            file_name=name,
            file_type=file_type(name),
            kind="row" if item.pk is not None else source.kind,
            source_url=sidecar.source_url,
            content_hash=content_hash,
            parser_version=parser_version(file_type(name)),
            tags=one_collection(sidecar.tags),
            acl=Acl(groups=tuple(sidecar.groups or source.groups), users=tuple(sidecar.users)),
            tier=sidecar.tier or source.tier,
            metadata=metadata,
            pk=item.pk,
            pages=item.pages,
            size_bytes=size,
            created_at=previous.created_at if previous else utcnow(),
            owner=sidecar.owner,
        )

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for texts, embedding only those the cache has not seen with this model."""
        return self._embed_later(texts)()

    def _embed_later(self, texts: Sequence[str], feed: Executor | None = None) -> Callable[[], np.ndarray]:
        """Looks the texts up in the cache now and embeds the missing ones on `feed` (here when
        None); the returned call waits for them, stores them in the cache and gives every text's
        vector. The cache is only used from the calling thread."""
        shas = [sha256_hex(t.encode()) for t in texts]
        found = self.cache.get_many(self.embedder.model_sha256, list(dict.fromkeys(shas)))
        missing = list(dict.fromkeys(s for s in shas if s not in found))
        text_of = dict(zip(shas, texts, strict=True))
        batch = [text_of[s] for s in missing]
        fresh: Future[np.ndarray] | None = None
        if missing and feed is not None:
            fresh = feed.submit(self.embedder.embed, batch)

        def vectors() -> np.ndarray:
            if missing:
                computed = self.embedder.embed(batch) if fresh is None else fresh.result()
                self.cache.put_many(self.embedder.model_sha256, zip(missing, computed, strict=True))
                found.update(zip(missing, computed, strict=True))
            out = np.empty((len(texts), self.embedder.dimension), dtype=np.float32)
            for i, sha in enumerate(shas):
                out[i] = found[sha]
            return out

        return vectors

    def _job(self, source: Source, path: str, kind: str = "ingest") -> Job:
        job = Job(
            job_id=uuid.uuid4().hex,
            tenant=source.tenant,
            type=kind,  # type: ignore[arg-type]
            status="running",
            target=path,
            source=source.source_id,
        )
        self.jobs.put(job)
        return job

    def _finish(
        self, job: Job, *, counts: dict[str, int] | None = None, error: str | None = None, updated: bool = False
    ) -> Job:
        """Record the job's outcome and say it in one log line (ingested, updated, deleted or failed)."""
        job.status = "failed" if error else "succeeded"
        job.error = error
        job.counts = counts or {}
        job.updated_at = utcnow()
        self.jobs.put(job)
        where = f"{job.source}:{job.target!r}"
        if error:
            log.warning("failed %s: %s", where, error)
        elif job.type == "delete":
            log.info("deleted %s", where)
        else:
            log.info("%s %s: %d chunks", "updated" if updated else "ingested", where, job.counts.get("chunks", 0))
        return job

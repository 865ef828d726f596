"""Notes: short Markdown texts agents add and update; stored as objects in the tenant's notes
source and ingested by the same pipeline as files."""

from __future__ import annotations

import uuid

from ragmcp.domain.errors import InvalidArgument, NotFound
from ragmcp.domain.models import Document, Job, Principal, one_collection
from ragmcp.ingest.dropfolder import NOTES, DropFolder
from ragmcp.ports import DocumentStore, TaskQueue
from ragmcp.security.policy import owner_of


class NoteService:
    def __init__(self, drop: DropFolder, documents: DocumentStore, tasks: TaskQueue):
        self.drop = drop
        self.documents = documents
        self.tasks = tasks

    def add(self, principal: Principal, text: str, collection: str, tags: list[str]) -> Job:
        if not text.strip():
            raise InvalidArgument("text must not be empty")
        path = f"{uuid.uuid4().hex}.md"
        all_tags = list(one_collection([*tags, f"collection:{collection}"]))
        job = Job(
            job_id=uuid.uuid4().hex,
            tenant=principal.tenant,
            type="note",
            target=path,
            source=NOTES,
            owner=owner_of(principal),
        )
        work = self.drop.put(principal, NOTES, path, text.encode(), all_tags, kind="note")
        return self.tasks.submit(job, work)

    def update(self, principal: Principal, doc: Document, text: str, collection: str | None = None) -> Document:
        """Rewrite a note in place and re-ingest it at once; its tags stay, and so does its collection
        unless another is given (which then replaces it: a document has exactly one collection).
        Only its owner or an admin may (the drop folder refuses anyone else: Forbidden)."""
        if doc.kind != "note":
            raise InvalidArgument("only notes can be updated")
        if not text.strip():
            raise InvalidArgument("text must not be empty")
        tags = list(doc.tags) if collection is None else list(one_collection([*doc.tags, f"collection:{collection}"]))
        self.drop.put(principal, doc.source, doc.path, text.encode(), tags, kind="note")()
        updated = self.documents.get(principal.tenant, doc.doc_id)
        if updated is None:
            raise NotFound("document not found")
        return updated

"""Chunked uploads over MCP: start -> parts (base64, any order, idempotent) -> finish -> ingest job.

Sessions are stored (they survive a restart) and expire after ten minutes; the sweeper
removes expired sessions and their staged parts. A session belongs to the principal that started
it: only they or an admin add parts to it or finish it; and an upload replaces a file of the same
name only when that file is theirs, or as an admin (ingest/dropfolder.py).
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

from ragmcp.domain.errors import Forbidden, InvalidArgument, LimitExceeded, NotFound
from ragmcp.domain.models import Job, Principal, UploadSession, utcnow
from ragmcp.ingest.dropfolder import UPLOADS
from ragmcp.ingest.filetypes import SUPPORTED_TYPES, file_type
from ragmcp.ports import BlobStore, TaskQueue, UploadStore
from ragmcp.security.policy import may_change, owner_of

_UNSAFE = re.compile(r"[^\w.\- ]+", re.UNICODE)


def safe_filename(name: str) -> str:
    """The last path component, with anything but word characters, dots, dashes and spaces removed."""
    base = _UNSAFE.sub("_", name.replace("\\", "/").rsplit("/", 1)[-1]).strip(" .")
    if not base:
        raise InvalidArgument("filename is empty after removing path and unsafe characters")
    return base[:200]


class UploadService:
    def __init__(
        self,
        *,
        uploads: UploadStore,
        blobs: BlobStore,
        tasks: TaskQueue,
        staging_location: str,
        deliver: Callable[[Principal, str, bytes, list[str], str | None], Callable[[], dict[str, int]]],
        check_replace: Callable[[Principal, str], None],
        max_upload_bytes: int,
        max_part_bytes: int,
        ttl_seconds: int = 600,
    ):
        self.uploads = uploads
        self.blobs = blobs
        self.tasks = tasks
        self.staging = staging_location
        self.deliver = deliver
        self.check_replace = check_replace
        """Raises Forbidden when the principal may not replace an upload of this name."""
        self.max_upload_bytes = max_upload_bytes
        self.max_part_bytes = max_part_bytes
        self.ttl = timedelta(seconds=ttl_seconds)

    def start(
        self, principal: Principal, filename: str, total_size: int, tags: list[str], collection: str
    ) -> UploadSession:
        name = safe_filename(filename)
        if file_type(name) not in SUPPORTED_TYPES:
            raise InvalidArgument(f"unsupported file type: .{file_type(name) or '(none)'}")
        if total_size <= 0:
            raise InvalidArgument("total_size must be positive")
        if total_size > self.max_upload_bytes:
            raise LimitExceeded(f"total_size {total_size} exceeds the limit of {self.max_upload_bytes} bytes")
        self.check_replace(principal, name)
        now = utcnow()
        session = UploadSession(
            tenant=principal.tenant,
            upload_id=str(uuid.uuid4()),
            filename=name,
            total_size=total_size,
            tags=tuple(tags),
            collection=collection,
            created_at=now,
            expires_at=now + self.ttl,
            owner=owner_of(principal),
        )
        self.uploads.put(session)
        return session

    def add_part(self, principal: Principal, upload_id: str, data_b64: str, index: int) -> UploadSession:
        session = self._session(principal, upload_id)
        try:
            data = base64.b64decode(data_b64, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidArgument("data is not valid base64") from None
        if len(data) > self.max_part_bytes:
            raise LimitExceeded(f"a part may hold at most {self.max_part_bytes} bytes")
        if index < 0 or index >= session.total_size:
            raise InvalidArgument(f"chunk_index {index} is out of range for this upload")
        staged = sum(size for i, size in session.parts.items() if i != index)
        if staged + len(data) > session.total_size:
            raise InvalidArgument(f"parts add up to more than total_size ({session.total_size} bytes)")
        self.blobs.write(self.staging, self._part_path(session, index), data)
        updated = self.uploads.add_part(principal.tenant, upload_id, index, len(data))
        if updated is None:
            raise NotFound(f"upload {upload_id} not found (unknown or expired)")
        return updated

    def finish(self, principal: Principal, upload_id: str) -> Job:
        session = self._session(principal, upload_id)
        indexes = sorted(session.parts)
        if indexes != list(range(len(indexes))):
            missing = sorted(set(range(max(indexes, default=-1) + 1)) - set(indexes))
            raise InvalidArgument(f"upload is missing parts {missing[:10]}")
        data = b"".join(self.blobs.read(self.staging, self._part_path(session, i)) for i in indexes)
        if len(data) != session.total_size:
            raise InvalidArgument(f"received {len(data)} bytes, but total_size is {session.total_size}")
        tags = [*session.tags, f"collection:{session.collection}"]
        job = Job(
            job_id=uuid.uuid4().hex,
            tenant=principal.tenant,
            type="upload",
            target=session.filename,
            source=UPLOADS,
            owner=session.owner,
        )
        work = self.deliver(principal, session.filename, data, tags, session.owner)  # the file is the session's
        self.discard(session)
        return self.tasks.submit(job, work)

    def sweep(self, now: datetime | None = None) -> int:
        """Remove expired sessions and their staged parts; the number removed."""
        expired = self.uploads.expired(now or utcnow())
        for session in expired:
            self.discard(session)
        return len(expired)

    def _session(self, principal: Principal, upload_id: str) -> UploadSession:
        session = self.uploads.get(principal.tenant, upload_id)
        if session is None:
            raise NotFound(f"upload {upload_id} not found (unknown or expired)")
        if not may_change(principal, session.owner):
            raise Forbidden(f"upload {upload_id} was started by another user: only they or an admin may continue it")
        return session

    def discard(self, session: UploadSession) -> None:
        """Remove the session and its staged parts (the janitor calls this for sessions TTL removed)."""
        for index in session.parts:
            self.blobs.delete(self.staging, self._part_path(session, index))
        self.uploads.delete(session.tenant, session.upload_id)

    @staticmethod
    def _part_path(session: UploadSession, index: int) -> str:
        return f"{session.tenant}/{session.upload_id}/{index:06d}"

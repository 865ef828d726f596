"""The drop bucket's change events (S3 -> SQS -> the ingest function) applied to the index.

Object keys are `sources/<tenant>/<source>/<path>`. An event only says that a path changed: the
state of the bucket decides what happens, as for the watched folder. An object that exists is
ingested (idempotent on its content), one that does not is removed, so events that arrive late,
twice or out of order leave the index as the bucket is. A sidecar's change re-ingests its file;
a `.source.json` (re)registers its source.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Literal
from urllib.parse import unquote_plus

from aws_lambda_powertools.utilities.data_classes import S3Event
from aws_lambda_powertools.utilities.data_classes.s3_event import S3EventRecord
from pydantic import BaseModel

from ragmcp.domain.errors import RagError
from ragmcp.domain.models import Source
from ragmcp.ingest.dropfolder import DropFolder
from ragmcp.ingest.pipeline import SIDECAR_SUFFIX, SOURCE_SETTINGS_FILE, is_ingestible
from ragmcp.ports import BlobStore, ObjectJobs, SourceStore

log = logging.getLogger(__name__)

SOURCES_PREFIX = "sources/"
RENDITIONS_PREFIX = "renditions/"
"""Redacted renditions of originals (security/originals.py): outside sources/, so never an event."""


class ObjectChange(BaseModel):
    """One change of one object of the drop bucket."""

    bucket: str
    key: str
    version: str
    removed: bool


class ChangeOutcome(BaseModel):
    action: Literal["ingested", "removed", "registered", "ignored"]
    counts: dict[str, int] = {}


class IngestFailed(RagError):
    """The change could not be ingested; raised so that the message is retried (then dead-lettered)."""


def changes_of(body: str) -> list[ObjectChange]:
    """The object changes of an S3 event notification (an SQS message body); none for a test event."""
    event = S3Event(json.loads(body))
    if "Records" not in event:
        return []
    return [
        ObjectChange(
            bucket=record.s3.bucket.name,
            key=unquote_plus(record.s3.get_object.key),
            version=change_version(record),
            removed=record.event_name.startswith("ObjectRemoved"),
        )
        for record in event.records
    ]


def change_version(record: S3EventRecord) -> str:
    """The object's version id (versioned bucket), else the event's sequencer; an emulator that
    sends neither gets its ETag and event time."""
    obj = record.s3.get_object
    return obj.version_id or obj.get("sequencer") or f"{obj.etag}@{record.event_time}"


def source_key(tenant: str, source_id: str) -> str:
    return f"{SOURCES_PREFIX}{tenant}/{source_id}"


def locate(key: str) -> tuple[str, str, str] | None:
    """(tenant, source, path) of a key under sources/, or None for any other key."""
    if not key.startswith(SOURCES_PREFIX):
        return None
    parts = key[len(SOURCES_PREFIX) :].split("/", 2)
    if len(parts) < 3 or not all(parts):
        return None
    tenant, source_id, path = parts
    return tenant, source_id, path


class DropEvents:
    def __init__(
        self,
        *,
        blobs: BlobStore,
        sources: SourceStore,
        drop: DropFolder,
        waiting: ObjectJobs,
        register: Callable[[str, str, str], Source],
    ):
        self.blobs = blobs
        self.sources = sources
        self.drop = drop
        self.waiting = waiting
        self.register = register

    def apply(self, change: ObjectChange) -> ChangeOutcome:
        where = locate(change.key)
        if where is None:
            return ChangeOutcome(action="ignored")
        tenant, source_id, path = where
        location = self.drop.location_for(tenant, source_id)
        if path == SOURCE_SETTINGS_FILE:
            self.register(tenant, source_id, location)
            return ChangeOutcome(action="registered")
        path = path.removesuffix(SIDECAR_SUFFIX)
        if not is_ingestible(path):
            return ChangeOutcome(action="ignored")
        source = self.sources.get(tenant, source_id) or self.register(tenant, source_id, location)
        with self.waiting.hold(tenant, source_id, path):  # one ingest of the object at a time
            present = self._exists(location, path)
            self.waiting.started(tenant, source_id, path)
            error = None
            counts: dict[str, int] = {}
            try:
                counts = self.drop.ingest_now(source, path) if present else self.drop.ingest.remove(source, path).counts
            except RagError as exc:
                error = exc.message
            except Exception as exc:  # recorded on the job, then retried by the queue
                log.exception("change of %r failed", change.key)
                error = f"internal error: {type(exc).__name__}"
            self.waiting.finished(tenant, source_id, path, counts, error)
        if error is not None:
            raise IngestFailed(error)
        return ChangeOutcome(action="ingested" if present else "removed", counts=counts)

    def _exists(self, location: str, path: str) -> bool:
        try:
            self.blobs.size(location, path)
        except FileNotFoundError:
            return False
        return True

"""Sources fed by a folder: a folder's `.source.json` describes, protects and fetches its documents."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from ragmcp.domain.errors import InvalidArgument
from ragmcp.domain.models import Source, Tier
from ragmcp.ingest.pipeline import SOURCE_SETTINGS_FILE, is_ingestible
from ragmcp.ports import BlobStore, DocumentStore, SourceStore


class SourceSettings(BaseModel):
    """A folder's `.source.json`: how its documents are described, protected and fetched."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    description: str | None = None
    groups: tuple[str, ...] | None = None
    tier: Tier | None = None
    pk_column: str | None = None
    text_columns: tuple[str, ...] | None = None
    fetch_columns: tuple[str, ...] | None = None
    hidden_columns: tuple[str, ...] | None = None
    default_selected: bool | None = None
    redact_pii: bool | None = None
    serve_originals: Literal["redacted", "raw"] | None = None
    injection_policy: Literal["warn", "exclude"] | None = None


def register_folder(
    sources: SourceStore, blobs: BlobStore, tenant: str, source_id: str, folder: str, *, pk_column: str
) -> Source:
    """The source that a folder feeds (created, or its folder updated), with the settings of the
    folder's `.source.json` when it has one; `pk_column` is a new source's row key column."""
    source = sources.get(tenant, source_id) or Source(
        tenant=tenant, source_id=source_id, name=source_id, location=folder, pk_column=pk_column
    )
    try:
        raw = blobs.read(folder, SOURCE_SETTINGS_FILE)
    except FileNotFoundError:
        raw = b"{}"
    try:
        declared = SourceSettings.model_validate_json(raw)
    except ValidationError as exc:
        problem = f"{SOURCE_SETTINGS_FILE} in {folder!r} is invalid: {exc.error_count()} errors"
        raise InvalidArgument(problem) from None
    update = {"location": folder, **declared.model_dump(exclude_unset=True)}
    sources.put(source.model_copy(update=update))
    return sources.get(tenant, source_id) or source


@dataclass(frozen=True)
class FolderSwitch:
    """A source that reads one folder, asked to read another: what that would delete."""

    tenant: str
    source_id: str
    old: str
    new: str
    files: int
    """The files the source's documents come from now."""
    deleted: int
    """Those the new folder does not hold: its first sync deletes their documents."""

    def refusal(self) -> str:
        return (
            f"source {self.source_id!r} of tenant {self.tenant!r} reads the folder {self.old} ({self.files} "
            f"files indexed), not {self.new}: to keep both, give this folder a source of its own (--source NAME); "
            f"to make it replace that folder, pass --replace (deletes the documents of the {self.deleted} files "
            "it does not hold); nothing was changed"
        )

    def notice(self) -> str:
        return (
            f"--replace: source {self.source_id!r} of tenant {self.tenant!r} now reads {self.new} instead of "
            f"{self.old}: {self.deleted} of its {self.files} files are not in the new folder, and their documents "
            "are deleted"
        )


def folder_switch(
    sources: SourceStore, documents: DocumentStore, blobs: BlobStore, tenant: str, source_id: str, folder: str
) -> FolderSwitch | None:
    """The switch that reading `folder` as the source would be, when the source exists, reads
    another folder and holds documents (None otherwise: a new source, the same folder, or an empty one)."""
    source = sources.get(tenant, source_id)
    if source is None or source.location == folder:
        return None
    held = {d.path for d in documents.list(tenant, source_id)}
    if not held:
        return None
    present = {p for p in blobs.list(folder) if is_ingestible(p)}
    return FolderSwitch(tenant, source_id, source.location, folder, len(held), len(held - present))

"""Sources fed by a folder: a folder's `.source.json` describes, protects and fetches its documents."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from ragmcp.domain.errors import InvalidArgument
from ragmcp.domain.models import Source, Tier
from ragmcp.ingest.pipeline import SOURCE_SETTINGS_FILE
from ragmcp.ports import BlobStore, SourceStore


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

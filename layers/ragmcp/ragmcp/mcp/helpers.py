"""What every profile's tools check and add the same way (moved from registry.py)."""

from __future__ import annotations

from typing import Any

from ragmcp.domain.errors import InvalidArgument
from ragmcp.domain.models import Document


def check_phrase_bytes(name: str, text: str, limit: int) -> None:
    """A search text longer than `limit` bytes (UTF-8) is an invalid argument `name`."""
    if len(text.encode()) > limit:
        raise InvalidArgument(f"{name}: longer than {limit} bytes")


def stale_fields(doc: Document) -> dict[str, Any]:
    """`stale: true` and its reason, added to a profile's view of a document whose file's newest
    version could not be read (these are its last good passages); nothing for any other document,
    so every answer about a sound document keeps its contract's fields exactly."""
    return {"stale": True, "stale_reason": doc.stale_reason} if doc.stale else {}

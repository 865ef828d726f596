"""Expiring, HMAC-signed links to originals served by the embedded server under /files/.

A link names who minted it (`grant`: the credential's kind and subject, the user, groups and tier
it was minted for), so that a download re-checks that credential and that user's access at
download time, and never grants more than the caller had when the link was made.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import json
import os
import secrets
import time
from pathlib import Path
from urllib.parse import quote, urlencode, urlsplit

from pydantic import ValidationError

from ragmcp.domain.models import Document, Principal
from ragmcp.ports import Links

GRANT_FIELDS = {"tenant", "via", "key_id", "user_id", "groups", "max_tier", "expires_at", "from_directory"}


def load_or_create_secret(path: Path) -> bytes:
    """The server's signing key: created once (mode 0600), read on every later start. Processes
    starting together (`ragmcp serve --workers N`) agree on one key: each writes its candidate to a
    file of its own and links it into place, which only the first link does; all read the winner."""
    if path.exists():
        return path.read_bytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    candidate = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(secrets.token_bytes(32))
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(candidate, path)
    finally:
        candidate.unlink(missing_ok=True)
    return path.read_bytes()


def web_url(url: str | None) -> bool:
    """Whether a sidecar's source_url may be handed out: an absolute http(s) URL with a host (never
    `javascript:`, `data:` or `file:`, which a client could open as active content)."""
    if not url:
        return False
    parts = urlsplit(url.strip())
    return parts.scheme.lower() in ("http", "https") and bool(parts.netloc)


def document_url(links: Links, principal: Principal, doc: Document, page: int | None = None) -> str:
    """A link that opens the original for this caller: the sidecar's own URL when it is http(s), else a
    link minted for the caller (security/originals.py); a page only for a PDF."""
    if doc.source_url and web_url(doc.source_url):
        return doc.source_url.strip()
    return links.url(principal, doc, page if doc.file_type == "pdf" else None)


def encode_grant(principal: Principal) -> str:
    body = principal.model_dump(mode="json", include=GRANT_FIELDS, exclude_none=True)
    raw = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_grant(grant: str) -> Principal | None:
    try:
        raw = base64.urlsafe_b64decode(grant + "=" * (-len(grant) % 4))
        return Principal.model_validate({**json.loads(raw), "scopes": ("read",)})
    except (binascii.Error, ValueError, ValidationError):
        return None


def link_expiry(principal: Principal, ttl_seconds: int, now: float | None = None) -> int:
    """When a link minted now for `principal` ends: after the link lifetime, or with the credential."""
    expires = int((now or time.time()) + ttl_seconds)
    return min(expires, principal.expires_at) if principal.expires_at else expires


class LinkSigner:
    def __init__(self, secret: bytes, base_url: str, ttl_seconds: int):
        self._secret = secret
        self.base_url = base_url.rstrip("/")
        self.ttl_seconds = ttl_seconds

    def _signature(self, tenant: str, doc_id: str, expires: int, grant: str) -> str:
        message = f"{tenant}\n{doc_id}\n{expires}\n{grant}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def url(self, principal: Principal, doc: Document, page: int | None = None, now: float | None = None) -> str:
        expires = link_expiry(principal, self.ttl_seconds, now)
        grant = encode_grant(principal)
        query = urlencode(
            {"expires": expires, "grant": grant, "sig": self._signature(doc.tenant, doc.doc_id, expires, grant)}
        )
        fragment = f"#page={page}" if page else ""
        return f"{self.base_url}/files/{quote(doc.tenant, safe='')}/{quote(doc.doc_id, safe='')}?{query}{fragment}"

    def verify(
        self, tenant: str, doc_id: str, expires: int, grant: str, signature: str, now: float | None = None
    ) -> Principal | None:
        """The principal the genuine, unexpired link was minted for; None otherwise."""
        if expires < (now or time.time()):
            return None
        if not hmac.compare_digest(self._signature(tenant, doc_id, expires, grant), signature):
            return None
        minted = decode_grant(grant)
        return minted if minted is not None and minted.tenant == tenant else None

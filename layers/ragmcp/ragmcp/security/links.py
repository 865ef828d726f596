"""Expiring, HMAC-signed links to originals served by the embedded server under /files/."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from pathlib import Path
from urllib.parse import quote, urlencode


def load_or_create_secret(path: Path) -> bytes:
    """The server's signing key: created once (mode 0600), read on every later start."""
    if path.exists():
        return path.read_bytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_bytes(32)
    path.touch(mode=0o600)
    path.write_bytes(key)
    return key


class LinkSigner:
    def __init__(self, secret: bytes, base_url: str, ttl_seconds: int):
        self._secret = secret
        self.base_url = base_url.rstrip("/")
        self.ttl_seconds = ttl_seconds

    def _signature(self, tenant: str, doc_id: str, expires: int) -> str:
        message = f"{tenant}\n{doc_id}\n{expires}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def url(self, tenant: str, doc_id: str, page: int | None = None, now: float | None = None) -> str:
        expires = int((now or time.time()) + self.ttl_seconds)
        query = urlencode({"expires": expires, "sig": self._signature(tenant, doc_id, expires)})
        fragment = f"#page={page}" if page else ""
        return f"{self.base_url}/files/{quote(tenant, safe='')}/{quote(doc_id, safe='')}?{query}{fragment}"

    def verify(self, tenant: str, doc_id: str, expires: int, signature: str, now: float | None = None) -> bool:
        if expires < (now or time.time()):
            return False
        return hmac.compare_digest(self._signature(tenant, doc_id, expires), signature)

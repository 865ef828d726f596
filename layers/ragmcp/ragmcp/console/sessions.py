"""Who may use the console: a credential with the admin scope (an API key, or an OAuth access
token), given as `Authorization: Bearer` on each request, or an admin API key entered once in
the login form, which sets a signed session cookie (Secure, HttpOnly, SameSite=Strict).

The cookie names the key and an expiry, signed with the server's console secret; every request
re-reads the key, so a revoked key or one that lost its admin scope is out at once. Forms carry a
CSRF token derived from the session (on an open server, from the secret alone); requests
authenticated by header need none, since a browser never adds that header on its own.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass

from ragmcp.domain.models import Principal
from ragmcp.security.identity import Credential, Identities, TokenRejected, key_credential, open_credential

COOKIE = "ragmcp_console"
SESSION_SECONDS = 8 * 3600
OPEN_SESSION = "open"


@dataclass(frozen=True)
class ConsoleUser:
    credential: Credential
    principal: Principal
    session: str | None
    """The cookie's value when signed in by the form, OPEN_SESSION on an open server (forms still
    need a CSRF token there); None for a Bearer header."""


class ConsoleSessions:
    def __init__(self, identities: Identities, secret: bytes):
        self.identities = identities
        self.secret = secret

    def _sign(self, text: str) -> str:
        return hmac.new(self.secret, text.encode(), hashlib.sha256).hexdigest()

    def _admin(self, credential: Credential | None, session: str | None) -> ConsoleUser | None:
        if credential is None or "admin" not in credential.scopes:
            return None
        return ConsoleUser(credential, self.identities.principal(credential), session)

    def open_user(self) -> ConsoleUser | None:
        if not self.identities.is_open():
            return None
        return self._admin(open_credential(self.identities.open_tenant), OPEN_SESSION)

    def bearer(self, presented: str) -> ConsoleUser | None:
        try:
            return self._admin(self.identities.authenticate(presented), None)
        except TokenRejected:
            return None

    def start(self, presented: str, now: float | None = None) -> tuple[str, ConsoleUser] | tuple[None, None]:
        """A session cookie for an admin API key and the admin it signs in, or (None, None)."""
        key = self.identities.keys.authenticate(presented) if presented else None
        if key is None or "admin" not in key.scopes:
            return None, None
        expires = int((now or time.time()) + SESSION_SECONDS)
        body = f"{key.key_id}.{expires}"
        cookie = f"{body}.{self._sign(body)}"
        user = self._admin(key_credential(key), cookie)
        return (cookie, user) if user is not None else (None, None)

    def resume(self, cookie: str, now: float | None = None) -> ConsoleUser | None:
        if cookie.count(".") != 2:
            return None
        key_id, expires, signature = cookie.split(".")
        if not hmac.compare_digest(self._sign(f"{key_id}.{expires}"), signature):
            return None
        if not expires.isdigit() or int(expires) < (now or time.time()):
            return None
        key = self.identities.keys.store.get(key_id)
        if key is None or key.revoked_at is not None:
            return None
        return self._admin(key_credential(key), cookie)

    def csrf(self, session: str) -> str:
        return self._sign(f"csrf:{session}")

    def csrf_ok(self, user: ConsoleUser, token: str) -> bool:
        return user.session is None or hmac.compare_digest(self.csrf(user.session), token)

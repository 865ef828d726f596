"""API keys: `rmcp_<env>_<64 hex>` (or, in ragbox's format, `rbx_live_<64 hex>`), shown once,
stored only as SHA-256 hashes, compared in constant time, revocable; each belongs to one tenant
and carries scopes, a tier and limits.

A key acts for one user (`user`, whose groups and tier the directory holds), for itself (no
user: the identity `key:<key_id>`, which no directory user, asserted user or token can take; no
groups, its tier), or is a platform key (scope `assert-identity`) that names
the end user on each request (security/identity.py)."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

from pydantic import BaseModel, Field

from ragmcp.domain.errors import InvalidArgument, NotFound
from ragmcp.domain.models import Tier, utcnow
from ragmcp.security.models import ApiKey, RateLimits
from ragmcp.security.ports import KeyStore

SCOPES = ("read", "write", "admin", "assert-identity")
KEY_PREFIX = "rmcp_"
RAGBOX_PREFIX = "rbx_live_"
"""ragbox-mcp.md's Key Format: `rbx_live_[64-character hexadecimal string]`."""
KEY_FORMATS = ("ragmcp", "ragbox")
KEY_PREFIXES = (KEY_PREFIX, RAGBOX_PREFIX)
"""What every key this server issues starts with (anything else presented is an OAuth token)."""
KB_MCP_KEY_ID = "kb-mcp-api-key"
"""The key id (and user) of KB_MCP_API_KEY's key in the audit trail and the rate limits."""
SELF_PREFIX = "key:"
"""The identities of keys made without a user (`key:<key_id>`): reserved, no one else may be called so."""
_USER = re.compile(r"^[^\s\x00-\x1f]{1,320}$")
_ENV = re.compile(r"^[a-z0-9]{2,16}$")
_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def self_identity(key_id: str) -> str:
    """The user a key made without one acts as."""
    return SELF_PREFIX + key_id


def hash_key(presented: str) -> str:
    return hashlib.sha256(presented.encode()).hexdigest()


class CreatedKey(BaseModel):
    """The one moment the secret exists outside the caller's hands: returned once, never stored."""

    key: ApiKey
    secret: str = Field(repr=False)


class KeyService:
    def __init__(self, store: KeyStore, env: str = "live"):
        if not _ENV.match(env):
            raise InvalidArgument("key environment must be 2-16 lowercase letters or digits")
        self.store = store
        self.env = env

    def create(
        self,
        tenant: str,
        *,
        name: str = "",
        scopes: tuple[str, ...] = ("read", "write"),
        max_tier: Tier = Tier.standard,
        limits: RateLimits | None = None,
        user: str | None = None,
        platform: bool = False,
        key_format: str = "ragmcp",
    ) -> CreatedKey:
        """A key bound to `user`, a platform key (`platform`: it gets the assert-identity scope),
        or, with neither, a key that is its own user; its secret `rmcp_<env>_...`, or `rbx_live_...`
        in the ragbox format."""
        if key_format not in KEY_FORMATS:
            raise InvalidArgument(f"unknown key format {key_format!r} (known: {', '.join(KEY_FORMATS)})")
        if not _TENANT.match(tenant):
            raise InvalidArgument("tenant must be 1-64 letters, digits, '.', '_' or '-'")
        if user is not None and (platform or "assert-identity" in scopes):
            raise InvalidArgument("a key is either bound to a user or a platform key, not both")
        if user is not None and not _USER.match(user):
            raise InvalidArgument("user must be 1-320 characters without spaces or control characters")
        if user is not None and user.startswith(SELF_PREFIX):
            raise InvalidArgument(f"user names starting with {SELF_PREFIX!r} are reserved for keys made without a user")
        if platform:
            scopes = (*scopes, "assert-identity")
        unknown = sorted(set(scopes) - set(SCOPES))
        if unknown:
            raise InvalidArgument(f"unknown scopes: {', '.join(unknown)} (known: {', '.join(SCOPES)})")
        prefix = RAGBOX_PREFIX if key_format == "ragbox" else f"{KEY_PREFIX}{self.env}_"
        secret = f"{prefix}{secrets.token_hex(32)}"
        key = ApiKey(
            key_id=secrets.token_hex(6),
            tenant=tenant,
            name=name,
            scopes=tuple(dict.fromkeys(scopes)),
            max_tier=max_tier,
            limits=limits or RateLimits(),
            user=user,
            key_hash=hash_key(secret),
        )
        self.store.put(key)
        return CreatedKey(key=key, secret=secret)

    def revoke(self, key_id: str) -> ApiKey:
        key = self.store.get(key_id)
        if key is None:
            raise NotFound(f"no key {key_id!r}")
        revoked = key.model_copy(update={"revoked_at": utcnow()})
        self.store.put(revoked)
        return revoked

    def any_active(self) -> bool:
        """Whether any key may be used: `ragmcp serve` refuses to start without one (unless --open)."""
        return any(key.revoked_at is None for key in self.store.list())

    def authenticate(self, presented: str) -> ApiKey | None:
        """The active key whose hash matches, compared in constant time; None otherwise."""
        digest = hash_key(presented)
        key = self.store.by_hash(digest)
        if key is None or key.revoked_at is not None:
            return None
        return key if hmac.compare_digest(key.key_hash, digest) else None


class ProfileKey:
    """A key given in the environment rather than made by `ragmcp keys` (kb-mcp-server.md's
    KB_MCP_API_KEY): accepted on its profile only, for one tenant, its own user. Only its SHA-256
    is kept, compared in constant time; it is never written to the key store."""

    def __init__(self, secret: str, *, key_id: str, profile: str, tenant: str):
        if not _TENANT.match(tenant):
            raise InvalidArgument("tenant must be 1-64 letters, digits, '.', '_' or '-'")
        self.profile = profile
        scopes = ("read", "write")
        self.key = ApiKey(key_id=key_id, tenant=tenant, name=key_id, scopes=scopes, key_hash=hash_key(secret))

    def matches(self, presented: str, profile: str | None) -> bool:
        same = hmac.compare_digest(self.key.key_hash, hash_key(presented))
        return same and profile == self.profile

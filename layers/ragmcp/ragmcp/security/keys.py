"""API keys: `rmcp_<env>_<64 hex>`, shown once, stored only as SHA-256 hashes, compared in
constant time, revocable; each belongs to one tenant and carries scopes, a tier and limits.

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
    ) -> CreatedKey:
        """A key bound to `user`, a platform key (`platform`: it gets the assert-identity scope),
        or, with neither, a key that is its own user."""
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
        secret = f"{KEY_PREFIX}{self.env}_{secrets.token_hex(32)}"
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

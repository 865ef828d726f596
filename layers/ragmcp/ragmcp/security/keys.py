"""API keys: `rmcp_<env>_<64 hex>`, shown once, stored only as SHA-256 hashes, compared in
constant time, revocable; each belongs to one tenant and carries scopes, a tier and limits."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

from pydantic import BaseModel, Field

from ragmcp.domain.errors import InvalidArgument, NotFound
from ragmcp.domain.models import Principal, Tier, utcnow
from ragmcp.ports import KeyStore
from ragmcp.security.models import ApiKey, RateLimits

SCOPES = ("read", "write", "admin")
_ENV = re.compile(r"^[a-z0-9]{2,16}$")
_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


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
    ) -> CreatedKey:
        if not _TENANT.match(tenant):
            raise InvalidArgument("tenant must be 1-64 letters, digits, '.', '_' or '-'")
        unknown = sorted(set(scopes) - set(SCOPES))
        if unknown:
            raise InvalidArgument(f"unknown scopes: {', '.join(unknown)} (known: {', '.join(SCOPES)})")
        secret = f"rmcp_{self.env}_{secrets.token_hex(32)}"
        key = ApiKey(
            key_id=secrets.token_hex(6),
            tenant=tenant,
            name=name,
            scopes=tuple(dict.fromkeys(scopes)),
            max_tier=max_tier,
            limits=limits or RateLimits(),
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


def principal_for(key: ApiKey) -> Principal:
    return Principal(tenant=key.tenant, key_id=key.key_id, max_tier=key.max_tier, scopes=key.scopes)

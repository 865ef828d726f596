"""Who is calling, proven: a credential (an API key, an OAuth access token, or the open server)
and the one function, `principal_of`, that turns it and the identity a platform asserts into the
Principal every tool, answer and link decides with.

- A key bound to a user acts for that user only: its groups and tier come from the user
  directory. A key created without a user is its own user, `key:<key_id>` (no groups, its tier):
  a name in the `key:` space no directory user, asserted user or token may take. Either refuses
  an asserted user that is not its own.
- A platform key (scope `assert-identity`) may assert the end user (mindset's `x-user-id`, the
  chat app's `username`); the asserted user's directory entry still decides groups and tier,
  and a user missing from the directory gets the tenant's default: no groups, standard tier.
- An access token names its user; its groups and tier come from its claims where the server
  maps them, else from the directory.
- Session tags (`x-session-tags`) only narrow the groups; the credential's tier caps the tier.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from ragmcp.domain.errors import Forbidden
from ragmcp.domain.models import Principal, Tier
from ragmcp.ports import UserDirectory
from ragmcp.security.keys import KEY_PREFIXES, SELF_PREFIX, KeyService, ProfileKey, self_identity
from ragmcp.security.models import ApiKey, RateLimits

ASSERT_IDENTITY = "assert-identity"
"""The scope of a platform key: it may name the end user it acts for."""


class Credential(BaseModel):
    """What a request proved, before any user it asserts is taken into account."""

    model_config = ConfigDict(frozen=True)

    tenant: str
    via: Literal["key", "token", "open"]
    subject: str | None
    """The key id, `oauth:<sub>` for a token, None for the open server."""
    user_id: str | None
    """The user the credential acts for; None for a platform key or the open server."""
    groups: tuple[str, ...] | None
    """Fixed groups, or None: the user directory's."""
    tier: Tier | None
    """Fixed tier, or None: the user directory's."""
    max_tier: Tier
    scopes: tuple[str, ...]
    platform: bool = False
    expires_at: int | None = None
    limits: RateLimits = Field(default_factory=RateLimits)
    """The rate limits of the key it proved, as read with it (a request reads its key once)."""


def key_credential(key: ApiKey) -> Credential:
    base = dict(
        tenant=key.tenant, via="key", subject=key.key_id, max_tier=key.max_tier, scopes=key.scopes, limits=key.limits
    )
    if ASSERT_IDENTITY in key.scopes:
        return Credential(**base, user_id=None, groups=(), tier=Tier.standard, platform=True)
    if key.user is not None:
        return Credential(**base, user_id=key.user, groups=None, tier=None)
    return Credential(**base, user_id=self_identity(key.key_id), groups=(), tier=key.max_tier)


def token_credential(minted: Principal) -> Credential:
    """An access token's credential as a link minted with it recorded it: what the token's claims
    fixed (groups, tier) stays fixed; what the user directory decided is read again."""
    return Credential(
        tenant=minted.tenant,
        via="token",
        subject=minted.key_id,
        user_id=minted.user_id,
        groups=None if "groups" in minted.from_directory else minted.groups,
        tier=None if "tier" in minted.from_directory else minted.max_tier,
        max_tier=minted.max_tier,
        scopes=minted.scopes,
        expires_at=minted.expires_at,
    )


def open_credential(tenant: str) -> Credential:
    """The server without keys or OAuth (loopback development): every tool, every tier, and the
    users a caller names are taken from the directory, as a platform's would be."""
    return Credential(
        tenant=tenant,
        via="open",
        subject=None,
        user_id=None,
        groups=(),
        tier=Tier.privileged,
        max_tier=Tier.privileged,
        scopes=("read", "write", "admin"),
        platform=True,
    )


def principal_of(
    credential: Credential,
    directory: UserDirectory,
    *,
    user: str | None = None,
    session_tags: Sequence[str] | None = None,
    human_uid: str | None = None,
) -> Principal:
    """The Principal for a credential and the identity asserted with it (a user, session tags).

    Raises Forbidden when a credential that acts for one user is asked to act for another.
    """
    if user is not None and not credential.platform and user != credential.user_id:
        raise Forbidden(f"this credential acts for its own user only; it may not act for {user!r}")
    asserted = credential.platform and user is not None
    who = user if asserted else credential.user_id
    if who is not None and who.startswith(SELF_PREFIX) and (asserted or not _own_key(credential, who)):
        raise Forbidden(f"user names starting with {SELF_PREFIX!r} belong to keys made without a user")
    from_directory = asserted or credential.groups is None or credential.tier is None
    record = directory.get(credential.tenant, who) if who is not None and from_directory else None
    if asserted or credential.groups is None:
        groups = record.groups if record else ()
    else:
        groups = credential.groups
    if asserted or credential.tier is None:
        tier = record.max_tier if record else Tier.standard
    else:
        tier = credential.tier
    if session_tags:
        tags = set(session_tags)
        groups = tuple(g for g in groups if g in tags)
    return Principal(
        tenant=credential.tenant,
        via=credential.via,
        key_id=credential.subject,
        user_id=who,
        human_uid=human_uid,
        groups=tuple(dict.fromkeys(groups)),
        max_tier=min(tier, credential.max_tier, key=lambda t: t.rank),
        scopes=credential.scopes,
        expires_at=credential.expires_at,
        from_directory=(
            *(("groups",) if asserted or credential.groups is None else ()),
            *(("tier",) if asserted or credential.tier is None else ()),
        ),
    )


def _own_key(credential: Credential, who: str) -> bool:
    """A key made without a user, acting as itself."""
    return credential.via == "key" and credential.subject is not None and who == self_identity(credential.subject)


class TokenRejected(Exception):
    """An access token that does not prove anything here: `error` is RFC 6750's code
    (invalid_token, insufficient_scope), `status` the HTTP status that answers it."""

    def __init__(self, error: str, description: str, status: int = 401):
        super().__init__(description)
        self.error = error
        self.description = description
        self.status = status


class TokenVerifier(Protocol):
    scopes_supported: tuple[str, ...]

    def verify(self, token: str) -> Credential:
        """The token's credential; raises TokenRejected."""


class Identities:
    """Presented secrets -> credentials -> principals, and a link's minted principal re-checked."""

    def __init__(
        self,
        keys: KeyService,
        users: UserDirectory,
        open_tenant: str,
        tokens: TokenVerifier | None = None,
        open_access: bool = False,
        profile_key: ProfileKey | None = None,
    ):
        self.keys = keys
        self.profile_key = profile_key
        """KB_MCP_API_KEY's key of the kb profile, when set."""
        self.users = users
        self.open_tenant = open_tenant
        self.tokens = tokens
        self.open_access = open_access
        """Started `--open` (loopback only, never on AWS): a request that presents nothing is let in.
        Fixed at start: creating or revoking keys never switches it."""

    def is_open(self) -> bool:
        """The loopback development server, as `ragmcp serve --open` asked."""
        return self.open_access

    def authenticate(self, presented: str | None, profile: str | None = None) -> Credential | None:
        """The credential a presented key or token proves on `profile`'s endpoint (None: /mcp); None
        when refused. A token that fails its checks raises TokenRejected (its reason goes in
        WWW-Authenticate)."""
        if presented and self.profile_key is not None and self.profile_key.matches(presented, profile):
            return key_credential(self.profile_key.key)
        if presented and self.tokens is not None and not presented.startswith(KEY_PREFIXES):
            return self.tokens.verify(presented)
        key = self.keys.authenticate(presented) if presented else None
        if key is not None:
            return key_credential(key)
        return open_credential(self.open_tenant) if self.is_open() else None

    def principal(self, credential: Credential, **asserted: Any) -> Principal:
        return principal_of(credential, self.users, **asserted)

    def recheck(self, minted: Principal) -> Principal | None:
        """The access of a link's minter now: its key still active and its user's directory entry
        as it is now, never more than when the link was minted; None when it has none."""
        if minted.via == "open":
            return minted if self.is_open() else None
        if minted.via == "token":
            credential = token_credential(minted)
        else:
            environment = self.profile_key.key if self.profile_key is not None else None
            if environment is not None and minted.key_id == environment.key_id:
                key: ApiKey | None = environment
            else:
                key = self.keys.store.get(minted.key_id or "")
            if key is None or key.revoked_at is not None or key.tenant != minted.tenant:
                return None
            credential = key_credential(key)
        try:
            now = self.principal(credential, user=minted.user_id if credential.platform else None)
        except Forbidden:
            return None
        groups = tuple(g for g in now.groups if g in minted.groups)
        tier = min(now.max_tier, minted.max_tier, key=lambda t: t.rank)
        return now.model_copy(update={"groups": groups, "max_tier": tier})

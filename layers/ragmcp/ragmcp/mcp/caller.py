"""Who calls a tool (Caller, set per request by the HTTP layer or stdio as `current_caller`) and where
its progress goes (`current_reporter`) (moved from registry.py)."""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS

from ragmcp.domain.errors import Forbidden
from ragmcp.domain.models import Principal
from ragmcp.security.identity import Credential, Identities


@dataclass(frozen=True)
class Caller:
    """Who is calling: the credential the HTTP layer (or stdio) proved, and the identity the request
    asserts with it (mindset's `x-user-id` and `x-session-tags`; chat's `username` comes per call).

    `require` turns them into the Principal through the one policy function
    (security.identity.principal_of); every tool asks it. `problem` holds a header that could not
    be read; a tool that needs the caller raises it as -32602, with the request's id.
    """

    credential: Credential
    identities: Identities
    user: str | None = None
    session_tags: tuple[str, ...] | None = None
    human_uid: str | None = None
    problem: str | None = None
    resolved: list[Principal] = field(default_factory=list, compare=False)

    def require(self, username: str | None = None) -> Principal:
        """The caller's Principal; `username` is an identity the tool's arguments assert."""
        if self.problem:
            raise MCPError(INVALID_PARAMS, self.problem)
        if username is not None and self.user is not None and username != self.user:
            raise Forbidden("the username argument and the x-user-id header name different users")
        principal = self.identities.principal(
            self.credential, user=username or self.user, session_tags=self.session_tags, human_uid=self.human_uid
        )
        self.resolved.append(principal)
        return principal

    @property
    def scopes(self) -> tuple[str, ...]:
        return self.credential.scopes

    def audited(self) -> Principal:
        """The principal a call acted as, for the audit trail: the last one resolved, else the credential
        and the user it claimed to act for."""
        if self.resolved:
            return self.resolved[-1]
        c = self.credential
        user = self.user if c.platform and self.user else c.user_id
        return Principal(tenant=c.tenant, via=c.via, key_id=c.subject, user_id=user, scopes=c.scopes)


current_caller: contextvars.ContextVar[Caller] = contextvars.ContextVar("current_caller")

Reporter = Callable[[float, float | None, str | None], Awaitable[None]]
current_reporter: contextvars.ContextVar[Reporter | None] = contextvars.ContextVar("current_reporter", default=None)
"""Sends notifications/progress for the tool call being answered, when its client asked for them."""

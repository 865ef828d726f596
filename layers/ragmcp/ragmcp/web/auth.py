"""Authentication of MCP requests: the API key or OAuth access token a request presents proves a
credential, or the request is refused (401, or 403 for a token short of scope) and the refusal
audited; the identity the platform headers assert is read into the `Caller`."""

from __future__ import annotations

import json

import anyio
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from ragmcp.domain.models import Principal
from ragmcp.mcp.caller import Caller
from ragmcp.mcp.errors import UNAUTHORIZED
from ragmcp.security.audit import UNAUTHENTICATED
from ragmcp.security.identity import Credential, Identities, TokenRejected
from ragmcp.security.oauth import bearer_challenge
from ragmcp.services import Services
from ragmcp.web.jsonrpc import McpCall, holds_lone_surrogate


def presented_key(headers: dict[str, str]) -> str | None:
    """The API key as `Authorization: Bearer <key>` or `X-API-Key: <key>`."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return headers.get("x-api-key", "").strip() or None


def caller_from_headers(headers: dict[str, str], credential: Credential, identities: Identities) -> Caller:
    """The caller: the proven credential plus the identity the mindset-style headers assert (a
    platform's; security/identity.py decides what they may change). An unreadable header is kept
    as a problem (answered -32602 by the tool that needs it)."""
    problem = None
    tags: tuple[str, ...] | None = None
    raw_tags = headers.get("x-session-tags")
    if raw_tags is not None and raw_tags.strip():
        try:
            parsed = json.loads(raw_tags)
        except (ValueError, RecursionError):
            parsed = None
        if not isinstance(parsed, list) or not all(isinstance(t, str) for t in parsed) or holds_lone_surrogate(parsed):
            problem = "Invalid params: x-session-tags must be a JSON array of strings"
        else:
            tags = tuple(dict.fromkeys(parsed))
    return Caller(
        credential=credential,
        identities=identities,
        user=headers.get("x-user-id") or None,
        session_tags=tags,
        human_uid=headers.get("x-human-uid") or None,
        problem=problem,
    )


class Authentication:
    """Sets the `McpCall`'s caller, or answers -32000: 401 (403 for insufficient scope) with, when
    OAuth is on, the WWW-Authenticate challenge naming this server's protected resource metadata
    (RFC 9728, as the MCP authorization specification asks)."""

    def __init__(self, app: ASGIApp, services: Services):
        self.app = app
        self.services = services

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        call = McpCall.of(scope)
        if call is None:
            await self.app(scope, receive, send)
            return
        identities = self.services.identities
        try:
            presented = presented_key(call.headers)
            credential = await anyio.to_thread.run_sync(identities.authenticate, presented, call.profile)
        except TokenRejected as rejected:
            refusal = await self._refused(call, rejected.status, rejected.error, rejected.description)
            await refusal(scope, receive, send)
            return
        if credential is None:
            what = "API key" if identities.tokens is None else "access token or API key"
            refusal = await self._refused(call, 401, "invalid_token", f"Unauthorized: missing or invalid {what}")
            await refusal(scope, receive, send)
            return
        call.caller = caller_from_headers(call.headers, credential, identities)
        await self.app(scope, receive, send)

    async def _refused(self, call: McpCall, status: int, error: str, description: str) -> JSONResponse:
        await call.audit_refusal(self.services.audit, Principal(tenant=UNAUTHENTICATED), f"refused {status}")
        response = call.error(status, UNAUTHORIZED, description)
        tokens = self.services.identities.tokens
        if tokens is not None:
            challenge = bearer_challenge(self.services.settings, error, description, tokens.scopes_supported)
            response.headers["www-authenticate"] = challenge
        return response

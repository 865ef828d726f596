"""Rate limiting of MCP requests per API key or token subject: requests and synthesis calls a
minute and concurrent requests (a slot held until the answer, streamed or not, is sent)."""

from __future__ import annotations

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ragmcp.mcp.errors import RATE_LIMITED
from ragmcp.mcp.registry import ToolRegistry
from ragmcp.services import Services
from ragmcp.web.jsonrpc import McpCall


class RateLimiting:
    """A request over its key's limits is refused with -32001 (HTTP 429 where the contract maps
    errors to statuses, 200 elsewhere) and audited; every answer to a counted request carries
    the X-RateLimit-Limit/-Remaining/-Reset headers. The open server (no subject) is not limited."""

    def __init__(self, app: ASGIApp, services: Services, registry: ToolRegistry):
        self.app = app
        self.services = services
        self.registry = registry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        call = McpCall.of(scope)
        caller = call.caller if call is not None else None
        subject = caller.credential.subject if caller is not None else None
        if call is None or caller is None or subject is None:
            await self.app(scope, receive, send)
            return
        spec = self.registry.tools.get(call.tool or "")
        limiter = self.services.limiter
        synthesis = bool(spec and spec.synthesis)
        # The limiter writes (SQLite: BEGIN IMMEDIATE, waiting out another writer): off the event loop.
        decision = await anyio.to_thread.run_sync(limiter.acquire, subject, caller.credential.limits, synthesis)
        told = decision.headers()
        if not decision.allowed:
            await call.audit_refusal(self.services.audit, caller.audited(), "refused 429")
            response = call.error(429 if call.status_mapped else 200, RATE_LIMITED, f"Rate limited: {decision.reason}")
            response.headers.update(told)
            await response(scope, receive, send)
            return
        extra = [(k.encode(), v.encode()) for k, v in told.items()]

        async def send_with_limits(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_limits)
        finally:
            with anyio.CancelScope(shield=True):  # the slot is given back even when the request was cancelled
                await anyio.to_thread.run_sync(limiter.release, subject)

"""The HTTP face: headers -> caller, POST /mcp and /mcp/{profile}, /healthz, /files.

Each MCP request gets a fresh stateless session manager answering in JSON, so the same
app works under uvicorn and, warm invocation after warm invocation, under Mangum.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ragmcp import __version__
from ragmcp.bootstrap import Services
from ragmcp.console.sessions import ConsoleSessions
from ragmcp.console.views import console_router
from ragmcp.domain.models import Principal
from ragmcp.mcp.registry import (
    ERROR_HTTP_STATUS,
    INTERNAL_ERROR,
    INVALID_REQUEST,
    PARSE_ERROR,
    RATE_LIMITED,
    UNAUTHORIZED,
    Caller,
    ToolRegistry,
    current_caller,
)
from ragmcp.mcp.resources import DocumentResources
from ragmcp.mcp.server import build_server
from ragmcp.retrieval.query_cache import query_cache_stats
from ragmcp.security.audit import UNAUTHENTICATED
from ragmcp.security.identity import Credential, Identities, TokenRejected
from ragmcp.security.models import RateLimits
from ragmcp.security.oauth import bearer_challenge, protected_resource_metadata

log = logging.getLogger(__name__)

MAX_HEADER_VALUE = 8192
MAX_AUDITED_NAME = 200
STATUS_MAPPED_PROFILES = frozenset({"ragbox"})
_RESULT_FIELDS = frozenset({"content", "structuredContent", "isError", "_meta", "resultType"})


def jsonrpc_error(status: int, code: int, message: str, request_id: Any = None) -> JSONResponse:
    body = {"jsonrpc": "2.0", "error": {"code": code, "message": message}, "id": request_id}
    return JSONResponse(body, status_code=status)


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
        if not isinstance(parsed, list) or not all(isinstance(t, str) for t in parsed):
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


def request_id_of(message: Any) -> str | int | None:
    """The message's id when an answer may carry it: a string or an integer."""
    value = message.get("id") if isinstance(message, dict) else None
    return value if isinstance(value, str | int) and not isinstance(value, bool) else None


def _read_message(body: bytes) -> tuple[dict[str, Any] | None, JSONResponse | None]:
    """The JSON-RPC message, or the error answering a body that is not one."""
    try:
        message = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None, jsonrpc_error(400, PARSE_ERROR, "Parse error: the body is not valid JSON")
    except RecursionError:
        return None, jsonrpc_error(400, PARSE_ERROR, "Parse error: the body is nested too deeply")
    request_id = request_id_of(message)
    valid = (
        isinstance(message, dict)
        and message.get("jsonrpc") == "2.0"
        and (isinstance(message.get("method"), str) or "result" in message or "error" in message)
        # A request's id is a string or an integer (MCP: never null); a notification has none.
        and (request_id is not None or "id" not in message or "method" not in message)
    )
    if not valid:
        return None, jsonrpc_error(400, INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message", request_id)
    return message, None


def _tool_name(message: dict[str, Any]) -> str | None:
    params = message.get("params")
    if message.get("method") == "tools/call" and isinstance(params, dict) and isinstance(params.get("name"), str):
        return params["name"]
    return None


def _lift(body: bytes) -> bytes:
    """Copy a tool's structured payload to the top of the JSON-RPC result, as the contracts show it."""
    try:
        message = json.loads(body)
    except ValueError:
        return body
    result = message.get("result") if isinstance(message, dict) else None
    payload = result.get("structuredContent") if isinstance(result, dict) else None
    if not isinstance(payload, dict) or result.get("isError"):
        return body
    result.update({k: v for k, v in payload.items() if k not in _RESULT_FIELDS})
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()


def _error_status(body: bytes) -> int:
    """The HTTP status a contract gives a JSON-RPC error (200 when the body is not an error)."""
    try:
        message = json.loads(body)
    except ValueError:
        return 200
    error = message.get("error") if isinstance(message, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return ERROR_HTTP_STATUS.get(code, 500) if code is not None else 200


def progress_token(message: dict[str, Any]) -> str | int | None:
    """The progressToken a request's `params._meta` carries, if any."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    return token if isinstance(token, str | int) and not isinstance(token, bool) else None


def _one_shot(
    request: Request, body: bytes, then: Callable[[], Awaitable[Message]] | None = None
) -> tuple[dict[str, Any], Callable[[], Awaitable[Message]]]:
    """The request's scope (accepting both answer types, as the transport requires) and a receive
    that hands over the already-read body once, then says the client left, or asks `then`."""
    scope = dict(request.scope)
    accept = request.headers.get("accept", "")
    if "application/json" not in accept or "text/event-stream" not in accept:
        scope["headers"] = [(k, v) for k, v in request.scope["headers"] if k != b"accept"]
        scope["headers"].append((b"accept", b"application/json, text/event-stream"))
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return await then() if then is not None else {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return scope, receive


class McpEndpoint:
    def __init__(self, registry: ToolRegistry, services: Services):
        self.services = services
        self.registry = registry
        self.lifted = registry.lifted()
        self.reporting = registry.reporting()
        resources = DocumentResources(services)
        self.servers: dict[str | None, Server] = {None: build_server(registry, None, resources)}
        self.servers.update({p: build_server(registry, p, resources) for p in registry.profiles()})
        hosts, origins = services.settings.transport_hosts()
        self.transport_security = TransportSecuritySettings(
            enable_dns_rebinding_protection=services.settings.dns_rebinding_protection,
            allowed_hosts=hosts,
            allowed_origins=origins,
        )

    async def __call__(self, request: Request, profile: str | None) -> Response:
        if profile not in self.servers:
            known = ", ".join(self.registry.profiles())
            return jsonrpc_error(404, INVALID_REQUEST, f"Unknown profile; profiles: {known}")
        limit = self.services.settings.max_body_bytes
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            return jsonrpc_error(413, INVALID_REQUEST, f"Request body larger than {limit} bytes")
        body = bytearray()
        async for part in request.stream():
            body += part
            if len(body) > limit:
                return jsonrpc_error(413, INVALID_REQUEST, f"Request body larger than {limit} bytes")
        headers = {k.lower(): v for k, v in request.headers.items()}
        if any(len(v) > MAX_HEADER_VALUE for v in headers.values()):
            return jsonrpc_error(431, INVALID_REQUEST, "Request header too large")
        message, error = _read_message(bytes(body))
        if error is not None:
            return error
        try:
            key = await anyio.to_thread.run_sync(self.services.identities.authenticate, presented_key(headers))
        except TokenRejected as rejected:
            await self._audit_refusal(Principal(tenant=UNAUTHENTICATED), message, f"refused {rejected.status}")
            return self._refused(message, rejected.status, rejected.error, rejected.description)
        if key is None:
            await self._audit_refusal(Principal(tenant=UNAUTHENTICATED), message, "refused 401")
            what = "API key" if self.services.identities.tokens is None else "access token or API key"
            return self._refused(message, 401, "invalid_token", f"Unauthorized: missing or invalid {what}")
        tool = _tool_name(message)
        status_mapped = bool(STATUS_MAPPED_PROFILES & {profile, self.registry.profile_of(tool)})
        if key.subject is None:
            return await self._answer(request, message, body, headers, key, profile, tool, status_mapped, {})
        spec = self.registry.tools.get(tool or "")
        decision = self.services.limiter.acquire(key.subject, self._limits(key), bool(spec and spec.synthesis))
        if not decision.allowed:
            await self._audit_refusal(
                caller_from_headers(headers, key, self.services.identities).audited(), message, "refused 429"
            )
            error = jsonrpc_error(
                429 if status_mapped else 200, RATE_LIMITED, f"Rate limited: {decision.reason}", request_id_of(message)
            )
            error.headers.update(decision.headers())
            return error
        try:
            limits = decision.headers()
            return await self._answer(request, message, body, headers, key, profile, tool, status_mapped, limits)
        finally:
            self.services.limiter.release(key.subject)

    def _refused(self, message: dict[str, Any], status: int, error: str, description: str) -> JSONResponse:
        """401/403 in JSON-RPC; with OAuth on, the WWW-Authenticate challenge naming this server's
        protected resource metadata (RFC 9728, as the MCP authorization specification asks)."""
        response = jsonrpc_error(status, UNAUTHORIZED, description, request_id_of(message))
        if self.services.identities.tokens is not None:
            scopes = self.services.identities.tokens.scopes_supported
            response.headers["www-authenticate"] = bearer_challenge(self.services.settings, error, description, scopes)
        return response

    async def _audit_refusal(self, principal: Principal, message: dict[str, Any], outcome: str) -> None:
        """A refused request in the audit trail: the tool (or method) asked for and its arguments' digest."""
        tool = _tool_name(message)
        params = message.get("params")
        arguments = params.get("arguments") if tool and isinstance(params, dict) else params
        name = (tool or str(message.get("method") or "(response)"))[:MAX_AUDITED_NAME]
        await anyio.to_thread.run_sync(self.services.audit.append, principal, name, arguments or {}, None, outcome)

    def _limits(self, key: Credential) -> RateLimits:
        if key.via != "key":
            return RateLimits()
        stored = self.services.keys.store.get(key.subject or "")
        return stored.limits if stored else RateLimits()

    async def _answer(
        self,
        request: Request,
        message: dict[str, Any],
        body: bytearray,
        headers: dict[str, str],
        key: Credential,
        profile: str | None,
        tool: str | None,
        status_mapped: bool,
        extra_headers: dict[str, str],
    ) -> Response:
        caller = caller_from_headers(headers, key, self.services.identities)
        if tool in self.reporting and progress_token(message) is not None:
            if await TransportSecurityMiddleware(self.transport_security).validate_request(request, True) is None:
                return self._stream(request, bytes(body), caller, profile, extra_headers)
        status, response_headers, payload = await self._dispatch(request, bytes(body), caller, profile)
        if status == 200 and tool in self.lifted:
            payload = _lift(payload)
        if status == 200 and status_mapped:
            status = _error_status(payload)
        response_headers = [(k, v) for k, v in response_headers if k.lower() != b"content-length"]
        response_headers += [(k.encode(), v.encode()) for k, v in extra_headers.items()]
        response = Response(content=payload, status_code=status)
        response.raw_headers = [*response_headers, (b"content-length", str(len(payload)).encode())]
        return response

    def _stream(
        self, request: Request, body: bytes, caller: Caller, profile: str | None, extra_headers: dict[str, str]
    ) -> StreamingResponse:
        """A long tool called with a progressToken: the transport answers in Server-Sent Events, passed
        on as they are written, so the client sees each notifications/progress while the tool runs."""
        # The event stream watches for the client leaving: the real connection tells it.
        scope, receive = _one_shot(request, body, request.receive)
        chunks_in, chunks_out = anyio.create_memory_object_stream[bytes](64)
        manager = StreamableHTTPSessionManager(
            app=self.servers[profile], json_response=False, stateless=True, security_settings=self.transport_security
        )

        async def send(message: Message) -> None:
            if message["type"] == "http.response.body" and message.get("body"):
                await chunks_in.send(message["body"])

        async def run() -> None:
            token = current_caller.set(caller)
            try:
                async with manager.run():
                    await manager.handle_request(scope, receive, send)
            finally:
                current_caller.reset(token)
                chunks_in.close()

        async def events() -> AsyncIterator[bytes]:
            async with anyio.create_task_group() as tasks, chunks_out:
                tasks.start_soon(run)
                async for chunk in chunks_out:
                    yield chunk

        headers = {"cache-control": "no-store", **extra_headers}
        return StreamingResponse(events(), media_type="text/event-stream", headers=headers)

    async def _dispatch(
        self, request: Request, body: bytes, caller: Caller, profile: str | None
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        scope, receive = _one_shot(request, body)

        start: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        manager = StreamableHTTPSessionManager(
            app=self.servers[profile], json_response=True, stateless=True, security_settings=self.transport_security
        )
        token = current_caller.set(caller)
        try:
            async with manager.run():
                await manager.handle_request(scope, receive, send)
        finally:
            current_caller.reset(token)
        if "status" not in start:
            error = {"jsonrpc": "2.0", "error": {"code": INTERNAL_ERROR, "message": "Internal error"}, "id": None}
            return 500, [(b"content-type", b"application/json")], json.dumps(error).encode()
        status, headers = start["status"], list(start.get("headers", []))
        if status >= 400 and not dict(headers).get(b"content-type", b"").startswith(b"application/json"):
            # The transport refused the request in plain text (content type, host, origin): say it in JSON-RPC.
            text = b"".join(chunks).decode(errors="replace").strip() or "Bad Request"
            request_id = request_id_of(json.loads(body))
            error = {"jsonrpc": "2.0", "error": {"code": INVALID_REQUEST, "message": text}, "id": request_id}
            return status, [(b"content-type", b"application/json")], json.dumps(error).encode()
        return status, headers, b"".join(chunks)


_KEPT_HEADERS = (b"allow", b"retry-after")


class JsonRpcErrors:
    """Under /mcp, whatever goes wrong answers in JSON-RPC: an error of the framework that is not
    JSON-RPC (an unknown path, a method no route takes: `{"detail": ...}` or plain text) keeps its
    status with a JSON-RPC body, and an exception nothing caught becomes -32603 (HTTP 500) instead
    of a bare 500 or a trace. Rate-limit, Allow and Retry-After headers of the replaced answer are
    kept. Only error answers are looked at (and they are small); a success streams through."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path != "/mcp" and not path.startswith("/mcp/"):
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        held: list[bytes] | None = None

        async def guarded(message: Message) -> None:
            nonlocal start, held
            if message["type"] == "http.response.start":
                start = message
                if message["status"] < 300:
                    await send(message)
                else:
                    held = []
            elif held is None:
                await send(message)
            else:
                held.append(message.get("body", b""))
                if not message.get("more_body"):
                    await _error_answer(send, start, b"".join(held))

        try:
            await self.app(scope, receive, guarded)
        except Exception:
            log.exception("unhandled error answering %s", path)
            if start is not None and held is None:
                raise
            await _send_error(send, 500, INTERNAL_ERROR, "Internal error", [])


async def _error_answer(send: Send, start: Message, body: bytes) -> None:
    """Pass an error answer on if it is JSON-RPC already; else say it in JSON-RPC."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        message = None
    if isinstance(message, dict) and message.get("jsonrpc") == "2.0":
        await send(start)
        await send({"type": "http.response.body", "body": body})
        return
    status = start["status"]
    kept = [(k, v) for k, v in start.get("headers", []) if k.startswith(b"x-ratelimit-") or k in _KEPT_HEADERS]
    await _send_error(send, status, INVALID_REQUEST, _reason(status), kept)


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Bad Request"


async def _send_error(send: Send, status: int, code: int, message: str, headers: list[tuple[bytes, bytes]]) -> None:
    body = json.dumps({"jsonrpc": "2.0", "error": {"code": code, "message": message}, "id": None}).encode()
    headers = [*headers, (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def create_app(services: Services, registry: ToolRegistry) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await anyio.to_thread.run_sync(services.audit.close)  # the last audit checkpoint

    app = FastAPI(
        title="ragmcp",
        version=__version__,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        lifespan=lifespan,
        redirect_slashes=False,
    )
    app.add_middleware(JsonRpcErrors)
    endpoint = McpEndpoint(registry, services)
    app.include_router(console_router(services, ConsoleSessions(services.identities, services.console_secret)))

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        watcher = getattr(app.state, "watcher", None)
        graph = getattr(app.state, "vector_graph", None)
        warmer = getattr(app.state, "warmer", None)
        problems = [p for p in (w.problem() for w in getattr(app.state, "workers", ())) if p]
        ingest = watcher.status.as_dict() if watcher else None
        if watcher is not None:
            source = await anyio.to_thread.run_sync(
                services.sources.get, watcher.source.tenant, watcher.source.source_id
            )
            held = source.held_deletions if source else ()
            ingest["held_deletions"] = {
                "count": len(held),
                "paths": list(held[:20]),
                "reason": source.held_reason if source and held else None,
            }
        body = {
            "status": "unhealthy" if problems else "ok",
            "problems": problems,
            "version": __version__,
            "embedding_model": services.embedder.model_id,
            "profiles": registry.profiles(),
            "ingest": ingest,
            "vector_graph": graph.status() if graph else None,
            "warm": warmer.status() if warmer else None,
            "query_cache": stats.model_dump() if (stats := query_cache_stats(services.embedder)) else None,
        }
        return JSONResponse(body, status_code=503 if problems else 200)

    @app.post("/mcp")
    async def mcp_all(request: Request) -> Response:
        return await endpoint(request, None)

    @app.post("/mcp/{profile}")
    async def mcp_profile(request: Request, profile: str) -> Response:
        return await endpoint(request, profile)

    @app.api_route("/mcp", methods=["GET", "DELETE", "PUT", "PATCH"])
    @app.api_route("/mcp/{profile}", methods=["GET", "DELETE", "PUT", "PATCH"])
    async def mcp_other() -> Response:
        response = jsonrpc_error(405, INVALID_REQUEST, "Method Not Allowed: use POST (stateless server, no streams)")
        response.headers["allow"] = "POST"
        return response

    @app.api_route("/mcp/{profile}/{rest:path}", methods=["GET", "POST", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS"])
    async def mcp_unknown() -> Response:
        return jsonrpc_error(404, INVALID_REQUEST, "Not Found: MCP answers on /mcp and /mcp/<profile> only")

    @app.get("/files/{tenant}/{doc_id:path}")
    async def original(tenant: str, doc_id: str, expires: int = 0, grant: str = "", sig: str = "") -> Response:
        download = await anyio.to_thread.run_sync(services.downloads.open, tenant, doc_id, expires, grant, sig)
        if download.status != 200:
            return JSONResponse({"error": download.error}, status_code=download.status)
        disposition = f"inline; filename*=UTF-8''{quote(download.file_name)}"
        headers = {"content-disposition": disposition, "cache-control": "no-store"}
        return Response(download.data, media_type=download.media_type, headers=headers)

    @app.get("/.well-known/oauth-protected-resource")
    @app.get("/.well-known/oauth-protected-resource/{resource_path:path}")
    async def protected_resource(resource_path: str = "") -> Response:
        if services.identities.tokens is None:
            return JSONResponse({"error": "OAuth is not enabled on this server"}, status_code=404)
        return JSONResponse(protected_resource_metadata(services.settings, services.identities.tokens))

    return app

"""The HTTP face: headers -> caller, POST /mcp and /mcp/{profile}, /healthz, /files.

Each MCP request gets a fresh stateless session manager answering in JSON, so the same
app works under uvicorn and, warm invocation after warm invocation, under Mangum.
"""

from __future__ import annotations

import json
import logging
import mimetypes
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import Message

from ragmcp import __version__
from ragmcp.bootstrap import Services
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
from ragmcp.mcp.server import build_server
from ragmcp.security.audit import UNAUTHENTICATED
from ragmcp.security.keys import principal_for
from ragmcp.security.models import RateLimits

log = logging.getLogger(__name__)

MAX_HEADER_VALUE = 8192
MAX_AUDITED_NAME = 200
DOWNLOAD = "GET /files"
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


def caller_from_headers(headers: dict[str, str], key: Principal) -> Caller:
    """The caller: the API key's principal plus the user context of the mindset-style headers;
    an unreadable header is kept as a problem (answered -32602 by the tool that needs it)."""
    problem = None
    groups: tuple[str, ...] = ()
    raw_tags = headers.get("x-session-tags")
    if raw_tags is not None and raw_tags.strip():
        try:
            tags = json.loads(raw_tags)
        except ValueError:
            tags = None
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            problem = "Invalid params: x-session-tags must be a JSON array of strings"
        else:
            groups = tuple(dict.fromkeys(tags))
    principal = key.model_copy(
        update={
            "user_id": headers.get("x-user-id") or None,
            "human_uid": headers.get("x-human-uid") or None,
            "groups": groups,
        }
    )
    return Caller(principal=principal, headers=headers, problem=problem)


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


class McpEndpoint:
    def __init__(self, registry: ToolRegistry, services: Services):
        self.services = services
        self.registry = registry
        self.lifted = registry.lifted()
        self.servers: dict[str | None, Server] = {None: build_server(registry, None)}
        self.servers.update({p: build_server(registry, p) for p in registry.profiles()})
        hosts, origins = services.settings.transport_hosts()
        self.transport_security = TransportSecuritySettings(
            enable_dns_rebinding_protection=services.settings.dns_rebinding_protection,
            allowed_hosts=hosts,
            allowed_origins=origins,
        )

    async def __call__(self, request: Request, profile: str | None) -> Response:
        if profile not in self.servers:
            return jsonrpc_error(404, INVALID_REQUEST, "Unknown profile")
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
        key = await anyio.to_thread.run_sync(self._authenticate, headers)
        if key is None:
            await self._audit_refusal(Principal(tenant=UNAUTHENTICATED), message, "refused 401")
            return jsonrpc_error(401, UNAUTHORIZED, "Unauthorized: missing or invalid API key", request_id_of(message))
        tool = _tool_name(message)
        status_mapped = bool(STATUS_MAPPED_PROFILES & {profile, self.registry.profile_of(tool)})
        if key.key_id is None:
            return await self._answer(request, body, headers, key, profile, tool, status_mapped, {})
        spec = self.registry.tools.get(tool or "")
        decision = self.services.limiter.acquire(key.key_id, self._limits(key), bool(spec and spec.synthesis))
        if not decision.allowed:
            await self._audit_refusal(caller_from_headers(headers, key).principal, message, "refused 429")
            error = jsonrpc_error(
                429 if status_mapped else 200, RATE_LIMITED, f"Rate limited: {decision.reason}", request_id_of(message)
            )
            error.headers.update(decision.headers())
            return error
        try:
            return await self._answer(request, body, headers, key, profile, tool, status_mapped, decision.headers())
        finally:
            self.services.limiter.release(key.key_id)

    async def _audit_refusal(self, principal: Principal, message: dict[str, Any], outcome: str) -> None:
        """A refused request in the audit trail: the tool (or method) asked for and its arguments' digest."""
        tool = _tool_name(message)
        params = message.get("params")
        arguments = params.get("arguments") if tool and isinstance(params, dict) else params
        name = (tool or str(message.get("method") or "(response)"))[:MAX_AUDITED_NAME]
        await anyio.to_thread.run_sync(self.services.audit.append, principal, name, arguments or {}, None, outcome)

    def _authenticate(self, headers: dict[str, str]) -> Principal | None:
        """The key's principal; None when refused. Only the embedded server without any key is open:
        the AWS deployment always asks for a key (looked up by its hash, never by listing keys)."""
        keys = self.services.keys
        if self.services.settings.backend == "local" and not keys.configured():
            return Principal(tenant=self.services.settings.tenant)
        presented = presented_key(headers)
        key = keys.authenticate(presented) if presented else None
        return principal_for(key) if key else None

    def _limits(self, key: Principal) -> RateLimits:
        stored = self.services.keys.store.get(key.key_id or "")
        return stored.limits if stored else RateLimits()

    async def _answer(
        self,
        request: Request,
        body: bytearray,
        headers: dict[str, str],
        key: Principal,
        profile: str | None,
        tool: str | None,
        status_mapped: bool,
        extra_headers: dict[str, str],
    ) -> Response:
        caller = caller_from_headers(headers, key)
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

    async def _dispatch(
        self, request: Request, body: bytes, caller: Caller, profile: str | None
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        scope = dict(request.scope)
        accept = request.headers.get("accept", "")
        if "application/json" not in accept or "text/event-stream" not in accept:
            scope["headers"] = [(k, v) for k, v in request.scope["headers"] if k != b"accept"]
            scope["headers"].append((b"accept", b"application/json, text/event-stream"))
        sent = False

        async def receive() -> Message:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

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


def create_app(services: Services, registry: ToolRegistry) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await anyio.to_thread.run_sync(services.audit.close)  # the last audit checkpoint

    app = FastAPI(
        title="ragmcp", version=__version__, docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan
    )
    endpoint = McpEndpoint(registry, services)

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        watcher = getattr(app.state, "watcher", None)
        graph = getattr(app.state, "vector_graph", None)
        return {
            "status": "ok",
            "version": __version__,
            "embedding_model": services.embedder.model_id,
            "profiles": registry.profiles(),
            "ingest": watcher.status.as_dict() if watcher else None,
            "vector_graph": graph.status() if graph else None,
        }

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

    async def audit_download(tenant: str, doc_id: str, expires: int, outcome: str, chain: str | None = None) -> None:
        arguments = {"tenant": tenant, "doc_id": doc_id, "expires": expires}
        payload = {"doc_id": doc_id} if outcome == "ok" else None
        principal = Principal(tenant=chain or tenant)
        await anyio.to_thread.run_sync(services.audit.append, principal, DOWNLOAD, arguments, payload, outcome)

    @app.get("/files/{tenant}/{doc_id:path}")
    async def original(tenant: str, doc_id: str, expires: int = 0, sig: str = "") -> Response:
        if not services.links.verify(tenant, doc_id, expires, sig):
            # The tenant of a link that does not verify is the caller's word: kept apart from the tenants' chains.
            await audit_download(tenant, doc_id, expires, "refused 403", chain=UNAUTHENTICATED)
            return JSONResponse({"error": "link invalid or expired"}, status_code=403)
        doc = services.documents.get(tenant, doc_id)
        source = services.sources.get(tenant, doc.source) if doc else None
        if doc is None or source is None:
            await audit_download(tenant, doc_id, expires, "error 404")
            return JSONResponse({"error": "document not found"}, status_code=404)
        try:
            data = await anyio.to_thread.run_sync(services.blobs.read, source.location, doc.path)
        except FileNotFoundError:
            await audit_download(tenant, doc_id, expires, "error 404")
            return JSONResponse({"error": "document not found"}, status_code=404)
        await audit_download(tenant, doc_id, expires, "ok")
        media_type = mimetypes.guess_type(doc.file_name)[0] or "application/octet-stream"
        disposition = f"inline; filename*=UTF-8''{quote(doc.file_name)}"
        return Response(data, media_type=media_type, headers={"content-disposition": disposition})

    return app

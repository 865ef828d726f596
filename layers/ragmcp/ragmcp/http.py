"""The HTTP face: POST /mcp and /mcp/{profile}, /healthz, /files, the console.

The MCP requests pass the middleware of ragmcp.web (body limit, JSON-RPC gate, authentication,
rate limits); then each gets a fresh stateless session manager answering in JSON, so the same
app works under uvicorn and, warm invocation after warm invocation, under Mangum. The transport's
answer goes to the client as the transport writes it: what the contracts add to it is made by the
SDK's server (mcp/answers.py), never by reading the answer back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import (
    RequestBodyLimitMiddleware,
    TransportSecurityMiddleware,
    TransportSecuritySettings,
)
from mcp.types import INTERNAL_ERROR, INVALID_REQUEST
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from ragmcp import __version__
from ragmcp.console import views as console
from ragmcp.console.sessions import ConsoleSessions
from ragmcp.mcp.answers import Answer, ContractAnswers, current_answer
from ragmcp.mcp.caller import Caller, current_caller
from ragmcp.mcp.errors import ERROR_HTTP_STATUS
from ragmcp.mcp.registry import ToolRegistry
from ragmcp.mcp.resources import DocumentResources
from ragmcp.mcp.server import build_server
from ragmcp.retrieval.query_cache import query_cache_stats
from ragmcp.security.oauth import protected_resource_metadata
from ragmcp.security.originals import download_headers
from ragmcp.services import Services
from ragmcp.web.auth import Authentication
from ragmcp.web.hosts import AllowedHosts
from ragmcp.web.jsonrpc import JsonRpcErrors, McpCall, McpRequests, jsonrpc_error
from ragmcp.web.rate_limits import RateLimiting
from ragmcp.web.state import ServeState


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
    """POST /mcp and /mcp/{profile} (an ASGI app): answers the `McpCall` the middleware (ragmcp.web)
    admitted through the SDK's transport, one stateless session manager per request, acting for the
    call's caller. The transport's answer goes to the client as it writes it; only a JSON-RPC error
    of a profile whose contract gives it an HTTP status has that status set as the answer starts
    (the code is the one the SDK's server ended the request with: mcp/answers.py). The transport's
    rare plain-text refusals are said in JSON-RPC by web.jsonrpc.JsonRpcErrors, as every other one."""

    def __init__(self, registry: ToolRegistry, services: Services):
        self.services = services
        self.registry = registry
        self.reporting = registry.reporting()
        resources = DocumentResources(services.catalog, services.audit, services.settings.server.resource_page_size)
        self.servers: dict[str | None, Server] = {None: build_server(registry, None, resources)}
        self.servers.update({p: build_server(registry, p, resources) for p in registry.profiles()})
        answers = ContractAnswers(registry.lifted())  # over HTTP only, as the contracts' HTTP clients read them
        for server in self.servers.values():
            server.middleware.append(answers)
        hosts, origins = services.settings.transport_hosts()
        self.transport_security = TransportSecuritySettings(
            enable_dns_rebinding_protection=services.settings.security.dns_rebinding_protection,
            allowed_hosts=hosts,
            allowed_origins=origins,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        call = McpCall.of(scope)
        if call is None or call.caller is None:
            raise RuntimeError("POST /mcp reached its route without the MCP middleware")
        request = Request(scope, receive)
        if call.tool in self.reporting and progress_token(call.message) is not None:
            if await TransportSecurityMiddleware(self.transport_security).validate_request(request, True) is None:
                await self._stream(request, call.body, call.caller, call.profile)(scope, receive, send)
                return
        await self._answer(request, call, call.caller, send)

    async def _serve(
        self,
        profile: str | None,
        json_response: bool,
        caller: Caller,
        scope: Scope,
        receive: Receive,
        send: Send,
        answer: Answer,
    ) -> None:
        """One request through a fresh stateless session manager, with `caller` as the current caller;
        how the SDK's server ends it is kept in `answer`."""
        manager = StreamableHTTPSessionManager(
            app=self.servers[profile],
            json_response=json_response,
            stateless=True,
            security_settings=self.transport_security,
            max_request_body_size=self.services.settings.server.max_body_bytes,
        )
        caller_token, answer_token = current_caller.set(caller), current_answer.set(answer)
        try:
            async with manager.run():
                await manager.handle_request(scope, receive, send)
        finally:
            current_answer.reset(answer_token)
            current_caller.reset(caller_token)

    async def _answer(self, request: Request, call: McpCall, caller: Caller, send: Send) -> None:
        """The transport's JSON answer, passed on as it is written; with a status-mapped profile's
        JSON-RPC error, the contract's HTTP status for it."""
        call.transport_answers = True
        scope, receive = _one_shot(request, call.body)
        answer = Answer()
        started = False

        async def passed(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if message["status"] == 200 and call.status_mapped and answer.error_code is not None:
                    message = {**message, "status": ERROR_HTTP_STATUS.get(answer.error_code, 500)}
            await send(message)

        await self._serve(call.profile, True, caller, scope, receive, passed, answer)
        if not started:
            await jsonrpc_error(500, INTERNAL_ERROR, "Internal error")(scope, receive, send)

    def _stream(self, request: Request, body: bytes, caller: Caller, profile: str | None) -> StreamingResponse:
        """A long tool called with a progressToken: the transport answers in Server-Sent Events, passed
        on as they are written, so the client sees each notifications/progress while the tool runs."""
        # The event stream watches for the client leaving: the real connection tells it.
        scope, receive = _one_shot(request, body, request.receive)
        chunks_in, chunks_out = anyio.create_memory_object_stream[bytes](64)

        async def send(message: Message) -> None:
            if message["type"] == "http.response.body" and message.get("body"):
                await chunks_in.send(message["body"])

        async def run() -> None:
            try:
                await self._serve(profile, False, caller, scope, receive, send, Answer())
            finally:
                chunks_in.close()

        async def events() -> AsyncIterator[bytes]:
            async with anyio.create_task_group() as tasks, chunks_out:
                tasks.start_soon(run)
                async for chunk in chunks_out:
                    yield chunk

        return StreamingResponse(events(), media_type="text/event-stream", headers={"cache-control": "no-store"})


def create_app(services: Services, registry: ToolRegistry, serve: ServeState | None = None) -> FastAPI:
    """The HTTP app over `services`; `serve`, what a `ragmcp serve` process runs beside it (none when
    not given), is also `app.state.serve` for the console."""
    state = serve if serve is not None else ServeState()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        if state.pool is not None:  # the reader processes stop with the writer
            await anyio.to_thread.run_sync(state.pool.stop)
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
    # Outermost last: the Host allow-list, JsonRpcErrors, the body limit, the gate, authentication, rate limiting.
    app.add_middleware(RateLimiting, services=services, registry=registry)
    app.add_middleware(Authentication, services=services)
    app.add_middleware(McpRequests, registry=registry, audit=services.audit)
    app.add_middleware(RequestBodyLimitMiddleware, max_body_size=services.settings.server.max_body_bytes)
    app.add_middleware(JsonRpcErrors)
    if services.settings.security.dns_rebinding_protection:
        app.add_middleware(AllowedHosts, hosts=services.settings.transport_hosts()[0])
    endpoint = McpEndpoint(registry, services)
    app.state.serve = state
    app.state.console_sessions = ConsoleSessions(services.identities, services.console_secret)
    console.install(app, services, app.state.console_sessions)

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        watcher, graph, warmer = state.watcher, state.vector_graph, state.warmer
        problems = [p for p in (w.problem() for w in state.workers) if p]
        ingest = await anyio.to_thread.run_sync(watcher.health, services.sources) if watcher else None
        readers = state.pool.status() if state.pool else None
        if state.writer_state is not None:  # a reader: the writer's state
            shared = await anyio.to_thread.run_sync(state.writer_state)
            ingest, readers = shared.get("ingest"), shared.get("readers")
            problems += [f"writer: {p}" for p in shared.get("problems", [])]
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
            "worker": state.worker,
            "readers": readers,
        }
        return JSONResponse(body, status_code=503 if problems else 200)

    # The endpoint is an ASGI app: the transport writes its answer to the client itself.
    app.router.routes += [Route(path, endpoint, methods=["POST"]) for path in ("/mcp", "/mcp/{profile}")]

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
        headers = download_headers(download.media_type, download.file_name)
        return Response(download.data, media_type=download.media_type, headers=headers)

    @app.get("/.well-known/oauth-protected-resource")
    @app.get("/.well-known/oauth-protected-resource/{resource_path:path}")
    async def protected_resource(resource_path: str = "") -> Response:
        if services.identities.tokens is None:
            return JSONResponse({"error": "OAuth is not enabled on this server"}, status_code=404)
        return JSONResponse(protected_resource_metadata(services.settings, services.identities.tokens))

    return app

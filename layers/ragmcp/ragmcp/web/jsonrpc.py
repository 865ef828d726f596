"""One JSON-RPC message per POST under /mcp: the gate that reads it (`McpRequests`), the call it
leaves for the middleware after it and the route (`McpCall`), and `JsonRpcErrors`, which says in
JSON-RPC whatever else goes wrong under /mcp."""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import anyio
from mcp.types import INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ragmcp.domain.models import Principal
from ragmcp.ingest.jobs import out_of_space
from ragmcp.mcp.caller import Caller
from ragmcp.mcp.errors import DISK_FULL
from ragmcp.mcp.registry import ToolRegistry
from ragmcp.security.audit import UNAUTHENTICATED, AuditLog

log = logging.getLogger(__name__)

MAX_HEADER_VALUE = 8192
MAX_AUDITED_NAME = 200
MAX_ERROR_TEXT = 200
STATUS_MAPPED_PROFILES = frozenset({"ragbox"})
"""Profiles whose contract answers a JSON-RPC error with an HTTP status (ragbox's table)."""

_MCP_PATH = re.compile(r"/mcp(?:/([^/]+))?")
# What may decode to a lone surrogate: a \\uD800-\\uDFFF escape, UTF-8-encoded surrogate bytes (json.loads
# decodes bytes with "surrogatepass"), or a UTF-16/32 body (a NUL among its first bytes). Only a body
# holding one is searched for a lone surrogate.
_MAY_HOLD_SURROGATE = re.compile(rb"\\[uU][dD][89a-fA-F]|\xed[\xa0-\xbf]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_STATE_KEY = "mcp_call"


def error_body(code: int, message: str, request_id: str | int | None) -> dict[str, Any]:
    """A JSON-RPC error answer (the SDK's model): id null when the request's is unknown."""
    error = JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))
    return error.model_dump(mode="json", exclude_unset=True)


def jsonrpc_error(status: int, code: int, message: str, request_id: str | int | None = None) -> JSONResponse:
    return JSONResponse(error_body(code, message, request_id), status_code=status)


def request_id_of(message: Any) -> str | int | None:
    """The message's id when an answer may carry it: a string (of Unicode text) or an integer."""
    value = message.get("id") if isinstance(message, dict) else None
    if isinstance(value, str) and _SURROGATE.search(value):
        return None
    return value if isinstance(value, str | int) and not isinstance(value, bool) else None


def holds_lone_surrogate(value: Any) -> bool:
    """Whether a decoded JSON value holds a lone surrogate in a string or a key: not Unicode text,
    so it cannot be encoded to answer, audit or store it. Walked without recursion (any depth)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


def read_message(body: bytes) -> tuple[dict[str, Any] | None, JSONResponse | None]:
    """The JSON-RPC message, or the error answering a body that is not one."""
    try:
        message = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None, jsonrpc_error(400, PARSE_ERROR, "Parse error: the body is not valid JSON")
    except RecursionError:
        return None, jsonrpc_error(400, PARSE_ERROR, "Parse error: the body is nested too deeply")
    if (_MAY_HOLD_SURROGATE.search(body) or b"\x00" in body[:4]) and holds_lone_surrogate(message):
        message_text = "Parse error: the body holds a lone surrogate (\\ud800-\\udfff unpaired), which is not Unicode"
        return None, jsonrpc_error(400, PARSE_ERROR, message_text, request_id_of(message))
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


def tool_name(message: dict[str, Any]) -> str | None:
    params = message.get("params")
    if message.get("method") == "tools/call" and isinstance(params, dict) and isinstance(params.get("name"), str):
        return params["name"]
    return None


@dataclass
class McpCall:
    """A POST to /mcp or /mcp/{profile} that holds one JSON-RPC message. `caller` is set once the
    request proved a credential (auth.Authentication)."""

    profile: str | None
    message: dict[str, Any]
    body: bytes
    headers: dict[str, str]
    """Lower-cased names."""
    tool: str | None
    status_mapped: bool
    caller: Caller | None = None
    transport_answers: bool = False
    """Set once the SDK's transport answers it (http.McpEndpoint): its JSON answers are JSON-RPC."""

    @staticmethod
    def of(scope: Scope) -> McpCall | None:
        return scope.get("state", {}).get(_STATE_KEY)

    def error(self, status: int, code: int, message: str) -> JSONResponse:
        return jsonrpc_error(status, code, message, request_id_of(self.message))

    async def audit_refusal(self, audit: AuditLog, principal: Principal, outcome: str) -> None:
        """A refused request in the audit trail (aggregated: AuditLog.refused): the tool (or method)
        asked for and its arguments' digest."""
        params = self.message.get("params")
        arguments = params.get("arguments") if self.tool and isinstance(params, dict) else params
        name = (self.tool or str(self.message.get("method") or "(response)"))[:MAX_AUDITED_NAME]
        await anyio.to_thread.run_sync(audit.refused, principal, name, arguments or {}, outcome)


class McpRequests:
    """The gate of POST /mcp and /mcp/{profile}: a known profile (404), no header over 8 KiB (431)
    and a body that is one JSON-RPC message (-32700/-32600), kept as the request's `McpCall`. What
    it refuses is audited (aggregated, in the chain of unauthenticated requests) when given `audit`."""

    def __init__(self, app: ASGIApp, registry: ToolRegistry, audit: AuditLog | None = None):
        self.app = app
        self.registry = registry
        self.audit = audit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        target = _MCP_PATH.fullmatch(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if target is None:
            await self.app(scope, receive, send)
            return
        profile = target[1]
        if profile is not None and profile not in self.registry.profiles():
            known = ", ".join(self.registry.profiles())
            refusal = jsonrpc_error(404, INVALID_REQUEST, f"Unknown profile; profiles: {known}")
            await self._refuse(refusal, scope, receive, send)
            return
        headers = {k.lower(): v for k, v in Headers(scope=scope).items()}
        if any(len(v) > MAX_HEADER_VALUE for v in headers.values()):
            await self._refuse(jsonrpc_error(431, INVALID_REQUEST, "Request header too large"), scope, receive, send)
            return
        body = await Request(scope, receive).body()
        message, error = read_message(body)
        if error is not None:
            await self._refuse(error, scope, receive, send)
            return
        tool = tool_name(message)
        status_mapped = bool(STATUS_MAPPED_PROFILES & {profile, self.registry.profile_of(tool)})
        scope.setdefault("state", {})[_STATE_KEY] = McpCall(profile, message, body, headers, tool, status_mapped)
        await self.app(scope, receive, send)

    async def _refuse(self, refusal: JSONResponse, scope: Scope, receive: Receive, send: Send) -> None:
        if self.audit is not None:
            code = json.loads(refusal.body)["error"]["code"]
            where = f"POST {scope['path']}"[:MAX_AUDITED_NAME]
            principal = Principal(tenant=UNAUTHENTICATED)
            outcome = f"refused {refusal.status_code}"
            await anyio.to_thread.run_sync(self.audit.refused, principal, where, {"code": code}, outcome)
        await refusal(scope, receive, send)


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
                if message["status"] < 300 or _jsonrpc_already(scope, message):
                    await send(message)
                else:
                    held = []
            elif held is None:
                await send(message)
            else:
                held.append(message.get("body", b""))
                if not message.get("more_body"):
                    await _error_answer(scope, receive, send, start, b"".join(held))

        try:
            await self.app(scope, receive, guarded)
        except ClientDisconnect:  # the client left (or was timed out): nobody to answer
            return
        except Exception as exc:
            full = out_of_space(exc)  # e.g. the rate limiter's count: the operator's to fix, said as such
            if full:
                log.warning("answering %s: the disk is full: %s", path, exc)
            else:
                log.exception("unhandled error answering %s", path)
            if start is not None and held is None:
                raise
            await _send_error(scope, receive, send, 500, INTERNAL_ERROR, DISK_FULL if full else "Internal error", [])


def _jsonrpc_already(scope: Scope, start: Message) -> bool:
    """Whether an answer is the SDK transport's JSON (JSON-RPC as it is), passed on without a look."""
    call = McpCall.of(scope)
    content_type = dict(start.get("headers", [])).get(b"content-type", b"")
    return call is not None and call.transport_answers and content_type.startswith(b"application/json")


async def _error_answer(scope: Scope, receive: Receive, send: Send, start: Message, body: bytes) -> None:
    """Pass an error answer on if it is JSON-RPC already; else say it in JSON-RPC (a short plain
    text, such as the SDK's body limit answers, is kept as the message)."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        message = None
    if isinstance(message, dict) and message.get("jsonrpc") == "2.0":
        await send(start)
        await send({"type": "http.response.body", "body": body})
        return
    status = start["status"]
    headers = start.get("headers", [])
    kept = [(k, v) for k, v in headers if k.startswith(b"x-ratelimit-") or k in _KEPT_HEADERS]
    content_type = dict(headers).get(b"content-type", b"")
    plain = not content_type or content_type.startswith(b"text/plain")
    text = body.decode(errors="replace").strip() if plain and len(body) <= MAX_ERROR_TEXT else ""
    call = McpCall.of(scope)  # a request the gate admitted (then refused by the SDK's transport): its id
    request_id = request_id_of(call.message) if call is not None else None
    await _send_error(scope, receive, send, status, INVALID_REQUEST, text or _reason(status), kept, request_id)


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Bad Request"


async def _send_error(
    scope: Scope,
    receive: Receive,
    send: Send,
    status: int,
    code: int,
    message: str,
    kept: list[tuple[bytes, bytes]],
    request_id: str | int | None = None,
) -> None:
    response = jsonrpc_error(status, code, message, request_id)
    response.raw_headers += kept
    await response(scope, receive, send)

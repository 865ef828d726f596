"""The Host allow-list, on every route: a request naming a host this server does not answer for is
refused 421 before anything reads it, so a web page whose name an attacker rebinds to this server
(DNS rebinding) reaches neither /mcp, nor /files, nor the console.

The hosts are the settings' (`Settings.transport_hosts`): loopback names in open mode; otherwise
also the host of RAGMCP_PUBLIC_URL and each of RAGMCP_ALLOWED_HOSTS. A `name:*` entry allows any
port. Off with RAGMCP_DNS_REBINDING_PROTECTION=false (behind API Gateway, which sets Host itself).
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from mcp.types import INVALID_REQUEST
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from ragmcp.web.jsonrpc import jsonrpc_error

MISDIRECTED = 421


def host_allowed(host: str, allowed: Iterable[str]) -> bool:
    """Whether `host` (a Host header's value, or an Origin's netloc) is one of `allowed`."""
    host = host.strip().lower()
    if not host:
        return False
    for entry in allowed:
        entry = entry.lower()
        if host == entry:
            return True
        if entry.endswith(":*"):
            name, colon, port = host.rpartition(":")
            if colon and name == entry[:-2] and port.isdigit():
                return True
    return False


def origin_allowed(origin: str, allowed: Iterable[str]) -> bool:
    """Whether a browser's Origin header names this server: http(s) and an allowed host."""
    parts = urlsplit(origin.strip())
    return parts.scheme in ("http", "https") and host_allowed(parts.netloc, allowed)


class AllowedHosts:
    """Answers 421 Misdirected Request to any HTTP request whose Host is not allowed (in JSON-RPC
    on /mcp, as the endpoint's other errors)."""

    def __init__(self, app: ASGIApp, hosts: list[str]):
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
        if host_allowed(host, self.hosts):
            await self.app(scope, receive, send)
            return
        message = "Misdirected Request: this server does not answer for that Host"
        path = scope.get("path", "")
        if path == "/mcp" or path.startswith("/mcp/"):
            response = jsonrpc_error(MISDIRECTED, INVALID_REQUEST, message)
        else:
            response = PlainTextResponse(message, status_code=MISDIRECTED)
        await response(scope, receive, send)

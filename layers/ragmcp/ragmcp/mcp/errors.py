"""The MCP errors the contracts name: their codes, the HTTP status the ragbox contract gives each, and
service errors and invalid arguments said as JSON-RPC errors (moved from registry.py)."""

from __future__ import annotations

import logging

from mcp.shared.exceptions import MCPError
from mcp.types import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR
from pydantic import ValidationError

from ragmcp.domain.errors import Forbidden, InvalidArgument, LimitExceeded, NotFound, RagError, Unauthorized
from ragmcp.ingest.jobs import out_of_space

log = logging.getLogger(__name__)

UNAUTHORIZED = -32000
"""The contracts' code for a refused credential (the SDK's -32000 means a closed connection)."""
RATE_LIMITED = -32001
DISK_FULL = "the server's disk is full: nothing was written; try again once its operator has freed space"
AUDIT_DISK_FULL = (
    "the server's disk is full: the call ran, but its audit record could not be written, so its answer is"
    " withheld; try again once its operator has freed space"
)

# The ragbox contract answers errors with these HTTP statuses (its table of error codes).
ERROR_HTTP_STATUS = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    METHOD_NOT_FOUND: 404,
    INVALID_PARAMS: 400,
    UNAUTHORIZED: 401,
    RATE_LIMITED: 429,
    -32002: 500,
    INTERNAL_ERROR: 500,
}


def validation_message(exc: ValidationError) -> str:
    """Field names and rules only: the rejected values are the caller's data."""
    parts = []
    for err in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        parts.append(f"{where}: {err['msg']}")
    return "Invalid params: " + "; ".join(parts[:5])


def rag_error_to_mcp(exc: RagError, internal_code: int = INTERNAL_ERROR) -> MCPError:
    """A service error as the JSON-RPC error the contracts name; the service's code goes in `data`."""
    if isinstance(exc, InvalidArgument | NotFound | LimitExceeded):
        return MCPError(INVALID_PARAMS, exc.message, {"code": exc.code})
    if isinstance(exc, Unauthorized | Forbidden):
        return MCPError(UNAUTHORIZED, exc.message, {"code": exc.code})
    return MCPError(internal_code, exc.message, {"code": exc.code})


def unaudited(what: str, internal_error_code: int, exc: Exception, answered: bool) -> MCPError:
    """A call (a tool's, a resource read) whose audit record could not be appended, in the contract's
    error format: it fails, so no answer is given unaudited (one that `answered` has run: said so)."""
    if isinstance(exc, RagError):
        return rag_error_to_mcp(exc, internal_error_code)
    if out_of_space(exc):
        log.warning("%s: its audit record cannot be written, the disk is full: %s", what, exc)
        return MCPError(internal_error_code, AUDIT_DISK_FULL if answered else DISK_FULL, {"code": "INTERNAL"})
    log.exception("%s: its audit record cannot be written", what)
    return MCPError(internal_error_code, "Internal error", {"code": "INTERNAL"})

"""What the contracts add to the SDK's answers, made where the answer is made (a middleware of the
SDK's server, run around every request), so nothing reads an answer back once written:

- a lifted tool's payload fields also on the top of its JSON-RPC result (mindset's contract reads
  them there; the SDK's result models keep only their own fields, so they are added to the result
  the server has already shaped for the wire);
- the JSON-RPC error code a request ended with, kept in its `Answer` for the HTTP status the
  ragbox contract gives it (http.py sets it when the transport starts its answer).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data

RESULT_FIELDS = frozenset({"content", "structuredContent", "isError", "_meta", "resultType"})
"""A tool result's own fields: a payload field of the same name is not copied over them."""


@dataclass
class Answer:
    """One HTTP request's answer, as the SDK's server ended it."""

    error_code: int | None = None
    """The JSON-RPC error code it answered with, None for a result."""


current_answer: ContextVar[Answer | None] = ContextVar("current_answer", default=None)


def lifted(result: dict[str, Any]) -> dict[str, Any]:
    """A tool result with its structured payload's fields copied to its top (not an error's)."""
    payload = result.get("structuredContent")
    if not isinstance(payload, dict) or result.get("isError"):
        return result
    return {**result, **{k: v for k, v in payload.items() if k not in RESULT_FIELDS}}


class ContractAnswers:
    """The SDK server's middleware (`Server.middleware`) that shapes the answers as above."""

    def __init__(self, lifted_tools: frozenset[str]):
        self.lifted_tools = lifted_tools

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        try:
            result = await call_next(ctx)
        except Exception as exc:
            if (answer := current_answer.get()) is not None:
                # As the SDK's dispatcher will say it: its code, or 0 for an exception it does not map.
                error = handler_exception_to_error_data(exc)
                answer.error_code = error.code if error is not None else 0
            raise
        if ctx.method == "tools/call" and isinstance(result, dict) and self._lifts(ctx.params):
            return lifted(result)
        return result

    def _lifts(self, params: Any) -> bool:
        return isinstance(params, Mapping) and params.get("name") in self.lifted_tools

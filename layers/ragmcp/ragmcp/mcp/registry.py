"""Tools: top-level `async def`s registered with `@tool`, each with its profile and argument model.

A tool is written in its profile's module as

    @tool("kb_search", profile="kb", title=..., description=...)
    async def kb_search(deps: KbDeps, caller: Caller, args: SearchArgs) -> dict[str, Any]: ...

`deps` is the profile's small dependency object (only the services its tools use), `args` the
pydantic model whose JSON schema is the tool's input schema. The decorator records the tool in
`CATALOGUE`; the composition root binds every profile's dependencies (`ToolRegistry.bind`).

Arguments are validated by the tool's pydantic model here, so a bad argument is always a
JSON-RPC -32602 error (the contracts ask for that), never a tool result with isError.
"""

from __future__ import annotations

import contextvars
import json
import logging
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, TypeVar

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp.types import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR
from pydantic import BaseModel, ValidationError

from ragmcp.domain.errors import Forbidden, InvalidArgument, LimitExceeded, NotFound, RagError, Unauthorized
from ragmcp.domain.models import Document, Principal
from ragmcp.ingest.jobs import out_of_space
from ragmcp.mcp.offloop import off_loop
from ragmcp.mcp.outputs import OUTPUTS
from ragmcp.security.audit import AuditLog
from ragmcp.security.identity import Credential, Identities

log = logging.getLogger(__name__)

UNAUTHORIZED = -32000
"""The contracts' code for a refused credential (the SDK's -32000 means a closed connection)."""
RATE_LIMITED = -32001
DISK_FULL = "the server's disk is full: nothing was written; try again once its operator has freed space"

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


def check_phrase_bytes(name: str, text: str, limit: int) -> None:
    """A search text longer than `limit` bytes (UTF-8) is an invalid argument `name`."""
    if len(text.encode()) > limit:
        raise InvalidArgument(f"{name}: longer than {limit} bytes")


def stale_fields(doc: Document) -> dict[str, Any]:
    """`stale: true` and its reason, added to a profile's view of a document whose file's newest
    version could not be read (these are its last good passages); nothing for any other document,
    so every answer about a sound document keeps its contract's fields exactly."""
    return {"stale": True, "stale_reason": doc.stale_reason} if doc.stale else {}


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

Handler = Callable[[Caller, Any], Awaitable[dict[str, Any] | list[Any]]]
ToolFunction = Callable[[Any, Caller, Any], Awaitable[dict[str, Any] | list[Any]]]
F = TypeVar("F", bound=ToolFunction)


@dataclass(frozen=True)
class ToolSpec:
    name: str
    profile: str
    description: str
    """May name the profile's dependencies' fields, as `{deps.max_part_kib}`: filled in when bound."""
    args: type[BaseModel]
    function: ToolFunction
    deps_type: type
    deps: Any = None
    title: str | None = None
    lift_result: bool = False
    """Also copy the payload's fields to the top of the JSON-RPC result, where the profile's contract
    reads them (mindset); other profiles get it twice only: text and structuredContent."""
    internal_error_code: int = INTERNAL_ERROR
    structured: bool = True
    """Also send the payload as structuredContent (it must then be a JSON object); when False the
    result is the JSON text content alone, as a contract that shows only `content` has it."""
    scope: str = "read"
    """The API-key scope a caller needs: read (search, fetch, answer), write (add, upload), admin."""
    synthesis: bool = False
    """Counts against the key's synthesis rate limit."""
    reports_progress: bool = False
    """Sends notifications/progress (and waits for its job) when the call carries a progressToken."""
    idempotent: bool = True
    """Whether calling it again with the same arguments changes nothing more (a hint for write tools)."""

    def bound(self, deps: Any) -> ToolSpec:
        return replace(self, deps=deps, description=self.description.format(deps=deps))

    def handler(self, caller: Caller, args: Any) -> Awaitable[dict[str, Any] | list[Any]]:
        return self.function(self.deps, caller, args)

    def annotations(self) -> types.ToolAnnotations:
        if self.scope == "read":
            return types.ToolAnnotations(read_only_hint=True, open_world_hint=False)
        return types.ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=self.idempotent, open_world_hint=False
        )

    @cached_property
    def definition(self) -> types.Tool:
        """The tool as tools/list shows it, built once for the servers of every profile that lists it."""
        schema = self.args.model_json_schema()
        schema.pop("title", None)
        return types.Tool(
            name=self.name,
            title=self.title,
            description=self.description,
            input_schema=schema,
            output_schema=OUTPUTS.get(self.name) if self.structured else None,
            annotations=self.annotations(),
        )


CATALOGUE: dict[str, ToolSpec] = {}
"""Every tool the profile modules define, by name, unbound."""


def tool(name: str, *, profile: str, description: str, **flags: Any) -> Callable[[F], F]:
    """Registers a tool function `async def f(deps, caller, args)`: its argument model and its
    dependencies' type are read from its annotations."""

    def register(function: F) -> F:
        hints = typing.get_type_hints(function)
        if name in CATALOGUE:
            raise ValueError(f"tool {name!r} is defined twice")
        CATALOGUE[name] = ToolSpec(
            name=name,
            profile=profile,
            description=description,
            args=hints["args"],
            function=function,
            deps_type=hints["deps"],
            **flags,
        )
        return function

    return register


D = TypeVar("D")


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


class ToolRegistry:
    def __init__(self, tools: list[ToolSpec], audit: AuditLog | None = None):
        self.tools = {t.name: t for t in tools}
        self.audit = audit

    @classmethod
    def bind(
        cls, specs: list[ToolSpec], provide: Callable[[type[D]], D], audit: AuditLog | None = None
    ) -> ToolRegistry:
        """The tools with their profiles' dependencies, made once per dependency type by `provide`."""
        made: dict[type, Any] = {}
        tools = []
        for spec in specs:
            if spec.deps_type not in made:
                made[spec.deps_type] = provide(spec.deps_type)
            tools.append(spec.bound(made[spec.deps_type]))
        return cls(tools, audit)

    def profiles(self) -> list[str]:
        return sorted({t.profile for t in self.tools.values()})

    def profile_of(self, tool: str | None) -> str | None:
        spec = self.tools.get(tool or "")
        return spec.profile if spec else None

    def for_profile(self, profile: str | None) -> list[ToolSpec]:
        return [t for t in self.tools.values() if profile is None or t.profile == profile]

    def reporting(self) -> frozenset[str]:
        return frozenset(t.name for t in self.tools.values() if t.reports_progress)

    def lifted(self) -> frozenset[str]:
        return frozenset(t.name for t in self.tools.values() if t.lift_result)

    async def call(self, name: str, arguments: dict[str, Any] | None, allowed: set[str]) -> types.CallToolResult:
        spec = self.tools.get(name)
        if spec is None or name not in allowed:
            raise MCPError(INVALID_PARAMS, f"Unknown tool: {name!r}", {"code": InvalidArgument.code})
        caller = current_caller.get()
        payload: Any = None
        outcome = "ok"
        try:
            payload = await self._run(spec, caller, arguments)
        except MCPError as exc:
            outcome = f"error {exc.error.code}"
            raise
        finally:
            if self.audit is not None:
                await anyio.to_thread.run_sync(
                    self.audit.append, caller.audited(), name, arguments or {}, payload, outcome
                )
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(payload, ensure_ascii=False))],
            structured_content=payload if spec.structured else None,
        )

    @staticmethod
    async def _run(spec: ToolSpec, caller: Caller, arguments: dict[str, Any] | None) -> Any:
        if spec.scope not in caller.scopes:
            credential = "access token" if caller.credential.via == "token" else "API key"
            message = f"this {credential} may not call {spec.name} (it needs the {spec.scope!r} scope)"
            raise MCPError(UNAUTHORIZED, message, {"code": Forbidden.code})
        try:
            args = spec.args.model_validate(arguments or {})
        except ValidationError as exc:
            raise MCPError(INVALID_PARAMS, validation_message(exc), {"code": InvalidArgument.code}) from None
        try:
            return await off_loop(lambda: spec.handler(caller, args), current_reporter)
        except MCPError:
            raise
        except RagError as exc:
            raise rag_error_to_mcp(exc, spec.internal_error_code) from None
        except Exception as exc:
            if out_of_space(exc):  # the operator's to fix, not a bug: said as such, without a traceback
                log.warning("tool %r: the disk is full: %s", spec.name, exc)
                raise MCPError(spec.internal_error_code, DISK_FULL, {"code": "INTERNAL"}) from None
            log.exception("tool %r failed", spec.name)
            raise MCPError(spec.internal_error_code, "Internal error", {"code": "INTERNAL"}) from None

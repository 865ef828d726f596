"""Tools: top-level `async def`s registered with `@tool`, each with its profile and argument model.

A tool is written in its profile's module as

    @tool("kb_search", profile="kb", title=..., description=...)
    async def kb_search(deps: KbDeps, caller: Caller, args: SearchArgs) -> dict[str, Any]: ...

`deps` is the profile's small dependency object (only the services its tools use), `args` the
pydantic model whose JSON schema is the tool's input schema. The decorator marks the function;
`catalogue` collects the tools of the profile modules it is given (mcp/server.py's), and the
composition root binds every profile's dependencies (`ToolRegistry.bind`). Who calls
is mcp/caller.py's, the errors' codes mcp/errors.py's, the profiles' shared checks mcp/helpers.py's.

Arguments are validated by the tool's pydantic model here, so a bad argument is always a
JSON-RPC -32602 error (the contracts ask for that), never a tool result with isError.
"""

from __future__ import annotations

import json
import logging
import typing
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from functools import cached_property
from types import ModuleType
from typing import Any, TypeVar

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp.types import INTERNAL_ERROR, INVALID_PARAMS
from pydantic import BaseModel, ValidationError

from ragmcp.domain.errors import Forbidden, InvalidArgument, RagError
from ragmcp.ingest.jobs import out_of_space
from ragmcp.mcp.caller import Caller, current_caller, current_reporter
from ragmcp.mcp.errors import DISK_FULL, UNAUTHORIZED, rag_error_to_mcp, unaudited, validation_message
from ragmcp.mcp.offloop import off_loop
from ragmcp.mcp.outputs import OUTPUTS
from ragmcp.security.audit import AuditLog

log = logging.getLogger(__name__)

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


TOOL_SPEC = "__ragmcp_tool__"
"""The attribute of a tool function that holds its ToolSpec (set by @tool)."""


def tool(name: str, *, profile: str, description: str, **flags: Any) -> Callable[[F], F]:
    """Marks a tool function `async def f(deps, caller, args)`: its argument model and its dependencies'
    type are read from its annotations. Nothing is registered anywhere: `catalogue` collects a profile
    module's tools when asked."""

    def register(function: F) -> F:
        hints = typing.get_type_hints(function)
        spec = ToolSpec(
            name=name,
            profile=profile,
            description=description,
            args=hints["args"],
            function=function,
            deps_type=hints["deps"],
            **flags,
        )
        setattr(function, TOOL_SPEC, spec)
        return function

    return register


def catalogue(modules: Iterable[ModuleType]) -> dict[str, ToolSpec]:
    """The tools the modules define (the functions @tool marked), by name, unbound, in the modules' order
    and then their definitions'; a name two functions take is an error."""
    found: dict[str, ToolSpec] = {}
    for module in modules:
        for value in vars(module).values():
            spec = getattr(value, TOOL_SPEC, None)
            if not isinstance(spec, ToolSpec) or spec.function is not value:
                continue
            if found.setdefault(spec.name, spec) is not spec:
                raise ValueError(f"tool {spec.name!r} is defined twice")
    return found


D = TypeVar("D")


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
        audit = self.audit

        recorded = False

        def record(payload: Any, outcome: str) -> None:
            """The call's one record: an append that raised is not tried again (a second record would
            say a call whose body answered failed); the call fails with the append's error instead."""
            nonlocal recorded
            recorded = True
            if audit is None:
                return
            try:  # the principal the body resolved, read once it has run
                audit.append(caller.audited(), name, arguments or {}, payload, outcome)
            except Exception as exc:
                raise unaudited(f"tool {name!r}", spec.internal_error_code, exc, answered=outcome == "ok") from None

        payload: Any = None
        outcome = "ok"
        try:
            payload = await self._run(spec, caller, arguments, record)
        except MCPError as exc:
            outcome = f"error {exc.error.code}"
            raise
        finally:
            if not recorded:  # refused or failed: recorded here, after the body (if any) ended
                await anyio.to_thread.run_sync(record, payload, outcome)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(payload, ensure_ascii=False))],
            structured_content=payload if spec.structured else None,
        )

    @staticmethod
    async def _run(
        spec: ToolSpec, caller: Caller, arguments: dict[str, Any] | None, record: Callable[[Any, str], None]
    ) -> Any:
        """The tool's payload, recorded (`record`) on the body's own thread once the body answered,
        with no hand-off to another thread for it."""
        if spec.scope not in caller.scopes:
            credential = "access token" if caller.credential.via == "token" else "API key"
            message = f"this {credential} may not call {spec.name} (it needs the {spec.scope!r} scope)"
            raise MCPError(UNAUTHORIZED, message, {"code": Forbidden.code})
        try:
            args = spec.args.model_validate(arguments or {})
        except ValidationError as exc:
            raise MCPError(INVALID_PARAMS, validation_message(exc), {"code": InvalidArgument.code}) from None

        async def body() -> Any:
            payload = await spec.handler(caller, args)
            record(payload, "ok")
            return payload

        try:
            return await off_loop(body, current_reporter)
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

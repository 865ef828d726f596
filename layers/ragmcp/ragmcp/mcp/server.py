"""MCP servers (official SDK, low-level API) built from the tool registry: one per profile."""

from __future__ import annotations

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server

from ragmcp import __version__
from ragmcp.mcp import chat, kb, mindset, proxysql, ragbox
from ragmcp.mcp.caller import current_reporter
from ragmcp.mcp.registry import ToolRegistry, ToolSpec, catalogue
from ragmcp.mcp.resources import DocumentResources

INSTRUCTIONS = (
    "ragmcp searches an organisation's own documents and returns cited passages. "
    "Every result carries its source file and a link to the original."
)


MODULES = (mindset, proxysql, kb, chat, ragbox)
"""The profile modules, whose tools `tool_specs` collects."""
PROFILES = tuple(sorted(module.PROFILE for module in MODULES))
RESOURCE_READERS = {ragbox.PROFILE: ragbox.vault_principal}
"""A profile whose tools narrow the caller's access applies the same rule to its resources:
ragbox's vault stays below privileged (resources have no privilege_mode to ask for more)."""


def tool_specs() -> list[ToolSpec]:
    """Every profile's tools, unbound, in the profiles' order (alphabetical, as tools/list always gave them)."""
    return list(catalogue(sorted(MODULES, key=lambda module: module.PROFILE)).values())


def build_server(registry: ToolRegistry, profile: str | None, resources: DocumentResources | None = None) -> Server:
    """A server exposing one profile's tools, or every profile's when `profile` is None, and the
    documents as resources when `resources` is given."""
    specs = registry.for_profile(profile)
    allowed = {s.name for s in specs}
    if resources is not None and profile in RESOURCE_READERS:
        resources = resources.reading_as(RESOURCE_READERS[profile])
    definitions = [s.definition for s in specs]

    async def list_tools(_ctx: object, _params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=definitions)

    async def call_tool(ctx: ServerRequestContext, params: types.CallToolRequestParams) -> types.CallToolResult:
        meta = params.meta or {}
        wanted = meta.get("progress_token", meta.get("progressToken")) is not None
        token = current_reporter.set(ctx.session.report_progress if wanted else None)
        try:
            return await registry.call(params.name, params.arguments, allowed)
        finally:
            current_reporter.reset(token)

    return Server(
        "ragmcp" if profile is None else f"ragmcp-{profile}",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=resources.list_resources if resources else None,
        on_list_resource_templates=resources.list_templates if resources else None,
        on_read_resource=resources.read if resources else None,
    )

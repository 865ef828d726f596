"""MCP servers (official SDK, low-level API) built from the tool registry: one per profile."""

from __future__ import annotations

import mcp_types as types
from mcp.server.lowlevel.server import Server

from ragmcp import __version__
from ragmcp.bootstrap import Services
from ragmcp.mcp import chat, kb, mindset, proxysql, ragbox
from ragmcp.mcp.registry import ToolRegistry

INSTRUCTIONS = (
    "ragmcp searches an organisation's own documents and returns cited passages. "
    "Every result carries its source file and a link to the original."
)


MODULES = (mindset, proxysql, kb, chat, ragbox)
PROFILES = tuple(sorted(module.PROFILE for module in MODULES))


def build_registry(services: Services) -> ToolRegistry:
    return ToolRegistry([tool for module in MODULES for tool in module.tools(services)], audit=services.audit)


def build_server(registry: ToolRegistry, profile: str | None) -> Server:
    """A server exposing one profile's tools, or every profile's when `profile` is None."""
    specs = registry.for_profile(profile)
    allowed = {s.name for s in specs}
    definitions = [s.definition for s in specs]

    async def list_tools(_ctx: object, _params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=definitions)

    async def call_tool(_ctx: object, params: types.CallToolRequestParams) -> types.CallToolResult:
        return await registry.call(params.name, params.arguments, allowed)

    return Server(
        "ragmcp" if profile is None else f"ragmcp-{profile}",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )

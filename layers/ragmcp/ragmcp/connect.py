"""`ragmcp connect <client>`: the configuration an MCP client needs to reach this server.

Each client's format as its own documentation gives it for a remote (Streamable HTTP) server:
Claude Desktop reads stdio servers from claude_desktop_config.json, so it reaches a URL through
the `mcp-remote` bridge (headers passed with `--header`, the value from an environment variable
so a space in it survives every platform's argument handling); Claude Code adds one with
`claude mcp add --transport http`; Cursor's mcp.json takes `url` and `headers` under `mcpServers`;
VS Code's mcp.json takes `type: http`, `url` and `headers` under `servers`; the MCP Inspector's
CLI takes `--transport http --server-url --header`. With `--stdio`, each client starts `ragmcp
stdio` itself, given the data directory as an absolute path.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from urllib.parse import urlsplit

CLIENTS = ("claude-desktop", "claude-code", "cursor", "vscode", "inspector")
SERVER_NAME = "ragmcp"
AUTH_VARIABLE = "RAGMCP_AUTHORIZATION"


@dataclass(frozen=True)
class ClientConfig:
    text: str
    """What to paste (JSON) or run (a command line)."""
    where: str
    """Where it goes, for the person reading it."""


def headers_for(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def client_config(client: str, url: str, key: str | None = None) -> ClientConfig:
    headers = headers_for(key)
    if client == "claude-desktop":
        args = ["-y", "mcp-remote", url]
        if urlsplit(url).scheme == "http" and urlsplit(url).hostname not in ("127.0.0.1", "localhost", "::1"):
            args.append("--allow-http")
        server: dict[str, object] = {"command": "npx", "args": args}
        if key:
            args += ["--header", f"Authorization:${{{AUTH_VARIABLE}}}"]
            server["env"] = {AUTH_VARIABLE: headers["Authorization"]}
        where = (
            "claude_desktop_config.json (Settings > Developer > Edit Config; macOS: ~/Library/Application Support/"
            "Claude/, Windows: %APPDATA%\\Claude\\), then restart Claude Desktop; needs Node.js for npx"
        )
        return ClientConfig(_json({"mcpServers": {SERVER_NAME: server}}), where)
    if client == "claude-code":
        words = ["claude", "mcp", "add", "--transport", "http", SERVER_NAME, url]
        for name, value in headers.items():
            words += ["--header", f"{name}: {value}"]
        return ClientConfig(shlex.join(words), "run it in a shell (add --scope user to use it in every project)")
    if client == "cursor":
        server = {"url": url, **({"headers": headers} if headers else {})}
        where = "~/.cursor/mcp.json, or .cursor/mcp.json in a project"
        return ClientConfig(_json({"mcpServers": {SERVER_NAME: server}}), where)
    if client == "vscode":
        server = {"type": "http", "url": url, **({"headers": headers} if headers else {})}
        where = ".vscode/mcp.json in a workspace, or your user mcp.json (MCP: Open User Configuration)"
        return ClientConfig(_json({"servers": {SERVER_NAME: server}}), where)
    if client == "inspector":
        words = ["npx", "@modelcontextprotocol/inspector", "--cli", "--transport", "http", "--server-url", url]
        for name, value in headers.items():
            words += ["--header", f"{name}: {value}"]
        words += ["--method", "tools/list"]
        return ClientConfig(shlex.join(words), "run it in a shell (Node.js 22); drop --cli for the Inspector's web UI")
    raise ValueError(f"unknown client {client!r}; clients: {', '.join(CLIENTS)}")


def stdio_config(client: str, command: list[str]) -> ClientConfig:
    """The configuration of a client that starts `command` (ragmcp stdio, with its data directory)
    itself and speaks MCP over its stdin and stdout: each client's format for a local server."""
    program, args = command[0], command[1:]
    if client in ("claude-desktop", "cursor"):
        where = {
            "claude-desktop": "claude_desktop_config.json (Settings > Developer > Edit Config), then restart it",
            "cursor": "~/.cursor/mcp.json, or .cursor/mcp.json in a project",
        }[client]
        return ClientConfig(_json({"mcpServers": {SERVER_NAME: {"command": program, "args": args}}}), where)
    if client == "claude-code":
        words = ["claude", "mcp", "add", SERVER_NAME, "--", *command]
        return ClientConfig(shlex.join(words), "run it in a shell (add --scope user to use it in every project)")
    if client == "vscode":
        server = {"type": "stdio", "command": program, "args": args}
        where = ".vscode/mcp.json in a workspace, or your user mcp.json (MCP: Open User Configuration)"
        return ClientConfig(_json({"servers": {SERVER_NAME: server}}), where)
    if client == "inspector":
        words = ["npx", "@modelcontextprotocol/inspector", "--cli", *command, "--method", "tools/list"]
        return ClientConfig(shlex.join(words), "run it in a shell (Node.js 22); drop --cli for the Inspector's web UI")
    raise ValueError(f"unknown client {client!r}; clients: {', '.join(CLIENTS)}")


def _json(value: object) -> str:
    return json.dumps(value, indent=2)

"""`ragmcp connect <client>` prints each client's configuration; each is read back the way that
client reads it (JSON keys, a command line's flags, mcp-remote's ${VAR} expansion from `env`),
and its URL and headers are handed to the official MCP Python SDK client, which calls a tool of
a real `ragmcp serve` that refuses requests without the key."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from collections.abc import Iterator

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from ragmcp.connect import CLIENTS, SERVER_NAME
from tests.conftest import REPO, RunningServer, start_server, stop_server
from tests.e2e.test_fuzz import cli

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, str]]:
    root = tmp_path_factory.mktemp("connect")
    docs = root / "docs"
    shutil.copytree(REPO / "samples" / "docs", docs)
    created = cli(root / "data", "keys", "create", "--tenant", "default", "--scopes", "read")
    assert created.returncode == 0, created.stderr
    key = next(line.split()[-1] for line in created.stdout.splitlines() if line.startswith("secret:"))
    server = start_server(docs, root / "data", ingest_timeout=300)
    yield server, key
    stop_server(server)


def flag_values(words: list[str], flag: str) -> list[str]:
    return [words[i + 1] for i, word in enumerate(words[:-1]) if word == flag]


def header_pairs(values: list[str]) -> dict[str, str]:
    return {name.strip(): value.strip() for name, _, value in (v.partition(":") for v in values)}


def endpoint(client: str, text: str) -> tuple[str, dict[str, str]]:
    """The URL and headers the client would send, read from its configuration as it reads it."""
    if client == "claude-desktop":
        server = json.loads(text)["mcpServers"][SERVER_NAME]
        assert server["command"] == "npx" and server["args"][:2] == ["-y", "mcp-remote"]
        env = server.get("env", {})
        expanded = [re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], a) for a in server["args"]]
        return expanded[2], header_pairs(flag_values(expanded, "--header"))
    if client == "cursor":
        server = json.loads(text)["mcpServers"][SERVER_NAME]
        return server["url"], server.get("headers", {})
    if client == "vscode":
        server = json.loads(text)["servers"][SERVER_NAME]
        assert server["type"] == "http"
        return server["url"], server.get("headers", {})
    words = shlex.split(text)
    if client == "claude-code":
        assert words[:6] == ["claude", "mcp", "add", "--transport", "http", SERVER_NAME]
        return words[6], header_pairs(flag_values(words, "--header"))
    assert words[:5] == ["npx", "@modelcontextprotocol/inspector", "--cli", "--transport", "http"]
    (url,) = flag_values(words, "--server-url")
    return url, header_pairs(flag_values(words, "--header"))


async def search_through(url: str, headers: dict[str, str]) -> dict:
    http = httpx2.AsyncClient(headers=headers, timeout=60)
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        result = await client.call_tool("kb_search", {"query": "which file types can be dropped into the folder"})
        assert not result.is_error, result
        return result.structured_content


@pytest.mark.parametrize("client", CLIENTS)
def test_each_clients_configuration_reaches_the_server_and_calls_a_tool(keyed_server, client, tmp_path):
    server, key = keyed_server
    done = cli(tmp_path, "connect", client, "--url", server.url, "--key", key)
    assert done.returncode == 0, done.stderr
    url, headers = endpoint(client, done.stdout)
    assert url == server.url and headers == {"Authorization": f"Bearer {key}"}
    payload = anyio.run(search_through, url, headers)
    assert payload["results"][0]["source_path"] == "getting-started.md", payload
    # The headers are what let it in: the same URL without them is refused.
    refused = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=30)
    assert refused.status_code == 401


def test_profile_and_default_url(tmp_path):
    done = cli(tmp_path, "connect", "cursor", "--profile", "mindset")
    assert done.returncode == 0, done.stderr
    config = json.loads(done.stdout)["mcpServers"][SERVER_NAME]
    assert config == {"url": "http://127.0.0.1:8000/mcp/mindset"}
    assert "mcp.json" in done.stderr


def test_unknown_client_and_profile_are_refused(tmp_path):
    assert cli(tmp_path, "connect", "emacs").returncode == 2
    bogus = cli(tmp_path, "connect", "cursor", "--profile", "bogus")
    assert bogus.returncode == 2 and "profiles: chat, kb, mindset, proxysql, ragbox" in bogus.stderr

"""kb-mcp-server.md, "Requirement: MCP server authentication": "The MCP server SHALL require Bearer
token authentication from calling agents via the KB_MCP_API_KEY environment variable." Its four
scenarios, against the real app and against a real `ragmcp serve` reading the variable, and how the
variable lives beside `ragmcp keys`' keys and open mode."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from ragmcp.bootstrap import Services, build_registry, build_services
from ragmcp.http import create_app
from ragmcp.settings import Settings, SettingsError, load_settings
from tests.conftest import free_port

KB_KEY = "kb-contract-key-0123456789abcdef"
UNAUTHORIZED = -32000
_ids = itertools.count(1)


def call(http: TestClient | httpx.Client, path: str, tool: str, arguments: dict[str, Any], **headers: str):
    body = {
        "jsonrpc": "2.0",
        "id": next(_ids),
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    return http.post(path, json=body, headers=headers)


def processed(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert response.status_code == 200 and "result" in body and not body["result"].get("isError"), body
    return body["result"]


def rejected(response: httpx.Response) -> None:
    """ "the MCP server SHALL reject the connection with an authentication error"."""
    assert response.status_code == 401, response.text
    assert response.json()["error"]["code"] == UNAUTHORIZED
    assert response.json()["error"]["message"] == "Unauthorized: missing or invalid API key"


def app(data_dir: Path, **settings: Any) -> tuple[Services, TestClient]:
    services = build_services(Settings(data_dir=data_dir, host="testserver", **settings))
    return services, TestClient(create_app(services, build_registry(services)), base_url="http://testserver")


@pytest.fixture(scope="module")
def kb_keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Services, TestClient]]:
    services, http = app(tmp_path_factory.mktemp("kb-key") / "data", kb_mcp_api_key=KB_KEY)
    with http:
        yield services, http


def test_valid_mcp_api_key_is_processed_normally(kb_keyed: tuple[Services, TestClient]) -> None:
    """Scenario: Valid MCP API key: "WHEN KB_MCP_API_KEY is set and a calling agent provides a matching
    Bearer token THEN the MCP server SHALL process the request normally": as a key of the kb profile,
    tenant `default`, scopes read and write, its own identity."""
    services, http = kb_keyed
    bearer = {"authorization": f"Bearer {KB_KEY}"}
    added = processed(call(http, "/mcp/kb", "kb_addnote", {"text": "The heron survey starts in May."}, **bearer))
    assert added["structuredContent"]["job_id"]
    processed(call(http, "/mcp/kb", "kb_search", {"query": "heron survey"}, **bearer))
    records = list(services.audit.store.records("default"))
    assert [(r.key_id, r.user, r.tool) for r in records[-2:]] == [
        ("kb-mcp-api-key", "key:kb-mcp-api-key", "kb_addnote"),
        ("kb-mcp-api-key", "key:kb-mcp-api-key", "kb_search"),
    ]
    assert processed(call(http, "/mcp/kb", "kb_status", {}, **{"x-api-key": KB_KEY}))  # as every key: X-API-Key too
    assert services.keys.store.list() == []  # a key of the environment, never written to the key store
    held = services.identities.profile_key
    assert held is not None and KB_KEY not in repr(vars(held)) and KB_KEY not in repr(services.settings)


def test_missing_mcp_api_key_is_rejected(kb_keyed: tuple[Services, TestClient]) -> None:
    """Scenario: Missing MCP API key when required: "WHEN KB_MCP_API_KEY is set and a calling agent
    connects without a Bearer token THEN the MCP server SHALL reject the connection with an
    authentication error"."""
    _, http = kb_keyed
    for headers in ({}, {"authorization": "Bearer"}, {"authorization": "Basic a2I6a2V5"}):
        rejected(call(http, "/mcp/kb", "kb_search", {"query": "heron"}, **headers))


def test_invalid_mcp_api_key_is_rejected(kb_keyed: tuple[Services, TestClient]) -> None:
    """Scenario: Invalid MCP API key: "WHEN KB_MCP_API_KEY is set and a calling agent provides a
    non-matching Bearer token THEN the MCP server SHALL reject the connection with an authentication
    error"; and it is a key of the kb profile: the other profiles do not take it."""
    _, http = kb_keyed
    for wrong in (KB_KEY[:-1], KB_KEY + "0", KB_KEY.upper(), "x", "rmcp_live_" + "0" * 64):
        rejected(call(http, "/mcp/kb", "kb_search", {"query": "heron"}, authorization=f"Bearer {wrong}"))
    for path, tool in (("/mcp", "kb_search"), ("/mcp/ragbox", "search_documents"), ("/mcp/proxysql", "rag.search_fts")):
        rejected(call(http, path, tool, {"query": "heron"}, authorization=f"Bearer {KB_KEY}"))


def test_existing_keys_keep_working_beside_it(kb_keyed: tuple[Services, TestClient]) -> None:
    services, http = kb_keyed
    stored = services.keys.create("default", name="ragmcp-key")
    for path, tool in (("/mcp/kb", "kb_search"), ("/mcp/ragbox", "search_documents"), ("/mcp", "kb_search")):
        processed(call(http, path, tool, {"query": "heron"}, authorization=f"Bearer {stored.secret}"))
    services.keys.revoke(stored.key.key_id)
    processed(call(http, "/mcp/kb", "kb_search", {"query": "heron"}, authorization=f"Bearer {KB_KEY}"))


def test_its_tenant_is_the_servers_tenant_and_it_reads_as_itself(tmp_path: Path) -> None:
    services, http = app(tmp_path / "data", kb_mcp_api_key=KB_KEY, tenant="acme")
    services.keys.create("default", name="other-tenant")
    with http:
        processed(
            call(http, "/mcp/kb", "kb_addnote", {"text": "acme's own heron note"}, authorization=f"Bearer {KB_KEY}")
        )
    assert {j.tenant for j in services.jobs.list("acme")} == {"acme"}
    assert services.jobs.list("default") == []


def test_the_variable_is_read_from_the_environment_and_must_be_long_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.upper().startswith(("RAGMCP_", "KB_MCP"))]:
        monkeypatch.delenv(name)
    assert load_settings().security.kb_mcp_api_key is None
    monkeypatch.setenv("KB_MCP_API_KEY", "")
    assert load_settings().security.kb_mcp_api_key is None  # set to nothing: not set
    monkeypatch.setenv("KB_MCP_API_KEY", KB_KEY)
    assert load_settings().security.kb_mcp_api_key.get_secret_value() == KB_KEY
    monkeypatch.setenv("KB_MCP_API_KEY", "short")
    with pytest.raises(SettingsError, match="at least 16 characters") as raised:
        load_settings()
    assert "short" not in str(raised.value)


def serve(data_dir: Path, port: int, *args: str, **env: str) -> subprocess.Popen[bytes]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("RAGMCP_", "KB_MCP"))}
    command = [sys.executable, "-m", "ragmcp.cli", "--data-dir", str(data_dir), "serve", "--port", str(port), *args]
    return subprocess.Popen(command, env={**clean, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def wait_healthy(process: subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.3)
    process.kill()
    raise AssertionError(process.communicate()[0].decode(errors="replace"))


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()


def test_serve_takes_kb_mcp_api_key_from_its_environment_as_its_only_key(tmp_path: Path) -> None:
    """The three scenarios with the variable set, over a real `ragmcp serve` (no `ragmcp keys` key, no
    --open: the variable alone lets it start)."""
    port = free_port()
    process = serve(tmp_path / "data", port, KB_MCP_API_KEY=KB_KEY)
    try:
        wait_healthy(process, port)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            processed(call(http, "/mcp/kb", "kb_status", {}, authorization=f"Bearer {KB_KEY}"))
            rejected(call(http, "/mcp/kb", "kb_status", {}))
            rejected(call(http, "/mcp/kb", "kb_status", {}, authorization=f"Bearer {KB_KEY}-not"))
    finally:
        stop(process)


def test_mcp_auth_disabled_when_kb_mcp_api_key_is_not_set(tmp_path: Path) -> None:
    """Scenario: MCP auth disabled: "WHEN KB_MCP_API_KEY is not set THEN the MCP server SHALL accept all
    connections without authentication": ragmcp's open mode, which is asked for (`--open`) and listens
    on loopback only; without it, and without a key, `serve` still refuses to start (README, kb)."""
    port = free_port()
    process = serve(tmp_path / "open", port, "--open")
    try:
        wait_healthy(process, port)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            processed(call(http, "/mcp/kb", "kb_status", {}))
            processed(call(http, "/mcp/kb", "kb_search", {"query": "anything"}))
    finally:
        stop(process)
    assert b"no active API key" in refusal(serve(tmp_path / "closed", free_port()))
    both = refusal(serve(tmp_path / "both", free_port(), "--open", KB_MCP_API_KEY=KB_KEY))
    assert b"KB_MCP_API_KEY is set" in both and KB_KEY.encode() not in both


def refusal(process: subprocess.Popen[bytes]) -> bytes:
    """What `serve` said when it refused to start (exit 2); a server that started is stopped and fails."""
    try:
        out, _ = process.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        stop(process)
        raise AssertionError("serve started where it must refuse") from None
    assert process.returncode == 2, out
    return out

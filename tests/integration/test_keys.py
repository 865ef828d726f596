"""API keys: format, hash-only storage, Bearer and X-API-Key, refusal of wrong and revoked keys,
scopes, the `ragmcp keys` commands, and `ragmcp serve` refusing to start without keys unless
asked `--open`, which listens on loopback only (it is never made to listen on another address here)."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from ragmcp.bootstrap import Services, build_registry, build_services
from ragmcp.domain.errors import InvalidArgument
from ragmcp.http import create_app
from ragmcp.security.keys import KeyService
from ragmcp.serve import is_loopback
from ragmcp.settings import Settings
from tests.conftest import free_port

KEY = re.compile(r"^rmcp_live_[0-9a-f]{64}$")
UNAUTHORIZED = -32000
_ids = itertools.count(1)


@dataclass
class Keyed:
    services: Services = field(repr=False)
    http: TestClient = field(repr=False)
    data_dir: Path


def keyed_app(data_dir: Path) -> tuple[Services, TestClient]:
    services = build_services(Settings(data_dir=data_dir, host="testserver"))
    return services, TestClient(create_app(services, build_registry(services)), base_url="http://testserver")


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keyed]:
    data_dir = tmp_path_factory.mktemp("keys") / "data"
    services, http = keyed_app(data_dir)
    with http:
        yield Keyed(services, http, data_dir)


def rpc(
    http: TestClient, method: str, params: dict | None = None, path: str = "/mcp", **headers: str
) -> httpx.Response:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": next(_ids), "method": method}
    if params is not None:
        body["params"] = params
    return http.post(path, json=body, headers=headers)


def tool(http: TestClient, name: str, arguments: dict, path: str = "/mcp", **headers: str) -> dict[str, Any]:
    return rpc(http, "tools/call", {"name": name, "arguments": arguments}, path, **headers).json()


def assert_unauthorized(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    body = response.json()
    assert body["error"]["code"] == UNAUTHORIZED and body["id"] == json.loads(response.request.content)["id"]
    assert body["error"]["message"] == "Unauthorized: missing or invalid API key"


def cli(data_dir: Path, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMCP_")}
    return subprocess.Popen(
        [sys.executable, "-m", "ragmcp.cli", "--data-dir", str(data_dir), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


def test_keys_have_the_documented_format_and_are_never_the_same(keyed: Keyed) -> None:
    secrets = [keyed.services.keys.create("acme").secret for _ in range(5)]
    assert all(KEY.match(s) for s in secrets) and len(set(secrets)) == 5
    other_env = KeyService(keyed.services.keys.store, env="test").create("acme").secret
    assert re.match(r"^rmcp_test_[0-9a-f]{64}$", other_env)
    with pytest.raises(InvalidArgument):
        KeyService(keyed.services.keys.store, env="Prod_1")
    with pytest.raises(InvalidArgument, match="tenant"):
        keyed.services.keys.create("no spaces allowed")
    with pytest.raises(InvalidArgument, match="unknown scopes: root"):
        keyed.services.keys.create("acme", scopes=("read", "root"))


RAGBOX_KEY = re.compile(r"^rbx_live_[0-9a-f]{64}$")


def test_ragbox_format_keys_are_rbx_live_and_64_hex_stored_hashed_and_accepted_where_their_scopes_allow(
    keyed: Keyed,
) -> None:
    """ragbox-mcp.md, Key Format: "rbx_live_[64-character hexadecimal string]", sent as
    "X-API-Key: rbx_live_your_key_here". A ragbox-format key is a key like any other: hashed, on
    every profile, Bearer or X-API-Key, its scopes deciding the tools."""
    made = [keyed.services.keys.create("rbx", name=f"vault-{i}", key_format="ragbox") for i in range(3)]
    assert all(RAGBOX_KEY.match(m.secret) for m in made) and len({m.secret for m in made}) == 3
    created = made[0]
    stored = keyed.services.keys.store.get(created.key.key_id)
    assert stored is not None and stored.key_hash == hashlib.sha256(created.secret.encode()).hexdigest()
    for path in keyed.data_dir.rglob("*"):
        if path.is_file():
            assert created.secret.rsplit("_", 1)[1].encode() not in path.read_bytes(), path
    for path in ("/mcp/ragbox", "/mcp/kb", "/mcp/proxysql", "/mcp/mindset", "/mcp/chat", "/mcp"):
        for headers in ({"x-api-key": created.secret}, {"authorization": f"Bearer {created.secret}"}):
            assert rpc(keyed.http, "tools/list", path=path, **headers).status_code == 200, (path, headers)
    listed = tool(keyed.http, "list_documents", {}, "/mcp/ragbox", **{"x-api-key": created.secret})
    assert "result" in listed, listed
    last = list(keyed.services.audit.store.records("rbx"))[-1]
    assert (last.key_id, last.tool) == (created.key.key_id, "list_documents")
    admin = tool(keyed.http, "rag.admin.stats", {}, "/mcp/proxysql", **{"x-api-key": created.secret})
    assert admin["error"]["code"] == UNAUTHORIZED and "'admin' scope" in admin["error"]["message"]
    assert_unauthorized(rpc(keyed.http, "tools/list", path="/mcp/ragbox", **{"x-api-key": "rbx_live_" + "0" * 64}))
    keyed.services.keys.revoke(created.key.key_id)
    assert_unauthorized(rpc(keyed.http, "tools/list", path="/mcp/ragbox", **{"x-api-key": created.secret}))
    with pytest.raises(InvalidArgument, match="key format"):
        keyed.services.keys.create("rbx", key_format="rbx")


def test_only_the_hash_of_a_key_is_stored(keyed: Keyed) -> None:
    created = keyed.services.keys.create("acme", name="hash-only")
    answer = rpc(keyed.http, "tools/list", authorization=f"Bearer {created.secret}")
    assert answer.status_code == 200
    secret_hex = created.secret.rsplit("_", 1)[1]
    files = [p for p in keyed.data_dir.rglob("*") if p.is_file()]
    assert any(p.name == "ragmcp.db" for p in files)
    for path in files:
        data = path.read_bytes()
        assert created.secret.encode() not in data and secret_hex.encode() not in data, path
    stored = keyed.services.keys.store.get(created.key.key_id)
    assert stored is not None and stored.key_hash == hashlib.sha256(created.secret.encode()).hexdigest()
    assert created.secret not in repr(created) and stored.key_hash not in repr(stored)


def test_bearer_and_x_api_key_are_both_accepted_and_name_the_keys_tenant(keyed: Keyed) -> None:
    created = keyed.services.keys.create("acme-tools", name="both")
    for headers in (
        {"authorization": f"Bearer {created.secret}"},
        {"authorization": f"bearer {created.secret}"},
        {"x-api-key": created.secret},
        {"authorization": "Basic dXNlcjpwYXNz", "x-api-key": created.secret},
    ):
        answer = tool(keyed.http, "kb_status", {}, **headers)
        assert "result" in answer, (headers, answer)
        last = list(keyed.services.audit.store.records("acme-tools"))[-1]
        assert (last.tenant, last.key_id, last.tool) == ("acme-tools", created.key.key_id, "kb_status")


def test_a_missing_wrong_or_malformed_key_is_refused_with_401(keyed: Keyed) -> None:
    keyed.services.keys.create("acme")
    wrong = "rmcp_live_" + "0" * 64
    for headers in (
        {},
        {"authorization": f"Bearer {wrong}"},
        {"x-api-key": wrong},
        {"authorization": "Bearer"},
        {"authorization": "Basic dXNlcjpwYXNz"},
        {"x-api-key": ""},
    ):
        assert_unauthorized(rpc(keyed.http, "tools/list", **headers))
        assert_unauthorized(rpc(keyed.http, "tools/list", path="/mcp/ragbox", **headers))


def test_a_wrong_bearer_key_is_not_rescued_by_a_right_x_api_key(keyed: Keyed) -> None:
    created = keyed.services.keys.create("acme")
    wrong = "rmcp_live_" + "1" * 64
    assert_unauthorized(rpc(keyed.http, "tools/list", authorization=f"Bearer {wrong}", **{"x-api-key": created.secret}))


def test_a_revoked_key_is_refused_and_the_others_go_on(keyed: Keyed) -> None:
    revoked = keyed.services.keys.create("acme", name="to revoke")
    kept = keyed.services.keys.create("acme", name="kept")
    assert rpc(keyed.http, "tools/list", **{"x-api-key": revoked.secret}).status_code == 200
    keyed.services.keys.revoke(revoked.key.key_id)
    assert_unauthorized(rpc(keyed.http, "tools/list", **{"x-api-key": revoked.secret}))
    assert rpc(keyed.http, "tools/list", **{"x-api-key": kept.secret}).status_code == 200


def test_revoking_the_last_key_locks_the_server_rather_than_opening_it(tmp_path: Path) -> None:
    services, http = keyed_app(tmp_path / "data")
    with http:
        assert_unauthorized(rpc(http, "tools/list"))  # no key yet: nobody, never everybody
        only = services.keys.create("default")
        assert rpc(http, "tools/list", authorization=f"Bearer {only.secret}").status_code == 200
        assert_unauthorized(rpc(http, "tools/list"))
        services.keys.revoke(only.key.key_id)
        assert_unauthorized(rpc(http, "tools/list"))
        assert_unauthorized(rpc(http, "tools/list", authorization=f"Bearer {only.secret}"))


def test_scopes_decide_which_tools_a_key_may_call(keyed: Keyed) -> None:
    reader = keyed.services.keys.create("scoped", scopes=("read",))
    writer = keyed.services.keys.create("scoped", scopes=("read", "write"))
    as_reader = {"authorization": f"Bearer {reader.secret}"}
    refused = tool(keyed.http, "kb_addnote", {"text": "the reader's note"}, "/mcp/kb", **as_reader)
    assert refused["error"] == {
        "code": UNAUTHORIZED,
        "message": "this API key may not call kb_addnote (it needs the 'write' scope)",
        "data": {"code": "FORBIDDEN"},
    }
    assert keyed.services.documents.list("scoped") == [] and keyed.services.jobs.list("scoped") == []
    stats = tool(keyed.http, "rag.admin.stats", {}, "/mcp/proxysql", **as_reader)
    assert stats["error"]["code"] == UNAUTHORIZED and "'admin' scope" in stats["error"]["message"]
    sync = tool(keyed.http, "rag.admin.sync", {}, "/mcp/proxysql", authorization=f"Bearer {writer.secret}")
    assert sync["error"]["code"] == UNAUTHORIZED and "'admin' scope" in sync["error"]["message"]
    assert "result" in tool(keyed.http, "kb_search", {"query": "anything"}, "/mcp/kb", **as_reader)
    added = tool(
        keyed.http, "kb_addnote", {"text": "the writer's note"}, "/mcp/kb", authorization=f"Bearer {writer.secret}"
    )
    assert "result" in added, added


def test_keys_commands_create_list_and_revoke(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    code, out, err = finish(
        cli(
            data_dir,
            "keys",
            "create",
            "--tenant",
            "acme",
            "--name",
            "ci bot",
            "--scopes",
            "read,admin",
            "--max-tier",
            "confidential",
            "--rate",
            "7",
            "--synthesis-rate",
            "3",
            "--concurrent",
            "2",
        )
    )
    assert code == 0, err
    fields = dict(line.split(":", 1) for line in out.strip().splitlines())
    key_id, secret = fields["key id"].strip(), fields["secret"].strip()
    assert fields["tenant"].strip() == "acme" and KEY.match(secret) and re.fullmatch(r"[0-9a-f]{12}", key_id)
    assert "shown only now" in err

    code, listed, err = finish(cli(data_dir, "keys", "list"))
    assert code == 0, err
    assert listed.strip() == (
        f"{key_id}  tenant=acme  name='ci bot'  acts_as=key:{key_id}  scopes=read,admin  max_tier=confidential  "
        "limits=7/3/2  active"
    )

    services, http = keyed_app(data_dir)
    keeper = services.keys.create("acme", name="keeper")  # revoking the last key is a case of its own
    with http:
        answer = rpc(http, "tools/list", path="/mcp/ragbox", **{"x-api-key": secret})
        assert answer.status_code == 200 and answer.headers["x-ratelimit-limit"] == "7"

        code, out, err = finish(cli(data_dir, "keys", "revoke", key_id))
        assert (code, out.strip()) == (0, f"revoked {key_id}"), err
        assert_unauthorized(rpc(http, "tools/list", path="/mcp/ragbox", **{"x-api-key": secret}))
        assert rpc(http, "tools/list", path="/mcp/ragbox", **{"x-api-key": keeper.secret}).status_code == 200

    code, listed, err = finish(cli(data_dir, "keys", "list"))
    assert code == 0, err
    lines = {line.split()[0]: line for line in listed.strip().splitlines()}
    assert set(lines) == {key_id, keeper.key.key_id}
    assert re.fullmatch(rf"{key_id}  tenant=acme .* revoked \d{{4}}-\d{{2}}-\d{{2}}", lines[key_id])
    assert lines[keeper.key.key_id].endswith("  active")
    assert secret not in listed and secret.rsplit("_", 1)[1] not in listed


def test_keys_create_format_ragbox_prints_an_rbx_live_key_that_ragbox_accepts(tmp_path: Path) -> None:
    """ragbox-mcp.md, Key Format: `rbx_live_[64-character hexadecimal string]`: `ragmcp keys create
    --format ragbox` issues one; `keys list` shows it as any other key, never its secret."""
    data_dir = tmp_path / "data"
    code, out, err = finish(
        cli(data_dir, "keys", "create", "--tenant", "acme", "--name", "vault", "--format", "ragbox")
    )
    assert code == 0, err
    fields = dict(line.split(":", 1) for line in out.strip().splitlines())
    key_id, secret = fields["key id"].strip(), fields["secret"].strip()
    assert RAGBOX_KEY.match(secret), secret
    code, listed, err = finish(cli(data_dir, "keys", "list"))
    assert code == 0 and listed.startswith(f"{key_id}  tenant=acme  name='vault'") and secret not in listed, err
    _services, http = keyed_app(data_dir)
    with http:
        answer = tool(http, "search_documents", {"query": "anything"}, "/mcp/ragbox", **{"x-api-key": secret})
        assert "result" in answer, answer
    code, _, err = finish(cli(data_dir, "keys", "create", "--tenant", "acme", "--format", "rbx"))
    assert code == 2 and "invalid choice: 'rbx'" in err


def test_keys_commands_refuse_bad_input(tmp_path: Path) -> None:
    running = [
        cli(tmp_path / "a", "keys", "revoke", "0123456789ab"),
        cli(tmp_path / "b", "keys", "create", "--tenant", "acme", "--scopes", "read,root"),
        cli(tmp_path / "c", "keys", "create", "--tenant", "no/slashes"),
    ]
    results = [finish(p) for p in running]
    assert [r[0] for r in results] == [2, 2, 2]
    assert "no key '0123456789ab'" in results[0][2]
    assert "unknown scopes: root" in results[1][2]
    assert "tenant must be" in results[2][2]
    assert all("secret" not in out for _, out, _ in results)


def test_serve_refuses_to_start_without_keys_on_any_address(tmp_path: Path) -> None:
    running = {
        host: cli(
            tmp_path / host.replace(":", "_").replace(".", "_"), "serve", "--host", host, "--port", str(free_port())
        )
        for host in ("0.0.0.0", "::", "192.0.2.10")
    }
    for host, process in running.items():
        code, out, err = finish(process, timeout=90)
        assert code == 2, (host, out, err)
        assert "ragmcp serve: no active API key in " in err


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.1", False),
        ("example.com", False),
        ("", False),
    ],
)
def test_only_loopback_addresses_count_as_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_an_open_server_says_so_and_listens_on_loopback_only(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMCP_")}
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "ragmcp.cli", "--data-dir", str(tmp_path / "data")),
                *("serve", "--open", "--port", str(port)),
            ],
            env=env,
            stdout=sink,
            stderr=sink,
        )
    try:
        deadline = time.monotonic() + 90
        health = None
        while time.monotonic() < deadline and process.poll() is None:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except httpx.HTTPError:
                time.sleep(0.3)
        assert health is not None and health.status_code == 200, log.read_text()
        text = log.read_text()
        assert "--open: serving WITHOUT authentication on 127.0.0.1 (loopback only)" in text
        listed = httpx.post(f"http://127.0.0.1:{port}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert listed.status_code == 200 and listed.json()["result"]["tools"]
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()

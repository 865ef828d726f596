"""`ragmcp serve` as a process, called by the official MCP client: the audit checkpoints are written
at the interval while it runs (before it stops) and once more when it stops, so that `ragmcp audit
verify` afterwards vouches for every record, refused requests included."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import start_server, stop_server

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]


def cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMCP_")}
    command = [sys.executable, "-m", "ragmcp.cli", "--data-dir", str(data_dir), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)


def checkpoints(data_dir: Path) -> list[dict]:
    path = data_dir / "audit-checkpoints.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_serve_checkpoints_the_trail_while_running_and_at_shutdown(tmp_path: Path, monkeypatch) -> None:
    docs, data_dir = tmp_path / "docs", tmp_path / "data"
    shutil.copytree(REPO / "samples" / "docs", docs)
    created = cli(data_dir, "keys", "create", "--tenant", "default")
    assert created.returncode == 0, created.stderr
    secret = next(line.split()[-1] for line in created.stdout.splitlines() if line.startswith("secret:"))
    monkeypatch.setenv("RAGMCP_AUDIT_CHECKPOINT_SECONDS", "0.5")
    server = start_server(docs, data_dir, ingest_timeout=300)
    try:

        async def calls() -> None:
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {secret}"}, timeout=60)
            async with http, Client(streamable_http_client(server.url + "/kb", http_client=http)) as client:
                await client.call_tool("kb_search", {"query": "getting started"})
                await client.call_tool("kb_status", {})

        anyio.run(calls)
        refused = httpx.post(
            server.url,
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "kb_status", "arguments": {}}},
            headers={"Authorization": "Bearer rmcp_live_" + "1" * 64},
            timeout=30,
        )
        assert refused.status_code == 401
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(
            c["heads"].get("default", [0])[0] >= 2 for c in checkpoints(data_dir)
        ):
            time.sleep(0.2)
        running = checkpoints(data_dir)
        assert server.process.poll() is None and any(c["heads"].get("default", [0])[0] >= 2 for c in running)
        anyio.run(calls)  # two more records, after the last checkpoint so far
    finally:
        stop_server(server)
    final = checkpoints(data_dir)[-1]["heads"]
    assert final["default"][0] == 4 and final["(unauthenticated)"][0] == 1
    verified = cli(data_dir, "audit", "verify")
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.startswith("audit trail intact: 5 records in 2 chains, ")
    assert verified.stdout.strip().endswith("; 0 records newer than the last checkpoint")

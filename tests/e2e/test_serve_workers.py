"""`ragmcp serve --workers 2` as processes, called by the official MCP client over fresh
connections (the kernel hands each to one of the processes waiting on the socket): both processes
answer, a write taken by either is found through every connection, the audit trail both append to
verifies as one chain, a killed reader is started again, and stopping the writer leaves no reader
behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import RunningServer, start_server, stop_server

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
NOTE = "Workers note: the zephyr quartermaster inventories every lighthouse on Tuesdays."


def cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMCP_")}
    command = [sys.executable, "-m", "ragmcp.cli", "--data-dir", str(data_dir), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)


def secret_of(created: subprocess.CompletedProcess[str]) -> str:
    assert created.returncode == 0, created.stderr
    return next(line.split()[-1] for line in created.stdout.splitlines() if line.startswith("secret:"))


def ready_processes(server: RunningServer, want: int, timeout: float = 120) -> dict[int, dict]:
    """pid -> /healthz body, once `want` processes have each answered ready (graph and index warm)."""
    seen: dict[int, dict] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            health = server.health()
        except httpx.HTTPError:
            time.sleep(0.2)
            continue
        graph, warm = health["vector_graph"], health["warm"]
        if graph["state"] == "ready" and graph["behind"] == 0 and warm["state"] == "ready":
            seen[health["worker"]["pid"]] = health
            if len(seen) >= want:
                return seen
        time.sleep(0.1)
    raise AssertionError(f"only {sorted(seen)} of {want} processes answered ready")


def search(server: RunningServer, secret: str, query: str) -> str:
    """kb_search over a new connection; its text."""

    async def call() -> str:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {secret}"}, timeout=60)
        async with http, Client(streamable_http_client(server.url + "/kb", http_client=http)) as client:
            result = await client.call_tool("kb_search", {"query": query})
            assert not result.is_error, result
            return "".join(getattr(part, "text", "") for part in result.content)

    return anyio.run(call)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, str, str]]:
    """The server, a key allowed 1,000 requests a minute and one allowed 5."""
    root = tmp_path_factory.mktemp("workers")
    docs, data_dir = root / "docs", root / "data"
    shutil.copytree(REPO / "samples" / "docs", docs)
    secret = secret_of(cli(data_dir, "keys", "create", "--tenant", "default", "--rate", "1000", "--concurrent", "20"))
    five = secret_of(cli(data_dir, "keys", "create", "--tenant", "default", "--rate", "5"))
    server = start_server(docs, data_dir, ingest_timeout=300, open_access=False, extra=("--workers", "2"))
    yield server, secret, five
    stop_server(server)


def test_a_writer_and_a_reader_answer_on_one_port(served) -> None:
    server, _, _ = served
    processes = ready_processes(server, 2)
    roles = {health["worker"]["role"]: pid for pid, health in processes.items()}
    assert set(roles) == {"writer", "reader"} and roles["writer"] == server.process.pid
    writer = processes[roles["writer"]]
    assert writer["readers"]["running"] == [roles["reader"]] and writer["ingest"]["state"] == "idle"


def test_eight_connections_at_once_are_spread_evenly_over_both_processes(served) -> None:
    """The bench's c=8: eight kept-alive connections, each answered by the process that accepted
    it. The processes take turns to accept (AcceptTurns): four each, where the first process
    woken used to take most of them and leave the other core idle."""
    server, _, _ = served
    ready_processes(server, 2)
    clients = [httpx.Client(timeout=10) for _ in range(8)]
    try:
        pids = [client.get(f"{server.base}/healthz").json()["worker"]["pid"] for client in clients]
        again = [client.get(f"{server.base}/healthz").json()["worker"]["pid"] for client in clients]
    finally:
        for client in clients:
            client.close()
    assert again == pids  # each connection stays with its process
    counts = sorted(pids.count(pid) for pid in set(pids))
    assert len(counts) == 2 and counts[0] >= 3, pids  # 4 and 4; 3 and 5 when a turn went stale under load


def test_every_process_answers_healthz_with_the_writers_state(served) -> None:
    """A poll of /healthz lands on either process: each says the writer's sync state, held
    deletions and readers (a reader used to answer "ingest": null, "readers": null)."""
    server, _, _ = served
    processes = ready_processes(server, 2)
    for pid, health in processes.items():
        assert health["ingest"] is not None and health["ingest"]["state"] == "idle", (pid, health)
        assert health["ingest"]["held_deletions"]["count"] == 0 and health["ingest"]["ingested"] >= 4
        assert health["readers"] is not None and len(health["readers"]["running"]) == 1, (pid, health)
        assert health["status"] == "ok"


def test_a_note_taken_by_either_process_is_found_through_every_connection(served) -> None:
    server, secret, _ = served

    async def add() -> None:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {secret}"}, timeout=60)
        async with http, Client(streamable_http_client(server.url + "/kb", http_client=http)) as client:
            result = await client.call_tool("kb_addnote", {"text": NOTE})
            assert not result.is_error, result

    anyio.run(add)
    deadline = time.monotonic() + 60
    while "zephyr quartermaster" not in search(server, secret, "zephyr quartermaster lighthouse"):
        assert time.monotonic() < deadline, "the note was never found"
        time.sleep(0.5)
    for _ in range(12):
        assert "zephyr quartermaster" in search(server, secret, "zephyr quartermaster lighthouse")
    # Another question puts its own document first (the relevance floor keeps all of an on-topic
    # query's results, the note among them, or none).
    first = json.loads(search(server, secret, "release notes"))["results"][0]
    assert "zephyr quartermaster" not in json.dumps(first)


def test_a_keys_rate_limit_holds_across_both_processes(served) -> None:
    server, _, five = served
    ready_processes(server, 2)
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "kb_status", "arguments": {}}}
    headers = {"Authorization": f"Bearer {five}", "Accept": "application/json, text/event-stream"}
    answers = [httpx.post(server.url + "/kb", json=call, headers=headers, timeout=60) for _ in range(12)]
    limited = [a for a in answers if "error" in a.json() and a.json()["error"]["code"] == -32001]
    assert len(answers) - len(limited) == 5 and len(limited) == 7
    assert {a.headers["x-ratelimit-limit"] for a in answers} == {"5"}


def test_the_audit_trail_both_processes_append_to_verifies(served) -> None:
    server, secret, _ = served
    for _ in range(6):
        search(server, secret, "getting started")
    verified = cli(server.data_dir, "audit", "verify")
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.startswith("audit trail intact: ")
    records = int(verified.stdout.split(": ", 1)[1].split()[0])
    assert records >= 6 + 12 + 2  # this test's calls, the note test's, and at least its add and first search


def test_a_killed_reader_is_started_again(served) -> None:
    server, _, _ = served
    reader = next(pid for pid, h in ready_processes(server, 2).items() if h["worker"]["role"] == "reader")
    os.kill(reader, signal.SIGKILL)
    processes = ready_processes(server, 2)  # a dead process answers nothing: these two are alive
    assert reader not in processes
    writer = processes[server.process.pid]
    assert writer["readers"]["restarts"] == 1 and len(writer["readers"]["running"]) == 1


def test_stopping_the_writer_stops_every_reader(served) -> None:
    server, _, _ = served
    readers = [pid for pid, h in ready_processes(server, 2).items() if h["worker"]["role"] == "reader"]
    server.process.send_signal(signal.SIGTERM)
    server.process.wait(timeout=30)
    deadline = time.monotonic() + 20
    while any(Path(f"/proc/{pid}").exists() for pid in readers):
        assert time.monotonic() < deadline, f"readers {readers} outlived the writer"
        time.sleep(0.2)

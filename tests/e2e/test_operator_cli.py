"""What an operator who has not read the code meets first: a server that says which tenant and data
directory it fills and when it is ready, `stdio` and `ingest` that name their data directory, a
folder switch that is explicit, and keys for a tenant that holds nothing said to find nothing."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e

# README's first request (section "Try it").
FIRST_REQUEST = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "rag_search", "arguments": {"search_phrases": ["how are links to originals signed"]}},
}


def ragmcp(data_dir: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ragmcp.cli", "--data-dir", str(data_dir), *args],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
    )


@pytest.fixture
def samples(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    shutil.copytree(REPO / "samples" / "docs", docs)
    return docs


def test_serve_names_its_tenant_and_says_ready_before_the_first_answer(tmp_path, samples):
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "ragmcp.cli", "--data-dir", str(tmp_path / "data"), "serve", "--open"]
        + ["--docs", str(samples), "--port", str(port)],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert server.stderr is not None
        for line in server.stderr:
            lines.append(line)
            if "ready:" in line:
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert ready.wait(240), "".join(lines)
        said = "".join(lines)
        assert f"of tenant 'default' (data directory {(tmp_path / 'data').resolve()})" in said
        assert f"ready: {(tmp_path / 'data').resolve()}: 7 documents in tenant 'default'" in said
        # The README waits for the ready line, then asks: the first answer is never empty.
        answer = httpx.post(
            f"http://127.0.0.1:{port}/mcp",
            json=FIRST_REQUEST,
            headers={"x-user-id": "user@example.com", "x-session-tags": '["department:sales"]'},
            timeout=60,
        ).json()
        assert answer["result"]["segments"], answer
    finally:
        server.terminate()
        server.wait(30)


def test_stdio_from_another_folder_says_which_index_it_serves(tmp_path, samples):
    data = tmp_path / "data"
    assert ragmcp(data, "ingest", str(samples)).returncode == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    stray = subprocess.run(
        [sys.executable, "-m", "ragmcp.cli", "stdio"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert f"ragmcp stdio: {(elsewhere / '.ragmcp').resolve()}: 0 documents in tenant 'default'" in stray.stderr
    assert "no documents yet" in stray.stderr
    served = ragmcp(data, "stdio", cwd=elsewhere)  # stdin at its end: the server stops at once
    assert served.returncode == 0, served.stderr
    assert f"ragmcp stdio: {data.resolve()}: 7 documents in tenant 'default'" in served.stderr


def test_connect_stdio_gives_a_client_the_absolute_data_directory(tmp_path, samples):
    data = tmp_path / "data"
    assert ragmcp(data, "ingest", str(samples)).returncode == 0
    config = ragmcp(data, "connect", "claude-desktop", "--stdio", "--profile", "mindset", cwd=tmp_path)
    assert config.returncode == 0, config.stderr
    server = json.loads(config.stdout)["mcpServers"]["ragmcp"]
    assert Path(server["command"]).is_absolute()
    assert server["args"][server["args"].index("--data-dir") + 1] == str(data.resolve())
    assert server["args"][-5:] == ["stdio", "--tenant", "default", "--profile", "mindset"]
    assert f"answers as tenant 'default' of {data.resolve()}" in config.stderr
    # What the client would run answers from the index, wherever the client starts it.
    listed = subprocess.run(
        [server["command"], *server["args"]],
        input=json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "0"},
                },
            }
        )
        + "\n",
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )
    assert listed.returncode == 0, listed.stderr
    assert "7 documents" in listed.stderr
    assert json.loads(listed.stdout.splitlines()[0])["result"]["serverInfo"]


def test_ingest_names_its_data_directory_and_what_it_holds(tmp_path, samples):
    data = tmp_path / "data"
    run = ragmcp(data, "ingest", str(samples))
    assert run.returncode == 0, run.stderr
    assert f"as source 'docs' of tenant 'default' into {data.resolve()}" in run.stderr
    assert f"ragmcp ingest: {data.resolve()}: 7 documents in tenant 'default'" in run.stderr


def test_another_folder_on_a_source_is_refused_kept_apart_or_replaced_on_request(tmp_path, samples):
    data = tmp_path / "data"
    other = tmp_path / "other"
    other.mkdir()
    (other / "penguins.md").write_text("# Penguins\n\nEmperor penguins breed in the Antarctic winter.\n")
    assert ragmcp(data, "ingest", str(samples)).returncode == 0

    switched = ragmcp(data, "ingest", str(other))
    assert switched.returncode == 2
    assert (
        f"source 'docs' of tenant 'default' reads the folder {samples.resolve()} (4 files indexed)" in switched.stderr
    )
    assert "--source NAME" in switched.stderr and "--replace (deletes the documents of the 4 files" in switched.stderr
    assert "7 documents in tenant 'default'" in ragmcp(data, "ingest", str(samples)).stderr  # nothing changed

    apart = ragmcp(data, "ingest", str(other), "--source", "penguins")
    assert apart.returncode == 0, apart.stderr
    assert "8 documents in tenant 'default'" in apart.stderr

    replaced = ragmcp(data, "ingest", str(other), "--replace")
    assert replaced.returncode == 0, replaced.stderr
    assert "4 of its 4 files are not in the new folder, and their documents are deleted" in replaced.stderr
    assert "4 deleted" in replaced.stdout
    # Source 'docs' now holds the penguins file, source 'penguins' the same file: 2 documents.
    assert "2 documents in tenant 'default'" in replaced.stderr


def test_a_key_for_a_tenant_without_documents_says_it_will_find_nothing(tmp_path, samples):
    data = tmp_path / "data"
    assert ragmcp(data, "ingest", str(samples)).returncode == 0
    empty = ragmcp(data, "keys", "create", "--tenant", "acme")
    assert empty.returncode == 0, empty.stderr
    assert "tenant 'acme' holds no documents yet" in empty.stderr
    filled = ragmcp(data, "keys", "create", "--tenant", "default")
    assert "holds no documents" not in filled.stderr
    secret = next(line.split()[-1] for line in filled.stdout.splitlines() if line.startswith("secret:"))
    said = ragmcp(data, "connect", "cursor", "--key", secret)
    assert "the key reads tenant 'default'" in said.stderr

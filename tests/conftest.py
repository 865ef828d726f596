"""Shared fixtures: the shared test documents and a real `ragmcp serve` on 127.0.0.1."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from ragmcp_bench.bench_scale import free_port

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"

# Test tiers: `make test-fast` runs `-m "not slow and not e2e"`. Every test under tests/e2e is `e2e`
# (a real `ragmcp serve`). `slow`: every test under tests/integration (servers, moto, the CLI, real
# ingests: measured at 1-70 s a module) but the modules named here, every test using one of the fixtures
# named here (they ingest real documents with the ONNX model), and the tests marked so.
FAST_INTEGRATION_MODULES = frozenset({"test_search_index_behaviour.py"})
SLOW_FIXTURES = frozenset({"shared_index", "kb_services", "library", "keyed", "served_documents", "scifact"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.relative_to(TESTS).parts
        if parts[0] == "e2e":
            item.add_marker(pytest.mark.e2e)
        elif parts[0] == "integration" and item.path.name not in FAST_INTEGRATION_MODULES:
            item.add_marker(pytest.mark.slow)
        elif SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


def shared_dir() -> Path:
    return Path(os.environ.get("RAGMCP_SHARED_DIR", REPO.parent / "shared"))


@pytest.fixture(scope="session")
def shared_documents() -> Path:
    folder = shared_dir() / "documents"
    if not (folder / "source").is_dir():
        pytest.skip(f"shared documents not found at {folder} (set RAGMCP_SHARED_DIR)")
    return folder


@pytest.fixture(scope="session")
def scifact() -> Path:
    folder = shared_dir() / "eval" / "scifact"
    if not (folder / "corpus.jsonl").is_file():
        pytest.skip(f"SciFact not found at {folder} (set RAGMCP_SHARED_DIR)")
    return folder


@dataclass
class RunningServer:
    url: str
    base: str
    data_dir: Path
    docs: Path
    process: subprocess.Popen

    def health(self) -> dict:
        return httpx.get(f"{self.base}/healthz", timeout=5).json()


def start_server(
    docs: Path,
    data_dir: Path,
    *,
    ingest_timeout: float = 900,
    open_access: bool = True,
    extra: tuple[str, ...] = (),
    settings: dict[str, str] | None = None,
    open_files: int | None = None,
) -> RunningServer:
    """`ragmcp serve --docs` on a free loopback port, ingested and idle; `--open` (no key needed)
    unless the test created keys and wants them required. `settings`: more RAGMCP_ variables;
    `open_files`: the server's RLIMIT_NOFILE (soft and hard)."""
    port = free_port()
    env = {**os.environ, "RAGMCP_DATA_DIR": str(data_dir), "RAGMCP_PORT": str(port), "RAGMCP_HOST": "127.0.0.1"}
    env.update(settings or {})
    log = (data_dir.parent / f"server-{port}.log").open("wb")

    def limit_open_files() -> None:
        if open_files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))

    process = subprocess.Popen(
        [sys.executable, "-m", "ragmcp.cli", "serve", "--docs", str(docs), *(["--open"] * open_access), *extra],
        env=env,
        stdout=log,
        stderr=log,
        preexec_fn=limit_open_files if open_files is not None else None,
    )
    base = f"http://127.0.0.1:{port}"
    server = RunningServer(f"{base}/mcp", base, data_dir, docs, process)
    deadline = time.monotonic() + ingest_timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"ragmcp serve exited with {process.returncode}; see {log.name}")
        try:
            ingest = server.health()["ingest"]
            if ingest and ingest["state"] == "idle":
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    process.kill()
    raise RuntimeError("ragmcp serve did not finish ingesting in time")


def stop_server(server: RunningServer) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.process.kill()


@pytest.fixture(scope="session")
def served_documents(shared_documents: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """`ragmcp serve` over the shared documents, ingested and idle."""
    server = start_server(shared_documents / "source", tmp_path_factory.mktemp("served") / "data")
    yield server
    stop_server(server)

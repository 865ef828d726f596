"""Safe start: `ragmcp serve` refuses what it must not serve, and says why in one line.

A typo in --docs, a missing or emptied key store, an empty or damaged database and `--open`
beyond loopback are each refused before anything is changed; the files the server creates are
private; a dead background worker makes /healthz answer 503; the access mode is fixed at start.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import sqlean
from pydantic import ValidationError
from starlette.testclient import TestClient

from ragmcp.adapters.local.watcher import FolderWatcher
from ragmcp.bootstrap import build_registry, build_services
from ragmcp.domain.models import Source
from ragmcp.http import create_app
from ragmcp.serve import folder_problem
from ragmcp.settings import Settings
from ragmcp.web.state import ServeState
from tests.conftest import REPO, free_port

SAMPLES = REPO / "samples" / "docs"


def cli(data_dir: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMCP_")}
    command = [sys.executable, "-m", "ragmcp.cli", "--data-dir", str(data_dir), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def refusal(result: subprocess.CompletedProcess[str]) -> str:
    """The refusal's one line (log lines of libraries loaded before it are left out)."""
    lines = [line for line in result.stderr.splitlines() if line.startswith("ragmcp")]
    assert result.returncode == 2 and len(lines) == 1, (result.returncode, result.stderr)
    return lines[0]


def digest(data_dir: Path) -> str:
    """Everything stored: each table's rows and every file beside the database."""
    sha = hashlib.sha256()
    conn = sqlean.connect(f"file:{data_dir / 'ragmcp.db'}?mode=ro", uri=True)
    try:
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"):
            for row in sorted(repr(r) for r in conn.execute(f'SELECT * FROM "{table}"')):
                sha.update(f"{table}:{row}".encode())
    finally:
        conn.close()
    for path in sorted(data_dir.rglob("*")):
        if path.is_file() and not path.name.startswith("ragmcp.db"):
            sha.update(path.read_bytes())
    return sha.hexdigest()


@pytest.fixture
def ingested(tmp_path: Path) -> Path:
    """A data directory holding the samples, with one key; its connections closed and checkpointed."""
    data_dir = tmp_path / "data"
    docs = tmp_path / "docs"
    shutil.copytree(SAMPLES, docs)
    services = build_services(Settings(data_dir=data_dir))
    report = services.ingest.sync(services.register_folder("default", "docs", str(docs)))
    assert report.ingested == 4 and report.failed == 0
    services.keys.create("default")
    services.database.conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return data_dir


def test_serve_of_a_missing_folder_or_a_file_exits_with_one_line_and_changes_nothing(
    ingested: Path, tmp_path: Path
) -> None:
    before = digest(ingested)
    typo = cli(ingested, "serve", "--docs", str(tmp_path / "dosc"), "--port", str(free_port()))
    assert refusal(typo) == f"ragmcp serve: no such folder: {tmp_path / 'dosc'} (nothing was changed)"
    a_file = cli(ingested, "serve", "--docs", str(SAMPLES / "glossary.csv"), "--port", str(free_port()))
    assert "not a folder" in refusal(a_file)
    ingest_typo = cli(ingested, "ingest", str(tmp_path / "dosc"))
    assert "no such file or folder" in refusal(ingest_typo)
    assert digest(ingested) == before


def test_an_unreadable_folder_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "locked"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0)
    else:  # root reads any folder: make the listing fail as it would for anyone else
        real = os.scandir

        def denied(path: object = ".") -> object:
            if Path(str(path)) == folder:
                raise PermissionError(13, "Permission denied", str(path))
            return real(path)

        monkeypatch.setattr(os, "scandir", denied)
    try:
        assert folder_problem(folder) == f"cannot read the folder {folder}: Permission denied (nothing was changed)"
    finally:
        folder.chmod(0o700)
    assert folder_problem(tmp_path) is None


def test_serve_never_opens_without_being_asked(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    none_yet = cli(data_dir, "serve", "--port", str(free_port()))
    assert refusal(none_yet).startswith(f"ragmcp serve: no active API key in {data_dir / 'ragmcp.db'}")
    assert "--open" in refusal(none_yet)
    created = cli(data_dir, "keys", "create", "--tenant", "default")
    key_id = next(line.split()[-1] for line in created.stdout.splitlines() if line.startswith("key id:"))
    assert cli(data_dir, "keys", "revoke", key_id).returncode == 0
    all_revoked = cli(data_dir, "serve", "--port", str(free_port()))
    assert "no active API key" in refusal(all_revoked)
    for host in ("0.0.0.0", "::", "192.0.2.10"):
        wide = cli(data_dir, "serve", "--open", "--host", host, "--port", str(free_port()))
        assert refusal(wide).startswith(f"ragmcp serve: refusing --open on {host}: ")
    with pytest.raises(ValidationError, match="never the AWS backend"):
        Settings(backend="aws", open=True)


def test_the_access_mode_is_fixed_at_start_and_a_new_key_does_not_change_it(tmp_path: Path) -> None:
    listed = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    for open_access in (True, False):
        settings = Settings(data_dir=tmp_path / f"data-{open_access}", host="testserver", open=open_access)
        services = build_services(settings)
        with TestClient(create_app(services, build_registry(services)), base_url="http://testserver") as http:
            keyless = http.post("/mcp", json=listed)
            assert keyless.status_code == (200 if open_access else 401), keyless.text
            created = services.keys.create("acme")
            assert http.post("/mcp", json=listed).status_code == keyless.status_code
            keyed = http.post("/mcp", json=listed, headers={"x-api-key": created.secret})
            assert keyed.status_code == 200 and keyed.headers["x-ratelimit-limit"] == "60"
            wrong = http.post("/mcp", json=listed, headers={"x-api-key": "rmcp_live_" + "0" * 64})
            assert wrong.status_code == keyless.status_code  # an unknown key is worth no more than none


def test_a_zero_length_database_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "ragmcp.db").write_bytes(b"")
    line = refusal(cli(data_dir, "serve", "--open", "--port", str(free_port())))
    assert "ragmcp.db is empty (0 bytes)" in line and "`ragmcp doctor`" in line
    assert (data_dir / "ragmcp.db").stat().st_size == 0
    doctor = cli(data_dir, "doctor")
    assert doctor.returncode == 1 and "PROBLEM: " in doctor.stdout and "empty (0 bytes)" in doctor.stdout
    assert "restore" in doctor.stdout


def test_garbage_in_the_middle_of_the_database_is_refused_with_the_recovery_command(ingested: Path) -> None:
    db = ingested / "ragmcp.db"
    assert cli(ingested, "doctor").returncode == 0
    data = bytearray(db.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 16384] = os.urandom(16384)
    db.write_bytes(bytes(data))
    damaged = db.read_bytes()
    line = refusal(cli(ingested, "serve", "--port", str(free_port())))
    assert str(db) in line and "`ragmcp doctor`" in line
    assert "fails SQLite's check" in line or "cannot be read" in line
    doctor = cli(ingested, "doctor")
    assert doctor.returncode == 1 and "PROBLEM: " in doctor.stdout and f"mv {db} {db}.damaged" in doctor.stdout
    assert db.read_bytes() == damaged


def test_a_vector_graph_of_another_index_is_refused(ingested: Path, tmp_path: Path) -> None:
    graph = ingested / "vectors.hnsw"
    header = b"rmcphns2" + (10**9).to_bytes(8, "little") + (384).to_bytes(8, "little") + b"\0" * 32
    graph.write_bytes(header + b"\0" * 64)
    line = refusal(cli(ingested, "serve", "--port", str(free_port())))
    assert "vectors.hnsw holds chunks up to id 1000000000" in line and f"rm {graph}" in line


def test_files_the_server_creates_are_private_and_health_says_ok(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    docs = tmp_path / "docs"
    shutil.copytree(SAMPLES, docs)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMCP_")}
    command = ["--data-dir", str(data_dir), "serve", "--open", "--docs", str(docs), "--port", str(port)]
    with (tmp_path / "serve.log").open("wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "ragmcp.cli", *command], env=env, stdout=log, stderr=log)
    try:
        health = None
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and process.poll() is None:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
                if health.json()["ingest"]["state"] == "idle" and (data_dir / "vectors.hnsw").exists():
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        assert health is not None and health.status_code == 200, (tmp_path / "serve.log").read_text()
        body = health.json()
        assert body["status"] == "ok" and body["problems"] == []
        assert body["ingest"]["held_deletions"] == {"count": 0, "paths": [], "reason": None}
        assert body["warm"]["state"] == "ready" and body["query_cache"]["capacity"] == 4096
        log_text = (tmp_path / "serve.log").read_text()
        assert "--open: serving WITHOUT authentication on 127.0.0.1" in log_text
        assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
        created = [p for p in data_dir.rglob("*") if p.is_file()]
        assert {"ragmcp.db", "ratelimits.db", "signing.key", "vectors.hnsw", "ragmcp.lock"} <= {p.name for p in created}
        for path in created:
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    finally:
        process.terminate()
        process.wait(timeout=20)


def test_healthz_answers_503_with_the_reason_when_a_worker_dies(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(SAMPLES, docs)
    services = build_services(Settings(data_dir=tmp_path / "data", host="testserver", open=True))
    source = services.register_folder("default", "docs", str(docs))
    watcher = FolderWatcher(services.ingest, source)
    app = create_app(services, build_registry(services), ServeState(watcher=watcher, workers=[watcher]))
    watcher.start()
    with TestClient(app, base_url="http://testserver") as http:
        deadline = time.monotonic() + 120
        while http.get("/healthz").json()["ingest"]["state"] != "idle" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert http.get("/healthz").status_code == 200
        indexed = services.documents.list("default", "docs")
        assert len(indexed) >= 4
        shutil.rmtree(docs)  # the folder is unmounted under the watcher
        while watcher.problem() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        health = http.get("/healthz")
        assert health.status_code == 503, health.text
        body = health.json()
        assert body["status"] == "unhealthy"
        assert body["problems"] == [f"folder-watcher: the watched folder {docs} vanished; its documents are kept"]
    assert services.documents.list("default", "docs") == indexed
    watcher.stop()


def test_a_watcher_of_a_folder_that_cannot_be_watched_is_reported(tmp_path: Path) -> None:
    services = build_services(Settings(data_dir=tmp_path / "data", host="testserver", open=True))
    gone = Source(tenant="default", source_id="gone", name="gone", location=str(tmp_path / "never-made"))
    services.sources.put(gone)
    watcher = FolderWatcher(services.ingest, gone)
    watcher.start()
    deadline = time.monotonic() + 60
    while watcher.problem() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert watcher.problem() is not None and watcher.problem().startswith("folder-watcher died: FileNotFoundError")

"""Issue 24: a data directory that survives an operator's adds, deletes, restarts and second processes.

The vector graph's start-up check follows the chunk id counter, not the newest surviving row; a
graph file carries a checksum and a corrupt one is never used.
"""

from __future__ import annotations

import base64
import json
import os
import random
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from mcp import Client as McpClient
from mcp.client.stdio import StdioServerParameters

from ragmcp.adapters.local.hnsw import HnswVectors
from ragmcp.adapters.local.recovery import Redo, RedoWorker
from ragmcp.adapters.local.watcher import FolderWatcher
from ragmcp.bootstrap import build_services
from ragmcp.doctor import diagnose, startup_findings
from ragmcp.domain.models import Job, Principal
from ragmcp.services import Services
from ragmcp.settings import Settings
from tests.conftest import REPO, free_port, start_server, stop_server

SAMPLES = REPO / "samples" / "docs"


def served(tmp_path: Path) -> tuple[Services, Settings, Path]:
    """The samples ingested into a fresh data directory, its vector graph built and saved."""
    docs = tmp_path / "docs"
    shutil.copytree(SAMPLES, docs)
    settings = Settings(data_dir=tmp_path / "data")
    services = build_services(settings)
    report = services.ingest.sync(services.register_folder("default", "docs", str(docs)))
    assert report.failed == 0 and report.ingested >= 4
    graph = services.vector_graph
    assert isinstance(graph, HnswVectors)
    graph.catch_up()
    assert (settings.server.data_dir / "vectors.hnsw").is_file()
    return services, settings, docs


def newest_file(services: Services) -> str:
    row = (
        services.database.conn()
        .execute(
            "SELECT d.source, i.doc_id FROM chunks c JOIN idx_docs i ON i.id = c.doc"
            " JOIN documents d ON d.tenant = i.tenant AND d.doc_id = i.doc_id ORDER BY c.id DESC LIMIT 1"
        )
        .fetchone()
    )
    [doc] = [d for d in services.documents.list("default", "docs") if d.doc_id == row[1]]
    return doc.path


def test_deleting_the_newest_file_never_stops_the_next_start(tmp_path: Path) -> None:
    services, settings, docs = served(tmp_path)
    (docs / newest_file(services)).unlink()
    report = services.ingest.sync(services.sources.get("default", "docs"))
    assert report.deleted == 1
    assert startup_findings(settings) == []
    assert [f for f in diagnose(settings) if "vectors.hnsw" in f.problem] == []


def test_switching_to_another_folder_and_back_never_stops_the_next_start(tmp_path: Path) -> None:
    services, settings, docs = served(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "one.md").write_text("# One\n\nA single short note about owls.\n")
    report = services.ingest.sync(services.register_folder("default", "docs", str(other)))
    assert report.ingested == 1 and report.held >= 4  # the first folder's documents are held, not deleted
    services.vector_graph.catch_up()
    back = services.ingest.sync(services.register_folder("default", "docs", str(docs)))
    assert back.deleted == 1  # one.md: the newest chunks of the index
    assert startup_findings(settings) == []


def test_a_graph_ahead_of_the_id_counter_is_still_refused(tmp_path: Path) -> None:
    services, settings, _docs = served(tmp_path)
    with services.database.write() as conn:
        conn.execute("UPDATE sqlite_sequence SET seq = 1 WHERE name = 'chunks'")
    [finding] = startup_findings(settings)
    assert "not its graph" in finding.problem and "rm " in finding.fix


def test_a_corrupted_graph_file_is_found_by_doctor_and_rebuilt_never_used(tmp_path: Path) -> None:
    services, settings, _docs = served(tmp_path)
    path = settings.server.data_dir / "vectors.hnsw"
    sound = path.read_bytes()
    rng = random.Random(24)
    for _ in range(12):
        data = bytearray(sound)
        at = rng.randrange(8, len(data) - 32)  # anywhere after the magic: header fields or graph
        data[at : at + 32] = bytes(rng.randrange(256) for _ in range(32))
        path.write_bytes(bytes(data))
        found = [f for f in diagnose(settings) if "vectors.hnsw" in f.problem]
        assert len(found) == 1 and "checksum" in found[0].problem, (at, found)
        graph = HnswVectors(services.database, path, services.vector_graph.params)
        graph.catch_up()  # loads the file: a damaged one is rebuilt from the database instead
        assert graph.status()["nodes"] == services.database.conn().execute("SELECT count(*) FROM chunks").fetchone()[0]
        assert [f for f in diagnose(settings) if "vectors.hnsw" in f.problem] == []


def test_a_worker_that_finished_is_not_a_dead_one(tmp_path: Path) -> None:
    """`serve --no-watch` syncs once and its watcher returns; a recovery redoes its files and
    returns: neither may keep /healthz at 503 for the life of the process."""
    docs = tmp_path / "docs"
    shutil.copytree(SAMPLES, docs)
    services = build_services(Settings(data_dir=tmp_path / "data"))
    source = services.register_folder("default", "docs", str(docs))
    once = FolderWatcher(services.ingest, source, watch_changes=False)
    redo = RedoWorker(services.ingest, services.sources, [Redo("default", "docs", "gone.md")], services.jobs)
    for worker in (once, redo):
        worker.start()
        worker._thread.join(timeout=120)
        assert not worker._thread.is_alive()
        assert worker.problem() is None, worker.problem()
    assert once.status.as_dict()["state"] == "idle"


def test_a_second_serve_on_the_same_data_directory_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(SAMPLES, docs)
    first = start_server(docs, tmp_path / "data")
    try:
        other = tmp_path / "other"
        other.mkdir()
        (other / "one.md").write_text("# One\n\nA single short note about owls.\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMCP_")}
        command = [sys.executable, "-m", "ragmcp.cli", "--data-dir", str(first.data_dir), "serve", "--open"]
        command += ["--docs", str(other), "--port", str(free_port())]
        second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
        assert second.returncode == 2, second.stderr[-2000:]
        [line] = [x for x in second.stderr.splitlines() if x.startswith("ragmcp")]
        assert f"pid {first.process.pid}" in line and str(first.data_dir) in line and "--data-dir" in line
        ingest = cli(first.data_dir, "ingest", str(other))  # the same source, from another folder
        assert ingest.returncode == 2, ingest.stderr[-2000:]
        [line] = [x for x in ingest.stderr.splitlines() if x.startswith("ragmcp")]
        assert f"pid {first.process.pid}" in line and str(docs.resolve()) in line and "--source" in line
        source = build_services(Settings(data_dir=first.data_dir)).sources.get("default", "docs")
        assert source is not None and source.location == str(docs.resolve()) and not source.held_deletions
        assert first.health()["status"] == "ok"
        said = (first.data_dir.parent / f"server-{first.base.rsplit(':', 1)[1]}.log").read_text()
        assert "as source 'docs' of tenant 'default'" in said
        assert f"ready: {first.data_dir.resolve()}: 7 documents in tenant 'default'" in said, said[-3000:]
        beside = cli(first.data_dir, "ingest", str(other), "--source", "other")  # its own source: allowed
        assert beside.returncode == 0 and "1 ingested" in beside.stdout, beside.stderr[-2000:]
    finally:
        stop_server(first)


def wait_for(condition, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


def test_changes_made_during_the_first_sync_are_seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(SAMPLES, docs)
    services = build_services(Settings(data_dir=tmp_path / "data"))
    source = services.register_folder("default", "docs", str(docs))
    present = sorted(p.name for p in docs.iterdir() if p.suffix == ".md")
    changed, deleted = present[0], present[-1]
    ingest = services.ingest.ingest
    calls = []

    def ingest_while_an_operator_works(src, path, **options):  # the operator's edits land while the sync runs
        if not calls:
            (docs / "added.md").write_text("# Added\n\nThe kingfisher dives for minnows.\n")
            (docs / changed).write_text("# Changed\n\nThe osprey circles the lake at dawn.\n")
            (docs / deleted).unlink()
        calls.append(path)
        return ingest(src, path, **options)

    monkeypatch.setattr(services.ingest, "ingest", ingest_while_an_operator_works)
    watcher = FolderWatcher(services.ingest, source)
    watcher.start()
    try:

        def caught_up() -> bool:
            paths = {d.path: d for d in services.documents.list("default", "docs")}
            return (
                "added.md" in paths
                and deleted not in paths
                and services.database.conn().execute("SELECT 1 FROM chunks WHERE text LIKE '%osprey%'").fetchone()
                and watcher.status.as_dict()["state"] == "idle"
            )

        assert wait_for(caught_up), (watcher.status.as_dict(), [d.path for d in services.documents.list("default")])
        assert watcher.problem() is None
    finally:
        watcher.stop()


NOBODY = 65534


@pytest.fixture
def nobody_dir() -> Iterator[Path]:
    """A folder the unprivileged user `nobody` owns (tests run as root, whom file modes never stop:
    the commands run as nobody, so a mode of 000 means what it means to an operator)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run a command as another user")
    folder = Path(tempfile.mkdtemp(prefix="ragmcp-nobody-"))
    folder.chmod(0o755)
    os.chown(folder, NOBODY, NOBODY)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def nobody_env(home: Path) -> dict[str, str]:
    """The environment of a command run as nobody. Parsing in the sandbox is off: its worker is a
    second exec of this interpreter, which may live where nobody cannot reach (a virtualenv under
    /root); what these tests check (unreadable files and folders) happens before any parse."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "RAGMCP_PARSE_SANDBOX": "false",
    }


def as_nobody(home: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = nobody_env(home)
    command = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable]
    command += ["-m", "ragmcp.cli", "--data-dir", str(home / "data"), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def owned_by_nobody(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        os.chown(path, NOBODY, NOBODY)


def test_an_unreadable_file_fails_alone_with_its_reason_and_ingest_goes_on(nobody_dir: Path) -> None:
    docs = nobody_dir / "docs"
    shutil.copytree(SAMPLES, docs)
    owned_by_nobody(docs)
    (docs / "getting-started.md").chmod(0o000)
    result = as_nobody(nobody_dir, "ingest", str(docs))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert "ingested" in result.stdout and "1 failed" in result.stdout
    assert "failed: getting-started.md: cannot read the file: Permission denied" in result.stderr
    indexed = {d.path for d in build_services(Settings(data_dir=nobody_dir / "data")).documents.list("default")}
    assert "wiki.md" in indexed or len(indexed) >= 3


def test_an_unreadable_subfolder_is_never_read_as_empty(nobody_dir: Path) -> None:
    docs = nobody_dir / "docs"
    shutil.copytree(SAMPLES, docs)
    (docs / "birds").mkdir()
    (docs / "birds" / "kestrel.md").write_text("# Kestrel\n\nA kestrel hovers over the verge.\n")
    owned_by_nobody(docs)
    first = as_nobody(nobody_dir, "ingest", str(docs))
    assert first.returncode == 0 and "0 failed" in first.stdout, first.stderr[-3000:]
    (docs / "birds").chmod(0o000)
    second = as_nobody(nobody_dir, "ingest", str(docs))
    assert second.returncode == 0, second.stderr[-3000:]
    assert "0 deleted" in second.stdout, second.stdout
    indexed = {d.path for d in build_services(Settings(data_dir=nobody_dir / "data")).documents.list("default")}
    assert "birds/kestrel.md" in indexed


def test_serve_keeps_watching_past_an_unreadable_file_and_folder(nobody_dir: Path) -> None:
    docs = nobody_dir / "docs"
    shutil.copytree(SAMPLES, docs)
    (docs / "birds").mkdir()
    (docs / "birds" / "kestrel.md").write_text("# Kestrel\n\nA kestrel hovers over the verge.\n")
    owned_by_nobody(docs)
    (docs / "getting-started.md").chmod(0o000)
    port = free_port()
    env = nobody_env(nobody_dir)
    command = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable, "-m"]
    command += ["ragmcp.cli", "--data-dir", str(nobody_dir / "data"), "serve", "--open", "--docs", str(docs)]
    log = (nobody_dir / "serve.log").open("wb")
    process = subprocess.Popen([*command, "--port", str(port)], env=env, stdout=log, stderr=log)
    health = f"http://127.0.0.1:{port}/healthz"

    def state() -> dict:
        try:
            return httpx.get(health, timeout=5).json()
        except httpx.HTTPError:
            return {}

    try:
        assert wait_for(lambda: (state().get("ingest") or {}).get("state") == "idle", 120), state()
        body = state()
        assert body["status"] == "ok" and body["ingest"]["failed"] == 1, body
        (docs / "birds").chmod(0o000)
        (docs / "birds" / "kestrel.md").touch()  # an event in the folder it can no longer read
        (docs / "later.md").write_text("# Later\n\nA wren sings from the hedge.\n")
        os.chown(docs / "later.md", NOBODY, NOBODY)
        data = Settings(data_dir=nobody_dir / "data")
        found = wait_for(lambda: "later.md" in {d.path for d in build_services(data).documents.list("default")}, 60)
        assert found, (nobody_dir / "serve.log").read_text()[-3000:]
        assert state()["status"] == "ok", state()
        assert "birds/kestrel.md" in {d.path for d in build_services(data).documents.list("default")}
    finally:
        process.terminate()
        process.wait(timeout=20)
        log.close()


def rows_csv(count: int) -> str:
    lines = ["id,term,definition"]
    lines += [f"r{n},Term {n},Definition {n}: stock item {n} is counted in aisle {n % 17}." for n in range(count)]
    return "\n".join(lines) + "\n"


def test_cutting_a_csv_to_a_few_rows_holds_the_row_deletions(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "rows.csv").write_text(rows_csv(200))
    services = build_services(Settings(data_dir=tmp_path / "data"))
    source = services.register_folder("default", "docs", str(docs))
    assert services.ingest.sync(source).failed == 0
    assert len(services.documents.list("default", "docs")) == 200

    (docs / "rows.csv").write_text(rows_csv(10))
    report = services.ingest.sync(source)
    assert (report.deleted, report.held) == (0, 190), report.line()
    kept = services.documents.list("default", "docs")
    assert len(kept) == 200 and all(d.stale and "190 of 200 rows" in d.stale_reason for d in kept)

    text = rows_csv(200)
    (docs / "rows.csv").write_text(text[: len(text) // 3])  # truncated mid-row
    assert services.ingest.sync(source).deleted == 0
    assert len(services.documents.list("default", "docs")) == 200

    (docs / "rows.csv").write_text(rows_csv(10))
    allowed = services.ingest.sync(source, allow_mass_delete=True)
    assert allowed.held == 0 and allowed.failed == 0
    rows = services.documents.list("default", "docs")
    assert len(rows) == 10 and not any(d.stale for d in rows)


def test_duplicate_row_keys_across_files_are_reported_not_overwritten(tmp_path: Path, caplog) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.csv").write_text("id,text\nk1,Apples are stored cold.\nk2,Pears ripen on the shelf.\n")
    (docs / "b.csv").write_text("id,text\nk2,Plums are picked in August.\nk3,Quinces need cooking.\n")
    services = build_services(Settings(data_dir=tmp_path / "data"))
    source = services.register_folder("default", "docs", str(docs))
    report = services.ingest.sync(source)
    assert report.duplicates == 1 and "1 duplicate keys" in report.line(), report.line()
    by_id = {d.doc_id: d for d in services.documents.list("default", "docs")}
    assert by_id["docs:k2"].path == "a.csv" and by_id["docs:k3"].path == "b.csv"
    [b_job] = [j for j in report.jobs if j.target == "b.csv"]
    assert b_job.counts["duplicate_keys"] == 1
    assert "'k2'" in caplog.text and "a.csv" in caplog.text
    assert services.ingest.sync(source).line().startswith("0 ingested")  # stays put, not flapping
    assert services.documents.get("default", "docs:k2").path == "a.csv"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A data directory on a 64 MB tmpfs of its own (root mounts it; unmounted afterwards)."""
    mount = tmp_path / "data"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0700", "tmpfs", str(mount)], check=False)
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    """Take every free byte of the disk; the filler file to remove to free it again."""
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as handle:
        for block in (1 << 20, 4096, 1):
            try:
                while handle.write(b"\0" * block):
                    pass
            except OSError:
                pass
    return filler


def test_the_task_queue_and_watcher_survive_a_full_disk_and_resume_once_it_is_freed(small_disk: Path) -> None:
    docs = small_disk.parent / "docs"
    shutil.copytree(SAMPLES, docs)
    services = build_services(Settings(data_dir=small_disk))
    source = services.register_folder("default", "docs", str(docs))
    watcher = FolderWatcher(services.ingest, source)
    watcher.start()
    try:
        assert wait_for(lambda: watcher.status.as_dict()["state"] == "idle", 120)
        gate = threading.Event()
        services.tasks.submit(Job(job_id="gate", tenant="default", type="note"), lambda: {"waited": gate.wait(60)})
        principal = Principal(tenant="default")
        texts = [f"The heron count on day {n} was {n * 3}." for n in range(5)]
        accepted = [services.notes.add(principal, text, "birds", []) for text in texts]
        services.database.conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")
        filler = fill(small_disk)
        gate.set()  # the notes' ingests run on a full disk
        (docs / "during.md").write_text("# During\n\nA grebe dived while the disk was full.\n")
        time.sleep(8)
        filler.unlink()

        def notes_indexed() -> bool:
            return len(services.documents.list("default", "notes")) == len(accepted)

        assert wait_for(notes_indexed, 90), [services.jobs.get("default", j.job_id) for j in accepted]
        assert wait_for(lambda: services.documents.by_path("default", "docs", "during.md") != [], 60)
        assert services.tasks.problem() is None and watcher.problem() is None
        assert all(services.jobs.get("default", j.job_id).status == "succeeded" for j in accepted)
        assert wait_for(lambda: services.jobs.unfinished() == [], 30), services.jobs.unfinished()
    finally:
        watcher.stop()


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[tuple[Services, FolderWatcher, Path]]:
    docs = tmp_path / "docs"
    shutil.copytree(SAMPLES, docs)
    services = build_services(Settings(data_dir=tmp_path / "data"))
    watcher = FolderWatcher(services.ingest, services.register_folder("default", "docs", str(docs)))
    watcher.start()
    assert wait_for(lambda: watcher.status.as_dict()["state"] == "idle", 120)
    yield services, watcher, docs
    watcher.stop()


def indexed(services: Services, path: str) -> bool:
    return services.documents.by_path("default", "docs", path) != []


def test_a_watched_folder_replaced_by_a_new_one_is_watched_again(watched, tmp_path: Path) -> None:
    services, watcher, docs = watched
    docs.rename(tmp_path / "docs.old")
    shutil.copytree(SAMPLES, docs)  # mv docs docs.old && mkdir docs, with the files copied back
    (docs / "new.md").write_text("# New\n\nA curlew calls over the mudflats.\n")
    assert wait_for(lambda: indexed(services, "new.md"), 30), watcher.status.as_dict()
    (docs / "later.md").write_text("# Later\n\nA dunlin runs along the tideline.\n")
    assert wait_for(lambda: indexed(services, "later.md"), 30), watcher.status.as_dict()
    assert watcher.problem() is None


def test_a_watched_folder_renamed_away_and_back_is_watched_again(watched, tmp_path: Path) -> None:
    services, watcher, docs = watched
    away = tmp_path / "away"
    docs.rename(away)
    assert wait_for(lambda: watcher.problem() is not None, 10)
    assert "vanished; its documents are kept" in watcher.problem()
    away.rename(docs)
    assert wait_for(lambda: watcher.problem() is None, 10), watcher.problem()
    (docs / "back.md").write_text("# Back\n\nA redshank returns to the marsh.\n")
    assert wait_for(lambda: indexed(services, "back.md"), 30), watcher.status.as_dict()
    assert len(services.documents.list("default", "docs")) >= 5


def test_a_file_is_indexed_only_once_it_stops_changing(watched) -> None:
    services, _watcher, docs = watched
    lines = [f"Line {n}: the {n}th tern of the colony was ringed on the north shore.\n" for n in range(12)]
    with (docs / "growing.md").open("w") as handle:
        handle.write("# Growing\n\n")
        for line in lines:  # a slow writer: a line every 0.3 s
            handle.write(line)
            handle.flush()
            time.sleep(0.3)
    final = (docs / "growing.md").stat().st_size
    assert wait_for(lambda: indexed(services, "growing.md"), 30)
    time.sleep(3)
    [doc] = services.documents.by_path("default", "docs", "growing.md")
    assert doc.size_bytes == final
    ingests = [j for j in services.jobs.list("default", limit=1000) if j.target == "growing.md" and j.type == "ingest"]
    assert len(ingests) == 1, [(j.status, j.counts) for j in ingests]  # never a half-written version


def cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMCP_")}
    command = [sys.executable, "-m", "ragmcp.cli", "--data-dir", str(data_dir), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=180, check=False)


def test_audit_verify_says_broken_on_an_unreadable_record(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    services = build_services(Settings(data_dir=data_dir))
    for n in range(3):
        services.audit.append(Principal(tenant="default"), "rag_search", {"query": f"q{n}"}, {}, "ok")
    services.audit.close()
    assert cli(data_dir, "audit", "verify").returncode == 0
    with services.database.write() as conn:
        conn.execute('UPDATE audit_records SET record_json = \'{"seq": 2, "tenant": \' WHERE seq = 2')
    result = cli(data_dir, "audit", "verify")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "audit trail BROKEN: tenant 'default', record 2: cannot be read" in result.stderr


def test_looking_a_user_up_changes_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    set_up = cli(data_dir, "users", "alice@acme.com", "--tenant", "acme", "--groups", "finance,hr")
    assert set_up.returncode == 0, set_up.stderr
    cli(data_dir, "users", "alice@acme.com", "--tenant", "acme", "--max-tier", "confidential")
    shown = cli(data_dir, "users", "alice@acme.com", "--tenant", "acme")
    assert shown.returncode == 0 and "groups=finance,hr max_tier=confidential" in shown.stdout, shown.stdout
    user = build_services(Settings(data_dir=data_dir)).users.get("acme", "alice@acme.com")
    assert user.groups == ("finance", "hr") and user.max_tier.value == "confidential"
    unknown = cli(data_dir, "users", "bob@acme.com", "--tenant", "acme")
    assert unknown.returncode == 1 and "no user bob@acme.com in tenant acme" in unknown.stderr
    assert build_services(Settings(data_dir=data_dir)).users.get("acme", "bob@acme.com") is None


def test_uploads_leave_no_staging_directories_and_create_private_ones(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    services = build_services(Settings(data_dir=data_dir))
    principal = Principal(tenant="default")
    body = b"# Upload\n\nA lapwing nests in the open field.\n"
    for n in range(3):
        session = services.uploads.start(principal, f"up-{n}.md", len(body), [], "default")
        half = len(body) // 2
        services.uploads.add_part(principal, session.upload_id, base64.b64encode(body[:half]).decode(), 0)
        services.uploads.add_part(principal, session.upload_id, base64.b64encode(body[half:]).decode(), 1)
        services.uploads.finish(principal, session.upload_id)
    services.tasks.join()
    staging = data_dir / "staging"
    assert [p for p in staging.rglob("*")] == [], sorted(staging.rglob("*"))
    made = [p for p in data_dir.rglob("*") if p.is_dir()]
    assert made and all(stat.S_IMODE(p.stat().st_mode) == 0o700 for p in made), [
        (str(p), oct(p.stat().st_mode)) for p in made
    ]
    assert len(services.documents.list("default", "uploads")) == 3


def test_ingest_and_stdio_say_their_data_directory_tenant_and_document_count(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    ingest = cli(data_dir, "ingest", str(SAMPLES))
    assert ingest.returncode == 0, ingest.stderr[-2000:]
    count = len(build_services(Settings(data_dir=data_dir)).documents.list("default"))  # glossary.csv's rows count
    assert count > 4 and f"ragmcp ingest: {data_dir}: {count} documents in tenant 'default'" in ingest.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMCP_")}
    for where, expected in ((data_dir, f"{count} documents"), (tmp_path / "elsewhere", "0 documents")):
        command = [sys.executable, "-m", "ragmcp.cli", "--data-dir", str(where), "stdio"]
        stdio = subprocess.run(command, env=env, input="", capture_output=True, text=True, timeout=120, check=False)
        assert f"ragmcp stdio: {where}: {expected} in tenant 'default'" in stdio.stderr, stdio.stderr[-2000:]
    assert "no documents yet" in stdio.stderr  # the empty one says how to fill it
    acme = cli(data_dir, "keys", "create", "--tenant", "acme")
    assert acme.returncode == 0 and "tenant 'acme' holds no documents" in acme.stderr, acme.stderr
    assert "--tenant acme" in acme.stderr and "'default'" in acme.stderr  # where the documents are, and how
    default = cli(data_dir, "keys", "create", "--tenant", "default")
    assert default.returncode == 0 and "holds no documents" not in default.stderr


def test_connect_stdio_gives_a_command_that_works_from_any_folder(tmp_path: Path) -> None:
    here, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMCP_")}
    command = [sys.executable, "-m", "ragmcp.cli", "--data-dir", ".ragmcp", "connect", "cursor", "--stdio"]
    printed = subprocess.run(command, cwd=here, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert printed.returncode == 0, printed.stderr
    server = json.loads(printed.stdout)["mcpServers"]["ragmcp"]
    assert str(here / ".ragmcp") in server["args"] and "stdio" in server["args"]
    assert "tenant 'default'" in printed.stderr

    async def tools() -> list[str]:
        params = StdioServerParameters(command=server["command"], args=server["args"], cwd=str(elsewhere), env=env)
        with anyio.fail_after(120):
            async with McpClient(params) as client:
                return [t.name for t in (await client.list_tools()).tools]

    assert "rag_search" in anyio.run(tools)
    assert not (elsewhere / ".ragmcp").exists()  # started elsewhere, it used the data directory it was given


def test_ingest_on_a_full_disk_says_so_and_completes_once_room_is_made(small_disk: Path, capsys) -> None:
    """Found by the operator's-year state machine: `ragmcp ingest` on a full disk ended in a
    traceback (`sqlean.dbapi2.OperationalError: database or disk is full`)."""
    from ragmcp import cli

    docs = small_disk.parent / "docs"
    shutil.copytree(SAMPLES, docs)
    ingest = ["--data-dir", str(small_disk), "ingest", str(docs)]
    assert cli.main(ingest) == 0
    filler = fill(small_disk)
    (docs / "during.md").write_text("# During\n\nA grebe dived while the disk was full.\n")
    capsys.readouterr()
    assert cli.main(ingest) == 2
    err = capsys.readouterr().err
    assert "the disk is full" in err and "free space" in err and "Traceback" not in err, err
    filler.unlink()
    assert startup_findings(Settings(data_dir=small_disk)) == []
    assert cli.main(ingest) == 0
    services = build_services(Settings(data_dir=small_disk))
    assert services.documents.by_path("default", "docs", "during.md") != []
    assert services.jobs.unfinished() == []


def test_a_database_that_cannot_be_opened_on_a_full_disk_is_not_called_damaged(small_disk: Path, capsys) -> None:
    """Found by the operator's-year state machine: once every connection had closed (the database's
    -wal and -shm files gone), a command on the full disk could not open the database ("disk I/O
    error") and was told it was damaged: "restore it from a backup; without one, move it aside and
    rebuild" (keys, users and notes lost for a full disk)."""
    import gc

    from ragmcp import cli

    docs = small_disk.parent / "docs"
    shutil.copytree(SAMPLES, docs)
    ingest = ["--data-dir", str(small_disk), "ingest", str(docs)]
    assert cli.main(ingest) == 0
    gc.collect()  # the command's connections closed, as at its process's exit
    assert not (small_disk / "ragmcp.db-wal").exists()
    filler = fill(small_disk)
    capsys.readouterr()
    assert cli.main(ingest) == 2
    err = capsys.readouterr().err
    assert "the disk is full" in err and "move it aside" not in err and "Traceback" not in err, err
    assert cli.main(["--data-dir", str(small_disk), "doctor"]) != 0
    said = capsys.readouterr().out
    assert "the disk is full" in said and "move it aside" not in said, said
    filler.unlink()
    assert startup_findings(Settings(data_dir=small_disk)) == []
    assert cli.main(ingest) == 0

"""The ingestion pipeline with the real parsers, embedder and SQLite index."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from ragmcp.adapters.local.database import Database
from ragmcp.adapters.local.sqlite_index import SqliteSearchIndex
from ragmcp.adapters.local.watcher import FolderWatcher
from ragmcp.bootstrap import build_services
from ragmcp.domain.models import Principal
from ragmcp.retrieval.service import SearchRequest
from ragmcp.settings import Settings

ME = Principal(tenant="default")


class CountingEmbedder:
    """The real embedder, counting the texts it is asked to embed."""

    def __init__(self, inner):
        self.inner = inner
        self.model_id = inner.model_id
        self.model_sha256 = inner.model_sha256
        self.dimension = inner.dimension
        self.texts = 0
        self.calls: list[tuple[int, str]] = []
        """(texts, the calling thread's name) of every call."""

    def embed(self, texts):
        self.texts += len(texts)
        self.calls.append((len(texts), threading.current_thread().name))
        return self.inner.embed(texts)


@pytest.fixture
def services(tmp_path):
    svc = build_services(Settings(data_dir=tmp_path / "data", max_file_bytes=200_000))
    svc.ingest.embedder = CountingEmbedder(svc.embedder)
    return svc


@pytest.fixture
def folder(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "turbines.md").write_text(
        "# Wind turbines\n\nA wind turbine turns the kinetic energy of wind into electricity.\n\n"
        "## Maintenance\n\nGearboxes are inspected every six months for wear and oil leaks.\n"
    )
    (docs / "people.csv").write_text("id,name,role\n1,Ada Lovelace,analyst\n2,Grace Hopper,admiral\n")
    return docs


def search(services, phrase, mode="hybrid"):
    result = services.search.search(ME, SearchRequest(phrases=[phrase], mode=mode, top_k=5))
    return [h.chunk.chunk_id for h in result.hits]


def test_ingest_is_idempotent_and_uses_the_embedding_cache(services, folder):
    source = services.register_folder("default", "docs", str(folder))
    first = services.ingest.sync(source)
    assert (first.ingested, first.failed) == (2, 0)
    embedded = services.ingest.embedder.texts
    assert embedded > 0
    again = services.ingest.sync(source)
    assert (again.ingested, again.unchanged) == (0, 2)
    assert services.ingest.embedder.texts == embedded
    docs = {d.doc_id: d for d in services.documents.list("default")}
    assert set(docs) == {"docs:turbines.md", "docs:1", "docs:2"}
    assert docs["docs:2"].kind == "row" and docs["docs:2"].pk == "2"
    jobs = services.jobs.list("default")
    assert len(jobs) == 2 and all(j.status == "succeeded" and j.counts["chunks"] >= 1 for j in jobs)


def test_a_files_rows_embed_in_groups_beside_the_writes_each_row_keeping_its_own_vector(services, tmp_path):
    rows = tmp_path / "rows"
    rows.mkdir()
    valves = ["intake", "exhaust", "bypass", "relief", "check", "gate", "needle"]
    texts = [f"The {valves[n % 7]} valve {n * 37 % 101} was replaced." for n in range(150)]
    lines = [json.dumps({"_id": str(n), "title": f"Log {n}", "text": text}) for n, text in enumerate(texts)]
    (rows / "log.jsonl").write_text("\n".join(lines) + "\n")
    (rows / ".source.json").write_text(json.dumps({"pk_column": "_id", "text_columns": ["title", "text"]}))
    source = services.register_folder("default", "rows", str(rows))
    commits = services.index.db.commits
    report = services.ingest.sync(source)
    assert (report.ingested, report.failed) == (1, 0)
    # A group's rows are written in one transaction (3 groups), not one a row: 150 commits (each new row draws
    # its document number in one), 3 for the groups and the job's own few; 306 when each row was its own write.
    assert services.index.db.commits - commits <= 150 + 10
    calls = services.ingest.embedder.calls
    # In groups of EMBED_GROUP_CHUNKS (not a call per row), on the feed thread while the main one writes.
    assert [size for size, _ in calls] == [64, 64, 22]
    assert all(thread.startswith("embed-feed") for _, thread in calls)
    stored = {chunk.doc_id: (chunk.text, vector) for chunk, _, vector in services.index.iter_chunks("default")}
    assert len(stored) == 150
    for n in (0, 63, 64, 65, 128, 149):
        text, vector = stored[f"rows:{n}"]
        assert f"valve {n * 37 % 101} was" in text
        np.testing.assert_allclose(vector, services.embedder.embed([text])[0], atol=1e-5)


def test_changed_file_replaces_its_chunks_and_deleted_file_leaves(services, folder):
    source = services.register_folder("default", "docs", str(folder))
    services.ingest.sync(source)
    assert search(services, "gearboxes inspected", "fts")
    before = services.ingest.embedder.texts
    (folder / "turbines.md").write_text(
        "# Wind turbines\n\nA wind turbine turns the kinetic energy of wind into electricity.\n\n"
        "## Blades\n\nBlades are made of fibreglass and balsa wood.\n"
    )
    report = services.ingest.sync(source)
    assert (report.ingested, report.updated) == (0, 1)
    assert search(services, "gearboxes", "fts") == []
    assert search(services, "fibreglass balsa", "fts")[0].startswith("docs:turbines.md#")
    assert services.ingest.embedder.texts > before
    (folder / "people.csv").write_text("id,name,role\n1,Ada Lovelace,analyst\n")
    services.ingest.sync(source)
    assert services.documents.get("default", "docs:2") is None
    assert search(services, "Grace Hopper admiral", "fts") == []
    (folder / "turbines.md").unlink()
    report = services.ingest.sync(source)
    assert report.deleted == 1
    assert search(services, "fibreglass", "fts") == []
    assert services.documents.by_path("default", "docs", "turbines.md") == []


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("empty.md", b"", "empty file"),
        ("broken.pdf", b"%PDF-1.7 this is not really a pdf", "pdf"),
        ("broken.docx", b"PK\x03\x04 not a zip at all", "docx"),
        ("huge.txt", b"word " * 50_000, "file too large"),
    ],
)
def test_bad_files_fail_their_job_and_the_rest_still_ingest(services, folder, name, content, reason):
    (folder / name).write_bytes(content)
    report = services.ingest.sync(services.register_folder("default", "docs", str(folder)))
    assert (report.ingested, report.failed) == (2, 1)
    [failed] = [j for j in report.jobs if j.status == "failed"]
    assert failed.target == name
    assert reason in failed.error.lower() and "\n" not in failed.error
    assert services.jobs.get("default", failed.job_id).status == "failed"
    assert services.documents.by_path("default", "docs", name) == []


def test_sidecar_metadata_sets_title_tags_and_acl(services, folder):
    (folder / "turbines.md.metadata.json").write_text(
        '{"title": "Turbine handbook", "tags": ["energy"], "groups": ["engineering"], "tier": "confidential"}'
    )
    services.ingest.sync(services.register_folder("default", "docs", str(folder)))
    doc = services.documents.get("default", "docs:turbines.md")
    assert doc.title == "Turbine handbook" and doc.tags == ("energy", "collection:documents")
    assert doc.acl.groups == ("engineering",) and doc.tier.value == "confidential"
    outsider = Principal(tenant="default", groups=("sales",))
    hits = services.search.search(outsider, SearchRequest(phrases=["gearboxes"], mode="fts")).hits
    assert all(h.document.doc_id != "docs:turbines.md" for h in hits)
    insider = Principal(tenant="default", groups=("engineering",))
    hits = services.search.search(insider, SearchRequest(phrases=["gearboxes"], mode="fts")).hits
    assert hits[0].document.doc_id == "docs:turbines.md"


def test_every_mode_ranks_the_relevant_chunk_first_and_scores_are_normalised(services, folder):
    services.ingest.sync(services.register_folder("default", "docs", str(folder)))
    for mode in ["fts", "vector", "hybrid", "fts_then_vec"]:
        result = services.search.search(
            ME, SearchRequest(phrases=["gearbox oil leaks", "inspection schedule"], mode=mode, top_k=3)
        )
        top = result.hits[0]
        assert "Gearboxes" in top.chunk.text, mode
        assert all(0 < h.score <= 1 for h in result.hits)
        assert [h.score for h in result.hits] == sorted((h.score for h in result.hits), reverse=True)
        assert len({h.chunk.chunk_id for h in result.hits}) == len(result.hits)
        if mode in ("fts", "hybrid"):
            assert top.fts_score is not None and top.fts_rank is not None
        if mode in ("vector", "hybrid", "fts_then_vec"):
            assert top.vec_score is not None and -1 <= top.vec_score <= 1


def test_searches_keep_working_while_a_folder_is_ingested(services, folder, tmp_path):
    services.ingest.sync(services.register_folder("default", "docs", str(folder)))
    bulk = tmp_path / "bulk"
    bulk.mkdir()
    for i in range(40):
        (bulk / f"note{i}.txt").write_text(f"Note {i} about solar panels and inverter number {i}.\n" * 5)
    done = threading.Event()
    errors: list[BaseException] = []

    def ingest_bulk():
        try:
            services.ingest.sync(services.register_folder("default", "bulk", str(bulk)))
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            done.set()

    threading.Thread(target=ingest_bulk).start()
    searches = 0
    while not done.is_set():
        assert search(services, "gearboxes inspected")[0].startswith("docs:turbines.md#")
        searches += 1
    assert not errors
    assert searches > 1
    assert search(services, "inverter number 7 solar", "fts")


def test_watched_folder_follows_changes(services, folder):
    source = services.register_folder("default", "docs", str(folder))
    watcher = FolderWatcher(services.ingest, source)
    watcher.start()
    try:
        wait_for(lambda: watcher.status.as_dict()["state"] == "idle")
        (folder / "new.md").write_text("# Hydrogen\n\nElectrolysers split water into hydrogen and oxygen.\n")
        wait_for(lambda: search(services, "electrolysers hydrogen", "fts"))
        (folder / "new.md").unlink()
        wait_for(lambda: not search(services, "electrolysers hydrogen", "fts"))
    finally:
        watcher.stop()


def wait_for(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


def test_an_index_built_with_another_model_is_refused_at_startup(tmp_path):
    SqliteSearchIndex(Database(tmp_path / "data" / "ragmcp.db")).ensure_model("some-other-model", 768)
    run = subprocess.run(
        [sys.executable, "-m", "ragmcp.cli", "--data-dir", str(tmp_path / "data"), "ingest", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2
    assert "was built with embedding model 'some-other-model'" in run.stderr
    assert "Traceback" not in run.stderr

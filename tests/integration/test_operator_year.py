"""Issue 24: an operator's year as a stateful property test.

A Hypothesis state machine drives the real CLI (`ragmcp.cli.main` in this process for the cheap
steps, `ragmcp serve` / `ragmcp ingest` subprocesses for restarts, SIGKILLs, second processes and
`--workers 2`) through what operators do to a small watched folder: add, modify, rename and delete
files (the newest, the oldest, all of them, a whole subfolder, rows of a CSV), make a file or a
folder unreadable, switch the served folder (`--replace`) and back, keep a second folder as a second
source, `reindex`, create and revoke keys, add notes and uploads over MCP, restart cleanly and
SIGKILL during ingest, recovery and writes.

After every step: the server starts (the start-up checks find nothing and recovery runs, as
`ragmcp ingest` does before its sync), `ragmcp doctor` finds nothing, `ragmcp audit verify` passes,
no job is left queued or running, every note and upload acknowledged over MCP is indexed, and the
index equals a fresh index of the same folder state built in a new data directory: same documents
and versions, same passages, the same first hit for one fixed question per document. One embedding
cache file (RAGMCP_EMBEDDING_CACHE) is shared by all data directories, so a fresh index embeds
nothing new.

`make test` runs the bounded budget below; `make soak-operator` (`python -m
tests.integration.test_operator_year`) runs sequences until SOAK_SECONDS pass, seeded by SOAK_SEED,
and reports sequences, steps and failures. A failure prints Hypothesis' shrunk sequence of rules.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import gc
import hashlib
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import ragmcp.bootstrap
import ragmcp.settings
from ragmcp import cli
from ragmcp.adapters.local.recovery import LOCK_FILE, DataDirLock
from ragmcp.bootstrap import build_services
from ragmcp.doctor import startup_findings
from ragmcp.domain.models import Principal, SearchFilter
from ragmcp.mcp.errors import DISK_FULL
from ragmcp.retrieval.query_cache import with_query_cache
from ragmcp.retrieval.service import SearchRequest
from ragmcp.services import Services
from ragmcp_bench.bench_scale import free_port
from tests.integration.test_data_dir_robustness import fill

pytestmark = pytest.mark.slow

TENANT = "default"
NOTES_TENANT = "mcp"  # notes and uploads go to their own tenant: the folder's index stays comparable
SEQUENCES = int(os.environ.get("OPERATOR_YEAR_SEQUENCES", "30"))
STEPS = int(os.environ.get("OPERATOR_YEAR_STEPS", "15"))
# Steps with processes of their own (serve, kills, unreadable files) a sequence may take: each costs
# 3-20 s where the rest cost a third of one. `make test` runs PROCESS_SEQUENCES of its sequences
# allowing one such step each, the others none; `make soak` allows 2 in every sequence.
EXPENSIVE_PER_SEQUENCE = int(os.environ.get("OPERATOR_YEAR_EXPENSIVE", "1"))
PROCESS_SEQUENCES = int(os.environ.get("OPERATOR_YEAR_PROCESS_SEQUENCES", "8"))
RECOVERING = "jobs were interrupted by a stop; they are ingested again"  # adapters/local/recovery.py's log line
DISK_MB = 48  # the data directory's tmpfs: a sequence's index takes a few MB
WAIT = 300.0  # seconds a server may take to start and sync on a loaded machine

TOPICS = [
    "Owls hunt small rodents at night with silent feathers.",
    "Basalt forms when lava cools quickly near the surface.",
    "Sourdough rises because wild yeast ferments the flour.",
    "Tides follow the moon's pull on the oceans twice a day.",
    "Copper wires carry current with little resistance.",
    "Glaciers carve U-shaped valleys as they slide downhill.",
    "Bees dance to tell the hive where the flowers are.",
    "Compilers turn source code into machine instructions.",
    "Lichens are partnerships of a fungus and an alga.",
    "Violins resonate through a hollow spruce top plate.",
]
NAMES = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]
GLOSSARY_ROWS = [
    ("bm25", "BM25", "A ranking function that weighs term frequency against rarity."),
    ("rrf", "Reciprocal rank fusion", "Merges ranked lists by summing one over rank plus a constant."),
    ("mcp", "Model Context Protocol", "A protocol through which agents call tools on servers."),
    ("hnsw", "Hierarchical navigable small world", "A graph for approximate nearest neighbour search."),
    ("fts", "Full-text search", "Finding documents by the words they contain."),
    ("onnx", "Open Neural Network Exchange", "A portable format for trained models."),
]

stats = {"sequences": 0, "steps": 0, "full": 0}
descriptors: dict[str, int] = {}
DESCRIPTOR_SLACK = 4  # what the run opens once after its first sequence (a library's cache file)
expensive_per_sequence = EXPENSIVE_PER_SEQUENCE
rules_run: Counter[str] = Counter()


_real_onnx_embedder = ragmcp.bootstrap._onnx_embedder
_real_chunker = ragmcp.bootstrap._chunker
_real_parser = cli.parser
_real_load_settings = ragmcp.settings.load_settings
_settings: dict[tuple, object] = {}
_embedders: dict[tuple, object] = {}
_chunkers: dict[tuple, object] = {}


def _memo_embedder(s, built_with=None) -> object:
    """The real ONNX embedder, loaded once for this process (the in-process CLI builds its services
    at every call; loading the model each time would cost a second a step), with the product's
    query cache for the run: the index and its fresh twin are asked the same questions."""
    e = s.embedding
    key = (
        e.embed_max_tokens,
        e.embed_batch,
        e.embed_workers,
        e.query_int8,
        e.document_int8,
        built_with,
        str(e.model_cache),
    )
    if key not in _embedders:
        _embedders[key] = with_query_cache(_real_onnx_embedder(s, built_with), 4096)
    return _embedders[key]


def _memo_settings(**overrides: object) -> object:
    """The settings of the environment and `overrides`, read once per pair (pydantic-settings reads
    every RAGMCP_ variable for each group: a quarter of a step's time, ~8 commands a step); a
    copy, so no command sees another's changes."""
    key = (tuple(sorted((k, str(v)) for k, v in overrides.items())), frozenset(
        (k, v) for k, v in os.environ.items() if k.startswith("RAGMCP_")
    ))  # fmt: skip
    if key not in _settings:
        _settings[key] = _real_load_settings(**overrides)
    return _settings[key].model_copy(deep=True)  # type: ignore[attr-defined]


def _memo_chunker(s) -> object:
    """The real chunker, its tokenizer loaded once (a third of a second per command that chunks)."""
    i = s.ingest
    key = (i.chunk_tokens, i.chunk_overlap, i.chunk_max_chars)
    if key not in _chunkers:
        _chunkers[key] = _real_chunker(s)
    return _chunkers[key]


_locks: list[DataDirLock] = []
_real_lock_init = DataDirLock.__init__


def _tracked_lock_init(self: DataDirLock, data_dir: Path) -> None:
    _real_lock_init(self, data_dir)
    _locks.append(self)


def run_cli(*argv: str) -> tuple[int, str, str]:
    """`ragmcp <argv>` in this process: the real CLI, its output captured. A command holds the data
    directory's lock until its process exits: here, until it returns, as if it had exited."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli.main(list(argv))
        except SystemExit as exc:
            rc = int(exc.code or 0)
        finally:
            while _locks:
                _locks.pop().close()
    return rc, out.getvalue(), err.getvalue()


def spawn(data_dir: Path, *argv: str, capless: bool = False) -> subprocess.Popen:
    """`ragmcp <argv>` as a process of its own (its own session, so it and its readers can be killed).
    `capless`: as root without CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH, so a mode 000 file cannot be read."""
    command = [sys.executable, "-m", "ragmcp.cli", "--data-dir", str(data_dir), *argv]
    if capless:
        command = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", *command]
    with (data_dir.parent / "processes.log").open("ab") as log:  # the child has its own copy of the descriptor
        log.write(f"\n$ {' '.join(command)}\n".encode())
        log.flush()
        return subprocess.Popen(command, stdout=log, stderr=log, start_new_session=True, env=os.environ.copy())


def kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def digest(folder: Path) -> tuple:
    return tuple(
        sorted((str(p.relative_to(folder)), hashlib.sha256(p.read_bytes()).hexdigest()) for p in files_of(folder))
    )


def files_of(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


Key = tuple[str, str, str]  # source, path, row key ("" for a file's one document)


@dataclass
class IndexState:
    documents: dict[Key, tuple[str, int, bool]]
    passages: list[tuple[Key, int, str]]
    first_hits: dict[str, str | None]
    """Per document, its first passage asked as the question: the first hit's text."""

    def differences(self, fresh: IndexState) -> list[str]:
        out = []
        for key in sorted(set(self.documents) | set(fresh.documents)):
            mine, theirs = self.documents.get(key), fresh.documents.get(key)
            if mine != theirs:
                out.append(f"document {key}: index {mine} != fresh {theirs} (content_hash, chunks, stale)")
        if not out and self.passages != fresh.passages:
            mine_p, theirs_p = set(self.passages), set(fresh.passages)
            out.append(
                f"passages: only in index {sorted(mine_p - theirs_p)[:3]}, only fresh {sorted(theirs_p - mine_p)[:3]}"
            )
        for question in sorted(set(self.first_hits) | set(fresh.first_hits)):
            if self.first_hits.get(question) != fresh.first_hits.get(question):
                out.append(
                    f"first hit for {question!r}: index {self.first_hits.get(question)} "
                    f"!= fresh {fresh.first_hits.get(question)}"
                )
        return out


def index_state(data_dir: Path, sources: tuple[str, ...], services: Services | None = None) -> IndexState:
    """What the index of `sources` in tenant TENANT holds and answers, comparable across data
    directories (no ids, numbers or times: those follow the history)."""
    services = services or build_services(ragmcp.settings.load_settings(data_dir=data_dir))
    documents: dict[Key, tuple[str, int, bool]] = {}
    keys: dict[str, Key] = {}
    for source in sources:
        for doc in services.documents.list(TENANT, source):
            if doc.stale:  # a file whose newest version cannot be read keeps its last good passages, by design;
                continue  # a fresh index never read them, so only the documents read now are compared
            keys[doc.doc_id] = (source, doc.path, doc.pk or "")
            documents[keys[doc.doc_id]] = (doc.content_hash, doc.chunk_count, doc.stale)
    rows = (
        services.database.conn()
        .execute(
            "SELECT i.doc_id, c.ordinal, c.text FROM chunks c JOIN idx_docs i ON i.id = c.doc WHERE c.tenant = ?",
            (TENANT,),
        )
        .fetchall()
    )
    passages = sorted((keys[doc_id], ordinal, text) for doc_id, ordinal, text in rows if doc_id in keys)
    first_hits: dict[str, str | None] = {}
    for _key, ordinal, text in passages:
        if ordinal != 0:
            continue
        question = " ".join(text.split()[:24])
        result = services.search.search(
            Principal(),
            SearchRequest(phrases=[question], top_k=1, filter=SearchFilter(sources=tuple(sorted(sources)))),
        )
        hit = result.hits[0] if result.hits else None
        # The hit, not its score: BM25 statistics are still shared between tenants (issue 25 M1),
        # so the notes of tenant NOTES_TENANT move tenant TENANT's keyword scores.
        first_hits[question] = hit.chunk.text if hit else None
    return IndexState(documents, passages, first_hits)


@dataclass
class Written:
    notes: dict[str, str] = field(default_factory=dict)  # doc_id -> text, acknowledged over MCP
    uploads: list[str] = field(default_factory=list)  # file names acknowledged by kb_upload_finish


class OperatorYear(RuleBasedStateMachine):
    """One data directory through a sequence of operator steps; see the module's docstring."""

    def __init__(self) -> None:
        super().__init__()
        stats["sequences"] += 1
        self.steps = 0
        self.root = Path(tempfile.mkdtemp(prefix="operator-year-"))
        self.data = self.root / "data"
        self.disk = small_disk(self.data)
        self.folders = {"A": self.root / "A", "B": self.root / "B"}
        self.sources: dict[str, str] = {"docs": "A"}  # source id -> folder name
        self.written = Written()
        self.keys: list[str] = []
        self.expensive = 0
        self.process_steps = 0
        self.counter = 0
        self.fresh: dict[tuple, IndexState] = {}
        self.checked = -1  # the last step whose checks passed

    # -- the folder ------------------------------------------------------------------------------

    def folder(self, source: str = "docs") -> Path:
        return self.folders[self.sources[source]]

    def text(self, topic: int, name: str) -> str:
        self.counter += 1
        return f"# {name.title()} {self.counter}\n\n{TOPICS[topic % len(TOPICS)]} Entry {name} {self.counter}.\n"

    @staticmethod
    def write_csv(path: Path, rows: list[tuple[str, str, str]]) -> None:
        path.write_text("id,term,definition\n" + "".join(f"{a},{b},{c}\n" for a, b, c in rows))

    @initialize()
    def setup(self) -> None:
        self.process_steps = expensive_per_sequence
        for name, folder in self.folders.items():
            (folder / "sub").mkdir(parents=True)
            for i, file in enumerate(["one.md", "two.txt", "sub/three.md"]):
                (folder / file).write_text(self.text(i + (3 if name == "B" else 0), f"{name}{i}"))
            self.write_csv(folder / "glossary.csv", GLOSSARY_ROWS[:4])
        rc, out, err = run_cli(
            "--data-dir", str(self.data), "keys", "create", "--tenant", NOTES_TENANT, "--name", "mcp"
        )
        assert rc == 0, err
        self.secret = next(line.split()[-1] for line in out.splitlines() if line.startswith("secret:"))
        self.sync("setup")

    def sync(self, why: str) -> None:
        """What a start does (checks, recovery of dead processes' jobs) and a sync of every source."""
        for source in self.sources:
            rc, out, err = run_cli(
                "--data-dir",
                str(self.data),
                "ingest",
                str(self.folder(source)),
                "--source",
                source,
                "--allow-mass-delete",
            )
            assert rc == 0, f"{why}: ragmcp ingest --source {source} exited {rc}: {err}{out}"

    def step(self) -> None:
        self.steps += 1
        stats["steps"] += 1
        rules_run[sys._getframe(1).f_code.co_name] += 1

    @rule(topic=st.integers(0, 9), name=st.sampled_from(NAMES), where=st.sampled_from(["", "sub/"]))
    def add_file(self, topic: int, name: str, where: str) -> None:
        self.step()
        path = self.folder() / where / f"{name}-{self.counter}.md"
        path.parent.mkdir(exist_ok=True)
        path.write_text(self.text(topic, name))

    @rule(pick=st.integers(0, 50), topic=st.integers(0, 9))
    def modify_file(self, pick: int, topic: int) -> None:
        self.step()
        files = [p for p in files_of(self.folder()) if p.suffix != ".csv"]
        if files:
            target = files[pick % len(files)]
            target.write_text(self.text(topic, target.stem))

    @rule(pick=st.integers(0, 50), into_sub=st.booleans())
    def rename_file(self, pick: int, into_sub: bool) -> None:
        self.step()
        files = files_of(self.folder())
        if files:
            target = files[pick % len(files)]
            self.counter += 1
            new = self.folder() / ("sub" if into_sub else "") / f"renamed-{self.counter}{target.suffix}"
            new.parent.mkdir(exist_ok=True)
            target.rename(new)

    @rule(which=st.sampled_from(["newest", "oldest", "all", "subfolder"]))
    def delete(self, which: str) -> None:
        self.step()
        folder = self.folder()
        files = sorted(files_of(folder), key=lambda p: p.stat().st_mtime_ns)
        if which == "subfolder":
            shutil.rmtree(folder / "sub", ignore_errors=True)
        elif files:
            for path in files if which == "all" else [files[-1] if which == "newest" else files[0]]:
                path.unlink()

    @rule(
        action=st.sampled_from(["drop_one", "add_one", "change_one", "keep_one", "truncate_mid_row"]),
        pick=st.integers(0, 9),
    )
    def csv_rows(self, action: str, pick: int) -> None:
        self.step()
        # The folder's one table, wherever it was renamed to: a second table with the same row keys
        # would index whichever came first (test_duplicate_row_keys_resolve_as_in_a_fresh_index).
        tables = [p for p in files_of(self.folder()) if p.suffix == ".csv"]
        if not tables:
            self.write_csv(self.folder() / "glossary.csv", GLOSSARY_ROWS[:2])
            return
        path = tables[0]
        lines = path.read_text().splitlines()[1:]
        rows = [tuple(line.split(",", 2)) for line in lines if line.count(",") >= 2]
        present = {r[0] for r in rows}
        if action == "drop_one" and rows:
            rows.pop(pick % len(rows))
        elif action == "add_one":
            missing = [r for r in GLOSSARY_ROWS if r[0] not in present]
            if missing:
                rows.append(missing[pick % len(missing)])
        elif action == "change_one" and rows:
            i = pick % len(rows)
            self.counter += 1
            rows[i] = (rows[i][0], rows[i][1], f"{rows[i][2]} Revised {self.counter}.")
        elif action == "keep_one":
            rows = rows[:1]
        elif action == "truncate_mid_row" and rows:
            self.write_csv(path, rows)
            data = path.read_bytes()
            path.write_bytes(data[: len(data) - 10])
            return
        self.write_csv(path, rows)

    # -- the CLI in this process ----------------------------------------------------------------

    @rule()
    def reindex(self) -> None:
        self.step()
        rc, _out, err = run_cli("--data-dir", str(self.data), "reindex")
        assert rc == 0, err

    @rule(revoke=st.booleans())
    def keys(self, revoke: bool) -> None:
        self.step()
        if revoke and self.keys:
            key_id = self.keys.pop(0)
            rc, out, err = run_cli("--data-dir", str(self.data), "keys", "revoke", key_id)
            assert rc == 0 and f"revoked {key_id}" in out, err
            rc, out, err = run_cli("--data-dir", str(self.data), "keys", "list")
            [line] = [line for line in out.splitlines() if line.startswith(key_id)]
            assert " revoked " in line, line
            return
        rc, out, err = run_cli("--data-dir", str(self.data), "keys", "create", "--tenant", TENANT, "--scopes", "read")
        assert rc == 0, err
        self.keys.append(next(line.split()[-1] for line in out.splitlines() if line.startswith("key id:")))

    @precondition(lambda self: "other" not in self.sources)
    @rule()
    def switch_folder(self) -> None:
        """Serve the other folder in place of this one (`--replace`), or back."""
        self.step()
        other = "B" if self.sources["docs"] == "A" else "A"
        if build_services(ragmcp.settings.load_settings(data_dir=self.data)).documents.count(TENANT, "docs"):
            # (a source that holds no documents switches without it: nothing is deleted)
            command = ("--data-dir", str(self.data), "ingest", str(self.folders[other]), "--source", "docs")
            rc, _out, err = run_cli(*command)
            assert rc == 2 and "--replace" in err, f"switching without --replace was not refused: {rc} {err}"
        rc, _out, err = run_cli(
            "--data-dir", str(self.data), "ingest", str(self.folders[other]), "--source", "docs", "--replace"
        )
        assert rc == 0, err
        self.sources["docs"] = other

    @precondition(lambda self: "other" not in self.sources)
    @rule()
    def keep_both_folders(self) -> None:
        """The other folder as a second source beside the first."""
        self.step()
        other = "B" if self.sources["docs"] == "A" else "A"
        self.sources["other"] = other

    @precondition(lambda self: self.disk)
    @rule(topic=st.integers(0, 9), key=st.booleans())
    def full_disk(self, topic: int, key: bool) -> None:
        """The data directory's disk full while the folder changes and commands run, then freed: a
        command does its work or says the disk is full (exit 2); nothing stored is lost or half-written."""
        self.step()
        (self.folder() / f"during-full-{self.counter}.md").write_text(self.text(topic, "full"))
        filler = fill(self.data)
        try:
            for source in self.sources:
                rc, out, err = run_cli(
                    "--data-dir", str(self.data), "ingest", str(self.folder(source)), "--source", source,
                    "--allow-mass-delete",
                )  # fmt: skip
                assert rc == 0 or (rc == 2 and "the disk is full" in err), f"ingest on a full disk: {rc} {err}{out}"
            if key:
                rc, out, err = run_cli("--data-dir", str(self.data), "keys", "create", "--tenant", TENANT)
                assert rc == 0 or (rc == 2 and "the disk is full" in err), f"keys create on a full disk: {rc} {err}"
                if rc == 0:
                    self.keys.append(next(line.split()[-1] for line in out.splitlines() if line.startswith("key id:")))
        finally:
            filler.unlink()

    # -- processes of their own ------------------------------------------------------------------

    def may_spend(self) -> bool:
        return self.expensive < self.process_steps

    @precondition(may_spend)
    @rule(kind=st.sampled_from(["file", "subfolder"]))
    def unreadable(self, kind: str) -> None:
        """A file or subfolder made unreadable (mode 000 for a process without root's DAC override):
        the ingest goes on, the rest is indexed, nothing under it is deleted."""
        self.step()
        self.expensive += 1
        folder = self.folder()
        self.sync("before unreadable")
        if kind == "subfolder":
            target = folder / "sub"
            if not any(files_of(target) if target.is_dir() else []):
                return
        else:
            candidates = files_of(folder)
            if not candidates:
                return
            target = candidates[0]
        under = [str(p.relative_to(folder)) for p in ([target] if target.is_file() else files_of(target))]
        beside = f"beside-{self.counter}.md"
        (folder / beside).write_text(self.text(self.counter, "beside"))
        target.chmod(0)
        try:
            process = spawn(self.data, "ingest", str(folder), "--source", "docs", capless=True)
            assert process.wait(timeout=WAIT) == 0, f"ingest with an unreadable {kind} failed: {self.log_tail()}"
        finally:
            target.chmod(0o755 if target.is_dir() else 0o644)
        services = build_services(ragmcp.settings.load_settings(data_dir=self.data))
        paths = {d.path for d in services.documents.list(TENANT, "docs")}
        kept = {p.split("#")[0] for p in paths}
        assert set(under) <= kept, f"unreadable {kind}: documents of {sorted(set(under) - kept)} were deleted"
        assert beside in kept, "a readable file beside an unreadable one was not indexed"

    @precondition(may_spend)
    @rule(delays=st.lists(st.floats(0.0, 2.0), min_size=1, max_size=2), topic=st.integers(0, 9))
    def kill_ingest(self, delays: list[float], topic: int) -> None:
        """`ragmcp ingest` SIGKILLed a drawn delay after it took the data directory's lock (its
        Python started: then it recovers, syncs and writes), during its work; a second one (which
        recovers the first's jobs) killed too."""
        self.step()
        self.expensive += 1
        self.counter += 1
        (self.folder() / f"killed-{self.counter}.md").write_text(self.text(topic, "killed"))
        lock = str(self.data / LOCK_FILE)
        for delay in delays:
            process = spawn(self.data, "ingest", str(self.folder()), "--source", "docs", "--allow-mass-delete")
            deadline = time.monotonic() + WAIT
            while process.poll() is None and lock not in open_descriptors(process.pid) and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(delay)
            kill_group(process)

    @precondition(may_spend)
    @rule(
        workers=st.sampled_from([1, 2]),
        notes=st.integers(0, 3),
        upload=st.booleans(),
        change=st.booleans(),
        second=st.sampled_from(["none", "serve", "ingest"]),
        full=st.booleans(),
        end=st.sampled_from(["clean", "kill_writer", "kill_reader", "kill_early", "kill_recovery"]),
        delay=st.floats(0.0, 1.0),
    )
    def serve(
        self, workers: int, notes: int, upload: bool, change: bool, second: str, full: bool, end: str, delay: float
    ) -> None:
        """`ragmcp serve` (a restart: it recovers what a killed process left), notes and uploads
        over a real MCP client, a change to the folder while it watches, a second process on the
        same data directory, the disk filled under it and freed (`full`), then a clean stop or a
        SIGKILL of the writer or of a reader, or of the writer and then of the next start while it
        redoes the writes the first left unfinished (`kill_recovery`)."""
        self.step()
        self.expensive += 1
        process, base = self.start_server(workers)
        try:
            if end == "kill_early":  # during start-up: the redo of what a killed process left, the first sync
                time.sleep(delay * 3)
                return
            self.wait_idle(process, base)
            if change:
                watched = f"watched-{self.counter}.md"
                (self.folder() / watched).write_text(self.text(self.counter, "watched"))
                self.wait_indexed(process, base, watched)
            if second == "serve":
                other = spawn(self.data, "serve", "--docs", str(self.folder()), "--port", str(free_port()))
                refused = other.wait(timeout=WAIT) == 2 and "is the writer of" in self.log_tail()
                assert refused, f"a second `ragmcp serve` on the same data directory was not refused: {self.log_tail()}"
            elif second == "ingest":
                elsewhere = self.folders["B" if self.sources["docs"] == "A" else "A"]
                rc, _out, _err = run_cli("--data-dir", str(self.data), "ingest", str(elsewhere), "--replace")
                assert rc != 0, "ragmcp ingest re-pointed the source of a running server"
                services = build_services(ragmcp.settings.load_settings(data_dir=self.data))
                assert services.sources.get(TENANT, "docs").location == str(self.folder().resolve())
            if full and self.disk:
                self.full_while_serving(process, base, notes, upload, delay)
            else:
                anyio.run(self.write_over_mcp, f"{base}/mcp", notes, upload, False)
            if end == "kill_writer":
                time.sleep(delay)
            elif end == "kill_reader" and workers == 2:
                for pid in children(process.pid):
                    os.kill(pid, signal.SIGKILL)
                time.sleep(delay)
        finally:
            if end == "clean":
                process.send_signal(signal.SIGTERM)
                try:
                    # uvicorn raises the signal it caught again once it has shut down
                    stopped = process.wait(timeout=60)
                    assert stopped in (0, -signal.SIGTERM), f"ragmcp serve stopped with {stopped}: {self.log_tail()}"
                finally:
                    kill_group(process)
            else:
                kill_group(process)
        if end == "kill_recovery":
            self.kill_during_recovery(workers, delay)

    def full_while_serving(self, process: subprocess.Popen, base: str, notes: int, upload: bool, delay: float) -> None:
        """Writes over MCP and a change to the watched folder while the data directory's disk is
        full (each write acknowledged or refused), then room made: the server's task queue and
        watcher resume by themselves, with no restart: every acknowledged write and the change are
        indexed, and /healthz names no problem."""
        filler = fill(self.data)
        try:
            try:
                anyio.run(self.write_over_mcp, f"{base}/mcp", notes, upload, True)
            except Exception as exc:  # (a session refused whole: the rate limiter could not count it)
                said = "".join(traceback.format_exception(exc))
                assert DISK_FULL in said, f"a write on a full disk failed for another reason: {said}"
            watched = f"while-full-{self.counter}.md"
            (self.folder() / watched).write_text(self.text(self.counter, "while full"))
            time.sleep(1 + delay)  # the watcher meets the full disk
        finally:
            filler.unlink()
        self.wait_indexed(process, base, watched)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert process.poll() is None, f"ragmcp serve exited with {process.returncode}: {self.log_tail()}"
            services = build_services(ragmcp.settings.load_settings(data_dir=self.data))
            missing = [d for d in self.written.notes if not services.documents.get(NOTES_TENANT, d)]
            uploaded = {d.file_name for d in services.documents.list(NOTES_TENANT, "uploads")}
            missing += [u for u in self.written.uploads if u not in uploaded]
            with contextlib.suppress(httpx.HTTPError):
                health = httpx.get(f"{base}/healthz", timeout=5)
                if not missing and health.status_code == 200:
                    return
            time.sleep(0.5)
        raise AssertionError(
            f"after the disk was freed: writes {missing} unindexed or /healthz {health.text}: {self.log_tail()}"
        )

    def kill_during_recovery(self, workers: int, delay: float) -> None:
        """The writer was SIGKILLed with writes acknowledged (their jobs perhaps unfinished): start
        `ragmcp serve` again and SIGKILL it while it redoes them; the next start must redo them all."""
        log = self.root / "processes.log"
        seen = log.read_text(errors="replace").count(RECOVERING)
        process, base = self.start_server(workers)
        try:
            deadline = time.monotonic() + WAIT
            while time.monotonic() < deadline and process.poll() is None:
                if log.read_text(errors="replace").count(RECOVERING) > seen:
                    rules_run["serve: SIGKILL landed during recovery"] += 1
                    break
                with contextlib.suppress(httpx.HTTPError, ValueError, KeyError, TypeError):
                    if httpx.get(f"{base}/healthz", timeout=5).json()["ingest"]["state"] == "idle":
                        break  # nothing was left to redo
                time.sleep(0.05)
            time.sleep(delay * 0.3)
        finally:
            kill_group(process)

    def start_server(self, workers: int) -> tuple[subprocess.Popen, str]:
        """`ragmcp serve` of the folder, once it listens on its port of 127.0.0.1 (or has exited), and
        its address. When another process took the port picked between free_port and the bind (other
        tests on this machine open thousands of connections from the same range), another port."""
        for _ in range(5):
            port = free_port()
            process = spawn(
                self.data, "serve", "--docs", str(self.folder()), "--source", "docs", "--allow-mass-delete",
                "--port", str(port), "--workers", str(workers),
            )  # fmt: skip
            deadline = time.monotonic() + WAIT
            while process.poll() is None and not listens(process.pid, port) and time.monotonic() < deadline:
                time.sleep(0.05)
            if process.poll() is None or f"cannot listen on 127.0.0.1:{port}" not in self.log_tail():
                return process, f"http://127.0.0.1:{port}"
        raise AssertionError(f"no port of 127.0.0.1 stayed free for `ragmcp serve` in 5 tries: {self.log_tail()}")

    def wait_idle(self, process: subprocess.Popen, base: str) -> None:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            assert process.poll() is None, f"ragmcp serve exited with {process.returncode}: {self.log_tail()}"
            with contextlib.suppress(httpx.HTTPError, ValueError, KeyError, TypeError):
                health = httpx.get(f"{base}/healthz", timeout=5).json()
                if health["ingest"]["state"] == "idle":
                    return
            time.sleep(0.3)
        raise AssertionError(f"ragmcp serve did not start and sync in time: {self.log_tail()}")

    def log_tail(self) -> str:
        """The end of what the processes of this sequence printed (the folder goes at teardown)."""
        path = self.root / "processes.log"
        return "\n" + "\n".join(path.read_text(errors="replace").splitlines()[-30:]) if path.exists() else ""

    def wait_indexed(self, process: subprocess.Popen, base: str, path: str) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            services = build_services(ragmcp.settings.load_settings(data_dir=self.data))
            if services.documents.by_path(TENANT, "docs", path):
                return
            time.sleep(0.5)
        raise AssertionError(f"the watcher did not index {path} within 60 s: {self.log_tail()}")

    async def write_over_mcp(self, url: str, notes: int, upload: bool, disk_full: bool) -> None:
        """Notes and an upload over MCP; only what is acknowledged is recorded. On a full disk a
        write may be refused (an error result), never acknowledged and then lost."""
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        http = httpx.AsyncClient(headers={"Authorization": f"Bearer {self.secret}"}, timeout=60)
        async with http, Client(streamable_http_client(url + "/kb", http_client=http)) as client:
            for _ in range(notes):
                self.counter += 1
                text = f"Note {self.counter}: {TOPICS[self.counter % len(TOPICS)]}"
                answer = await client.call_tool("kb_addnote", {"text": text})
                if answer.is_error and disk_full and DISK_FULL in str(answer.content):
                    continue
                assert not answer.is_error, answer.content
                self.written.notes[answer.structured_content["doc_id"]] = text
            if upload:
                self.counter += 1
                body = self.text(self.counter, "uploaded").encode()
                name = f"uploaded-{self.counter}.md"
                started = await client.call_tool("kb_upload_start", {"filename": name, "total_size": len(body)})
                if started.is_error and disk_full and DISK_FULL in str(started.content):
                    return
                assert not started.is_error, started.content
                upload_id = started.structured_content["upload_id"]
                data = base64.b64encode(body).decode()
                chunk = {"upload_id": upload_id, "data": data, "chunk_index": 0}
                sent = await client.call_tool("kb_upload_chunk", chunk)
                finish = {"upload_id": upload_id}
                finished = sent if sent.is_error else await client.call_tool("kb_upload_finish", finish)
                if finished.is_error and disk_full and DISK_FULL in str(finished.content):
                    return
                assert not finished.is_error, finished.content
                self.written.uploads.append(name)

    # -- after every step ------------------------------------------------------------------------

    @invariant()
    def operable_and_equal_to_a_fresh_index(self) -> None:
        if not hasattr(self, "secret"):
            return
        settings_ = ragmcp.settings.load_settings(data_dir=self.data)
        assert startup_findings(settings_) == [], "the server would not start"
        self.sync("after the step")  # a start: recovery of dead processes' jobs, then the sync
        rc, out, err = run_cli("--data-dir", str(self.data), "doctor")
        assert rc == 0, f"ragmcp doctor: {out}{err}"
        rc, out, err = run_cli("--data-dir", str(self.data), "audit", "verify")
        assert rc == 0, f"ragmcp audit verify: {out}{err}"
        services = build_services(settings_)
        left = (
            services.database.conn()
            .execute("SELECT tenant, job_id, status FROM jobs WHERE status IN ('queued', 'running')")
            .fetchall()
        )
        assert left == [], f"jobs left unfinished: {left}"
        for doc_id, text in self.written.notes.items():
            doc = services.documents.get(NOTES_TENANT, doc_id)
            assert doc is not None and doc.chunk_count > 0 and not doc.stale, f"note {doc_id} ({text!r}) lost: {doc}"
        uploaded = {d.file_name for d in services.documents.list(NOTES_TENANT, "uploads")}
        assert set(self.written.uploads) <= uploaded, f"uploads lost: {set(self.written.uploads) - uploaded}"
        sources = tuple(sorted(self.sources))
        state = tuple((s, digest(self.folder(s))) for s in sources)
        if state not in self.fresh:
            fresh = self.root / f"fresh-{len(self.fresh)}"
            for source in sources:
                rc, out, err = run_cli("--data-dir", str(fresh), "ingest", str(self.folder(source)), "--source", source)
                assert rc == 0, err
            self.fresh[state] = index_state(fresh, sources)
            shutil.rmtree(fresh)
        problems = index_state(self.data, sources, services).differences(self.fresh[state])
        assert problems == [], "the index is not a fresh index of the folder:\n  " + "\n  ".join(problems)
        self.checked = self.steps

    def teardown(self) -> None:
        if self.steps >= STEPS:
            stats["full"] += 1
        print(f"operator-year: sequence {stats['sequences']}: {self.steps} steps", file=sys.stderr)
        for folder in self.folders.values():
            for path in [folder, *folder.rglob("*")]:
                with contextlib.suppress(OSError):
                    path.chmod(0o755)
        if self.disk:
            subprocess.run(["umount", "-l", str(self.data)], check=False)
        shutil.rmtree(self.root, ignore_errors=True)
        if self.checked == self.steps:  # (after a failure, its traceback holds the failed step's objects)
            self.no_descriptors_left()

    def no_descriptors_left(self) -> None:
        """This process holds nothing of the sequence once it is over (no database, log or graph
        file under its folder), and no more descriptors than after the first sequence: a leak of a
        few a step ran the soak out of descriptors after ~1,100 steps."""
        gc.collect()  # services are cyclic: what holds no thread goes at the next collection
        held = open_descriptors()
        mine = sorted({target for target in held if target.startswith(str(self.root))})
        assert mine == [], f"descriptors left open after the sequence: {mine}"
        if "after_first" not in descriptors:
            descriptors["after_first"] = len(held)
        grown = len(held) - descriptors["after_first"]
        assert grown <= DESCRIPTOR_SLACK, (
            f"{grown} more descriptors open than after the first sequence: {Counter(held).most_common(5)}"
        )


def open_descriptors(pid: int | str = "self") -> list[str]:
    """What a process's (this one's) open file descriptors point at."""
    targets = []
    with contextlib.suppress(OSError):  # (a process that has just exited)
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                targets.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return targets


def small_disk(data: Path) -> bool:
    """The data directory on a small tmpfs of its own, to fill (root mounts it); False where it cannot."""
    data.mkdir(mode=0o700)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m,mode=0700", "tmpfs", str(data)], capture_output=True
    )
    return mounted.returncode == 0


def listens(pid: int, port: int) -> bool:
    """Whether process `pid` holds a listening TCP socket on `port` of 127.0.0.1 (and not another
    process that took the port)."""
    sockets = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A" and fields[1] == f"0100007F:{port:04X}":  # LISTEN on 127.0.0.1:port
            sockets.add(f"socket:[{fields[9]}]")
    with contextlib.suppress(OSError):
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") in sockets for fd in os.listdir(f"/proc/{pid}/fd"))
    return False


def children(pid: int) -> list[int]:
    with contextlib.suppress(OSError):
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return []


def run_sequences(examples: int, steps: int, *, shrink: bool = True) -> None:
    """`examples` sequences of `steps` steps each (Hypothesis would end about a third of them
    early, now and then right after the setup; `_min_steps` makes every one run them all)."""
    run_state_machine_as_test(OperatorYear, settings=budget(examples, steps, shrink=shrink), _min_steps=steps + 1)


def budget(examples: int, steps: int, *, shrink: bool = True) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=steps + 1,  # the setup counts as one
        deadline=None,
        database=None,
        phases=[Phase.generate, Phase.shrink] if shrink else [Phase.generate],
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )


@contextlib.contextmanager
def in_process() -> Iterator[None]:
    """One embedding cache for every data directory of the run; the ONNX model loaded once; the
    data directory locks of in-process commands let go when they return. Files are parsed in the
    command's own process (RAGMCP_PARSE_SANDBOX=false): a sandbox worker costs a process start per
    command, which would take the budget; tests/integration/test_parse_sandbox.py covers the sandbox."""
    with tempfile.TemporaryDirectory(prefix="operator-year-cache-") as cache:
        saved = os.environ.get("RAGMCP_EMBEDDING_CACHE")
        saved_sandbox = os.environ.get("RAGMCP_PARSE_SANDBOX")
        os.environ["RAGMCP_EMBEDDING_CACHE"] = str(Path(cache) / "embeddings.db")
        os.environ["RAGMCP_PARSE_SANDBOX"] = "false"
        ragmcp.bootstrap._onnx_embedder = _memo_embedder
        ragmcp.bootstrap._chunker = _memo_chunker
        cli.parser = functools.cache(_real_parser)  # argparse's tree of commands, built once
        ragmcp.settings.load_settings = _memo_settings  # type: ignore[assignment]
        DataDirLock.__init__ = _tracked_lock_init  # type: ignore[method-assign]
        try:
            yield
        finally:
            DataDirLock.__init__ = _real_lock_init  # type: ignore[method-assign]
            ragmcp.bootstrap._onnx_embedder = _real_onnx_embedder
            ragmcp.bootstrap._chunker = _real_chunker
            cli.parser = _real_parser
            ragmcp.settings.load_settings = _real_load_settings
            _settings.clear()
            for name, value in (("RAGMCP_EMBEDDING_CACHE", saved), ("RAGMCP_PARSE_SANDBOX", saved_sandbox)):
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


@pytest.mark.timeout(600)  # measured 116-148 s on 2 shared vCPU at load average 3.6-4.5 (1,374 s before)
def test_an_operators_year() -> None:
    stats.update(sequences=0, steps=0, full=0)
    descriptors.clear()
    rules_run.clear()
    global expensive_per_sequence
    with in_process():
        try:
            expensive_per_sequence = 0
            run_sequences(SEQUENCES - PROCESS_SEQUENCES, STEPS)
            expensive_per_sequence = EXPENSIVE_PER_SEQUENCE
            run_sequences(PROCESS_SEQUENCES, STEPS)
        finally:
            expensive_per_sequence = EXPENSIVE_PER_SEQUENCE
    print(f"operator-year: {stats}; steps by rule: {dict(rules_run)}", file=sys.stderr)
    assert stats["full"] >= SEQUENCES, stats


def soak() -> int:
    """Rounds of SOAK_ROUND sequences, each round seeded by SOAK_SEED + its number, until
    SOAK_SECONDS have passed; prints the totals. (A round of one would be Hypothesis' simplest
    sequence every time.)"""
    import hypothesis.core

    seconds, seed = float(os.environ.get("SOAK_SECONDS", "600")), int(os.environ.get("SOAK_SEED", "24"))
    per_round = int(os.environ.get("SOAK_ROUND", "10"))
    shrink = os.environ.get("SOAK_SHRINK", "0") == "1"  # shrinking one failure takes minutes: off unless asked
    global expensive_per_sequence
    expensive_per_sequence = int(os.environ.get("OPERATOR_YEAR_EXPENSIVE", "2"))
    end, round_, failures = time.monotonic() + seconds, 0, 0
    stats.update(sequences=0, steps=0, full=0)
    descriptors.clear()
    with in_process():
        while time.monotonic() < end:
            hypothesis.core.global_force_seed = seed + round_
            try:
                run_sequences(per_round, STEPS, shrink=shrink)
            except Exception as exc:  # a found failure: its notes hold the shrunk sequence of steps
                failures += 1
                traceback.print_exception(exc, file=sys.stdout)
                print(f"soak: FAILURE in round {round_} (seed {seed + round_}): {exc}", flush=True)
            round_ += 1
            print(f"soak: round {round_} done, {stats}, {failures} failures; by rule {dict(rules_run)}", flush=True)
    print(
        f"soak: seed {seed}, {round_} rounds of {per_round}, {stats['sequences']} sequences "
        f"({stats['full']} of {STEPS} steps), {stats['steps']} steps, {failures} failures; "
        f"steps by rule: {dict(rules_run)}",
        flush=True,
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(soak())


@pytest.fixture
def commands() -> Iterator[None]:
    """The in-process commands of the state machine (the model loaded once, no sandbox worker per command)."""
    with in_process():
        yield


def test_listens_tells_the_servers_port_from_one_another_process_took() -> None:
    """The soak's one failure in its first 20 minutes: another process took the port picked for a
    `ragmcp serve` (start_server now sees whose socket listens, and picks another port)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert listens(os.getpid(), port)
        other = subprocess.Popen(["sleep", "30"])
        try:
            assert not listens(other.pid, port)
        finally:
            other.kill()
            other.wait()
    assert not listens(os.getpid(), port)


def test_a_renamed_csv_keeps_its_rows(tmp_path: Path, commands: None) -> None:
    """Found by the state machine: a CSV renamed in its folder lost every row until a second sync
    (its rows' keys were taken for another file's, the old file's about to be deleted: the new file
    "failed: no extractable text", then the old rows were deleted with the old file)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    OperatorYear.write_csv(docs / "glossary.csv", GLOSSARY_ROWS[:3])
    for n, topic in enumerate(TOPICS[:3]):
        (docs / f"note-{n}.md").write_text(f"# Note {n}\n\n{topic}\n")
    data = str(tmp_path / "data")
    assert run_cli("--data-dir", data, "ingest", str(docs))[0] == 0
    (docs / "glossary.csv").rename(docs / "renamed.csv")
    rc, out, err = run_cli("--data-dir", data, "ingest", str(docs))
    assert rc == 0 and "0 failed" in out, out + err
    services = build_services(ragmcp.settings.load_settings(data_dir=Path(data)))
    rows = [d for d in services.documents.list(TENANT, "docs") if d.file_type == "csv"]
    assert sorted(d.path for d in rows) == ["renamed.csv"] * 3
    assert all(d.chunk_count == 1 for d in rows)


@pytest.mark.xfail(
    strict=True,
    reason="issue 24, found by the state machine: a row key in two tables of one source goes to the table "
    "ingested first, so the index depends on the history, not on the folder",
)
def test_duplicate_row_keys_resolve_as_in_a_fresh_index(tmp_path: Path, commands: None) -> None:
    """Two tables with the same row keys: the index after `b.csv` came first, then `a.csv`, differs
    from a fresh index of the same two files (which reads `a.csv` first)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for n, topic in enumerate(TOPICS[:3]):
        (docs / f"note-{n}.md").write_text(f"# Note {n}\n\n{topic}\n")
    OperatorYear.write_csv(docs / "b.csv", GLOSSARY_ROWS[:2])
    assert run_cli("--data-dir", str(tmp_path / "data"), "ingest", str(docs))[0] == 0
    OperatorYear.write_csv(docs / "a.csv", [(k, t, d + " Again.") for k, t, d in GLOSSARY_ROWS[:2]])
    assert run_cli("--data-dir", str(tmp_path / "data"), "ingest", str(docs))[0] == 0
    assert run_cli("--data-dir", str(tmp_path / "fresh"), "ingest", str(docs))[0] == 0
    lived, fresh = index_state(tmp_path / "data", ("docs",)), index_state(tmp_path / "fresh", ("docs",))
    assert lived.differences(fresh) == []

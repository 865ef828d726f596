"""An operator's year on one data directory, as a Hypothesis state machine (issue 24, first part).

The machine drives the real ingest pipeline, SQLite index, vector graph and ONNX embedder through
what operators do to a watched folder: add, change, rename and delete files (the newest, the
oldest, a whole subfolder), cut a CSV's rows, switch the source to another folder and back, add
notes, and restart on the same data directory. After every sync it checks: the start-up checks
and `doctor`'s checks of the database and graph find nothing; no job is left queued or running;
every note is still there; a sync that held deletions deleted nothing; and the index equals a
fresh index of the same folder built in a new data directory (the same documents and content
hashes, the same passages).

Not yet here (issue 24 asks for them): the CLI and server as processes, SIGKILLs, unreadable
files, a full disk, `--workers 2` and keys. The budget: RAGMCP_OPERATOR_EXAMPLES sequences
(default 4) of at most RAGMCP_OPERATOR_STEPS steps (default 12); a failure prints the shrunk
sequence of rules.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ragmcp.adapters.local.hnsw import HnswVectors
from ragmcp.bootstrap import build_services
from ragmcp.doctor import database_findings, graph_findings, startup_findings
from ragmcp.domain.models import Principal
from ragmcp.services import Services
from ragmcp.settings import Settings

WORDS = (
    "anchor basalt cobalt delta ember fjord garnet harbor indigo juniper kelp lagoon marble nectar "
    "obsidian pewter quartz rivet saffron tundra umber velvet walnut xenon yarrow zephyr"
).split()
EXAMPLES = int(os.environ.get("RAGMCP_OPERATOR_EXAMPLES", "4"))
STEPS = int(os.environ.get("RAGMCP_OPERATOR_STEPS", "12"))

text = st.lists(st.sampled_from(WORDS), min_size=3, max_size=12).map(lambda w: " ".join(w))
names = st.sampled_from(["a", "b", "c", "d", "e", "f", "g"])


def index_state(services: Services, tenant: str, source: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """doc_id -> (content hash, its passages' texts in order)."""
    conn = services.database.conn()
    state = {}
    for doc in services.documents.list(tenant, source):
        rows = conn.execute(
            "SELECT c.text FROM chunks c JOIN idx_docs i ON i.id = c.doc"
            " WHERE i.tenant = ? AND i.doc_id = ? ORDER BY c.ordinal",
            (tenant, doc.doc_id),
        ).fetchall()
        state[doc.doc_id] = (doc.content_hash, tuple(r[0] for r in rows))
    return state


class OperatorYear(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="ragmcp-year-"))
        self.docs = self.root / "docs"
        self.other = self.root / "other"
        self.docs.mkdir()
        self.other.mkdir()
        (self.other / "elsewhere.md").write_text("# Elsewhere\n\nThe other folder holds one note on kelp.\n")
        self.cache = self.root / "embedding-cache.db"
        self.settings = Settings(data_dir=self.root / "data", embedding_cache=self.cache)
        self.services = build_services(self.settings)
        self.source = self.services.register_folder("default", "docs", str(self.docs))
        self.notes: list[str] = []
        self.fresh_count = 0
        self.synced = True

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def _files(self) -> list[Path]:
        return sorted(p for p in self.docs.rglob("*") if p.is_file())

    def _changed(self) -> None:
        self.synced = False

    @rule(name=names, body=text, sub=st.booleans())
    def add_or_change_a_file(self, name: str, body: str, sub: bool) -> None:
        path = self.docs / ("sub" if sub else "") / f"{name}.md"
        path.parent.mkdir(exist_ok=True)
        path.write_text(f"# {name}\n\n{body}.\n")
        self._changed()

    @rule(which=st.sampled_from(["newest", "oldest", "first"]))
    def delete_a_file(self, which: str) -> None:
        files = self._files()
        if not files:
            return
        by_time = sorted(files, key=lambda p: p.stat().st_mtime_ns)
        {"newest": by_time[-1], "oldest": by_time[0], "first": files[0]}[which].unlink()
        self._changed()

    @rule(to=names)
    def rename_a_file(self, to: str) -> None:
        files = [p for p in self._files() if p.suffix == ".md"]
        if files and not (self.docs / f"{to}.md").exists():
            files[0].rename(self.docs / f"{to}.md")
            self._changed()

    @rule()
    def delete_the_subfolder(self) -> None:
        shutil.rmtree(self.docs / "sub", ignore_errors=True)
        self._changed()

    @rule(rows=st.integers(min_value=1, max_value=12), offset=st.integers(min_value=0, max_value=3))
    def write_the_csv(self, rows: int, offset: int) -> None:
        lines = ["id,text"] + [f"r{n + offset},Row {n + offset} is about {WORDS[n % len(WORDS)]}." for n in range(rows)]
        (self.docs / "rows.csv").write_text("\n".join(lines) + "\n")
        self._changed()

    @rule()
    def sync(self) -> None:
        before = index_state(self.services, "default", "docs")
        report = self.services.ingest.sync(self.source)
        if report.held:  # held deletions delete nothing; the operator then allows them
            after = index_state(self.services, "default", "docs")
            assert set(before) <= set(after), f"held, yet deleted: {sorted(set(before) - set(after))}"
            self.services.ingest.sync(self.source, allow_mass_delete=True)
        graph = self.services.vector_graph
        if isinstance(graph, HnswVectors):
            graph.catch_up()
        self.synced = True

    @rule(body=text)
    def add_a_note(self, body: str) -> None:
        job = self.services.notes.add(Principal(tenant="default"), f"Note: {body}.", "default", [])
        self.services.tasks.join()
        self.notes.append(job.target)

    @precondition(lambda self: self.synced)
    @rule()
    def switch_to_another_folder_and_back(self) -> None:
        away = self.services.register_folder("default", "docs", str(self.other))
        self.services.ingest.sync(away, allow_mass_delete=True)
        graph = self.services.vector_graph
        if isinstance(graph, HnswVectors):
            graph.catch_up()
        self.source = self.services.register_folder("default", "docs", str(self.docs))
        self.services.ingest.sync(self.source, allow_mass_delete=True)

    @rule()
    def restart(self) -> None:
        assert startup_findings(self.settings) == [], startup_findings(self.settings)
        self.services = build_services(self.settings)
        self.source = self.services.register_folder("default", "docs", str(self.docs))

    @invariant()
    def the_data_directory_is_sound(self) -> None:
        if not self.synced:
            return
        assert startup_findings(self.settings) == []
        found = database_findings(self.settings.server.db_path, full=True) + graph_findings(self.settings, full=True)
        assert found == [], found
        assert self.services.jobs.unfinished() == []
        kept = {d.path for d in self.services.documents.list("default", "notes")}
        assert set(self.notes) <= kept, sorted(set(self.notes) - kept)

    @invariant()
    def the_index_equals_a_fresh_index_of_the_folder(self) -> None:
        if not self.synced:
            return
        self.fresh_count += 1
        fresh_settings = Settings(data_dir=self.root / f"fresh-{self.fresh_count}", embedding_cache=self.cache)
        fresh = build_services(fresh_settings)
        fresh.ingest.sync(fresh.register_folder("default", "docs", str(self.docs)))
        assert index_state(self.services, "default", "docs") == index_state(fresh, "default", "docs")
        shutil.rmtree(fresh_settings.server.data_dir, ignore_errors=True)


OperatorYear.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestOperatorYear = OperatorYear.TestCase

"""Checks of an embedded data directory: run at every `ragmcp serve` start (the cheap ones) and in
full by `ragmcp doctor`, which says what is wrong and what to run about it.

The database is opened read-only here: a check never changes what it checks.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path

import sqlean

from ragmcp.domain.models import Source
from ragmcp.ingest.jobs import no_room
from ragmcp.security.models import ApiKey
from ragmcp.settings import Settings

RESTORE = (
    "restore {db} from a backup; without one, move it aside (mv {db} {db}.damaged) and rebuild: "
    "`ragmcp keys create --tenant T`, then `ragmcp ingest <folder>` for each folder (keys, users and "
    "notes live in the database and must be created again)"
)
FREE_SPACE = "free space on the disk of {folder} and run the command again (the database needs no restoring for this)"
REINDEX = "`ragmcp reindex` (rebuilds the index from the stored originals)"


@dataclass(frozen=True, slots=True)
class Finding:
    problem: str
    fix: str

    def line(self) -> str:
        return f"PROBLEM: {self.problem}\n  fix: {self.fix}"


def _read_only(db: Path) -> sqlean.Connection:
    return sqlean.connect(f"file:{db}?mode=ro", uri=True, isolation_level=None)


def database_findings(db: Path, *, full: bool) -> list[Finding]:
    """The database file itself: present, not empty, passing SQLite's own check; with `full`,
    the full-text index matching the chunks and the index matching the document store."""
    restore = RESTORE.format(db=db)
    if not db.exists():
        return []
    if db.stat().st_size == 0:
        return [Finding(f"{db} is empty (0 bytes): truncated or never written", restore)]
    try:
        conn = _read_only(db)
        try:
            rows = [r[0] for r in conn.execute(f"PRAGMA {'integrity_check' if full else 'quick_check'}(20)")]
            if rows != ["ok"]:
                return [Finding(f"{db} fails SQLite's check: {'; '.join(rows[:5])}", restore)]
            if not full:
                return []
            return _consistency(conn)
        finally:
            conn.close()
    except sqlean.DatabaseError as exc:
        if no_room(db.parent):  # not damage: SQLite could not make its -shm file
            return [Finding(f"{db} cannot be opened: the disk is full ({exc})", FREE_SPACE.format(folder=db.parent))]
        return [Finding(f"{db} cannot be read: {exc}", restore)]


def _consistency(conn: sqlean.Connection) -> list[Finding]:
    found = []
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if {"chunks", "chunks_fts_docsize", "idx_docs", "documents"} - tables:
        return [Finding("the database lacks ragmcp's tables (another program's file?)", "check --data-dir")]
    chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    fts = conn.execute("SELECT count(*) FROM chunks_fts_docsize").fetchone()[0]
    if chunks != fts:
        found.append(Finding(f"the full-text index holds {fts} rows for {chunks} chunks", REINDEX))
    orphans = conn.execute(
        "SELECT count(*) FROM idx_docs i WHERE NOT EXISTS"
        " (SELECT 1 FROM documents d WHERE d.tenant = i.tenant AND d.doc_id = i.doc_id)"
    ).fetchone()[0]
    missing = conn.execute(
        "SELECT count(*) FROM documents d WHERE NOT EXISTS"
        " (SELECT 1 FROM idx_docs i WHERE i.tenant = d.tenant AND i.doc_id = d.doc_id)"
    ).fetchone()[0]
    if orphans or missing:
        found.append(
            Finding(f"{orphans} indexed documents have no record and {missing} records no index entry", REINDEX)
        )
    return found


def graph_findings(settings: Settings, *, full: bool) -> list[Finding]:
    from ragmcp.adapters.local.hnsw import check_file

    path = settings.server.data_dir / "vectors.hnsw"
    if not path.exists() or not settings.server.db_path.exists():
        return []
    try:
        conn = _read_only(settings.server.db_path)
        try:
            # The id counter, not max(id): ids are never reused, and deleting the newest rows lowers max(id)
            # below a sound graph's watermark.
            counter = conn.execute(
                "SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'chunks'), 0)"
            ).fetchone()[0]
            row = conn.execute("SELECT value FROM meta WHERE key = 'embedding_dimension'").fetchone()
        finally:
            conn.close()
    except sqlean.DatabaseError:
        return []  # the database's own finding says it
    if row is None:
        return [Finding(f"{path} exists beside an index that holds no vectors", f"rm {path}")]
    problem = check_file(path, int(row[0]), counter, full=full)
    fix = f"remove {path} (rm {path}); `ragmcp serve` builds it again from the database"
    return [Finding(problem, fix)] if problem else []


def state_findings(settings: Settings) -> list[Finding]:
    """What a sound database may still hold that needs a person: no keys, unfinished jobs, held
    deletions, a data directory others may read."""
    found = []
    data_dir, db = settings.server.data_dir, settings.server.db_path
    if data_dir.exists() and stat.S_IMODE(data_dir.stat().st_mode) & 0o077:
        found.append(Finding(f"{data_dir} may be read by other users", f"chmod 700 {data_dir}"))
    if db.exists() and stat.S_IMODE(db.stat().st_mode) & 0o077:
        found.append(Finding(f"{db} may be read by other users", f"chmod 600 {db}*"))
    try:
        conn = _read_only(db)
    except sqlean.DatabaseError:
        return found
    try:
        keys = [ApiKey.model_validate_json(r[0]) for r in conn.execute("SELECT key_json FROM api_keys")]
        if not any(k.revoked_at is None for k in keys):
            found.append(
                Finding(
                    "no active API key: `ragmcp serve` refuses to start without one (or without --open)",
                    "`ragmcp keys create --tenant default`, or `ragmcp serve --open` on 127.0.0.1 to try it",
                )
            )
        running = conn.execute("SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')").fetchone()[0]
        if running:
            found.append(
                Finding(
                    f"{running} jobs are queued or running (interrupted if no ragmcp process runs)",
                    "start `ragmcp serve` or `ragmcp ingest <folder>`: interrupted jobs are marked and redone",
                )
            )
        for tenant, source_json in conn.execute("SELECT tenant, source_json FROM sources"):
            source = Source.model_validate_json(source_json)
            if source.held_deletions:
                found.append(
                    Finding(
                        f"source {tenant}/{source.source_id} holds {len(source.held_deletions)} deletions: "
                        f"{source.held_reason}",
                        f"if the files were removed on purpose: `ragmcp ingest {source.location} --tenant {tenant} "
                        f"--source {source.source_id} --allow-mass-delete`; else put the files back",
                    )
                )
    except sqlean.DatabaseError:
        pass
    finally:
        conn.close()
    return found


def startup_findings(settings: Settings) -> list[Finding]:
    """The checks `ragmcp serve` runs before it opens the door: the cheap ones."""
    return database_findings(settings.server.db_path, full=False) + graph_findings(settings, full=False)


def diagnose(settings: Settings) -> list[Finding]:
    """Every check; the state of the data only when the database itself is sound."""
    found = database_findings(settings.server.db_path, full=True)
    return found + graph_findings(settings, full=True) + (state_findings(settings) if not found else [])

"""One SQLite database under the data directory: WAL mode, FTS5 and sqlite-vec loaded.

The stock `sqlite3` module of many Pythons cannot load extensions, so connections come
from `sqlean` (a drop-in sqlite3 with extension loading). Each thread gets its own
connection; writes are serialised by one lock so that a long ingest never makes a
writer wait on SQLITE_BUSY, while readers keep reading the last committed state.

A new database file is created 0600 in a 0700 folder (SQLite gives its -wal and -shm files the
database's mode). An existing file that is empty or that SQLite cannot read is refused with
`StoreDamaged`, never replaced by a fresh empty store.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import sqlean
import sqlite_vec

from ragmcp.domain.errors import StoreDamaged
from ragmcp.ingest.jobs import no_room
from ragmcp.text import keyword_text

DOCTOR = "run `ragmcp doctor` for what to do"

CACHE_KIB = 65_536
"""One connection's page cache at most (each thread reads through its own connection)."""
SQLITE_HEAP_BYTES = 128 * 2**20
"""SQLite's memory in one process, every connection's page cache together (a soft limit: past it a
connection reuses its own cached pages rather than adding more). A server process reads through a
connection on each of its threads (the search pool, the tool threads, the background workers): at
1M chunks each filled its own 64 MB cache. The first 256 MB of the database stay mapped: mapped
pages are the OS page cache's, held once however many connections and processes map them, and
reading through the mapping saves 5-9% of a request's CPU at 100k (BENCHMARKS.md, q31m2)."""
MMAP_BYTES = 256 * 2**20
"""How much of the database each connection maps; pages past it are read into the page caches."""

DOC_NUMBERS = """\
CREATE TABLE IF NOT EXISTS doc_numbers(
    tenant TEXT NOT NULL,
    number INTEGER NOT NULL,
    doc_id TEXT NOT NULL,
    PRIMARY KEY(tenant, number),
    UNIQUE(tenant, doc_id)
) WITHOUT ROWID"""

CONVERSATIONS = """\
CREATE TABLE IF NOT EXISTS conversations(
    tenant TEXT NOT NULL,
    user_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    turns_json TEXT NOT NULL,
    PRIMARY KEY(tenant, user_id, conversation_id)
)"""

STEMMED = "porter unicode61 remove_diacritics 2"
"""The default FTS5 tokenizer: unicode61 words (lower-cased, diacritics removed) reduced to their
Porter stems, so "ducks feeding" finds "duck feeds"."""
UNSTEMMED = "unicode61 remove_diacritics 2"
"""The same words unstemmed (RAGMCP_FTS_STEMMING=false, to measure what stemming does)."""


def stored_vectors(conn: sqlean.Connection, ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """The stored float32 vectors of these chunk rows, read at once: the ids of the rows found (a row
    deleted since is left out) and one vector a row, in that order."""
    if not ids:
        return np.zeros(0, dtype=np.int64), np.zeros((0, 0), dtype=np.float32)
    marks = ",".join("?" * len(ids))
    rows = conn.execute(f"SELECT id, embedding FROM chunks WHERE id IN ({marks})", list(ids)).fetchall()
    found = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
    return found, np.frombuffer(b"".join(row[1] for row in rows), dtype=np.float32).reshape(len(rows), -1)


def fts_tokenizer(stemming: bool) -> str:
    return STEMMED if stemming else UNSTEMMED


def fts_table_sql(tokenizer: str) -> str:
    """The keyword index: an external-content FTS5 table over the chunks' text and headline."""
    if tokenizer not in (STEMMED, UNSTEMMED):
        raise ValueError(f"unknown FTS5 tokenizer {tokenizer!r}")
    return (
        "CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5("
        f"text, headline, content='chunks', content_rowid='id', tokenize='{tokenizer}')"
    )


SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta(
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS idx_docs(
    id INTEGER PRIMARY KEY,
    tenant TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    source TEXT NOT NULL,
    kind TEXT NOT NULL,
    tier INTEGER NOT NULL,
    acl_open INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    doc_json TEXT NOT NULL,
    UNIQUE(tenant, doc_id)
);
CREATE INDEX IF NOT EXISTS idx_docs_source ON idx_docs(tenant, source);

CREATE TABLE IF NOT EXISTS idx_doc_terms(
    doc INTEGER NOT NULL REFERENCES idx_docs(id) ON DELETE CASCADE,
    field TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY(doc, field, value)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idx_doc_terms_value ON idx_doc_terms(field, value);

CREATE TABLE IF NOT EXISTS chunks(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    doc INTEGER NOT NULL REFERENCES idx_docs(id) ON DELETE CASCADE,
    tenant TEXT NOT NULL,
    chunk_id TEXT NOT NULL,
    ordinal INTEGER NOT NULL,
    text TEXT NOT NULL,
    headline TEXT NOT NULL,
    summary TEXT NOT NULL,
    page_start INTEGER,
    page_end INTEGER,
    char_start INTEGER NOT NULL,
    char_end INTEGER NOT NULL,
    locator TEXT,
    flags TEXT NOT NULL DEFAULT '',
    embedding BLOB NOT NULL,
    UNIQUE(tenant, chunk_id)
);
CREATE INDEX IF NOT EXISTS chunks_doc ON chunks(doc);


CREATE TABLE IF NOT EXISTS documents(
    tenant TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    source TEXT NOT NULL,
    path TEXT NOT NULL,
    doc_json TEXT NOT NULL,
    PRIMARY KEY(tenant, doc_id)
);
CREATE INDEX IF NOT EXISTS documents_path ON documents(tenant, source, path);

{DOC_NUMBERS};

CREATE TABLE IF NOT EXISTS users(
    tenant TEXT NOT NULL,
    user_id TEXT NOT NULL,
    user_json TEXT NOT NULL,
    PRIMARY KEY(tenant, user_id)
);

CREATE TABLE IF NOT EXISTS upload_sessions(
    tenant TEXT NOT NULL,
    upload_id TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    session_json TEXT NOT NULL,
    PRIMARY KEY(tenant, upload_id)
);
CREATE INDEX IF NOT EXISTS upload_sessions_expiry ON upload_sessions(expires_at);

{CONVERSATIONS};

CREATE TABLE IF NOT EXISTS jobs(
    tenant TEXT NOT NULL,
    job_id TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at TEXT NOT NULL,
    job_json TEXT NOT NULL,
    owner TEXT NOT NULL DEFAULT '',
    PRIMARY KEY(tenant, job_id)
);
CREATE INDEX IF NOT EXISTS jobs_status ON jobs(tenant, status, created_at);

CREATE TABLE IF NOT EXISTS sources(
    tenant TEXT NOT NULL,
    source_id TEXT NOT NULL,
    number INTEGER NOT NULL,
    source_json TEXT NOT NULL,
    PRIMARY KEY(tenant, source_id),
    UNIQUE(tenant, number)
);

CREATE TABLE IF NOT EXISTS api_keys(
    key_id TEXT PRIMARY KEY,
    key_hash TEXT NOT NULL UNIQUE,
    key_json TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS audit_records(
    tenant TEXT NOT NULL,
    seq INTEGER NOT NULL,
    record_json TEXT NOT NULL,
    PRIMARY KEY(tenant, seq)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS audit_heads(
    tenant TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    hash TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS embedding_cache(
    model_sha256 TEXT NOT NULL,
    text_sha256 TEXT NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY(model_sha256, text_sha256)
) WITHOUT ROWID;
"""

FTS_TRIGGER_STATEMENTS = (
    "CREATE TRIGGER IF NOT EXISTS chunks_ai AFTER INSERT ON chunks BEGIN"
    " INSERT INTO chunks_fts(rowid, text, headline) VALUES (new.id, keyword_text(new.text), new.headline); END",
    "CREATE TRIGGER IF NOT EXISTS chunks_ad AFTER DELETE ON chunks BEGIN"
    " INSERT INTO chunks_fts(chunks_fts, rowid, text, headline)"
    " VALUES ('delete', old.id, keyword_text(old.text), old.headline); END",
)
FTS_TRIGGERS = "".join(f"{statement};\n" for statement in FTS_TRIGGER_STATEMENTS)
"""The keyword index reads a chunk's text through `ragmcp.text.keyword_text` (CJK character pairs
added), a function every connection registers; `FTS_REBUILD` fills it the same way."""
FTS_REBUILD = "INSERT INTO chunks_fts(rowid, text, headline) SELECT id, keyword_text(text), headline FROM chunks"


class Database:
    def __init__(self, path: Path):
        self.path = path
        self._local = threading.local()
        self._write_lock = threading.Lock()
        self.commits = 0
        """Write transactions this object has committed: readers' in-memory caches compare it."""
        if path.exists():
            if path.stat().st_size == 0:
                raise StoreDamaged(f"{path} is empty (0 bytes): it was truncated or never written; {DOCTOR}")
        else:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        try:
            self._migrate_doc_numbers()
            self._migrate_conversations()
            self.conn().executescript(f"{SCHEMA}\n{fts_table_sql(STEMMED)};\n{FTS_TRIGGERS}")
            self._migrate_job_owner()
        except sqlean.DatabaseError as exc:
            if no_room(path.parent):  # not damage: a full disk (SQLite says "disk I/O error" for its -shm file)
                raise OSError(errno.ENOSPC, f"the disk is full: {path} cannot be opened ({exc})") from exc
            raise StoreDamaged(f"{path} cannot be read ({exc}); {DOCTOR}") from None

    def _migrate_doc_numbers(self) -> None:
        """Document numbers were one counter for every tenant; now each tenant counts its own. The
        numbers already given keep their values (agents may hold them)."""
        if not self.autoincrement("doc_numbers"):
            return
        with self.write() as conn:
            conn.execute("ALTER TABLE doc_numbers RENAME TO doc_numbers_shared")
            conn.execute(DOC_NUMBERS)
            conn.execute(
                "INSERT INTO doc_numbers(tenant, number, doc_id) SELECT tenant, number, doc_id FROM doc_numbers_shared"
            )
            conn.execute("DROP TABLE doc_numbers_shared")

    def _migrate_job_owner(self) -> None:
        """Jobs did not record the process that took them; those of older servers have no owner."""

        def has_owner(conn: sqlean.Connection) -> bool:
            return "owner" in {row[1] for row in conn.execute("PRAGMA table_info(jobs)")}

        if has_owner(self.conn()):
            return
        with self.write() as conn:
            if not has_owner(conn):  # another process may have added it meanwhile
                conn.execute("ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT ''")

    def _migrate_conversations(self) -> None:
        """Conversations were keyed by tenant and id alone, so two users reusing an id shared one;
        now the user is part of the key. Turns kept before cannot be given a user: they go (they
        expired within RAGMCP_CONVERSATION_TTL_SECONDS anyway)."""
        def outdated(conn: sqlean.Connection) -> bool:
            columns = [row[1] for row in conn.execute("PRAGMA table_info(conversations)")]
            return bool(columns) and "user_id" not in columns

        if outdated(self.conn()):
            with self.write() as conn:
                if outdated(conn):  # another process starting at once may have done it
                    conn.execute("DROP TABLE conversations")
                    conn.execute(CONVERSATIONS)

    def conn(self) -> sqlean.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlean.connect(str(self.path), isolation_level=None, check_same_thread=False, timeout=30)
            conn.enable_load_extension(True)
            sqlite_vec.load(conn)
            conn.enable_load_extension(False)
            conn.create_function("keyword_text", 1, keyword_text, deterministic=True)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
            conn.execute(f"PRAGMA soft_heap_limit={SQLITE_HEAP_BYTES}")  # the whole process's, not this connection's
            conn.execute(f"PRAGMA mmap_size={MMAP_BYTES}")
            self._local.conn = conn
        return conn

    def autoincrement(self, table: str) -> bool:
        """Whether `table` was created with AUTOINCREMENT ids (never reused after a delete)."""
        sql = "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?"
        row = self.conn().execute(sql, (table,)).fetchone()
        return row is not None and "AUTOINCREMENT" in row[0].upper()

    @contextmanager
    def write(self) -> Iterator[sqlean.Connection]:
        """One write transaction; everything in it becomes visible to readers at once. A write
        opened inside another (same thread) joins it: both commit together or not at all."""
        conn = self.conn()
        if getattr(self._local, "writing", False):
            yield conn
            return
        with self._write_lock:
            self._local.writing = True
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
                self.commits += 1
            finally:
                self._local.writing = False

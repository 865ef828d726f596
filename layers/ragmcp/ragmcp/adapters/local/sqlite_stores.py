"""Document, job, source and embedding-cache stores in the embedded SQLite database."""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timedelta

import numpy as np
from pydantic import TypeAdapter

from ragmcp.adapters.local.database import Database
from ragmcp.adapters.local.ratelimit import process_identity
from ragmcp.domain.models import (
    Document,
    Job,
    JobStatus,
    Source,
    Turn,
    UploadSession,
    UserRecord,
    random_document_number,
    utcnow,
)
from ragmcp.security.audit import GENESIS
from ragmcp.security.models import ApiKey, AuditRecord

_TURNS = TypeAdapter(list[Turn])
SQLITE_MIN_INT, SQLITE_MAX_INT = -(2**63), 2**63 - 1


class SqliteDocumentStore:
    def __init__(self, db: Database):
        self.db = db

    def number_for(self, tenant: str, doc_id: str) -> int:
        row = self.db.conn().execute(
            "SELECT number FROM doc_numbers WHERE tenant = ? AND doc_id = ?", (tenant, doc_id)
        ).fetchone()
        if row:
            return row[0]
        with self.db.write() as conn:  # a random number: it says nothing of how many documents there are
            while True:
                conn.execute(
                    "INSERT OR IGNORE INTO doc_numbers(tenant, number, doc_id) VALUES (?, ?, ?)",
                    (tenant, random_document_number(), doc_id),
                )
                row = conn.execute(
                    "SELECT number FROM doc_numbers WHERE tenant = ? AND doc_id = ?", (tenant, doc_id)
                ).fetchone()
                if row:  # else the number drawn was taken: draw again
                    return row[0]

    def known(self, tenant: str, doc_id: str) -> bool:
        row = self.db.conn().execute(
            "SELECT 1 FROM doc_numbers WHERE tenant = ? AND doc_id = ?", (tenant, doc_id)
        ).fetchone()
        return row is not None

    def get_by_number(self, tenant: str, number: int) -> Document | None:
        if not SQLITE_MIN_INT <= number <= SQLITE_MAX_INT:
            return None
        row = self.db.conn().execute(
            "SELECT d.doc_json FROM doc_numbers n JOIN documents d ON d.tenant = n.tenant AND d.doc_id = n.doc_id"
            " WHERE n.tenant = ? AND n.number = ?",
            (tenant, number),
        ).fetchone()
        return Document.model_validate_json(row[0]) if row else None

    def put(self, doc: Document) -> None:
        with self.db.write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO documents(tenant, doc_id, source, path, doc_json) VALUES (?, ?, ?, ?, ?)",
                (doc.tenant, doc.doc_id, doc.source, doc.path, doc.model_dump_json()),
            )

    def get(self, tenant: str, doc_id: str) -> Document | None:
        row = self.db.conn().execute(
            "SELECT doc_json FROM documents WHERE tenant = ? AND doc_id = ?", (tenant, doc_id)
        ).fetchone()
        return Document.model_validate_json(row[0]) if row else None

    def delete(self, tenant: str, doc_id: str) -> None:
        with self.db.write() as conn:
            conn.execute("DELETE FROM documents WHERE tenant = ? AND doc_id = ?", (tenant, doc_id))

    def by_path(self, tenant: str, source: str, path: str) -> list[Document]:
        rows = self.db.conn().execute(
            "SELECT doc_json FROM documents WHERE tenant = ? AND source = ? AND path = ? ORDER BY doc_id",
            (tenant, source, path),
        ).fetchall()
        return [Document.model_validate_json(r[0]) for r in rows]

    def tenants(self) -> builtins.list[str]:  # `list` here is the method below
        """The tenants that hold documents."""
        return [r[0] for r in self.db.conn().execute("SELECT DISTINCT tenant FROM documents ORDER BY tenant")]

    def list(self, tenant: str, source: str | None = None) -> list[Document]:
        sql = "SELECT doc_json FROM documents WHERE tenant = ?"
        params: list[object] = [tenant]
        if source is not None:
            sql += " AND source = ?"
            params.append(source)
        rows = self.db.conn().execute(sql + " ORDER BY doc_id", params).fetchall()
        return [Document.model_validate_json(r[0]) for r in rows]

    def count(self, tenant: str, source: str | None = None) -> int:
        sql = "SELECT count(*) FROM documents WHERE tenant = ?"
        params: list[object] = [tenant]
        if source is not None:
            sql += " AND source = ?"
            params.append(source)
        return int(self.db.conn().execute(sql, params).fetchone()[0])


def process_owner() -> str:
    """This process as a job's owner: its pid and identity (start time and boot, see
    ratelimit.process_identity), so a pid taken by a later process names another owner."""
    pid = os.getpid()
    owner = _OWNERS.get(pid)
    if owner is None:
        owner = _OWNERS.setdefault(pid, f"{pid}:{process_identity(pid)}")
    return owner


_OWNERS: dict[int, str] = {}


class SqliteJobStore:
    """Jobs, each with its owner: the process that last wrote it (pid and identity, see
    `process_owner`), so the unfinished jobs of a process that died can be told from live ones."""

    def __init__(self, db: Database):
        self.db = db

    def put(self, job: Job) -> None:
        with self.db.write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO jobs(tenant, job_id, status, created_at, job_json, owner)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    job.tenant,
                    job.job_id,
                    job.status,
                    job.created_at.isoformat(),
                    job.model_dump_json(),
                    process_owner(),
                ),
            )

    def get(self, tenant: str, job_id: str) -> Job | None:
        row = self.db.conn().execute(
            "SELECT job_json FROM jobs WHERE tenant = ? AND job_id = ?", (tenant, job_id)
        ).fetchone()
        return Job.model_validate_json(row[0]) if row else None

    def list(self, tenant: str, status: JobStatus | None = None, limit: int = 100) -> list[Job]:
        sql = "SELECT job_json FROM jobs WHERE tenant = ?"
        params: list[object] = [tenant]
        if status is not None:
            sql += " AND status = ?"
            params.append(status)
        rows = self.db.conn().execute(sql + " ORDER BY created_at DESC LIMIT ?", [*params, limit]).fetchall()
        return [Job.model_validate_json(r[0]) for r in rows]

    def unfinished(self, dead_owner: int | None = None) -> builtins.list[Job]:  # `list` here is the method above
        """Every tenant's jobs still queued or running (crash recovery reads them at start); with
        `dead_owner`, only those of the process that had that pid, when no live process is it."""
        sql = "SELECT job_json, owner FROM jobs WHERE status IN ('queued', 'running')"
        params: tuple[object, ...] = ()
        if dead_owner is not None:
            sql += " AND owner LIKE ?"
            params = (f"{dead_owner}:%",)
        rows = self.db.conn().execute(sql + " ORDER BY created_at", params).fetchall()
        if dead_owner is not None:
            alive = f"{dead_owner}:{process_identity(dead_owner)}"
            rows = [r for r in rows if r[1] != alive]
        return [Job.model_validate_json(r[0]) for r in rows]


class SqliteSourceStore:
    def __init__(self, db: Database):
        self.db = db

    def put(self, source: Source) -> None:
        """Store the source; a new one gets the next number of its tenant, an old one keeps its own."""
        with self.db.write() as conn:
            row = conn.execute(
                "SELECT number FROM sources WHERE tenant = ? AND source_id = ?", (source.tenant, source.source_id)
            ).fetchone()
            if row is None:
                row = conn.execute(
                    "SELECT COALESCE(MAX(number), 0) + 1 FROM sources WHERE tenant = ?", (source.tenant,)
                ).fetchone()
            stored = source.model_copy(update={"number": row[0]})
            conn.execute(
                "INSERT OR REPLACE INTO sources(tenant, source_id, number, source_json) VALUES (?, ?, ?, ?)",
                (stored.tenant, stored.source_id, stored.number, stored.model_dump_json()),
            )

    def get(self, tenant: str, source_id: str) -> Source | None:
        row = self.db.conn().execute(
            "SELECT source_json FROM sources WHERE tenant = ? AND source_id = ?", (tenant, source_id)
        ).fetchone()
        return Source.model_validate_json(row[0]) if row else None

    def list(self, tenant: str) -> list[Source]:
        rows = self.db.conn().execute(
            "SELECT source_json FROM sources WHERE tenant = ? ORDER BY source_id", (tenant,)
        ).fetchall()
        return [Source.model_validate_json(r[0]) for r in rows]


class SqliteEmbeddingCache:
    def __init__(self, db: Database):
        self.db = db

    def get_many(self, model_sha256: str, text_sha256s: Sequence[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        conn = self.db.conn()
        for start in range(0, len(text_sha256s), 500):
            batch = list(text_sha256s[start : start + 500])
            rows = conn.execute(
                "SELECT text_sha256, vector FROM embedding_cache WHERE model_sha256 = ?"
                f" AND text_sha256 IN ({','.join('?' * len(batch))})",
                [model_sha256, *batch],
            ).fetchall()
            found.update((sha, np.frombuffer(blob, dtype=np.float32)) for sha, blob in rows)
        return found

    def put_many(self, model_sha256: str, items: Iterable[tuple[str, np.ndarray]]) -> None:
        with self.db.write() as conn:
            conn.executemany(
                "INSERT OR IGNORE INTO embedding_cache(model_sha256, text_sha256, vector) VALUES (?, ?, ?)",
                [(model_sha256, sha, np.asarray(v, dtype=np.float32).tobytes()) for sha, v in items],
            )


class SqliteUserDirectory:
    def __init__(self, db: Database):
        self.db = db

    def get(self, tenant: str, user_id: str) -> UserRecord | None:
        row = self.db.conn().execute(
            "SELECT user_json FROM users WHERE tenant = ? AND user_id = ?", (tenant, user_id)
        ).fetchone()
        return UserRecord.model_validate_json(row[0]) if row else None

    def put(self, user: UserRecord) -> None:
        with self.db.write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO users(tenant, user_id, user_json) VALUES (?, ?, ?)",
                (user.tenant, user.user_id, user.model_dump_json()),
            )

    def list(self, tenant: str) -> list[UserRecord]:
        rows = self.db.conn().execute("SELECT user_json FROM users WHERE tenant = ? ORDER BY user_id", (tenant,))
        return [UserRecord.model_validate_json(r[0]) for r in rows]


class SqliteUploadStore:
    """Upload sessions; expiry is checked on every read, whatever the sweeper has done."""

    def __init__(self, db: Database):
        self.db = db

    def put(self, session: UploadSession) -> None:
        with self.db.write() as conn:
            self._put(conn, session)

    @staticmethod
    def _put(conn, session: UploadSession) -> None:
        conn.execute(
            "INSERT OR REPLACE INTO upload_sessions(tenant, upload_id, expires_at, session_json) VALUES (?, ?, ?, ?)",
            (session.tenant, session.upload_id, session.expires_at.isoformat(), session.model_dump_json()),
        )

    @staticmethod
    def _get(conn, tenant: str, upload_id: str) -> UploadSession | None:
        row = conn.execute(
            "SELECT session_json FROM upload_sessions WHERE tenant = ? AND upload_id = ?", (tenant, upload_id)
        ).fetchone()
        session = UploadSession.model_validate_json(row[0]) if row else None
        return session if session is not None and session.expires_at > utcnow() else None

    def get(self, tenant: str, upload_id: str) -> UploadSession | None:
        return self._get(self.db.conn(), tenant, upload_id)

    def add_part(self, tenant: str, upload_id: str, index: int, size: int) -> UploadSession | None:
        with self.db.write() as conn:
            session = self._get(conn, tenant, upload_id)
            if session is None:
                return None
            session.parts[index] = size
            self._put(conn, session)
            return session

    def delete(self, tenant: str, upload_id: str) -> None:
        with self.db.write() as conn:
            conn.execute("DELETE FROM upload_sessions WHERE tenant = ? AND upload_id = ?", (tenant, upload_id))

    def expired(self, now: datetime) -> list[UploadSession]:
        rows = self.db.conn().execute(
            "SELECT session_json FROM upload_sessions WHERE expires_at <= ?", (now.isoformat(),)
        ).fetchall()
        return [UploadSession.model_validate_json(r[0]) for r in rows]


class SqliteConversationStore:
    def __init__(self, db: Database):
        self.db = db

    def get(self, tenant: str, user: str, conversation_id: str) -> list[Turn]:
        row = self.db.conn().execute(
            "SELECT turns_json FROM conversations"
            " WHERE tenant = ? AND user_id = ? AND conversation_id = ? AND expires_at > ?",
            (tenant, user, conversation_id, utcnow().isoformat()),
        ).fetchone()
        return _TURNS.validate_json(row[0]) if row else []

    def append(self, tenant: str, user: str, conversation_id: str, turn: Turn, ttl_seconds: int) -> None:
        turns = [*self.get(tenant, user, conversation_id), turn]
        expires = (utcnow() + timedelta(seconds=ttl_seconds)).isoformat()
        with self.db.write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO conversations(tenant, user_id, conversation_id, expires_at, turns_json)"
                " VALUES (?, ?, ?, ?, ?)",
                (tenant, user, conversation_id, expires, _TURNS.dump_json(turns).decode()),
            )


class SqliteKeyStore:
    def __init__(self, db: Database):
        self.db = db

    def put(self, key: ApiKey) -> None:
        with self.db.write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO api_keys(key_id, key_hash, key_json) VALUES (?, ?, ?)",
                (key.key_id, key.key_hash, key.model_dump_json()),
            )

    def get(self, key_id: str) -> ApiKey | None:
        row = self.db.conn().execute("SELECT key_json FROM api_keys WHERE key_id = ?", (key_id,)).fetchone()
        return ApiKey.model_validate_json(row[0]) if row else None

    def by_hash(self, key_hash: str) -> ApiKey | None:
        row = self.db.conn().execute("SELECT key_json FROM api_keys WHERE key_hash = ?", (key_hash,)).fetchone()
        return ApiKey.model_validate_json(row[0]) if row else None

    def list(self) -> list[ApiKey]:
        rows = self.db.conn().execute("SELECT key_json FROM api_keys ORDER BY key_id").fetchall()
        return [ApiKey.model_validate_json(r[0]) for r in rows]


class SqliteAuditStore:
    """One chain per tenant: records keyed by (tenant, seq) and a head row per tenant, both written
    in the one transaction of an append (SQLite has one writer: appends of different tenants queue
    for it for the length of that transaction, but no tenant's chain depends on another's)."""

    def __init__(self, db: Database):
        self.db = db

    def append(self, tenant: str, build: Callable[[int, str], AuditRecord]) -> AuditRecord:
        with self.db.write() as conn:
            count, last_hash = self._head(conn, tenant)
            record = build(count + 1, last_hash)
            conn.execute(
                "INSERT INTO audit_records(tenant, seq, record_json) VALUES (?, ?, ?)",
                (tenant, record.seq, record.model_dump_json()),
            )
            conn.execute(
                "INSERT OR REPLACE INTO audit_heads(tenant, seq, hash) VALUES (?, ?, ?)",
                (tenant, record.seq, record.hash),
            )
            return record

    def tenants(self) -> list[str]:
        sql = "SELECT tenant FROM audit_heads UNION SELECT DISTINCT tenant FROM audit_records ORDER BY 1"
        return [row[0] for row in self.db.conn().execute(sql)]

    def records(self, tenant: str) -> Iterator[AuditRecord]:
        sql = "SELECT record_json FROM audit_records WHERE tenant = ? ORDER BY seq"
        for (raw,) in self.db.conn().execute(sql, (tenant,)):
            yield AuditRecord.model_validate_json(raw)

    def head(self, tenant: str) -> tuple[int, str]:
        return self._head(self.db.conn(), tenant)

    @staticmethod
    def _head(conn, tenant: str) -> tuple[int, str]:
        row = conn.execute("SELECT seq, hash FROM audit_heads WHERE tenant = ?", (tenant,)).fetchone()
        return (int(row[0]), row[1]) if row else (0, GENESIS)

"""Document, job, source and embedding-cache stores in the embedded SQLite database."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from ragmcp.adapters.local.database import Database
from ragmcp.domain.models import Document, Job, JobStatus, Source


class SqliteDocumentStore:
    def __init__(self, db: Database):
        self.db = db

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

    def list(self, tenant: str, source: str | None = None) -> list[Document]:
        sql = "SELECT doc_json FROM documents WHERE tenant = ?"
        params: list[object] = [tenant]
        if source is not None:
            sql += " AND source = ?"
            params.append(source)
        rows = self.db.conn().execute(sql + " ORDER BY doc_id", params).fetchall()
        return [Document.model_validate_json(r[0]) for r in rows]


class SqliteJobStore:
    def __init__(self, db: Database):
        self.db = db

    def put(self, job: Job) -> None:
        with self.db.write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO jobs(tenant, job_id, status, created_at, job_json) VALUES (?, ?, ?, ?, ?)",
                (job.tenant, job.job_id, job.status, job.created_at.isoformat(), job.model_dump_json()),
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


class SqliteSourceStore:
    def __init__(self, db: Database):
        self.db = db

    def put(self, source: Source) -> None:
        with self.db.write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO sources(tenant, source_id, source_json) VALUES (?, ?, ?)",
                (source.tenant, source.source_id, source.model_dump_json()),
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

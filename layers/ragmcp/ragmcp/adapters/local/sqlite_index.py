"""SearchIndex on SQLite: FTS5 bm25 for words, sqlite-vec distances for vectors.

Both searches run one SQL statement that applies tenant, source, tags, doc ids, dates,
tier and ACL inside the query, so the top-k is taken over what the caller may see.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from ragmcp.adapters.local.database import Database
from ragmcp.domain.errors import IndexMismatch
from ragmcp.domain.models import Chunk, Document, IndexHit, Principal, SearchFilter

_WORD = re.compile(r"\w+", re.UNICODE)
_MAX_QUERY_TERMS = 64


def fts_query(text: str) -> str | None:
    """User text as an FTS5 expression: each word a quoted term, any of them may match.

    Quoting every term means no user character is ever read as FTS5 syntax.
    """
    terms = list(dict.fromkeys(w.lower() for w in _WORD.findall(text)))[:_MAX_QUERY_TERMS]
    if not terms:
        return None
    return " OR ".join(f'"{t}"' for t in terms)


def filter_sql(principal: Principal, flt: SearchFilter) -> tuple[str, list[object]]:
    """WHERE conditions on `d` (idx_docs) and `c` (chunks) for this caller and filter, all bound."""
    clauses = ["d.tenant = ?", "d.tier <= ?"]
    params: list[object] = [principal.tenant, principal.max_tier.rank]

    def any_of(column: str, values: Sequence[str]) -> None:
        clauses.append(f"{column} IN ({','.join('?' * len(values))})")
        params.extend(values)

    def has_term(field: str, values: Sequence[str]) -> str:
        params.append(field)
        params.extend(values)
        return (
            "EXISTS (SELECT 1 FROM idx_doc_terms t WHERE t.doc = d.id AND t.field = ? "
            f"AND t.value IN ({','.join('?' * len(values))}))"
        )

    if flt.sources is not None:
        any_of("d.source", flt.sources or ("",))
    if flt.doc_ids is not None:
        any_of("d.doc_id", flt.doc_ids or ("",))
    if flt.chunk_ids is not None:
        any_of("c.chunk_id", flt.chunk_ids or ("",))
    if flt.kinds is not None:
        any_of("d.kind", flt.kinds or ("",))
    if flt.created_after is not None:
        clauses.append("d.created_at >= ?")
        params.append(flt.created_after.isoformat())
    if flt.created_before is not None:
        clauses.append("d.created_at < ?")
        params.append(flt.created_before.isoformat())
    if flt.tags_any:
        clauses.append(has_term("tag", flt.tags_any))
    for tag in flt.tags_all:
        clauses.append(has_term("tag", (tag,)))
    for key, values in flt.metadata.items():
        clauses.append(has_term(f"meta:{key}", values or ("",)))
    acl = ["d.acl_open = 1"]
    if principal.groups:
        acl.append(has_term("group", principal.groups))
    if principal.user_id:
        acl.append(has_term("user", (principal.user_id,)))
    clauses.append(f"({' OR '.join(acl)})")
    return " AND ".join(clauses), params


def _terms(doc: Document) -> list[tuple[str, str]]:
    terms = [("tag", t) for t in doc.tags]
    terms += [("group", g) for g in doc.acl.groups]
    terms += [("user", u) for u in doc.acl.users]
    terms += [(f"meta:{k}", str(v)) for k, v in doc.metadata.items() if isinstance(v, str | int | float | bool)]
    return list(dict.fromkeys(terms))


class SqliteSearchIndex:
    def __init__(self, db: Database):
        self.db = db

    def ensure_model(self, model_id: str, dimension: int) -> None:
        wanted = {"embedding_model": model_id, "embedding_dimension": str(dimension)}
        with self.db.write() as conn:
            found = dict(conn.execute("SELECT key, value FROM meta WHERE key IN (?, ?)", tuple(wanted)).fetchall())
            for key, value in wanted.items():
                if key not in found:
                    conn.execute("INSERT INTO meta(key, value) VALUES (?, ?)", (key, value))
                elif found[key] != value:
                    raise IndexMismatch(
                        f"index at {self.db.path} was built with {key.replace('_', ' ')} {found[key]!r}, "
                        f"but this server uses {value!r}; use another --data-dir or re-ingest into a fresh one"
                    )

    def replace_document(self, doc: Document, chunks: Sequence[Chunk], vectors: np.ndarray) -> None:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        with self.db.write() as conn:
            conn.execute("DELETE FROM idx_docs WHERE tenant = ? AND doc_id = ?", (doc.tenant, doc.doc_id))
            row = conn.execute(
                "INSERT INTO idx_docs(tenant, doc_id, source, kind, tier, acl_open, created_at, doc_json)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (
                    doc.tenant,
                    doc.doc_id,
                    doc.source,
                    doc.kind,
                    doc.tier.rank,
                    int(doc.acl.is_open),
                    doc.created_at.isoformat(),
                    doc.model_dump_json(),
                ),
            ).fetchone()
            doc_row = row[0]
            conn.executemany(
                "INSERT INTO idx_doc_terms(doc, field, value) VALUES (?, ?, ?)",
                [(doc_row, f, v) for f, v in _terms(doc)],
            )
            conn.executemany(
                "INSERT INTO chunks(doc, tenant, chunk_id, ordinal, text, headline, summary, page_start, page_end,"
                " char_start, char_end, locator, flags, embedding) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        doc_row,
                        doc.tenant,
                        c.chunk_id,
                        c.ordinal,
                        c.text,
                        c.headline,
                        c.summary,
                        c.page_start,
                        c.page_end,
                        c.char_start,
                        c.char_end,
                        c.locator,
                        ",".join(c.flags),
                        vectors[i].tobytes(),
                    )
                    for i, c in enumerate(chunks)
                ],
            )

    def delete_document(self, tenant: str, doc_id: str) -> bool:
        with self.db.write() as conn:
            cur = conn.execute("DELETE FROM idx_docs WHERE tenant = ? AND doc_id = ?", (tenant, doc_id))
            return cur.rowcount > 0

    def search_fts(self, principal: Principal, query: str, flt: SearchFilter, k: int) -> list[IndexHit]:
        expression = fts_query(query)
        if expression is None:
            return []
        where, params = filter_sql(principal, flt)
        rows = self.db.conn().execute(
            "SELECT c.chunk_id, bm25(chunks_fts, 1.0, 0.5) AS s FROM chunks_fts"
            " JOIN chunks c ON c.id = chunks_fts.rowid JOIN idx_docs d ON d.id = c.doc"
            f" WHERE chunks_fts MATCH ? AND {where} ORDER BY s LIMIT ?",
            [expression, *params, k],
        ).fetchall()
        return [IndexHit(chunk_id=cid, raw_score=-score) for cid, score in rows]

    def search_vector(self, principal: Principal, vector: np.ndarray, flt: SearchFilter, k: int) -> list[IndexHit]:
        where, params = filter_sql(principal, flt)
        blob = np.ascontiguousarray(vector, dtype=np.float32).tobytes()
        rows = self.db.conn().execute(
            "SELECT c.chunk_id, vec_distance_cosine(c.embedding, ?) AS dist FROM chunks c"
            f" JOIN idx_docs d ON d.id = c.doc WHERE {where} ORDER BY dist LIMIT ?",
            [blob, *params, k],
        ).fetchall()
        return [IndexHit(chunk_id=cid, raw_score=1.0 - dist) for cid, dist in rows]

    def get_chunks(self, tenant: str, chunk_ids: Sequence[str]) -> dict[str, tuple[Chunk, Document]]:
        if not chunk_ids:
            return {}
        rows = self.db.conn().execute(
            "SELECT c.chunk_id, d.doc_id, c.ordinal, c.text, c.headline, c.summary, c.page_start, c.page_end,"
            " c.char_start, c.char_end, c.locator, c.flags, d.doc_json FROM chunks c JOIN idx_docs d ON d.id = c.doc"
            f" WHERE c.tenant = ? AND c.chunk_id IN ({','.join('?' * len(chunk_ids))})",
            [tenant, *chunk_ids],
        ).fetchall()
        docs: dict[str, Document] = {}
        found: dict[str, tuple[Chunk, Document]] = {}
        for cid, doc_id, ordinal, text, headline, summary, p0, p1, c0, c1, locator, flags, doc_json in rows:
            doc = docs.get(doc_id) or docs.setdefault(doc_id, Document.model_validate_json(doc_json))
            chunk = Chunk(
                chunk_id=cid,
                doc_id=doc_id,
                ordinal=ordinal,
                text=text,
                headline=headline,
                summary=summary,
                page_start=p0,
                page_end=p1,
                char_start=c0,
                char_end=c1,
                locator=locator,
                flags=tuple(f for f in flags.split(",") if f),
            )
            found[cid] = (chunk, doc)
        return found

    def count_chunks(self, tenant: str) -> int:
        return self.db.conn().execute("SELECT count(*) FROM chunks WHERE tenant = ?", (tenant,)).fetchone()[0]

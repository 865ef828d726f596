"""SearchIndex on SQLite: bm25 over the FTS5 index for words (with the tenant's own statistics,
bm25.py), sqlite-vec distances for vectors.

Both searches apply tenant, source, tags, doc ids, dates, tier and ACL inside the search (SQL
conditions, or the bitmap of the rows they let through), so the top-k is taken over what the
caller may see.
"""

from __future__ import annotations

import logging
import re
import secrets
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain, compress
from typing import TYPE_CHECKING

import numpy as np
import sqlean
from pydantic import BaseModel

from ragmcp.adapters.local.bm25 import Bm25, RowLengths, TenantRows, Tokens, tenant_rows, term_scores
from ragmcp.adapters.local.database import (
    FTS_REBUILD,
    FTS_TRIGGER_STATEMENTS,
    STEMMED,
    Database,
    fts_table_sql,
    stored_vectors,
)
from ragmcp.adapters.local.postings import PAIR_BYTES, Generation, Key, SharedColumns, Summed, TermPostings
from ragmcp.domain.errors import DeadlineExceeded, IndexMismatch, IndexOutdated, check_deadline
from ragmcp.domain.models import Chunk, Document, IndexHit, Principal, SearchFilter
from ragmcp.ports import ScoresAsked

if TYPE_CHECKING:
    from ragmcp.adapters.local.hnsw import HnswVectors

log = logging.getLogger(__name__)
_WORD = re.compile(r"\w+", re.UNICODE)
_MAX_QUERY_TERMS = 64
_BITMAP_CACHE = 32
_GENERATION_TTL_S = 0.05
_TENANT_STATS = 64
_TOKENIZE = re.compile(r"tokenize\s*=\s*'([^']*)'", re.IGNORECASE)
PROGRESS_STEPS = 10_000
"""SQLite virtual machine instructions between two looks at a search's deadline (well under a millisecond)."""

SCHEMA_VERSION = 4
"""What an index's contents depend on besides the embedding model, recorded as meta.schema_version:
1 (nothing recorded): indexes written before the version was; their keyword tokenizer is unchecked.
2: the FTS5 keyword index is built with the tokenizer the server asks for (Porter stemming unless
RAGMCP_FTS_STEMMING=false), checked at every start.
3: the keyword index reads each chunk's text with its CJK character pairs (`ragmcp.text.keyword_text`).
4: and with each name joined by underscores in it whole ("CUSTOMER_TAX_ID" also as "customertaxid")."""


def query_words(text: str, distinct: bool = True) -> list[str]:
    """The (distinct) words of user text, lower-cased, at most 64 (never read as FTS5 syntax: each
    is bound as a value and cut into the index's terms by its tokenizer)."""
    words = [w.lower() for w in _WORD.findall(text)]
    return (list(dict.fromkeys(words)) if distinct else words)[:_MAX_QUERY_TERMS]


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
        clauses.append("c.tenant = ?")  # the same as d.tenant; lets SQLite find the chunks by UNIQUE(tenant, chunk_id)
        params.append(principal.tenant)
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


def built_with(db: Database) -> str | None:
    """The embedding model id of an index's vectors (the one a reindex left midway was embedding
    them with), or None while it has none."""
    row = (
        db.conn()
        .execute(
            "SELECT value FROM meta WHERE key IN ('reembed_model', 'embedding_model')"
            " ORDER BY key = 'reembed_model' DESC LIMIT 1"
        )
        .fetchone()
    )
    return None if row is None else str(row[0])


_STAMP = "SELECT value FROM meta WHERE key = 'index_stamp'"


def _stamp() -> str:
    """A value no other write draws: a restored backup repeats generation numbers, never stamps."""
    return secrets.token_hex(8)


def shared_columns(db: Database, tokenizer: str, bm25: Bm25 | None = None) -> SharedColumns:
    """Term columns shared by every process on this database, in the folder `postings` beside it;
    named by the database file (a new file never reads another's columns) and the scoring. An index
    no write has stamped yet (made before stamps) is stamped now, so its columns are shared at once."""
    if db.conn().execute(_STAMP).fetchone() is None:
        with db.write() as conn:
            conn.execute("INSERT INTO meta(key, value) VALUES ('index_stamp', ?) ON CONFLICT DO NOTHING", (_stamp(),))
    stat = db.path.stat()
    return SharedColumns(db.path.parent / "postings", f"{stat.st_dev}:{stat.st_ino}:{tokenizer}:{bm25 or Bm25()}")


def _bump_generation(conn: sqlean.Connection) -> None:
    """A write's new index generation, in its transaction: the count moves on and a new stamp is drawn."""
    conn.execute(
        "INSERT INTO meta(key, value) VALUES ('index_generation', '1')"
        " ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1"
    )
    conn.execute(
        "INSERT INTO meta(key, value) VALUES ('index_stamp', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (_stamp(),),
    )


class WarmReport(BaseModel):
    """What `SqliteSearchIndex.warm` read into memory, and how long it took."""

    seconds: float
    chunk_names: int
    terms: int
    """Common words whose postings were loaded."""
    postings_bytes: int
    """Memory the term postings hold (all of them, not only the words warmed)."""


@dataclass(frozen=True, slots=True)
class Allowed:
    """The rows a filter lets through: one bool per chunk id (the term postings read it), the same
    as a bitmap (one bit per chunk id, little-endian within bytes: the graph reads it), and how many."""

    rows: np.ndarray
    bitmap: np.ndarray
    count: int


class ChunkNames:
    """Chunk row id -> chunk id. A row's chunk id never changes and AUTOINCREMENT never reuses a row
    id, so what is held stays true across writes: it only grows, reading the rows after the last one
    it holds when asked for a newer one. Held as one byte string of the names (UTF-8) and where each
    row's name starts in it: about 30 bytes a row at 1M chunks, where an array of str objects took
    about 85 in every process."""

    def __init__(self, db: Database):
        self.db = db
        self._held: tuple[np.ndarray, bytes] = (np.zeros(1, dtype=np.int64), b"")
        """Row r's name is text[starts[r]:starts[r + 1]] (empty: a row deleted before it was read)."""
        self._lock = threading.Lock()

    def of(self, ids: np.ndarray) -> list[str | None]:
        """The chunk ids of these row ids (None for a row deleted before it was read)."""
        starts, text = self._held
        if ids.size and int(ids.max()) >= starts.size - 1:
            starts, text = self._grow()
        return [
            text[begin:end].decode() if end > begin else None
            for begin, end in zip(starts[ids].tolist(), starts[ids + 1].tolist(), strict=True)
        ]

    def _grow(self) -> tuple[np.ndarray, bytes]:
        with self._lock:
            starts, text = self._held
            held = starts.size - 1
            cursor = self.db.conn().execute("SELECT id, chunk_id FROM chunks WHERE id >= ? ORDER BY id", (held,))
            ids, lengths, parts = [], [], []
            while rows := cursor.fetchmany(_NAMES_READ):  # a block at a time: no million str objects at once
                names = [name.encode() for _, name in rows]
                ids.append(np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows)))
                lengths.append(np.fromiter(map(len, names), dtype=np.int64, count=len(names)))
                parts.append(b"".join(names))
            if ids:
                read = np.concatenate(ids)
                sizes = np.zeros(int(read[-1]) + 1 - held, dtype=np.int64)
                sizes[read - held] = np.concatenate(lengths)
                starts = np.concatenate([starts, starts[-1] + np.cumsum(sizes)])
                text = b"".join([text, *parts])
                self._held = (starts, text)
            return starts, text


_NAMES_READ = 65_536


_SUMMED_BYTES = 32 << 20
"""The keyword searches' sums kept for scoring their requests' other candidates (`SqliteSearchIndex._summed`):
a table of 8 bytes a row each, 40 searches' at 100k chunks, four at 1M; the oldest dropped first."""
_KNOWN_ROWS = 4096
"""The chunk id -> row id pairs of the hits searches returned are kept in two dicts of at most this many
(`SqliteSearchIndex._known`): a request's searches return at most some 500 (five phrases, 50 a side), so
the two hold those of every request in flight at once (about 1 MB)."""


class SqliteSearchIndex:
    """The embedded index. With a `graph`, vector searches that may see at least `exact_below`
    rows walk the HNSW graph; smaller ones (a narrow filter, a small tenant) scan exactly."""

    def __init__(
        self,
        db: Database,
        graph: HnswVectors | None = None,
        postings: TermPostings | None = None,
        exact_below: int = 5000,
        tokenizer: str = STEMMED,
        bm25: Bm25 | None = None,
    ):
        self.db = db
        self.tokenizer = tokenizer
        self.bm25 = bm25 or Bm25()
        self._tokens = Tokens(tokenizer)
        self._lengths = RowLengths()
        self._tenants: OrderedDict[str, tuple[Generation, TenantRows]] = OrderedDict()
        self.graph = graph
        self.postings = postings
        self.exact_below = exact_below
        self._bitmaps: OrderedDict[tuple[str, tuple[object, ...]], tuple[Generation, Allowed]] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._fill_lock = threading.Lock()
        self._names = ChunkNames(db)
        self._summed: OrderedDict[tuple[object, ...], Summed] = OrderedDict()
        """What recent keyword searches summed, by (generation, tenant, terms, filter): `score_chunks` reads a
        chunk's bm25 there when the search for its ask's words was made here and is still kept (else it
        looks the rows up in the term columns: the same totals, more work). At most _SUMMED_BYTES."""
        self._known: tuple[dict[str, int], dict[str, int]] = ({}, {})
        """Chunk id -> row id of the hits searches returned (`_named`), the newer dict first: scoring a
        fusion's candidates, which this request's own searches returned, finds their rows without SQL.
        When the newer is full it becomes the older (the older dropped), so what a request in flight
        remembered is still there."""
        self._seen_generation = (Generation(0, None), -1, 0.0)
        self._newest = (Generation(-1, None), 0)
        self.clock: Callable[[], float] = time.monotonic
        """What a search's deadline is read against (a test moves it by the work done)."""
        self.progress_steps = PROGRESS_STEPS

    def ensure_model(self, model_id: str, dimension: int) -> None:
        wanted = {"embedding_model": model_id, "embedding_dimension": str(dimension)}
        with self.db.write() as conn:
            found = dict(conn.execute("SELECT key, value FROM meta WHERE key IN (?, ?)", tuple(wanted)).fetchall())
            for key, value in wanted.items():
                if key not in found:
                    conn.execute("INSERT INTO meta(key, value) VALUES (?, ?)", (key, value))
                elif found[key] != value:
                    settings = (
                        " (or start with the settings it was built with: RAGMCP_DOCUMENT_INT8 and"
                        " RAGMCP_EMBED_MAX_TOKENS choose the model id)"
                        if key == "embedding_model"
                        else ""
                    )
                    raise IndexMismatch(
                        f"index at {self.db.path} was built with {key.replace('_', ' ')} {found[key]!r}, "
                        f"but this server uses {value!r}; run `ragmcp reindex` with the same --data-dir and"
                        " settings to embed its stored chunks again with this model (every document is kept)" + settings
                    )

    def reembed(
        self,
        model_id: str,
        dimension: int,
        embed: Callable[[list[str]], np.ndarray],
        forget_graph: Callable[[], None],
        batch: int = 64,
    ) -> int:
        """Embed every stored chunk's text again with `embed` (the model `model_id`) when the index
        was built with another model; how many chunks it embedded (0 when the model is this one).

        The vectors are written in batches, each in one transaction with the last chunk id done
        (meta.reembed_upto, for meta.reembed_model): the model id recorded changes only with the
        last batch, so an index left midway is still refused at start and the next call resumes
        where it stopped. `forget_graph` drops the vector graph (built from the old vectors) before
        the first vector is replaced."""
        meta = dict(self.db.conn().execute("SELECT key, value FROM meta").fetchall())
        built = (meta.get("embedding_model", model_id), meta.get("embedding_dimension", str(dimension)))
        if built == (model_id, str(dimension)) and "reembed_model" not in meta:
            return 0
        upto = int(meta["reembed_upto"]) if meta.get("reembed_model") == model_id else 0
        total = self.db.conn().execute("SELECT count(*) FROM chunks WHERE id > ?", (upto,)).fetchone()[0]
        log.info("re-embedding %d chunks for model %s (was %s)", total, model_id, meta.get("embedding_model"))
        forget_graph()
        done = 0
        while rows := (
            self.db.conn()
            .execute("SELECT id, text FROM chunks WHERE id > ? ORDER BY id LIMIT ?", (upto, batch))
            .fetchall()
        ):
            vectors = np.ascontiguousarray(embed([text for _, text in rows]), dtype=np.float32)
            upto = rows[-1][0]
            with self.db.write() as conn:
                _bump_generation(conn)
                conn.executemany(
                    "UPDATE chunks SET embedding = ? WHERE id = ?",
                    [(vectors[n].tobytes(), row[0]) for n, row in enumerate(rows)],
                )
                conn.executemany(
                    "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    [("reembed_model", model_id), ("reembed_upto", str(upto))],
                )
            done += len(rows)
            if done % 1024 < len(rows) or done == total:
                log.info("re-embedded %d/%d chunks", done, total)
        with self.db.write() as conn:
            conn.executemany(
                "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                [("embedding_model", model_id), ("embedding_dimension", str(dimension))],
            )
            conn.execute("DELETE FROM meta WHERE key IN ('reembed_model', 'reembed_upto')")
        return done

    def ensure_schema(self, rebuild: bool = False) -> bool:
        """Check the schema version and keyword tokenizer; True when the keyword index was rebuilt now.

        An index without chunks is brought up to date at once (nothing to lose). One with chunks
        written under another version or tokenizer raises IndexOutdated unless `rebuild` is set
        (`ragmcp reindex`): then the FTS5 table is dropped and rebuilt from the chunks table with
        this server's tokenizer, in one transaction, keeping every document, chunk and vector.
        """
        with self.db.write() as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            version = 1 if row is None else int(row[0])
            tokenizer = self._tokenizer(conn)
            if version == SCHEMA_VERSION and tokenizer == self.tokenizer:
                return False
            if version > SCHEMA_VERSION:
                raise IndexOutdated(
                    f"index at {self.db.path} has schema version {version}, written by a newer ragmcp than this one"
                    f" (schema version {SCHEMA_VERSION}); upgrade ragmcp or use another --data-dir"
                )
            empty = conn.execute("SELECT NOT EXISTS (SELECT 1 FROM chunks)").fetchone()[0]
            if not (rebuild or empty):
                raise IndexOutdated(
                    f"index at {self.db.path} has schema version {version} with keyword tokenizer {tokenizer!r};"
                    f" this server needs schema version {SCHEMA_VERSION} with {self.tokenizer!r}: run"
                    " `ragmcp reindex` (with the same --data-dir) to rebuild it; every document is kept"
                )
            _bump_generation(conn)
            conn.execute("DROP TABLE IF EXISTS chunks_fts")
            conn.execute(fts_table_sql(self.tokenizer))
            conn.execute("DROP TRIGGER IF EXISTS chunks_ai")
            conn.execute("DROP TRIGGER IF EXISTS chunks_ad")
            for statement in FTS_TRIGGER_STATEMENTS:
                conn.execute(statement)
            conn.execute(FTS_REBUILD)
            conn.execute(
                "INSERT INTO meta(key, value) VALUES ('schema_version', ?)"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (str(SCHEMA_VERSION),),
            )
        self._lengths.reset()
        return True

    @staticmethod
    def _tokenizer(conn: sqlean.Connection) -> str | None:
        """The tokenizer the FTS5 table was created with, read from its CREATE statement."""
        row = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'chunks_fts'").fetchone()
        found = _TOKENIZE.search(row[0]) if row else None
        return found.group(1) if found else None

    def replace_document(self, doc: Document, chunks: Sequence[Chunk], vectors: np.ndarray) -> None:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        with self.db.write() as conn:
            _bump_generation(conn)
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
        if self.graph is not None:
            self.graph.wake()

    def delete_document(self, tenant: str, doc_id: str) -> bool:
        with self.db.write() as conn:
            _bump_generation(conn)
            cur = conn.execute("DELETE FROM idx_docs WHERE tenant = ? AND doc_id = ?", (tenant, doc_id))
        if self.graph is not None:
            self.graph.wake()
        return cur.rowcount > 0

    def search_fts(
        self, principal: Principal, query: str, flt: SearchFilter, k: int, *, deadline: float | None = None
    ) -> list[IndexHit]:
        """bm25 with the statistics of the caller's tenant, over the chunks the filter lets through;
        the (tenant, term) columns are kept in the term postings when they are on."""
        # The query's words are cut into terms before the deadline is armed: that writes (and empties) a
        # table of the connection's temp schema, which an interrupt would leave half-done.
        terms = self._tokens.of(self.db.conn(), query_words(query, self.bm25.distinct))
        if not terms:
            return []
        with self._until(deadline):
            where, params = filter_sql(principal, flt)
            allowed = self._allowed(where, params)
            if not allowed.count:
                return []
            postings = self.postings or TermPostings(max_entries=0)
            keys = [(principal.tenant, term) for term in terms]

            def scores(key: Key) -> tuple[np.ndarray, np.ndarray]:
                check_deadline(deadline, self.clock)  # between the terms' columns, each read in its statement
                return self._term_scores(key)

            generation = self._generation()
            best, totals, summed = postings.top_summed(generation, keys, scores, allowed.rows, k)
            self._keep_summed((generation, principal.tenant, tuple(terms), where, tuple(params)), summed)
            check_deadline(deadline, self.clock)
            return self._named(best, totals)

    def _keep_summed(self, key: tuple[object, ...], summed: Summed) -> None:
        with self._cache_lock:
            self._summed.pop(key, None)
            self._summed[key] = summed
            held = sum(kept.sums.nbytes for kept in self._summed.values())
            while held > _SUMMED_BYTES and len(self._summed) > 1:
                _, dropped = self._summed.popitem(last=False)
                held -= dropped.sums.nbytes

    @contextmanager
    def _until(self, deadline: float | None) -> Iterator[None]:
        """Stop at `deadline` (None: never): a statement running then on this thread's connection is
        interrupted (its progress handler), and DeadlineExceeded raised; nothing it read is kept."""
        if deadline is None:
            yield
            return
        clock = self.clock
        check_deadline(deadline, clock)
        conn = self.db.conn()  # this thread's own connection: no other thread's statement is touched
        conn.set_progress_handler(lambda: clock() >= deadline, self.progress_steps)
        try:
            yield
        except sqlean.OperationalError as exc:
            if "interrupted" not in str(exc):
                raise
            raise DeadlineExceeded("the search reached its deadline") from None
        finally:
            conn.set_progress_handler(None, 0)

    def warm(self, stop: threading.Event, sample: int = 4000, share: float = 0.0025) -> WarmReport:
        """Read now what the first searches would read then: every chunk's name, and the postings
        of each (tenant, term) found in at least `share` of a sample of the tenant's chunks (the
        common words, whose postings take longest to read: they are in most chunks)."""
        started = time.monotonic()
        newest = self._newest_row()
        if newest:
            self._names.of(np.asarray([newest]))
        terms = 0
        if self.postings is not None and newest:
            conn = self.db.conn()
            seen: Counter[Key] = Counter()
            chunked: Counter[str] = Counter()
            picked = list(range(1, newest + 1, max(1, newest // sample)))
            for start in range(0, len(picked), 500):
                batch = picked[start : start + 500]
                marks = ",".join("?" * len(batch))
                for tenant, text in conn.execute(f"SELECT tenant, text FROM chunks WHERE id IN ({marks})", batch):
                    words = list({w.lower() for w in _WORD.findall(text)})
                    seen.update({(tenant, term) for term in self._tokens.of(conn, words)})
                    chunked[tenant] += 1
            common = [key for key, n in seen.most_common() if n >= share * chunked[key[0]]]
            terms = self.postings.preload(self._generation(), common, self._term_scores, stop)
        return WarmReport(
            seconds=round(time.monotonic() - started, 2),
            chunk_names=newest,
            terms=terms,
            postings_bytes=0 if self.postings is None else self.postings.entries * PAIR_BYTES,
        )

    def _term_scores(self, key: Key) -> tuple[np.ndarray, np.ndarray]:
        """Every chunk of the tenant that has the term, and the term's bm25 in it (positive: higher
        is better), with the tenant's own statistics."""
        tenant, term = key
        conn = self.db.conn()
        return term_scores(conn, self._tokens, self._lengths, self._tenant_rows(tenant), term, self.bm25)

    def _tenant_rows(self, tenant: str) -> TenantRows:
        """The tenant's rows, count and mean length at this index generation."""
        generation = self._generation()
        with self._cache_lock:
            cached = self._tenants.get(tenant)
            if cached is not None and cached[0] == generation:
                self._tenants.move_to_end(tenant)
                return cached[1]
        rows = tenant_rows(self.db.conn(), self._lengths, tenant, self.bm25)
        with self._cache_lock:
            self._tenants[tenant] = (generation, rows)
            self._tenants.move_to_end(tenant)
            if len(self._tenants) > _TENANT_STATS:
                self._tenants.popitem(last=False)
        return rows

    def _named(self, ids: np.ndarray, scores: np.ndarray) -> list[IndexHit]:
        """Chunk row ids and their scores as hits, in the same order (their rows remembered: `_known`)."""
        names = self._names.of(ids)
        newer = self._known[0]
        if len(newer) >= _KNOWN_ROWS:
            newer = {}
            self._known = (newer, self._known[0])
        newer.update((name, row) for name, row in zip(names, ids.tolist(), strict=True) if name is not None)
        # positional: a NamedTuple made by keyword costs half as much again, 500 hits a mindset search
        return [IndexHit(name, score) for name, score in zip(names, scores.tolist(), strict=True) if name is not None]

    def score_chunks(
        self, principal: Principal, flt: SearchFilter, asked: Sequence[ScoresAsked], *, deadline: float | None = None
    ) -> list[tuple[dict[str, float], dict[str, float]]]:
        """The scores a search gives the chunks each ask names, all asks at once: their rows found without
        SQL when this index's searches returned them (`_known`) and the filter's rows are in memory; each
        bm25 read from what the keyword search for the ask's words summed when it is kept (`_summed`), else
        its rows looked up in the term columns (`TermPostings.at`): the same totals either way; the cosines
        from the vectors the graph compares when it holds every row (`HnswVectors.cosines`), else from the
        stored float32 vectors, read once for every ask."""
        if not asked:
            return []
        conn = self.db.conn()
        distinct = self.bm25.distinct
        # The words are cut into terms before the deadline is armed (a temp table write: see search_fts).
        terms = [self._tokens.of(conn, query_words(ask.query, distinct)) if ask.bm25_of else [] for ask in asked]
        with self._until(deadline):
            where, params = filter_sql(principal, flt)
            generation = self._generation()
            named = self._rows_of(principal, flt, (where, tuple(params)), generation, asked)
            wanted = np.unique(np.concatenate([found for _, found in named]))
            wanted = wanted[wanted > 0]
            cosines = self._cosine_table(np.stack([ask.vector for ask in asked]), wanted)
            keys = [(generation, principal.tenant, tuple(words), where, tuple(params)) for words in terms]
            with self._cache_lock:
                held = [self._summed.pop(key, None) if words else None for key, words in zip(keys, terms, strict=True)]
            postings = self.postings or TermPostings(max_entries=0)

            def scores(key: Key) -> tuple[np.ndarray, np.ndarray]:
                check_deadline(deadline, self.clock)
                return self._term_scores(key)

            lookups = [
                ([(principal.tenant, term) for term in words], keyword[keyword > 0])
                for words, (keyword, _), kept in zip(terms, named, held, strict=True)
                if words and kept is None
            ]
            looked_up = iter(postings.at(generation, lookups, scores))
            scored = []
            for n, (ask, words, kept, (keyword, semantic)) in enumerate(zip(asked, terms, held, named, strict=True)):
                bm25: dict[str, float] = {}
                if words:
                    seen = keyword > 0
                    totals = next(looked_up) if kept is None else kept.at(keyword[seen])
                    bm25 = {c: t for c, t in zip(compress(ask.bm25_of, seen), totals.tolist(), strict=True) if t > 0}
                seen = semantic > 0
                cosine = cosines[n, np.searchsorted(wanted, semantic[seen])].tolist()
                scored.append((bm25, dict(zip(compress(ask.cosine_of, seen), cosine, strict=True))))
            return scored

    def _rows_of(
        self,
        principal: Principal,
        flt: SearchFilter,
        key: tuple[str, tuple[object, ...]],
        generation: Generation,
        asked: Sequence[ScoresAsked],
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """The row ids of each ask's chunks (its bm25_of, its cosine_of), 0 for a chunk the filter hides or
        gone (row ids start at 1): from the rows searches returned (`_known`) when the filter's rows (`key`)
        are in memory and hold them (so the row is live, and the chunk's: a row id is never reused), the rest
        read by their ids and the filter at once."""
        newer, older = self._known
        parts = [part for ask in asked for part in (ask.bm25_of, ask.cosine_of)]
        named = list(chain.from_iterable(parts))
        rows = np.fromiter((newer.get(c) or older.get(c) or 0 for c in named), dtype=np.int64, count=len(named))
        allowed = self._cached_bitmap(key, generation)
        live = np.zeros(rows.size, dtype=bool)
        if allowed is not None:
            inside = rows < allowed.rows.size
            live[inside] = allowed.rows[rows[inside]]
        if not live.all():  # not remembered, or the row gone since (a document written again keeps its chunk ids)
            lost = np.flatnonzero(~live)
            missing = tuple({named[n] for n in lost.tolist()})
            where, params = filter_sql(principal, flt.model_copy(update={"chunk_ids": missing}))
            sql = f"SELECT c.chunk_id, c.id FROM chunks c JOIN idx_docs d ON d.id = c.doc WHERE {where}"
            read = dict(self.db.conn().execute(sql, params).fetchall())
            rows[lost] = [read.get(named[n], 0) for n in lost.tolist()]
        cuts = np.cumsum([len(part) for part in parts])[:-1]
        split = np.split(rows, cuts)
        return list(zip(split[::2], split[1::2], strict=True))

    def _cosine_table(self, vectors: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The cosine of each vector to each row's vector, one row a vector: the graph's codes when it holds
        every row and can give them (`HnswVectors.cosines`), else the stored float32 vectors' (as sqlite-vec's
        `vec_distance_cosine` makes them)."""
        if not rows.size:
            return np.zeros((len(vectors), 0), dtype=np.float32)
        from_graph = None if self.graph is None else self.graph.cosines(vectors, rows)
        if from_graph is not None:
            return from_graph
        found, stored = stored_vectors(self.db.conn(), rows.tolist())
        table = np.zeros((len(vectors), rows.size), dtype=np.float32)  # a row deleted since its id was read: 0
        if found.size:  # (its chunk is not shown)
            norms = np.linalg.norm(stored, axis=1) * np.linalg.norm(vectors, axis=1)[:, None]
            table[:, np.searchsorted(rows, found)] = (vectors @ stored.T) / np.where(norms > 0, norms, 1.0)
        return table

    def search_vector(
        self, principal: Principal, vector: np.ndarray, flt: SearchFilter, k: int, *, deadline: float | None = None
    ) -> list[IndexHit]:
        where, params = filter_sql(principal, flt)
        blob = np.ascontiguousarray(vector, dtype=np.float32).tobytes()
        watermark = None if self.graph is None else self.graph.watermark
        with self._until(deadline):
            if watermark is not None:
                allowed = self._allowed(where, params)
                if allowed.count >= max(1, self.exact_below):
                    return self._graph_search(vector, blob, allowed, watermark, where, params, k, deadline)
            return self._exact(blob, where, params, k, after=0)

    def _exact(self, blob: bytes, where: str, params: list[object], k: int, after: int) -> list[IndexHit]:
        """The k nearest of the rows the filter lets through with ids above `after`. Above 0 (the
        rows a graph does not hold yet), CROSS JOIN makes SQLite walk only that id range."""
        sql = (
            "SELECT c.chunk_id, vec_distance_cosine(c.embedding, ?) AS dist FROM chunks c"
            f" {'CROSS JOIN' if after else 'JOIN'} idx_docs d ON d.id = c.doc"
            f" WHERE c.id > ? AND {where} ORDER BY dist LIMIT ?"
        )
        rows = self.db.conn().execute(sql, [blob, after, *params, k]).fetchall()
        return [IndexHit(chunk_id=cid, raw_score=1.0 - dist) for cid, dist in rows]

    def _graph_search(
        self,
        vector: np.ndarray,
        blob: bytes,
        allowed: Allowed,
        watermark: int,
        where: str,
        params: list[object],
        k: int,
        deadline: float | None = None,
    ) -> list[IndexHit]:
        """The graph's nearest allowed rows, merged with an exact scan of the rows it does not hold yet."""
        assert self.graph is not None
        check_deadline(deadline, self.clock)  # the graph's walk is one faiss call (ef_search bounds it)
        walked = self.graph.search(vector, allowed.bitmap, k, allowed.rows)
        check_deadline(deadline, self.clock)
        found = self._named(*walked)
        if self._newest_row() <= watermark:
            return found
        best = {hit.chunk_id: hit.raw_score for hit in found}
        for hit in self._exact(blob, where, params, k, after=watermark):
            best[hit.chunk_id] = max(hit.raw_score, best.get(hit.chunk_id, hit.raw_score))
        ranked = sorted(best.items(), key=lambda item: item[1], reverse=True)[:k]
        return [IndexHit(chunk_id=cid, raw_score=score) for cid, score in ranked]

    def _allowed(self, where: str, params: list[object]) -> Allowed:
        """The rows this filter lets through; kept until the next write to the index, the least
        recently used dropped first (a search's one-off chunk-id filters must not push out the
        tenant's own, which costs a read of every chunk row to make again)."""
        key = (where, tuple(params))
        generation = self._generation()
        cached = self._cached_bitmap(key, generation)
        if cached is not None:
            return cached
        # The phrases of one request search at once and miss together: the first makes the bitmap,
        # the others wait for it instead of each reading every chunk row.
        with self._fill_lock:
            cached = self._cached_bitmap(key, generation)
            if cached is not None:
                return cached
            sql = f"SELECT c.id FROM chunks c JOIN idx_docs d ON d.id = c.doc WHERE {where}"
            rows = self.db.conn().execute(sql, params)
            ids = np.fromiter((row[0] for row in rows), dtype=np.int64)
            mask = np.zeros(int(ids.max()) + 1 if ids.size else 1, dtype=bool)
            mask[ids] = True
            allowed = Allowed(mask, np.packbits(mask, bitorder="little"), int(ids.size))
            with self._cache_lock:
                self._bitmaps.pop(key, None)
                if len(self._bitmaps) >= _BITMAP_CACHE:
                    self._bitmaps.popitem(last=False)
                self._bitmaps[key] = (generation, allowed)
        return allowed

    def _cached_bitmap(self, key: tuple[str, tuple[object, ...]], generation: Generation) -> Allowed | None:
        with self._cache_lock:
            cached = self._bitmaps.get(key)
            if cached is None or cached[0] != generation:
                return None
            self._bitmaps.move_to_end(key)
            return cached[1]

    def _newest_row(self) -> int:
        """The highest chunk id, read once per index generation."""
        generation = self._generation()
        seen, newest = self._newest
        if seen != generation:
            newest = self.db.conn().execute("SELECT coalesce(max(id), 0) FROM chunks").fetchone()[0]
            self._newest = (generation, newest)
        return newest

    def _generation(self) -> Generation:
        """The index's write count and stamp: writes through this Database show at once, other
        processes' within 50 ms."""
        generation, commits, read_at = self._seen_generation
        now = time.monotonic()
        if commits == self.db.commits and now - read_at < _GENERATION_TTL_S:
            return generation
        commits = self.db.commits
        meta = dict(
            self.db.conn().execute("SELECT key, value FROM meta WHERE key IN ('index_generation', 'index_stamp')")
        )
        generation = Generation(int(meta.get("index_generation", 0)), meta.get("index_stamp"))
        self._seen_generation = (generation, commits, now)
        return generation

    def get_chunks(self, tenant: str, chunk_ids: Sequence[str]) -> dict[str, tuple[Chunk, Document]]:
        if not chunk_ids:
            return {}
        marks = ",".join("?" * len(chunk_ids))
        rows = self.db.conn().execute(
            "SELECT c.chunk_id, d.doc_id, c.ordinal, c.text, c.headline, c.summary, c.page_start, c.page_end,"
            " c.char_start, c.char_end, c.locator, c.flags, d.doc_json FROM chunks c JOIN idx_docs d ON d.id = c.doc"
            f" WHERE c.tenant = ? AND c.chunk_id IN ({marks})",
            [tenant, *chunk_ids],
        )
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

    def iter_chunks(self, tenant: str, batch: int = 2000) -> Iterator[tuple[Chunk, Document, np.ndarray]]:
        """Every chunk of the tenant with its document and stored vector, in insertion order."""
        last = 0
        while True:
            rows = (
                self.db.conn()
                .execute(
                    "SELECT c.id, c.chunk_id FROM chunks c WHERE c.tenant = ? AND c.id > ? ORDER BY c.id LIMIT ?",
                    (tenant, last, batch),
                )
                .fetchall()
            )
            if not rows:
                return
            last = rows[-1][0]
            ids = [cid for _, cid in rows]
            found = self.get_chunks(tenant, ids)
            vectors = self._vectors(tenant, ids)
            for cid in ids:
                chunk, doc = found[cid]
                yield chunk, doc, vectors[cid]

    def _vectors(self, tenant: str, chunk_ids: Sequence[str]) -> dict[str, np.ndarray]:
        marks = ",".join("?" * len(chunk_ids))
        rows = (
            self.db.conn()
            .execute(
                f"SELECT chunk_id, embedding FROM chunks WHERE tenant = ? AND chunk_id IN ({marks})",
                [tenant, *chunk_ids],
            )
            .fetchall()
        )
        return {cid: np.frombuffer(blob, dtype=np.float32) for cid, blob in rows}

    def count_chunks(self, tenant: str) -> int:
        return self.db.conn().execute("SELECT count(*) FROM chunks WHERE tenant = ?", (tenant,)).fetchone()[0]

"""BM25 of the embedded keyword index with each tenant's own statistics.

FTS5's `bm25()` takes its document frequencies and lengths from the whole table, so one tenant's
documents would move another's scores (and tell it which words exist on the server). Here FTS5
is the inverted index only: a term's occurrences come from its `fts5vocab` instance table, each
chunk's length (in tokens, per column) from FTS5's own docsize record, and the score is computed
with the statistics of the searching tenant's chunks alone: their number, their mean length and
how many of them hold the term.

score(term, chunk) = idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
  idf = ln(1 + (N - df + 0.5) / (df + 0.5))          (Lucene's, never negative)
  tf, dl: the term's count and the chunk's length, text plus `headline` times the headline weight

Query words are cut into terms by the index's own tokenizer (an FTS5 table in the connection's
temp schema), so a query term is the stem the index holds, whatever the tokenizer.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import sqlean

from ragmcp.adapters.local.database import STEMMED, UNSTEMMED

_WORD_CACHE = 1 << 16


@dataclass(frozen=True, slots=True)
class Bm25:
    """The BM25 parameters (BENCHMARKS.md, "The keyword side", says how they were chosen)."""

    k1: float = 1.2
    b: float = 0.75
    headline: float = 0.5
    """The weight of a headline token against a text token, in tf and in the chunk's length."""
    distinct: bool = True
    """A word the query repeats counts once (False: as often as it is given)."""
    avgdl: float | None = None
    """A fixed mean length instead of the tenant's (what OpenSearch's similarity uses: a measure)."""

    def scores(self, tf: np.ndarray, dl: np.ndarray, df: int, n: int, avgdl: float) -> np.ndarray:
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
        norm = self.k1 * (1.0 - self.b + self.b * dl / max(avgdl, 1e-9))
        return idf * tf * (self.k1 + 1.0) / (tf + norm)


@dataclass(frozen=True, slots=True)
class TenantRows:
    """One tenant's chunks at one index generation: which rows, how many, their mean length."""

    mask: np.ndarray
    """One bool per row id up to the tenant's highest."""
    count: int
    avgdl: float


class Tokens:
    """Query words as the index's terms, through an FTS5 table of the same tokenizer in each
    connection's temp schema; each word's terms are remembered (the tokenizer never changes)."""

    def __init__(self, tokenizer: str):
        if tokenizer not in (STEMMED, UNSTEMMED):
            raise ValueError(f"unknown FTS5 tokenizer {tokenizer!r}")
        self.tokenizer = tokenizer
        self._local = threading.local()
        self._words: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def of(self, conn: sqlean.Connection, words: Sequence[str]) -> list[str]:
        """The terms of these words, in order (a word may give none, or several: `wild_duck`)."""
        with self._lock:
            missing = [w for w in dict.fromkeys(words) if w not in self._words]
        found = self._tokenize(conn, missing) if missing else {}
        with self._lock:
            for word, terms in found.items():
                self._words[word] = terms
                if len(self._words) > _WORD_CACHE:
                    self._words.popitem(last=False)
            return [term for word in words for term in (found.get(word) or self._words.get(word, ()))]

    def _tokenize(self, conn: sqlean.Connection, words: Sequence[str]) -> dict[str, tuple[str, ...]]:
        self._prepare(conn)
        conn.executemany("INSERT INTO temp.query_words(rowid, word) VALUES (?, ?)", list(enumerate(words)))
        try:
            rows = conn.execute("SELECT doc, term FROM temp.query_words_terms ORDER BY doc, offset").fetchall()
        finally:
            conn.execute("DELETE FROM temp.query_words")
        terms: dict[int, list[str]] = {}
        for doc, term in rows:
            terms.setdefault(doc, []).append(term)
        return {word: tuple(terms.get(i, ())) for i, word in enumerate(words)}

    def _prepare(self, conn: sqlean.Connection) -> None:
        if getattr(self._local, "conn", None) is conn:
            return
        words = f"fts5(word, tokenize='{self.tokenizer}')"  # one of the two known tokenizers
        conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.query_words USING {words}")
        conn.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.query_words_terms USING fts5vocab(temp, query_words, instance)"
        )
        conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.chunk_terms USING fts5vocab(main, chunks_fts, instance)")
        self._local.conn = conn

    def occurrences(self, conn: sqlean.Connection, term: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every chunk row holding the term (ascending), and the term's count in its text and in its headline."""
        self._prepare(conn)
        rows = conn.execute(
            "SELECT doc, sum(col = 'text'), sum(col = 'headline') FROM temp.chunk_terms WHERE term = ? GROUP BY doc",
            (term,),
        ).fetchall()
        if not rows:
            empty = np.zeros(0)
            return empty.astype(np.int64), empty, empty
        table = np.asarray(rows, dtype=np.int64)
        return table[:, 0], table[:, 1].astype(np.float64), table[:, 2].astype(np.float64)


class RowLengths:
    """Each chunk row's length in tokens (text, headline), read from FTS5's docsize records. A row's
    text never changes (a new version of a chunk is a new row), so the arrays only grow; `reset`
    after the keyword index is rebuilt with another tokenizer."""

    def __init__(self) -> None:
        self._text = np.zeros(0, dtype=np.float64)
        self._headline = np.zeros(0, dtype=np.float64)
        self._lock = threading.Lock()

    def of(self, conn: sqlean.Connection, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if ids.size and int(ids.max()) >= self._text.size:
            self._grow(conn)
        text, headline = self._text, self._headline
        inside = ids < text.size  # a row written after the read above: its length is read next time
        safe = np.where(inside, ids, 0)
        return np.where(inside, text[safe], 0.0), np.where(inside, headline[safe], 0.0)

    def reset(self) -> None:
        with self._lock:
            self._text = np.zeros(0, dtype=np.float64)
            self._headline = np.zeros(0, dtype=np.float64)

    def _grow(self, conn: sqlean.Connection) -> None:
        with self._lock:
            start = self._text.size
            rows = conn.execute("SELECT id, sz FROM chunks_fts_docsize WHERE id >= ? ORDER BY id", (start,)).fetchall()
            if not rows:
                return
            size = rows[-1][0] + 1
            text = np.zeros(size)
            headline = np.zeros(size)
            text[:start], headline[:start] = self._text, self._headline
            for row_id, blob in rows:
                sizes = _varints(blob)
                text[row_id] = sizes[0] if sizes else 0
                headline[row_id] = sizes[1] if len(sizes) > 1 else 0
            self._text, self._headline = text, headline


def _varints(blob: bytes) -> list[int]:
    """SQLite varints (7 bits a byte, high bit set on all but the last byte of each), as FTS5 writes column sizes."""
    values, value = [], 0
    for byte in blob:
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            values.append(value)
            value = 0
    return values


def tenant_rows(conn: sqlean.Connection, lengths: RowLengths, tenant: str, bm25: Bm25) -> TenantRows:
    ids = np.fromiter(
        (row[0] for row in conn.execute("SELECT id FROM chunks WHERE tenant = ?", (tenant,))), dtype=np.int64
    )
    mask = np.zeros(int(ids.max()) + 1 if ids.size else 0, dtype=bool)
    mask[ids] = True
    text, headline = lengths.of(conn, ids)
    avgdl = bm25.avgdl or (float((text + bm25.headline * headline).mean()) if ids.size else 0.0)
    return TenantRows(mask, int(ids.size), avgdl)


def term_scores(
    conn: sqlean.Connection, tokens: Tokens, lengths: RowLengths, rows: TenantRows, term: str, bm25: Bm25
) -> tuple[np.ndarray, np.ndarray]:
    """The tenant's chunk rows that hold the term and its bm25 in each, with the tenant's statistics."""
    ids, in_text, in_headline = tokens.occurrences(conn, term)
    mine = ids < rows.mask.size
    mine[mine] = rows.mask[ids[mine]]
    ids, in_text, in_headline = ids[mine], in_text[mine], in_headline[mine]
    if not ids.size:
        return ids, np.zeros(0)
    text, headline = lengths.of(conn, ids)
    tf = in_text + bm25.headline * in_headline
    dl = text + bm25.headline * headline
    return ids, bm25.scores(tf, dl, int(ids.size), rows.count, rows.avgdl)

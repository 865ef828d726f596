"""LanceDB (embedded) as a peer of our SQLite index, for `ragmcp bench` only.

The same chunks and embeddings go into a LanceDB table with a native (Lance, not tantivy) BM25
full-text index; a search runs, for each phrase, a full-text query and an exact cosine vector
query in LanceDB, and fuses every list with our own reciprocal rank fusion, so that latency and
nDCG can be compared side by side with ours. LanceDB is an optional dependency (the `bench`
extra): nothing that serves or tests ragmcp by default imports this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import lancedb
import numpy as np
import pyarrow as pa
from lancedb.index import FTS, HnswSq
from lancedb.query import FullTextOperator, MatchQuery

from ragmcp.retrieval.fusion import RankedList, rrf

DIMENSION = 384
_TABLE = "chunks"
_SCHEMA = pa.schema(
    [
        pa.field("chunk_id", pa.string(), nullable=False),
        pa.field("doc_key", pa.string(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("vector", pa.list_(pa.float32(), DIMENSION), nullable=False),
    ]
)
# Tokenised like our FTS5 table ('porter unicode61 remove_diacritics 2'): lower-cased, stemmed,
# accents folded, and no stop words dropped.
_FTS = FTS(lower_case=True, stem=True, ascii_folding=True, remove_stop_words=False)


@dataclass(frozen=True, slots=True)
class PeerChunk:
    chunk_id: str
    doc_key: str  # the document's primary key (for nDCG by document)
    text: str
    vector: np.ndarray  # float32, L2-normalised, dim 384


class LanceDBPeer:
    def __init__(self, table: lancedb.table.Table):
        self._table = table
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lancedb-peer")

    @classmethod
    def build(
        cls, folder: Path, chunks: Iterable[PeerChunk], batch: int = 10_000, *, vector_index: bool = False
    ) -> LanceDBPeer:
        """A new table in `folder` (replacing one there), written in Arrow batches of `batch` rows.

        Vectors are searched exactly (flat) unless `vector_index`, which builds an IVF_HNSW_SQ index;
        LanceDB's docs find an index usually unnecessary up to about 100k rows.
        """
        reader = pa.RecordBatchReader.from_batches(_SCHEMA, _batches(chunks, batch))
        table = lancedb.connect(folder).create_table(_TABLE, data=reader, mode="overwrite")
        table.create_index("text", config=_FTS)
        if vector_index:
            table.create_index("vector", config=HnswSq(distance_type="cosine"))
        return cls(table)

    @classmethod
    def open(cls, folder: Path) -> LanceDBPeer:
        return cls(lancedb.connect(folder).open_table(_TABLE))

    def count(self) -> int:
        return self._table.count_rows()

    def search(
        self,
        phrases: Sequence[str],
        vectors: np.ndarray,
        *,
        top_k: int = 8,
        fts_k: int = 50,
        vec_k: int = 50,
        k0: int = 60,
    ) -> list[tuple[str, str]]:
        """(chunk_id, doc_key) pairs, best first: per phrase a BM25 and a cosine ranking, fused by RRF.

        The full-text queries run concurrently with one multi-vector query for all phrases (one scan
        of the table, LanceDB's fastest exact form). Lists are fused in our order (each phrase's
        full-text list, then its vector list), so ties break the same way.
        """
        matrix = np.asarray(vectors, dtype=np.float32).reshape(len(phrases), DIMENSION)
        by_vector = self._pool.submit(self._vectors, matrix, vec_k)
        by_text = [self._pool.submit(self._fts, phrase, fts_k) for phrase in phrases]
        runs = [
            run for text, vector in zip(by_text, by_vector.result(), strict=True) for run in (text.result(), vector)
        ]
        doc_of = {chunk_id: doc_key for run in runs for chunk_id, doc_key in run}
        lists = [RankedList([chunk_id for chunk_id, _ in run]) for run in runs if run]
        return [(chunk_id, doc_of[chunk_id]) for chunk_id, _ in rrf(lists, k0)[:top_k]]

    def _fts(self, phrase: str, k: int) -> list[tuple[str, str]]:
        # A match query takes the text as plain words, any of which may match: no query syntax.
        query = MatchQuery(phrase, "text", operator=FullTextOperator.OR)
        found = self._table.search(query).select(["chunk_id", "doc_key", "_score"]).limit(k).to_arrow()
        return list(zip(found.column("chunk_id").to_pylist(), found.column("doc_key").to_pylist(), strict=True))

    def _vectors(self, matrix: np.ndarray, k: int) -> list[list[tuple[str, str]]]:
        """The k nearest chunks by cosine to each row of `matrix`, in one query, nearest first."""
        query = self._table.search(matrix if len(matrix) > 1 else matrix[0], vector_column_name="vector")
        found = query.distance_type("cosine").select(["chunk_id", "doc_key", "_distance"]).limit(k).to_arrow()
        # Several query vectors add a query_index column (one vector returns none).
        which = found.column("query_index").to_pylist() if len(matrix) > 1 else [0] * found.num_rows
        runs: list[list[tuple[str, str]]] = [[] for _ in matrix]
        order = np.lexsort((found.column("_distance").to_numpy(), np.asarray(which)))
        chunk_ids, doc_keys = found.column("chunk_id").to_pylist(), found.column("doc_key").to_pylist()
        for row in order:
            runs[which[row]].append((chunk_ids[row], doc_keys[row]))
        return runs


def _batches(chunks: Iterable[PeerChunk], size: int) -> Iterator[pa.RecordBatch]:
    it = iter(chunks)
    while group := list(islice(it, size)):
        vectors = np.stack([c.vector for c in group]).astype(np.float32, copy=False)
        if vectors.shape[1] != DIMENSION:
            raise ValueError(f"vectors have dimension {vectors.shape[1]}, not {DIMENSION}")
        yield pa.RecordBatch.from_arrays(
            [
                pa.array([c.chunk_id for c in group]),
                pa.array([c.doc_key for c in group]),
                pa.array([c.text for c in group]),
                pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), DIMENSION),
            ],
            schema=_SCHEMA,
        )

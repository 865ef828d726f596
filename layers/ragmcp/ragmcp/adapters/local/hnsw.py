"""An HNSW graph (faiss, inner product on unit vectors) over the chunks table's vectors, so the
embedded backend's vector search stays fast at hundreds of thousands of chunks.

Nodes are labelled with `chunks.id`, which AUTOINCREMENT never reuses. The graph covers the
rows up to a watermark; the index scans newer rows exactly and merges them, so a search never
misses a row the graph has not caught up with. Callers pass a bitmap of the chunk ids they may
see (computed by the same SQL filter as every other search), and faiss applies it inside the
graph walk: deleted rows and rows outside the filter are never returned.

A background thread loads the saved graph (or builds it), then adds new rows in batches
whenever a write wakes it, saving after each catch-up. It rebuilds from scratch when deletions
have left more than a quarter of the nodes dead.

The graph stores its vectors as float32, fp16 or 8 bits a dimension (faiss's scalar quantizer,
trained on the rows present when the graph is made: `hnsw_vectors`); an fp16 graph's cosines are
those of the stored codes, and an 8-bit graph's hits (its codes' cosines within about 0.005 of the
exact ones, enough to reorder close neighbours) are ranked by the exact cosines of the rows' stored
float32 vectors, read from the database.

The file is faiss's serialised index followed by a trailer (watermark, dimension, the rows the
quantizer was trained on, the vector kind, SHA-256, magic); the SHA-256 covers the index and the
trailer's fields. A load verifies it before faiss reads a byte: a damaged file is never used (the
writer rebuilds the graph from the database, a follower keeps scanning exactly), and `ragmcp
doctor` says so. A file of an older format (a header first, float32 vectors) is rebuilt once, by the
writer. A file of another vector kind than the settings ask for is re-encoded once by the writer when
it holds more bits a dimension than asked (float32 to fp16 or sq8, fp16 to sq8): its vectors are
decoded and stored in the new kind under the same links, seconds where a rebuild of a large graph takes
many minutes (at 1M chunks the links of an fp16 graph searched with 8-bit codes give the recall a fresh
8-bit graph gives: BENCHMARKS.md); the other way round it is rebuilt.

A follower (a reader process of `ragmcp serve --workers N`) never adds or saves: it maps the
graph file its writer saved (faiss's IO_FLAG_MMAP_IFC: the vectors stay in the page cache, one
copy for every process that maps the file, and a reload maps the new file instead of reading a
second copy), and maps it again whenever the writer has saved a newer one; the rows written
since are scanned exactly meanwhile, as for the writer's own graph.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO, cast

import faiss
import numpy as np

from ragmcp.adapters.local.background import BackgroundWorker
from ragmcp.adapters.local.database import Database, stored_vectors

log = logging.getLogger(__name__)

_TRAILER = struct.Struct("<qqq8s32s8s")
"""watermark, dimension, rows the quantizer was trained on, vector kind, SHA-256, magic."""
_FIELDS = struct.Struct("<qqq8s")
_MAGIC = b"rmcphns3"
_OLDER_MAGICS = (b"rmcphns2", b"rmcphnsw")
"""Formats with a header before the index (float32 vectors; the first without a checksum):
recognised, never loaded."""
_OLDER_HEADER = struct.Struct("<8sqq")
_READ_BLOCK = 1 << 20
_DEAD_FRACTION = 0.25
VECTOR_KINDS = ("float32", "fp16", "sq8")
"""From the most bits a dimension to the fewest."""
AUTO = "auto"
"""`hnsw_vectors`' default: fp16 up to AUTO_SQ8_FROM nodes, 8 bits above."""
AUTO_SQ8_FROM = 500_000
"""Above this many nodes an `auto` graph stores 8 bits a dimension: fp16's vectors would be 384 MB
and more (768 MB at 1M, a third of 2.5 GB), and 8-bit codes with their hits rescored hold the recall
(at 1M 0.975 against fp16's 0.974); below it the rescoring's reads are not worth the memory saved."""
_REENCODE_BLOCK = 65_536
TRAIN_ROWS = 20_000
"""A quantized graph's quantizer learns each dimension's range from up to this many rows, the
first ones when the graph is made."""
_RETRAIN_GROWTH = 4
"""A graph whose quantizer learnt from fewer than TRAIN_ROWS rows is rebuilt once it holds this
many times as many (a graph made over the first few documents would clip later ones' values)."""


EF_SEARCH = 80
"""`hnsw_ef_search`'s default: at 100k chunks recall@10 0.989 against the exact scan (128: 0.993) for
0.6-0.7 of 128's walk CPU, and the server's nDCG@10 there within 0.001 of 128's (BENCHMARKS.md, v31)."""
EF_GROWTH_FROM = 100_000
"""Graphs of up to this many nodes are searched `hnsw_ef_search` wide; larger ones wider."""
EF_GROWTH = 0.704
"""Above EF_GROWTH_FROM nodes the search breadth grows as (nodes / EF_GROWTH_FROM) ** EF_GROWTH:
from EF_SEARCH at 100k to 405 at 1M, the breadth that gives recall@10 0.977 there (recall falls as a
graph grows at a fixed breadth: 128 at 100k gave 0.993, 405 at 1M 0.974-0.977; BENCHMARKS.md)."""


def ef_search_for(nodes: int, base: int) -> int:
    """How wide a graph of `nodes` is searched so that its recall@10 holds as it grows: `base` up
    to EF_GROWTH_FROM nodes, then growing with the graph (EF_GROWTH)."""
    if nodes <= EF_GROWTH_FROM:
        return base
    return round(base * (nodes / EF_GROWTH_FROM) ** EF_GROWTH)


@dataclass(frozen=True, slots=True)
class HnswParams:
    dimension: int
    m: int = 32
    ef_construction: int = 100
    ef_search: int = EF_SEARCH
    batch: int = 2000
    vectors: str = AUTO
    """How the graph stores vectors: float32, fp16, sq8 (8 bits a dimension) or auto (AUTO_SQ8_FROM)."""


class ReadWriteLock:
    """Any number of readers at once, or one writer alone. A waiting writer holds back new
    readers, so a stream of searches cannot keep the graph's catch-up waiting forever."""

    def __init__(self) -> None:
        self._state = threading.Condition()
        self._readers = 0
        self._writers = 0
        """Writers waiting or writing."""
        self._writing = False

    @contextmanager
    def reading(self) -> Iterator[None]:
        with self._state:
            self._state.wait_for(lambda: not self._writers)
            self._readers += 1
        try:
            yield
        finally:
            with self._state:
                self._readers -= 1
                if not self._readers:
                    self._state.notify_all()

    @contextmanager
    def writing(self) -> Iterator[None]:
        with self._state:
            self._writers += 1
            self._state.wait_for(lambda: not self._readers and not self._writing)
            self._writing = True
        try:
            yield
        finally:
            with self._state:
                self._writing = False
                self._writers -= 1
                self._state.notify_all()


def _new_index(params: HnswParams) -> faiss.Index:
    hnsw: faiss.IndexHNSW
    if params.vectors == "float32":
        hnsw = faiss.IndexHNSWFlat(params.dimension, params.m, faiss.METRIC_INNER_PRODUCT)
    else:
        kind = faiss.ScalarQuantizer.QT_fp16 if params.vectors == "fp16" else faiss.ScalarQuantizer.QT_8bit
        hnsw = faiss.IndexHNSWSQ(params.dimension, kind, params.m, faiss.METRIC_INNER_PRODUCT)  # type: ignore[arg-type]
    hnsw.hnsw.efConstruction = params.ef_construction
    return faiss.IndexIDMap(hnsw)


def _kind(name: str) -> bytes:
    return name.encode().ljust(8, b"\0")


class _Graph:
    """One faiss index, the highest chunk id it holds, the rows its quantizer learnt from, and
    whether it is a read-only mapping of its file (never added to: faiss aborts the process)."""

    def __init__(
        self,
        params: HnswParams,
        index: faiss.Index | None = None,
        watermark: int = 0,
        trained: int = 0,
        *,
        mapped: bool = False,
    ):
        self.kind = params.vectors
        self.index = _new_index(params) if index is None else index
        self.watermark = watermark
        self.trained = trained
        self.mapped = mapped

    @property
    def learns_ranges(self) -> bool:
        """Whether the graph's quantizer learnt its ranges from rows (sq8; fp16 needs none)."""
        return self.kind == "sq8"

    @classmethod
    def load(cls, path: Path, params: HnswParams, *, mapped: bool = False, any_kind: bool = False) -> _Graph | None:
        """The saved graph, or None when there is none or it must be rebuilt (another dimension or
        vector kind, an older format, a damaged file: each said in the log). `mapped`: faiss maps
        the file's vectors instead of reading them (shared with every process mapping it); `any_kind`:
        the graph whatever vectors it stores (its `kind` says which)."""
        if not path.is_file():
            return None
        try:
            with path.open("rb") as handle:
                if handle.read(len(_MAGIC)) in _OLDER_MAGICS:
                    log.warning("vector graph at %s is of an older format (float32, header first); rebuilding it", path)
                    return None
                trailer = _read_trailer(handle)
                if trailer is None:
                    log.warning("vector graph at %s is not a ragmcp vector graph; rebuilding it", path)
                    return None
                watermark, dimension, trained, kind, digest = trailer
                if _digest(handle, trailer) != digest:
                    log.warning("vector graph at %s fails its checksum (damaged); rebuilding it", path)
                    return None
                if dimension != params.dimension:
                    return None
                stored = kind.rstrip(b"\0").decode(errors="replace")
                if any_kind and stored in VECTOR_KINDS:
                    params = replace(params, vectors=stored)
                elif kind != _kind(params.vectors):
                    log.warning(
                        "vector graph at %s stores %s vectors, the settings ask for %s"
                        "; the writer re-encodes or rebuilds it",
                        path,
                        stored,
                        params.vectors,
                    )
                    return None
            # faiss reads the index from the file's start and stops before the trailer
            flags = faiss.IO_FLAG_MMAP_IFC if mapped else 0
            index = faiss.read_index(str(path), flags)
        except (OSError, struct.error, RuntimeError) as exc:
            log.warning("vector graph at %s not loaded (%s); rebuilding it", path, exc)
            return None
        return cls(params, index, watermark, trained, mapped=mapped)

    def reencoded(self, params: HnswParams) -> _Graph:
        """The same graph (links, ids, watermark) storing `params.vectors` vectors, encoded from this
        graph's own (decoded in blocks; deleted rows' nodes too); a quantizer learns its ranges
        from the first TRAIN_ROWS nodes, as a graph made over those rows would."""
        fresh = _Graph(params, watermark=self.watermark)
        mapping, copy = cast(faiss.IndexIDMap, self.index), cast(faiss.IndexIDMap, fresh.index)
        source = cast(faiss.IndexHNSW, faiss.downcast_index(mapping.index))
        target = cast(faiss.IndexHNSW, faiss.downcast_index(copy.index))
        nodes = int(source.ntotal)
        if fresh.learns_ranges and nodes:
            target.train(source.storage.reconstruct_n(0, min(TRAIN_ROWS, nodes)))
            fresh.trained = min(TRAIN_ROWS, nodes)
        storage = faiss.downcast_index(target.storage)
        for start in range(0, nodes, _REENCODE_BLOCK):
            storage.add(source.storage.reconstruct_n(start, min(_REENCODE_BLOCK, nodes - start)))
        target.hnsw = source.hnsw  # a copy of the links (SWIG assigns the struct)
        target.ntotal = nodes
        copy.id_map = mapping.id_map
        copy.ntotal = nodes
        return fresh

    def save(self, path: Path) -> None:
        sha = hashlib.sha256()
        scratch = path.with_name(path.name + ".tmp")
        with os.fdopen(os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as handle:

            def write(data: bytes) -> None:
                sha.update(data)
                handle.write(data)

            faiss.write_index(self.index, faiss.PyCallbackIOWriter(write))  # type: ignore[attr-defined]
            fields = (self.watermark, self.index.d, self.trained, _kind(self.kind))
            sha.update(_FIELDS.pack(*fields) + _MAGIC)
            handle.write(_TRAILER.pack(*fields, sha.digest(), _MAGIC))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(scratch, path)


_Trailer = tuple[int, int, int, bytes, bytes]


def _read_trailer(handle: BinaryIO) -> _Trailer | None:
    """The trailer's fields (watermark, dimension, trained rows, kind, digest), or None when the
    file does not end with one."""
    size = handle.seek(0, os.SEEK_END)
    if size < _TRAILER.size:
        return None
    handle.seek(size - _TRAILER.size)
    watermark, dimension, trained, kind, digest, magic = _TRAILER.unpack(handle.read(_TRAILER.size))
    if magic != _MAGIC:
        return None
    return watermark, dimension, trained, kind, digest


def _digest(handle: BinaryIO, trailer: _Trailer) -> bytes:
    """The SHA-256 of the index (the file before its trailer) and of the trailer's fields."""
    watermark, dimension, trained, kind, _ = trailer
    left = handle.seek(0, os.SEEK_END) - _TRAILER.size
    handle.seek(0)
    sha = hashlib.sha256()
    while left > 0 and (block := handle.read(min(_READ_BLOCK, left))):
        sha.update(block)
        left -= len(block)
    sha.update(_FIELDS.pack(watermark, dimension, trained, kind) + _MAGIC)
    return sha.digest()


def check_file(path: Path, dimension: int, id_counter: int, *, full: bool = False) -> str | None:
    """The graph file's own check: None when it is sound (or absent: it is then built), else what
    is wrong. `id_counter` is the highest chunk id the database has ever given (deleted rows
    included): a graph holding a higher one belongs to another database. The quick check reads the
    trailer only (every start; a load verifies the checksum anyway); `full` verifies the checksum
    and loads the graph too. A file of an older format passes when its header fits this database:
    its next load rebuilds it."""
    if not path.exists():
        return None
    damaged = older = False
    try:
        with path.open("rb") as handle:
            head = handle.read(_OLDER_HEADER.size)
            if head[: len(_MAGIC)] in _OLDER_MAGICS:
                older = True
                _, watermark, stored_dimension = _OLDER_HEADER.unpack(head)
                trailer = None
            else:
                trailer = _read_trailer(handle)
                if trailer is None:
                    return f"{path} is not a ragmcp vector graph"
                watermark, stored_dimension, _, _, digest = trailer
                damaged = full and _digest(handle, trailer) != digest
    except (OSError, struct.error) as exc:
        return f"{path} has no readable header ({exc})"
    if damaged:
        return f"{path} fails its checksum: the file is damaged"
    if stored_dimension != dimension:
        return f"{path} holds {stored_dimension}-dimensional vectors, the index {dimension}-dimensional ones"
    if watermark > id_counter:
        return (
            f"{path} holds chunks up to id {watermark} but the database has given ids up to {id_counter} only: "
            "not its graph"
        )
    if full and not older and trailer is not None:
        kind = trailer[3].rstrip(b"\0").decode(errors="replace")
        graph = _Graph.load(
            path, HnswParams(dimension, vectors=kind if kind in VECTOR_KINDS else "float32"), mapped=True
        )
        if graph is None or graph.index.ntotal > watermark:
            return f"{path} cannot be loaded"
    return None


class HnswVectors(BackgroundWorker):
    name = "vector-graph"

    def __init__(self, db: Database, path: Path, params: HnswParams, *, follow: bool = False, idle_seconds: float = 60):
        """`follow`: load the writer's saved graph instead of growing one; `idle_seconds`: how long
        the thread waits for a write to wake it before it looks for new rows (or a newer file) anyway."""
        super().__init__()
        self.db = db
        self.path = path
        self.params = params
        self.follow = follow
        self.idle_seconds = idle_seconds
        self._graph: _Graph | None = None
        self._loaded: tuple[int, int, int] | None = None
        """The graph file's (inode, size, mtime) when a follower last loaded it."""
        self._lock = ReadWriteLock()
        """Searches read the graph together (faiss releases the GIL); adding nodes or swapping
        the graph waits for them and holds them back."""
        self._wake = threading.Event()
        self._counted_rows: tuple[np.ndarray, tuple[int, int], bool] | None = None
        """The last filter's rows (by identity), the graph they were counted against (watermark, nodes),
        and whether they pass every node."""
        self._counted: str | None = None
        """The index generation at the last count of the graph's live rows."""
        self._unfiltered: tuple[int, faiss.SearchParameters] | None = None
        """An unfiltered walk's breadth and parameters: made once a breadth (a SWIG object a walk was
        about 10 us of its Python), shared by every search (faiss only reads them). One pair: the breadth
        changes only as the graph grows, so older ones are never asked for again."""

    @property
    def watermark(self) -> int | None:
        """The highest chunk id the graph holds, or None while it is not loaded."""
        graph = self._graph
        return None if graph is None else graph.watermark

    def status(self) -> dict[str, object]:
        graph = self._graph
        newest = self._newest()
        if graph is None:
            return {"state": "loading", "nodes": 0, "behind": newest}
        return {"state": "ready", "nodes": int(graph.index.ntotal), "behind": max(0, newest - graph.watermark)}

    def wake(self) -> None:
        self._wake.set()

    def forget(self) -> None:
        """Drop the graph and its saved file (its vectors are no longer the index's): the next
        catch-up builds it again from every row."""
        self.path.unlink(missing_ok=True)
        with self._lock.writing():
            self._graph = None

    def search(
        self, vector: np.ndarray, allowed: np.ndarray, k: int, rows: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Chunk ids and cosines of the k nearest nodes whose bit is set in `allowed` (one bit per
        chunk id, little-endian bit order within bytes), nearest first. `rows`, the same set as one
        bool per chunk id, lets a filter that passes every node of the graph be left out of the walk."""
        query = np.ascontiguousarray(vector, dtype=np.float32).reshape(1, -1)
        with self._lock.reading():
            graph = self._graph
            if graph is None or not graph.index.ntotal:
                return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
            # Nodes are the rows up to the watermark, some deleted since; when the filter passes as
            # many of those rows as there are nodes, it passes every node (the watermark moves only
            # after its nodes are added, so a stale one undercounts, never over).
            passes_all = rows is not None and self._passes_all(rows, graph)
            ef = max(ef_search_for(graph.index.ntotal, self.params.ef_search), k)
            params = self._walk(ef, None if passes_all else allowed)
            # One query walks the graph on one thread: an OpenMP team for it costs more CPU in its
            # start and its spinning threads than it saves (the setting is this thread's own, put
            # back after, as a graph this thread builds later wants every core).
            threads = faiss.omp_get_max_threads()
            faiss.omp_set_num_threads(1)
            try:
                scores, labels = graph.index.search(query, k, params=params)
            finally:
                faiss.omp_set_num_threads(threads)
        found = labels[0] >= 0
        labels, scores = labels[0][found], scores[0][found]
        if graph.kind == "sq8":
            return self._rescored(query[0], labels)
        return labels, scores

    def cosines(self, vectors: np.ndarray, rows: np.ndarray) -> np.ndarray | None:
        """The cosines of each of `vectors` to these chunk ids' vectors as the graph stores them (float32
        or fp16 codes: what a walk compares), one row a vector, with no walk and no database read; None
        when it cannot give every one (not loaded, a row it does not hold, or 8-bit codes: those are read
        exactly from the database, as `_rescored` does)."""
        with self._lock.reading():
            graph = self._graph
            if graph is None or graph.kind == "sq8" or not rows.size or int(rows.max()) > graph.watermark:
                return None
            # Nodes are added in chunk id order, so the graph's labels ascend: a row's node is found by bisection.
            nodes = int(graph.index.ntotal)
            labels = faiss.rev_swig_ptr(graph.index.id_map.data(), nodes)  # type: ignore[attr-defined]
            at = np.minimum(np.searchsorted(labels, rows), nodes - 1)
            if not np.array_equal(labels[at], rows):
                return None
            # The codes read in place (IEEE halves or floats: faiss's own decoding of each is a third slower).
            storage = faiss.downcast_index(faiss.downcast_index(graph.index.index).storage)  # type: ignore[attr-defined]
            codes = faiss.rev_swig_ptr(storage.codes.data(), nodes * storage.code_size)  # type: ignore[attr-defined]
            kind = np.float16 if graph.kind == "fp16" else np.float32
            stored = codes.view(kind).reshape(nodes, -1)[at].astype(np.float32)
        return (stored @ np.asarray(vectors, dtype=np.float32).reshape(-1, stored.shape[1]).T).T

    def _walk(self, ef: int, allowed: np.ndarray | None) -> faiss.SearchParameters:
        """A walk's parameters: `ef` wide, through the nodes whose bit is set in `allowed` (None: every node)."""
        # faiss's SWIG classes are missing from its type stubs
        if allowed is not None:
            selector = faiss.IDSelectorBitmap(allowed.size, faiss.swig_ptr(allowed))
            return faiss.SearchParametersHNSW(sel=selector, efSearch=ef)  # type: ignore[attr-defined]
        held = self._unfiltered  # one read: another thread may replace the pair meanwhile
        if held is None or held[0] != ef:
            held = self._unfiltered = (ef, faiss.SearchParametersHNSW(efSearch=ef))  # type: ignore[attr-defined]
        return held[1]

    def _passes_all(self, rows: np.ndarray, graph: _Graph) -> bool:
        """Whether the filter's rows pass as many rows up to the watermark as the graph has nodes:
        counted once for a filter's rows and a graph (a search's bitmaps are kept, unchanged, until
        the next write; at 1M chunks a count is a tenth of a millisecond, five a request)."""
        key = (graph.watermark, int(graph.index.ntotal))
        seen = self._counted_rows
        if seen is not None and seen[0] is rows and seen[1] == key:
            return seen[2]
        passes = int(np.count_nonzero(rows[: graph.watermark + 1])) == graph.index.ntotal
        self._counted_rows = (rows, key, passes)
        return passes

    def _rescored(self, query: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The graph's hits ranked by the exact cosines of their stored float32 vectors: 8-bit codes
        reorder close neighbours (recall@10 at 1M chunks 0.959 as walked, 0.973 rescored, fp16's
        0.974: BENCHMARKS.md). A row deleted since the walk drops out."""
        if not labels.size:
            return labels, np.zeros(0, dtype=np.float32)
        ids, stored = stored_vectors(self.db.conn(), labels.tolist())
        cosines = stored @ query
        order = np.argsort(-cosines, kind="stable")
        return ids[order], cosines[order]

    def catch_up(self) -> None:
        """Load or build the graph, then add every row newer than its watermark; save if it grew.
        Between catch-ups the writer too searches a mapping of the file it saved (shared with its
        readers); rows are added to a copy read from that file (or, while the graph is first
        built, to the graph searches use), which is saved and mapped in its turn."""
        if self._graph is None:
            self._graph = self._opened() or _Graph(self._params_for(self._rows()))
        graph = self._graph
        if (
            graph.learns_ranges
            and graph.index.ntotal
            and graph.trained < TRAIN_ROWS
            and self._rows() > _RETRAIN_GROWTH * graph.trained
        ):
            log.info(
                "vector graph: its quantizer learnt from %d rows only; rebuilding it over all of them", graph.trained
            )
            self._rebuild()
            return
        # Rows are only deleted by a write, and every write moves the index generation: an idle
        # wake-up does not count the table again.
        generation = self._generation()
        counted, self._counted = self._counted, generation
        live = None if generation == counted or not graph.index.ntotal else self._live(graph.watermark)
        if live is not None and live < (1 - _DEAD_FRACTION) * graph.index.ntotal:
            log.info("vector graph: over a quarter of its nodes were deleted; rebuilding it")
            self._rebuild()
        elif graph.mapped:  # faiss cannot add to a mapping: a copy grows while searches read the mapping
            if self._newest() <= graph.watermark:
                return
            copy = _Graph.load(self.path, self.params, any_kind=True)
            if copy is None or copy.watermark != graph.watermark:
                self._rebuild()
                return
            self._extend(copy, lock=False)
            self._publish(self._fitted(copy))
        elif self._extend(graph, lock=True):
            self._publish(self._fitted(graph))

    def _params_for(self, nodes: int) -> HnswParams:
        """The parameters of a graph of `nodes` nodes: the vector kind asked for (auto: fp16, and
        sq8 above AUTO_SQ8_FROM nodes)."""
        if self.params.vectors != AUTO:
            return self.params
        return replace(self.params, vectors="sq8" if nodes > AUTO_SQ8_FROM else "fp16")

    def _opened(self) -> _Graph | None:
        """The saved graph, mapped: as saved when it stores the vectors asked for (auto: as many
        bits a dimension as its size asks, or fewer), re-encoded first when it stores more bits,
        else None (rebuilt)."""
        graph = _Graph.load(self.path, self.params, mapped=True, any_kind=True)
        if graph is None:
            return None
        wanted, stored = self._params_for(graph.index.ntotal).vectors, VECTOR_KINDS.index(graph.kind)
        if stored == VECTOR_KINDS.index(wanted) or (
            self.params.vectors == AUTO and stored > VECTOR_KINDS.index(wanted)
        ):
            return graph
        if stored > VECTOR_KINDS.index(wanted):
            log.warning(
                "vector graph at %s stores %s vectors, the settings ask for %s; rebuilding it",
                self.path,
                graph.kind,
                wanted,
            )
            return None
        del graph
        whole = _Graph.load(self.path, self.params, any_kind=True)
        if whole is None:
            return None
        fitted = self._fitted(whole)
        del whole
        fitted.save(self.path)
        return _Graph.load(self.path, self.params, mapped=True, any_kind=True) or fitted

    def _fitted(self, graph: _Graph) -> _Graph:
        """`graph`, re-encoded under its links when it stores more bits a dimension than its size
        asks for (a graph growing past AUTO_SQ8_FROM nodes, or saved with more bits than asked)."""
        wanted = self._params_for(graph.index.ntotal)
        if VECTOR_KINDS.index(graph.kind) >= VECTOR_KINDS.index(wanted.vectors):
            return graph
        log.info(
            "vector graph: re-encoding its %d nodes' vectors from %s to %s (the links kept)",
            graph.index.ntotal,
            graph.kind,
            wanted.vectors,
        )
        return graph.reencoded(wanted)

    def _rebuild(self) -> None:
        fresh = _Graph(self._params_for(self._rows()))
        self._extend(fresh, lock=False)
        self._publish(fresh)

    def _publish(self, graph: _Graph) -> None:
        """Save `graph`, then search a mapping of the file saved (the graph itself if it cannot be mapped)."""
        graph.save(self.path)
        mapped = _Graph.load(self.path, self.params, mapped=True, any_kind=True)
        with self._lock.writing():
            self._graph = mapped or graph

    def reload(self) -> bool:
        """A follower's step: load the graph file if the writer has saved it since the last load;
        whether it did. A file replaced while it is read is loaded again at the next step."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return False
        stamp = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if stamp == self._loaded:
            return False
        graph = _Graph.load(self.path, self.params, mapped=True, any_kind=self.params.vectors == AUTO)
        if graph is None:
            return False
        with self._lock.writing():
            self._graph = graph
        self._loaded = stamp
        return True

    def _extend(self, graph: _Graph, *, lock: bool) -> bool:
        grew = False
        while not self._stop.is_set():
            untrained = not graph.index.is_trained
            rows = (
                self.db.conn()
                .execute(
                    "SELECT id, embedding FROM chunks WHERE id > ? ORDER BY id LIMIT ?",
                    (graph.watermark, max(self.params.batch, TRAIN_ROWS) if untrained else self.params.batch),
                )
                .fetchall()
            )
            if not rows:
                break
            ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
            vectors = np.frombuffer(b"".join(row[1] for row in rows), dtype=np.float32).reshape(len(rows), -1)
            with self._lock.writing() if lock else nullcontext():
                if untrained:  # a fresh quantized graph learns its ranges from its first rows
                    graph.index.train(vectors)
                    graph.trained = len(rows)
                graph.index.add_with_ids(vectors, ids)
            graph.watermark = int(ids[-1])
            grew = True
        return grew

    def _live(self, upto: int) -> int:
        return self.db.conn().execute("SELECT count(*) FROM chunks WHERE id <= ?", (upto,)).fetchone()[0]

    def _generation(self) -> str:
        """The search index's write count (SqliteSearchIndex moves it with every write)."""
        row = self.db.conn().execute("SELECT value FROM meta WHERE key = 'index_generation'").fetchone()
        return "" if row is None else str(row[0])

    def _rows(self) -> int:
        return self.db.conn().execute("SELECT count(*) FROM chunks").fetchone()[0]

    def _newest(self) -> int:
        return self.db.conn().execute("SELECT coalesce(max(id), 0) FROM chunks").fetchone()[0]

    def _run(self) -> None:
        step = self.reload if self.follow else self.catch_up
        while not self._stop.is_set():
            self._wake.clear()
            try:
                step()
            except Exception:
                log.exception("vector graph %s failed; searches scan exactly meanwhile", step.__name__)
            self._wake.wait(timeout=self.idle_seconds)

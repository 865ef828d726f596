"""The embedded index's HNSW graph (real faiss, real SQLite): same answers as the exact scan,
filters and deletions applied inside the graph search, rows newer than the graph still found."""

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from ragmcp.adapters.local.database import Database
from ragmcp.adapters.local.hnsw import HnswParams, HnswVectors
from ragmcp.adapters.local.sqlite_index import SqliteSearchIndex, filter_sql
from ragmcp.domain.models import Acl, Chunk, Document, Principal, SearchFilter

DIM = 16
DOCS = 300


def vectors(seed: int, n: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def doc(tenant: str, n: int, **fields) -> Document:
    name = f"d{n}"
    return Document(
        tenant=tenant, doc_id=name, source="s", path=name, title=name, file_name=name, file_type="md",
        content_hash="h", **fields,
    )  # fmt: skip


def put(index: SqliteSearchIndex, document: Document, seed: int) -> None:
    chunks = [
        Chunk(chunk_id=f"{document.doc_id}#{i}", doc_id=document.doc_id, ordinal=i, text="t", headline="", summary="")
        for i in range(2)
    ]
    index.replace_document(document, chunks, vectors(seed, 2))


def make(
    tmp_path, exact_below: int = 0, kind: str | None = None
) -> tuple[SqliteSearchIndex, SqliteSearchIndex, HnswVectors]:
    """Two indexes over one database: one exact, one through the graph (storing `kind` vectors,
    by default those of hnsw_vectors' default)."""
    db = Database(tmp_path / "t.db")
    params = HnswParams(DIM, m=16, ef_construction=64, ef_search=64)
    params = params if kind is None else dataclasses.replace(params, vectors=kind)
    graph = HnswVectors(db, tmp_path / "vectors.hnsw", params)
    return SqliteSearchIndex(db, None), SqliteSearchIndex(db, graph, exact_below=exact_below), graph


def ids(hits) -> list[str]:
    return [h.chunk_id for h in hits]


@pytest.fixture
def filled(tmp_path):
    exact, approx, graph = make(tmp_path)
    for n in range(DOCS):
        put(exact, doc("t", n, tags=("even",) if n % 2 == 0 else ()), n)
    graph.catch_up()
    return exact, approx, graph


def test_graph_agrees_with_the_exact_scan(filled):
    exact, approx, _ = filled
    me = Principal(tenant="t")
    found = [
        (ids(approx.search_vector(me, q, SearchFilter(), 10)), ids(exact.search_vector(me, q, SearchFilter(), 10)))
        for q in vectors(999, 50)
    ]
    overlap = [len(set(a) & set(e)) for a, e in found]
    assert sum(overlap) / (10 * len(overlap)) >= 0.98
    first = exact.search_vector(me, vectors(999, 1)[0], SearchFilter(), 5)
    again = approx.search_vector(me, vectors(999, 1)[0], SearchFilter(), 5)
    assert [h.raw_score for h in again] == pytest.approx([h.raw_score for h in first], abs=1e-3)  # fp16 codes


def test_walks_on_threads_at_once_find_what_each_finds_alone_and_a_filtered_walk_keeps_its_filter(filled):
    """Unfiltered walks share their parameters (made once a breadth); a filtered walk makes its own, so
    it never walks without its filter, whatever ran before it or beside it."""
    _, approx, _ = filled
    me, even = Principal(tenant="t"), SearchFilter(tags_any=("even",))

    def both(query: np.ndarray) -> tuple[list[str], list[str], list[str]]:
        return (
            ids(approx.search_vector(me, query, SearchFilter(), 10)),
            ids(approx.search_vector(me, query, even, 10)),
            ids(approx.search_vector(me, query, SearchFilter(), 120)),  # k above the breadth (80): walked k wide
        )

    queries = list(vectors(999, 40))
    alone = [both(q) for q in queries]
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(both, queries)) == alone
    evens = {f"d{n}#{i}" for n in range(0, DOCS, 2) for i in range(2)}
    assert all(len(filtered) == 10 and set(filtered) <= evens for _, filtered, _ in alone)
    assert any(not set(unfiltered) <= evens for unfiltered, _, _ in alone)


def test_an_unfiltered_walk_is_as_wide_as_asked_whatever_breadth_walked_before(filled):
    """The shared parameters are remade when the breadth changes (a graph grown past 100k nodes, a k
    above the breadth): a walk never goes at a breadth another search asked for."""
    _, _, graph = filled
    asked = [80, 80, 120, 80, 405, 405]
    walked = [graph._walk(ef, None) for ef in asked]
    assert [params.efSearch for params in walked] == asked
    assert walked[0] is walked[1] and walked[4] is walked[5]  # made once a breadth
    allowed = np.ones(8, dtype=np.uint8)
    assert graph._walk(80, allowed) is not walked[3] and graph._walk(80, allowed).sel is not None


SMALL = 50
"""Documents of the quick tests of the graph file (two chunks each)."""


@pytest.fixture
def small(tmp_path):
    exact, approx, graph = make(tmp_path, kind="sq8")
    for n in range(SMALL):
        put(exact, doc("t", n), n)
    graph.catch_up()
    return exact, approx, graph


def test_a_float32_graph_gives_the_exact_scans_scores(tmp_path):
    exact, approx, graph = make(tmp_path, kind="float32")
    for n in range(SMALL):
        put(exact, doc("t", n), n)
    graph.catch_up()
    me, query = Principal(tenant="t"), vectors(999, 1)[0]
    first, again = exact.search_vector(me, query, SearchFilter(), 5), approx.search_vector(me, query, SearchFilter(), 5)
    assert ids(again) == ids(first)
    assert [h.raw_score for h in again] == pytest.approx([h.raw_score for h in first], abs=1e-5)


def graph_file(tmp_path, kind: str) -> int:
    """The size of the saved graph over the same rows, storing `kind` vectors."""
    folder = tmp_path / kind
    folder.mkdir()
    exact, _, graph = make(folder, kind=kind)
    for n in range(SMALL):
        put(exact, doc("t", n), n)
    graph.catch_up()
    return (folder / "vectors.hnsw").stat().st_size


def test_quantized_graphs_store_two_or_one_bytes_a_dimension(tmp_path):
    full, half, byte = (graph_file(tmp_path, kind) for kind in ("float32", "fp16", "sq8"))
    nodes = 2 * SMALL
    assert full - half == pytest.approx(nodes * DIM * 2, abs=2 * DIM * 4 + 64)  # the quantizer's ranges besides
    assert full - byte == pytest.approx(nodes * DIM * 3, abs=2 * DIM * 4 + 64)


def test_a_graph_of_the_older_format_is_rebuilt_by_the_writer_never_loaded_by_a_follower(small, tmp_path):
    """Before the quantizer the file began with a header (magic, watermark, dimension, SHA-256)
    and held float32 vectors: such a file is never loaded, and the writer's next load rebuilds it."""
    from ragmcp.adapters.local.hnsw import check_file

    path = tmp_path / "vectors.hnsw"
    older = b"rmcphns2" + (2 * SMALL).to_bytes(8, "little") + DIM.to_bytes(8, "little") + b"\0" * 32
    path.write_bytes(older + path.read_bytes())
    assert check_file(path, DIM, 2 * SMALL) is None  # it fits this database: rebuilt, not refused
    db = Database(tmp_path / "t.db")
    params = HnswParams(DIM, m=16, ef_construction=64, ef_search=64)
    follower = HnswVectors(db, path, params, follow=True)
    assert not follower.reload() and follower.status()["state"] == "loading"
    writer = HnswVectors(db, path, params)
    writer.catch_up()
    assert writer.status() == {"state": "ready", "nodes": 2 * SMALL, "behind": 0}
    assert path.read_bytes().endswith(b"rmcphns3") and not path.read_bytes().startswith(b"rmcphns")
    assert follower.reload() and follower.status() == {"state": "ready", "nodes": 2 * SMALL, "behind": 0}


def test_a_graph_of_another_vector_kind_is_rebuilt_by_the_writer_never_loaded_by_a_follower(small, tmp_path):
    path = tmp_path / "vectors.hnsw"
    sq8 = path.stat().st_size
    db = Database(tmp_path / "t.db")
    params = HnswParams(DIM, m=16, ef_construction=64, ef_search=64, vectors="float32")
    follower = HnswVectors(db, path, params, follow=True)
    assert not follower.reload()  # the file holds 8-bit vectors; the follower was asked for float32
    writer = HnswVectors(db, path, params)
    writer.catch_up()
    assert writer.status()["nodes"] == 2 * SMALL and path.stat().st_size > sq8
    assert follower.reload() and follower.status()["nodes"] == 2 * SMALL


def test_a_follower_maps_the_graph_file_and_its_searches_agree_with_the_writers(small, tmp_path):
    _, approx, writer = small
    db = Database(tmp_path / "t.db")
    follower = HnswVectors(db, tmp_path / "vectors.hnsw", writer.params, follow=True)
    assert follower.reload() and follower._graph is not None and follower._graph.mapped
    assert writer._graph.mapped  # the writer too searches the mapping, and adds to a copy
    reader, me = SqliteSearchIndex(db, follower, exact_below=0), Principal(tenant="t")
    for q in vectors(5, 10):
        assert ids(reader.search_vector(me, q, SearchFilter(), 10)) == ids(
            approx.search_vector(me, q, SearchFilter(), 10)
        )


def test_a_quantizer_that_learnt_from_few_rows_learns_again_once_the_graph_has_grown(tmp_path):
    exact, _, graph = make(tmp_path, kind="sq8")
    for n in range(5):
        put(exact, doc("t", n), n)
    graph.catch_up()
    assert graph._graph.trained == 10
    for n in range(5, 30):
        put(exact, doc("t", n), n)
    graph.catch_up()
    assert graph._graph.trained == 60 and graph.status() == {"state": "ready", "nodes": 60, "behind": 0}
    for n in range(30, 40):
        put(exact, doc("t", n), n)
    graph.catch_up()  # 80 rows: not four times the 60 it learnt from, so only added
    assert graph._graph.trained == 60 and graph.status()["nodes"] == 80
    _, again, reloaded = make(tmp_path, kind="sq8")
    reloaded.catch_up()
    assert reloaded._graph.trained == 60  # saved with the file
    q = vectors(39, 2)[1]
    assert ids(again.search_vector(Principal(tenant="t"), q, SearchFilter(), 1)) == ["d39#1"]


def test_the_graph_file_check_reads_its_trailer(small, tmp_path):
    from ragmcp.adapters.local.hnsw import check_file

    path = tmp_path / "vectors.hnsw"
    assert check_file(path, DIM, 2 * SMALL, full=True) is None
    assert "not its graph" in check_file(path, DIM, 10)
    assert "16-dimensional vectors, the index 32-dimensional" in check_file(path, 32, 2 * SMALL)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    assert check_file(path, DIM, 2 * SMALL) is None  # the quick check reads the trailer only
    assert "fails its checksum" in check_file(path, DIM, 2 * SMALL, full=True)
    path.write_bytes(bytes(data[:100]))
    assert "not a ragmcp vector graph" in check_file(path, DIM, 2 * SMALL)


def test_filters_apply_inside_the_graph_search(filled):
    _, approx, _ = filled
    evens = {f"d{n}#{i}" for n in range(0, DOCS, 2) for i in range(2)}
    for q in vectors(7, 20):
        hits = approx.search_vector(Principal(tenant="t"), q, SearchFilter(tags_any=("even",)), 10)
        assert len(hits) == 10 and set(ids(hits)) <= evens
        assert approx.search_vector(Principal(tenant="other"), q, SearchFilter(), 10) == []


def test_deleted_and_restricted_rows_are_never_returned(filled):
    exact, approx, graph = filled
    target = vectors(42, 2)[0]
    me = Principal(tenant="t")
    assert ids(approx.search_vector(me, target, SearchFilter(), 1)) == ["d42#0"]
    exact.delete_document("t", "d42")
    assert "d42#0" not in ids(approx.search_vector(me, target, SearchFilter(), 10))
    put(exact, doc("t", 42, acl=Acl(groups=("hr",))), 42)
    assert "d42#0" not in ids(approx.search_vector(me, target, SearchFilter(), 10))
    hr = Principal(tenant="t", groups=("hr",))
    assert ids(approx.search_vector(hr, target, SearchFilter(), 1)) == ["d42#0"]
    assert graph.status()["behind"] == 2


def test_rows_newer_than_the_graph_are_found_then_added(filled):
    exact, approx, graph = filled
    put(exact, doc("t", 5000), 5000)
    target = vectors(5000, 2)[1]
    assert ids(approx.search_vector(Principal(tenant="t"), target, SearchFilter(), 1)) == ["d5000#1"]
    graph.catch_up()
    assert graph.status() == {"state": "ready", "nodes": 2 * DOCS + 2, "behind": 0}
    assert ids(approx.search_vector(Principal(tenant="t"), target, SearchFilter(), 1)) == ["d5000#1"]


def test_the_saved_graph_is_loaded_and_a_mostly_deleted_one_rebuilt(filled, tmp_path):
    exact, _, _ = filled
    _, approx, reloaded = make(tmp_path)
    reloaded.catch_up()
    assert reloaded.status() == {"state": "ready", "nodes": 2 * DOCS, "behind": 0}
    for n in range(DOCS // 2):
        exact.delete_document("t", f"d{n}")
    reloaded.catch_up()
    assert reloaded.status()["nodes"] == DOCS
    q = vectors(DOCS - 1, 2)[0]
    assert ids(approx.search_vector(Principal(tenant="t"), q, SearchFilter(), 1)) == [f"d{DOCS - 1}#0"]


def test_a_follower_loads_the_writers_saved_graph_and_never_writes_it(filled, tmp_path):
    """A reader process's graph (serve --workers N): it loads what the writer saved, finds rows the
    writer has not saved yet by the exact scan, and loads the newer file once the writer saves."""
    exact, _, writer = filled
    db = Database(tmp_path / "t.db")
    params = HnswParams(DIM, m=16, ef_construction=64, ef_search=64)
    follower = HnswVectors(db, tmp_path / "vectors.hnsw", params, follow=True)
    reader = SqliteSearchIndex(db, follower)
    assert follower.reload() and follower.status() == {"state": "ready", "nodes": 2 * DOCS, "behind": 0}
    assert not follower.reload()  # nothing new saved
    saved = (tmp_path / "vectors.hnsw").stat()
    put(exact, doc("t", 7000), 7000)
    target = vectors(7000, 2)[0]
    me = Principal(tenant="t")
    assert ids(reader.search_vector(me, target, SearchFilter(), 1)) == ["d7000#0"]  # scanned exactly
    assert not follower.reload() and follower.status()["behind"] == 2
    writer.catch_up()
    assert follower.reload() and follower.status() == {"state": "ready", "nodes": 2 * DOCS + 2, "behind": 0}
    assert ids(reader.search_vector(me, target, SearchFilter(), 1)) == ["d7000#0"]
    exact.delete_document("t", "d7000")
    assert "d7000#0" not in ids(reader.search_vector(me, target, SearchFilter(), 10))
    assert (tmp_path / "vectors.hnsw").stat().st_mtime_ns != saved.st_mtime_ns
    follower.start()  # the follower's thread only loads: the writer's file stays as the writer saved it
    before = (tmp_path / "vectors.hnsw").read_bytes()
    follower.wake()
    follower.stop()
    assert (tmp_path / "vectors.hnsw").read_bytes() == before


def test_live_rows_are_counted_only_after_a_write(filled, monkeypatch):
    exact, _, graph = filled
    counts = []
    live = graph._live
    monkeypatch.setattr(graph, "_live", lambda upto: counts.append(upto) or live(upto))
    graph.catch_up()
    graph.catch_up()
    assert counts == []  # idle wake-ups: nothing written, nothing counted
    exact.delete_document("t", "d3")
    graph.catch_up()
    graph.catch_up()
    assert len(counts) == 1


def test_the_filter_in_use_keeps_its_bitmap_while_one_off_filters_come_and_go(filled):
    _, approx, _ = filled
    me = Principal(tenant="t")
    tenant_wide = approx._allowed(*filter_sql(me, SearchFilter()))
    for n in range(100):  # a search's keyword-only hits: a chunk-id filter of their own, used once
        approx._allowed(*filter_sql(me, SearchFilter(chunk_ids=(f"d{n}#0", f"d{n}#1"))))
        assert approx._allowed(*filter_sql(me, SearchFilter())) is tenant_wide


def test_concurrent_searches_missing_one_filter_make_its_bitmap_once(filled, monkeypatch):
    _, approx, _ = filled
    conn, made = approx.db.conn, []

    class Counting:
        """The thread's connection, counting (and slowing) the reads of a filter's rows."""

        def __init__(self, inner):
            self.inner = inner

        def execute(self, sql, *args):
            if sql.startswith("SELECT c.id FROM chunks"):
                made.append(sql)
                time.sleep(0.05)
            return self.inner.execute(sql, *args)

    monkeypatch.setattr(approx.db, "conn", lambda: Counting(conn()))
    where = filter_sql(Principal(tenant="t"), SearchFilter())
    with ThreadPoolExecutor(8) as pool:
        found = list(pool.map(lambda _: approx._allowed(*where), range(8)))
    assert len(made) == 1
    assert all(f is found[0] for f in found) and found[0].count == 2 * DOCS


def test_small_filtered_sets_scan_exactly(tmp_path):
    exact, approx, graph = make(tmp_path, exact_below=1000)
    for n in range(50):
        put(exact, doc("t", n), n)
    graph.catch_up()
    q = vectors(3, 1)[0]
    assert ids(approx.search_vector(Principal(tenant="t"), q, SearchFilter(), 10)) == ids(
        exact.search_vector(Principal(tenant="t"), q, SearchFilter(), 10)
    )


WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def reference_bm25(texts: dict[str, str], query: str, k1: float = 1.2, b: float = 0.75) -> dict[str, float]:
    """bm25 written out over whitespace words (the test's words are their own Porter stems), with
    the statistics of the chunks given (the tenant's), the query's words each counted once."""
    import math

    words = {cid: text.split() for cid, text in texts.items()}
    avgdl = sum(map(len, words.values())) / len(words)
    scores: dict[str, float] = {}
    for term in dict.fromkeys(query.lower().split()):
        df = sum(term in w for w in words.values())
        idf = math.log(1 + (len(words) - df + 0.5) / (df + 0.5))
        for cid, w in words.items():
            tf = w.count(term)
            if tf:
                norm = k1 * (1 - b + b * len(w) / avgdl)
                scores[cid] = scores.get(cid, 0.0) + idf * tf * (k1 + 1) / (tf + norm)
    return scores


def test_term_postings_give_the_tenants_bm25_within_the_filter(tmp_path):
    """The in-memory term scores are bm25 with the tenant's statistics (another tenant's chunks
    with the same words change nothing), within the filter, for common words (dense columns) and
    rare ones (sparse), with and without the postings kept; a write starts a new generation (new
    scores, deleted rows gone). Term scores are kept in 16 bits (also when the postings are off: the
    same scores either way): within 0.05% of the reference each, the ranking the reference's but for
    chunks whose scores are that close."""
    from ragmcp.adapters.local.postings import TermPostings

    db = Database(tmp_path / "t.db")
    plain, fast = SqliteSearchIndex(db), SqliteSearchIndex(db, None, TermPostings(), exact_below=0)
    rng = np.random.default_rng(1)
    texts: dict[str, dict[str, str]] = {"t": {}, "other": {}}
    for n in range(300):
        tenant = "t" if n < 200 else "other"
        text = " ".join(rng.choice(WORDS, size=int(rng.integers(3, 30)))) + (" omega" if n % 40 == 7 else "")
        document = doc(tenant, n, tags=("even",) if n % 2 == 0 else ())
        chunk = Chunk(chunk_id=f"d{n}#0", doc_id=document.doc_id, ordinal=0, text=text, headline="", summary="")
        plain.replace_document(document, [chunk], vectors(n, 1))
        texts[tenant][chunk.chunk_id] = text
    me = Principal(tenant="t")
    even = {cid for cid in texts["t"] if int(cid[1:].split("#")[0]) % 2 == 0}
    queries = [("alpha beta", SearchFilter(), None), ("gamma OR mu kappa", SearchFilter(tags_any=("even",)), even)]
    queries += [("omega", SearchFilter(), None), ("beta omega", SearchFilter(tags_any=("even",)), even)]
    for query, flt, only in queries:
        reference = reference_bm25(texts["t"], query)
        expected = sorted(((s, c) for c, s in reference.items() if only is None or c in only), reverse=True)[:20]
        for index in (plain, fast):
            got = index.search_fts(me, query, flt, 20)
            assert [h.raw_score for h in got] == pytest.approx([s for s, _ in expected], rel=1e-3), query
            edge = expected[-1][0] * (1 + 1e-3)  # scores this close (or equal) at the edge may come in any order
            assert {h.chunk_id for h in got if h.raw_score > edge} == {c for s, c in expected if s > edge}
    assert fast.search_fts(Principal(tenant="nobody"), "alpha", SearchFilter(), 5) == []
    best = fast.search_fts(me, "alpha", SearchFilter(), 1)[0].chunk_id
    plain.delete_document("t", best.split("#")[0])
    del texts["t"][best]
    assert best not in {h.chunk_id for h in fast.search_fts(me, "alpha", SearchFilter(), 200)}
    expected = sorted(reference_bm25(texts["t"], "alpha").values(), reverse=True)[:20]
    assert [h.raw_score for h in fast.search_fts(me, "alpha", SearchFilter(), 20)] == pytest.approx(expected, rel=1e-3)


def test_searches_of_a_caught_up_index_read_nothing_from_sqlite(filled):
    """Once a filter's rows, its terms' postings and the chunk names are in memory, and the graph
    holds every row, keyword and vector searches run no SQL but the index generation's read."""
    from ragmcp.adapters.local.postings import TermPostings

    exact, _, graph = filled
    index = SqliteSearchIndex(exact.db, graph, TermPostings(), exact_below=0)
    me, query = Principal(tenant="t"), vectors(999, 1)[0]
    first = (
        ids(index.search_vector(me, query, SearchFilter(), 10)),
        ids(index.search_fts(me, "t", SearchFilter(), 10)),
    )
    statements: list[str] = []
    exact.db.conn().set_trace_callback(statements.append)
    try:
        again = (
            ids(index.search_vector(me, query, SearchFilter(), 10)),
            ids(index.search_fts(me, "t", SearchFilter(), 10)),
        )
    finally:
        exact.db.conn().set_trace_callback(None)
    assert again == first and len(first[0]) == len(first[1]) == 10
    assert all("index_generation" in statement for statement in statements), statements
    put(exact, doc("t", 7000), 7000)  # a row the graph lacks: scanned exactly, and named
    assert ids(index.search_vector(me, vectors(7000, 2)[0], SearchFilter(), 1)) == ["d7000#0"]


def test_a_search_among_given_chunks_finds_them_by_their_ids(filled):
    """A chunk_ids filter (the similarity of keyword-only hits) looks the chunks up by UNIQUE(tenant,
    chunk_id) instead of walking every chunk of the tenant."""
    from ragmcp.adapters.local.sqlite_index import filter_sql

    exact, _, _ = filled
    where, params = filter_sql(Principal(tenant="t"), SearchFilter(chunk_ids=("d1#0", "d2#1")))
    plan = exact.db.conn().execute(
        f"EXPLAIN QUERY PLAN SELECT c.id FROM chunks c JOIN idx_docs d ON d.id = c.doc WHERE {where}", params
    )
    assert any("sqlite_autoindex_chunks_1" in row[-1] for row in plan)
    hits = exact.search_vector(Principal(tenant="t"), vectors(1, 2)[0], SearchFilter(chunk_ids=("d1#0", "d2#1")), 5)
    assert ids(hits) == ["d1#0", "d2#1"]
    assert exact.search_vector(Principal(tenant="u"), vectors(1, 2)[0], SearchFilter(chunk_ids=("d1#0",)), 5) == []


def test_the_warm_pass_loads_common_words_and_names_before_the_first_search(tmp_path):
    """After warming, a search of common words reads no postings and no names from SQLite; rare
    words are left for their first search; the worker reports warming, then what it loaded."""
    import threading

    from ragmcp.adapters.local.postings import TermPostings
    from ragmcp.adapters.local.warmer import IndexWarmer

    db = Database(tmp_path / "t.db")
    index = SqliteSearchIndex(db, None, TermPostings(), exact_below=0)
    rng = np.random.default_rng(3)
    for n in range(500):  # omega, in one chunk, is under the 0.25% a word needs to be warmed
        text = " ".join(rng.choice(WORDS, size=12)) + (" omega" if n == 7 else "")
        document = doc("t", n)
        chunk = Chunk(chunk_id=f"d{n}#0", doc_id=document.doc_id, ordinal=0, text=text, headline="", summary="")
        index.replace_document(document, [chunk], vectors(n, 1))
    warmer = IndexWarmer(index)
    assert warmer.status() == {"state": "warming"}
    warmer.start()
    for _ in range(500):
        if warmer.report is not None:
            break
        threading.Event().wait(0.01)
    status = warmer.status()
    assert status["state"] == "ready" and status["chunk_names"] == 500 and status["terms"] == len(WORDS)
    assert status["postings_bytes"] >= 8 * 500 * len(WORDS) // 4 and warmer.problem() is None
    statements: list[str] = []
    db.conn().set_trace_callback(statements.append)
    try:
        hits = index.search_fts(Principal(tenant="t"), "Alpha beta", SearchFilter(), 5)
        assert len(hits) == 5 and not any("chunk_terms" in s or "chunk_id FROM chunks" in s for s in statements)
        assert [h.chunk_id for h in index.search_fts(Principal(tenant="t"), "omega", SearchFilter(), 5)] == ["d7#0"]
        assert any("chunk_terms" in s for s in statements)  # a rare word is read at its first search
    finally:
        db.conn().set_trace_callback(None)
    warmer.stop()


def test_term_postings_top_is_the_brute_force_top_with_ties_in_row_order():
    """Dense and sparse columns, scores rounded so that many tie, filters that pass all, most or few
    rows: the k best are those of sorting every row by (-score, row id), the scores as kept (16-bit
    floats, summed in 64 bits)."""
    from ragmcp.adapters.local.postings import TermPostings

    rng = np.random.default_rng(5)
    size = 5000
    shares = {"common": 0.9, "usual": 0.4, "rare": 0.02, "rarer": 0.004}
    columns = {}
    for term, share in shares.items():
        rows = np.sort(rng.choice(np.arange(1, size), int(size * share), replace=False))
        columns[term] = (rows, np.round(rng.random(rows.size) * (3 if share < 0.25 else 0.3), 1).astype(np.float16))
    for generation, (terms, passing, k) in enumerate(
        [(["common", "rare"], 1.0, 10), (["common", "usual", "rarer"], 0.7, 50), (["usual", "rare"], 0.01, 20)]
    ):
        allowed = rng.random(size) < passing
        totals = np.zeros(size)
        for term in terms:
            np.add.at(totals, columns[term][0], columns[term][1])
        totals[~allowed] = 0
        order = sorted((i for i in range(size) if totals[i] > 0), key=lambda i: (-totals[i], i))[:k]
        ids, scores = TermPostings().top(generation, terms, columns.__getitem__, allowed, k)
        assert ids.tolist() == order
        assert scores.tolist() == pytest.approx([totals[i] for i in order])


def test_graph_searches_read_together_and_a_waiting_writer_goes_next():
    """Readers share the graph; a writer waits for them, and new readers wait for the writer."""
    import threading

    from ragmcp.adapters.local.hnsw import ReadWriteLock

    lock, events = ReadWriteLock(), []

    def run(kind: str, started: threading.Event, release: threading.Event) -> threading.Thread:
        def body() -> None:
            with getattr(lock, kind)():
                events.append(kind)
                started.set()
                release.wait(10)

        thread = threading.Thread(target=body)
        thread.start()
        return thread

    first_in, first_out = threading.Event(), threading.Event()
    second_in, second_out = threading.Event(), threading.Event()
    readers = [run("reading", first_in, first_out), run("reading", second_in, second_out)]
    assert first_in.wait(5) and second_in.wait(5)  # two readers inside at once
    writer_in, writer_out = threading.Event(), threading.Event()
    writer = run("writing", writer_in, writer_out)
    late_in, late_out = threading.Event(), threading.Event()
    for _ in range(500):  # until the writer is waiting (at most 5 s)
        if lock._writers:
            break
        threading.Event().wait(0.01)
    assert lock._writers == 1
    late = run("reading", late_in, late_out)
    assert not writer_in.wait(0.2) and not late_in.is_set()
    first_out.set()
    second_out.set()
    assert writer_in.wait(5)
    assert not late_in.wait(0.2)  # held back while the writer writes
    writer_out.set()
    assert late_in.wait(5)
    late_out.set()
    for thread in [*readers, writer, late]:
        thread.join(5)
    assert events == ["reading", "reading", "writing", "reading"]


def test_the_search_breadth_grows_with_the_graph_above_100k_nodes():
    from ragmcp.adapters.local.hnsw import EF_GROWTH_FROM, ef_search_for

    assert [ef_search_for(n, 128) for n in (0, 10_000, EF_GROWTH_FROM)] == [128, 128, 128]
    wider = [ef_search_for(n, 128) for n in (EF_GROWTH_FROM + 1, 300_000, 1_000_000, 10_000_000)]
    assert wider == sorted(wider) and wider[0] == 128 and wider[-1] > 2 * wider[1]


def test_the_default_breadth_walks_100k_nodes_80_wide_and_1m_nodes_as_wide_as_before():
    """At 100k chunks 80 wide (recall@10 0.989, 128: 0.993; the server's nDCG@10 within 0.001) for 0.6
    of the walk; at 1M the 405 that gives recall@10 0.977 there (issue 31's 0.97), as before."""
    from ragmcp.adapters.local.hnsw import ef_search_for
    from ragmcp.settings import IndexSettings

    base = IndexSettings().hnsw_ef_search
    assert base == HnswParams(DIM).ef_search == 80
    assert [ef_search_for(n, base) for n in (11_171, 100_001, 1_000_002)] == [80, 80, 405]
    grown = [ef_search_for(n, base) for n in range(100_001, 1_000_002, 50_000)]
    assert grown == sorted(grown)


def test_a_graph_whose_vectors_need_no_ranges_is_never_rebuilt_to_learn_them(tmp_path):
    """fp16 learns nothing from rows: an idle catch-up of a small fp16 graph leaves its file alone."""
    exact, _, graph = make(tmp_path, kind="fp16")
    for n in range(5):
        put(exact, doc("t", n), n)
    graph.catch_up()
    saved = (tmp_path / "vectors.hnsw").stat()
    graph.catch_up()
    assert (tmp_path / "vectors.hnsw").stat().st_ino == saved.st_ino and graph.status()["nodes"] == 10


def test_an_8_bit_graph_ranks_its_hits_by_their_exact_cosines(tmp_path):
    """8-bit codes move a cosine by up to about 0.005, enough to reorder close neighbours (recall@10
    at 1M chunks 0.959 as walked): the graph's hits are rescored from the rows' float32 vectors."""
    exact, approx, graph = make(tmp_path, kind="sq8")
    for n in range(SMALL):
        put(exact, doc("t", n), n)
    graph.catch_up()
    me = Principal(tenant="t")
    for query in vectors(999, 5):
        cosines = {h.chunk_id: h.raw_score for h in exact.search_vector(me, query, SearchFilter(), 2 * SMALL)}
        again = approx.search_vector(me, query, SearchFilter(), 5)
        # each hit scored by its exact cosine, best first (faiss builds the graph on several threads,
        # so which nodes a walk reaches may vary: the scores and their order may not)
        assert [h.raw_score for h in again] == pytest.approx([cosines[h.chunk_id] for h in again], abs=1e-5)
        assert [h.raw_score for h in again] == sorted((h.raw_score for h in again), reverse=True)


def test_a_graph_of_more_bits_is_re_encoded_with_its_links_kept(filled, tmp_path):
    """Asking for 8-bit vectors over a saved fp16 graph stores the same graph's vectors in 8 bits (seconds
    at 1M chunks, where a rebuild takes many minutes): the links are the fp16 graph's, the file is smaller,
    a follower maps it, and searches still agree with the exact scan."""
    import faiss

    exact, _, fp16 = filled
    path = tmp_path / "vectors.hnsw"
    links = faiss.vector_to_array(faiss.downcast_index(fp16._graph.index.index).hnsw.neighbors)
    size = path.stat().st_size
    db = Database(tmp_path / "t.db")
    params = dataclasses.replace(fp16.params, vectors="sq8")
    writer = HnswVectors(db, path, params)
    writer.catch_up()
    assert writer._graph.kind == "sq8" and writer._graph.mapped and writer.status()["nodes"] == 2 * DOCS
    assert (faiss.vector_to_array(faiss.downcast_index(writer._graph.index.index).hnsw.neighbors) == links).all()
    saved = size - path.stat().st_size  # a byte a dimension instead of two
    assert saved == pytest.approx(2 * DOCS * DIM, abs=2 * DIM * 4 + 64)
    follower = HnswVectors(db, path, params, follow=True)
    assert follower.reload() and follower.status()["nodes"] == 2 * DOCS
    me, approx = Principal(tenant="t"), SqliteSearchIndex(db, follower)
    found = [
        (ids(approx.search_vector(me, q, SearchFilter(), 10)), ids(exact.search_vector(me, q, SearchFilter(), 10)))
        for q in vectors(999, 20)
    ]
    assert sum(len(set(a) & set(e)) for a, e in found) / (10 * len(found)) >= 0.98


def test_an_auto_graph_stores_fp16_then_8_bits_once_it_grows_past_the_size(tmp_path, monkeypatch):
    """hnsw_vectors' default: fp16 while the graph is small, its vectors re-encoded into 8 bits (its links
    kept) at the catch-up that takes it past AUTO_SQ8_FROM nodes; a follower maps whichever the writer saved."""
    from ragmcp.adapters.local import hnsw

    monkeypatch.setattr(hnsw, "AUTO_SQ8_FROM", 150)
    exact, _, graph = make(tmp_path)
    assert graph.params.vectors == "auto"
    for n in range(60):
        put(exact, doc("t", n), n)
    graph.catch_up()
    follower = HnswVectors(Database(tmp_path / "t.db"), tmp_path / "vectors.hnsw", graph.params, follow=True)
    assert graph._graph.kind == "fp16" and follower.reload() and follower._graph.kind == "fp16"
    for n in range(60, 90):
        put(exact, doc("t", n), n)
    graph.catch_up()
    assert graph._graph.kind == "sq8" and graph._graph.trained == 180 and graph.status()["nodes"] == 180
    assert follower.reload() and follower._graph.kind == "sq8"
    me, reader = Principal(tenant="t"), SqliteSearchIndex(Database(tmp_path / "t.db"), follower)
    found = [
        (ids(reader.search_vector(me, q, SearchFilter(), 10)), ids(exact.search_vector(me, q, SearchFilter(), 10)))
        for q in vectors(999, 20)
    ]
    assert sum(len(set(a) & set(e)) for a, e in found) / (10 * len(found)) >= 0.95
    _, _, again = make(tmp_path)
    again.catch_up()  # a restart keeps the 8-bit file as it is
    assert again._graph.kind == "sq8" and again._graph.mapped


def test_a_filters_rows_are_counted_against_the_graph_once_not_at_every_search(filled, monkeypatch):
    """Whether a filter passes every node is a count over one bool a chunk (a tenth of a millisecond at 1M
    chunks, five a request): made once for a filter's kept rows and a graph, again after a write."""
    import sys

    from ragmcp.adapters.local import hnsw

    exact, approx, graph = filled
    counted = []
    count_nonzero = np.count_nonzero

    def counting(array, *args, **kwargs):
        if sys._getframe(1).f_code.co_filename == hnsw.__file__:
            counted.append(array.size)
        return count_nonzero(array, *args, **kwargs)

    monkeypatch.setattr(hnsw.np, "count_nonzero", counting)
    me = Principal(tenant="t")
    first = [ids(approx.search_vector(me, q, SearchFilter(), 10)) for q in vectors(999, 5)]
    assert len(counted) == 1
    assert [ids(approx.search_vector(me, q, SearchFilter(), 10)) for q in vectors(999, 5)] == first
    assert len(counted) == 1
    put(exact, doc("t", DOCS), DOCS)
    graph.catch_up()
    approx.search_vector(me, vectors(999, 1)[0], SearchFilter(), 10)
    assert len(counted) == 2


def test_a_requests_candidates_are_scored_as_its_searches_score_them_with_no_sql(tmp_path):
    """Issue 27's fusion scores each phrase's candidates on both sides in one call (`score_chunks`): the
    chunks a search returned (their rows remembered) get the bm25 the full search gives them, to the bit
    (their rows looked up in the term columns, rare and common), and the cosine of the graph's fp16 codes
    (each within 2^-11 of the exact: half a unit in fp16's last place a dimension, over unit vectors),
    with no SQL but the index generation's read. Chunks no search of this index returned (another
    process's) are found by SQL and scored alike; without a graph the cosines are the stored vectors'."""
    from ragmcp.adapters.local.postings import TermPostings
    from ragmcp.ports import ScoresAsked

    db = Database(tmp_path / "t.db")
    graph = HnswVectors(db, tmp_path / "vectors.hnsw", HnswParams(DIM, m=16, ef_construction=64, ef_search=64))
    index = SqliteSearchIndex(db, graph, TermPostings(), exact_below=0)
    exact = SqliteSearchIndex(db, None)
    rng = np.random.default_rng(5)
    for n in range(400):
        text = " ".join(rng.choice(WORDS, size=int(rng.integers(3, 30)))) + (" omega" if n % 9 == 1 else "")
        document = doc("t", n, tags=("even",) if n % 2 == 0 else ())
        chunk = Chunk(chunk_id=f"d{n}#0", doc_id=document.doc_id, ordinal=0, text=text, headline="", summary="")
        index.replace_document(document, [chunk], vectors(n, 1))
    graph.catch_up()
    me, words = Principal(tenant="t"), "alpha omega kappa"  # common and rare words
    queries = vectors(999, 2)
    every_bm25 = {h.chunk_id: h.raw_score for h in index.search_fts(me, words, SearchFilter(), 400)}
    asked = []
    for query in queries:
        keyword = {h.chunk_id for h in index.search_fts(me, words, SearchFilter(), 30)}
        semantic = {h.chunk_id for h in index.search_vector(me, query, SearchFilter(), 30)}
        asked.append(ScoresAsked(words, query, tuple(sorted(semantic - keyword)), tuple(sorted(keyword - semantic))))
    assert all(len(ask.bm25_of) > 10 and len(ask.cosine_of) > 10 for ask in asked)
    statements: list[str] = []
    db.conn().set_trace_callback(statements.append)
    try:
        scored = index.score_chunks(me, SearchFilter(), asked)
    finally:
        db.conn().set_trace_callback(None)
    assert all("index_generation" in statement for statement in statements), statements
    for ask, query, (bm25, cosines) in zip(asked, queries, scored, strict=True):
        assert bm25 == {c: every_bm25[c] for c in ask.bm25_of if c in every_bm25}
        every_cosine = {h.chunk_id: h.raw_score for h in exact.search_vector(me, query, SearchFilter(), 400)}
        assert list(cosines) == list(ask.cosine_of)
        assert list(cosines.values()) == pytest.approx([every_cosine[c] for c in ask.cosine_of], abs=2**-11)
    fresh = SqliteSearchIndex(db, graph, TermPostings(), exact_below=0)  # nothing remembered: SQL finds the rows
    assert fresh.score_chunks(me, SearchFilter(), asked) == scored
    gone = exact._cosine_table(queries, np.asarray([1, 10**6]))  # a row deleted after its id was read: 0
    assert gone.shape == (2, 2) and not gone[:, 1].any() and gone[:, 0].all()
    stored = exact.score_chunks(me, SearchFilter(), asked)  # no graph: the stored float32 vectors' cosines
    for (_, cosines), (_, exactly) in zip(scored, stored, strict=True):
        assert list(exactly) == list(cosines)
        assert list(exactly.values()) == pytest.approx(list(cosines.values()), abs=2**-11)
    rewritten = asked[0].cosine_of[0]  # written again: the same chunk id on a new row, the old row gone
    n = int(rewritten[1:-2])
    document = doc("t", n, tags=("even",) if n % 2 == 0 else ())
    text = index.get_chunks("t", [rewritten])[rewritten][0].text
    chunk = Chunk(chunk_id=rewritten, doc_id=document.doc_id, ordinal=0, text=text, headline="", summary="")
    index.replace_document(document, [chunk], vectors(n, 1))
    index.search_vector(me, queries[0], SearchFilter(), 30)  # the filter's rows made again, the old row not in them
    assert rewritten in index.score_chunks(me, SearchFilter(), asked)[0][1]
    even = SearchFilter(tags_any=("even",))
    for filtered in (index, fresh):
        (bm25, cosines), _ = filtered.score_chunks(me, even, asked)
        assert {*bm25, *cosines} <= {f"d{n}#0" for n in range(0, 400, 2)}  # the filter holds
        assert set(cosines) == {c for c in asked[0].cosine_of if int(c[1:-2]) % 2 == 0}


def test_the_graph_gives_no_cosines_it_cannot_give_exactly_enough(tmp_path):
    """`HnswVectors.cosines`: the fp16 or float32 codes' of rows it holds; None for a row it does not
    hold yet (past its watermark, or never a row) and for an 8-bit graph (its codes are 0.005 off)."""
    for kind, gives in (("float32", True), ("fp16", True), ("sq8", False)):
        exact, _, graph = make(tmp_path / kind, kind=kind)
        for n in range(50):
            put(exact, doc("t", n), n)
        graph.catch_up()
        rows = np.asarray([1, 7, 40], dtype=np.int64)
        queries = vectors(999, 2)
        stored = np.stack([vectors(0, 2)[0], vectors(3, 2)[0], vectors(19, 2)[1]])  # rows 1, 7 and 40
        found = graph.cosines(queries, rows)
        assert (found is not None) == gives, kind
        if found is not None:
            assert found.shape == (2, 3) and found.ravel() == pytest.approx((queries @ stored.T).ravel(), abs=1e-3)
        assert graph.cosines(queries, np.asarray([1, 101], dtype=np.int64)) is None  # 101: past the watermark


def test_the_keyword_sums_kept_for_scoring_stay_within_their_budget(tmp_path, monkeypatch):
    """The sums of recent keyword searches are kept for `score_chunks` within _SUMMED_BYTES (the oldest
    dropped first), and a search's are taken when read; a chunk whose search's sums were dropped is
    scored alike from the term columns."""
    from ragmcp.adapters.local import sqlite_index
    from ragmcp.adapters.local.postings import TermPostings
    from ragmcp.ports import ScoresAsked

    db = Database(tmp_path / "t.db")
    index = SqliteSearchIndex(db, None, TermPostings(), exact_below=0)
    rng = np.random.default_rng(3)
    for n in range(300):
        text = " ".join(rng.choice(WORDS, size=int(rng.integers(3, 30))))
        document = doc("t", n)
        chunk = Chunk(chunk_id=f"d{n}#0", doc_id=document.doc_id, ordinal=0, text=text, headline="", summary="")
        index.replace_document(document, [chunk], vectors(n, 1))
    me = Principal(tenant="t")
    table = 8 * 301  # one search's sums: a float64 a row id
    monkeypatch.setattr(sqlite_index, "_SUMMED_BYTES", 3 * table)
    queries = ["alpha", "beta gamma", "delta", "epsilon zeta", "eta"]
    hits = {query: index.search_fts(me, query, SearchFilter(), 300) for query in queries}
    assert len(index._summed) == 3 and sum(s.sums.nbytes for s in index._summed.values()) <= 3 * table
    asked = [ScoresAsked(query, vectors(0, 1)[0], tuple(h.chunk_id for h in hits[query][:20]), ()) for query in queries]
    scored = index.score_chunks(me, SearchFilter(), asked)  # the first two asks' sums were dropped: looked up
    assert [bm25 for bm25, _ in scored] == [{h.chunk_id: h.raw_score for h in hits[q][:20]} for q in queries]
    assert not index._summed  # each kept search's sums taken as read

"""One behaviour suite for the SearchIndex port, run against every adapter with the same assertions:
the embedded SQLite index (FTS5 + sqlite-vec) and the in-memory fake (tests/fakes.py) always; the
OpenSearch adapter on the OpenSearch double (managed-domain semantics, writes visible at once; needs
the API spec) and on a real cluster when OPENSEARCH_URL is set. Synthetic unit vectors stand in for
embeddings, so vector hits are exact."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import numpy as np
import pytest

from ragmcp.adapters.aws.opensearch import OpenSearchIndex
from ragmcp.adapters.local.database import Database
from ragmcp.adapters.local.sqlite_index import SqliteSearchIndex
from ragmcp.domain.models import Acl, Principal, SearchFilter, Tier
from ragmcp.ports import ScoresAsked, SearchIndex
from ragmcp.security.policy import can_read
from tests.fakes import MemorySearchIndex

from .opensearch_double import Clock, OpenSearchDouble
from .test_opensearch_adapter import DIM, chunks_for, fresh_index, jan1, make_doc, put, unit

T = Principal(tenant="t")


@pytest.fixture(
    params=[
        "sqlite",
        "memory",
        pytest.param("opensearch-double", marks=pytest.mark.slow),  # its chunk ledger runs on moto
        pytest.param("opensearch", marks=pytest.mark.slow),
    ]
)
def index(request: pytest.FixtureRequest, tmp_path) -> Iterator[SearchIndex]:
    if request.param == "sqlite":
        sqlite = SqliteSearchIndex(Database(tmp_path / "index.db"))
        sqlite.ensure_schema()
        sqlite.ensure_model("test-model", DIM)
        yield sqlite
        return
    if request.param == "memory":
        memory = MemorySearchIndex()
        memory.ensure_model("test-model", DIM)
        yield memory
        return
    spec, ledger = request.getfixturevalue("spec"), request.getfixturevalue("ledger")
    if request.param == "opensearch-double":
        double = OpenSearchDouble(spec, Clock(), serverless=False, delay=0.0)
        on_double = OpenSearchIndex(double, f"ragmcp-{request.node.name}", ledger)
        on_double.create("test-model", DIM)
        yield on_double
        return
    with fresh_index(request.getfixturevalue("cluster"), ledger) as on_cluster:
        yield on_cluster


def doc_ids(hits) -> list[str]:
    return sorted(h.chunk_id.split("#")[0] for h in hits)


def test_replace_then_search_both_ways_and_read_back(index):
    doc = make_doc("t", "d1", tags=("x",), metadata={"lang": "en"})
    texts = ["quarterly revenue grew", "headcount stayed flat", "outlook remains cautious"]
    put(index, doc, texts, [1, 2, 3])
    assert index.count_chunks("t") == 3

    hits = index.search_vector(T, unit(2), SearchFilter(), k=3)
    assert hits[0].chunk_id == "d1#1"
    expected = {f"d1#{i}": float(unit(s) @ unit(2)) for i, s in enumerate([1, 2, 3])}
    for hit in hits:
        assert hit.raw_score == pytest.approx(expected[hit.chunk_id], abs=1e-4)

    hits = index.search_fts(T, "quarterly revenue?", SearchFilter(), k=3)
    assert [h.chunk_id for h in hits] == ["d1#0"] and hits[0].raw_score > 0
    assert index.search_fts(T, " ;; ", SearchFilter(), k=3) == []

    found = index.get_chunks("t", ["d1#0", "d1#2", "missing#0"])
    assert set(found) == {"d1#0", "d1#2"}
    chunk, document = found["d1#2"]
    assert chunk == chunks_for(doc, texts)[2]
    assert document == doc
    assert index.get_chunks("other", ["d1#0"]) == {}


def test_results_come_best_first_in_both_modes(index):
    put(index, make_doc("t", "both"), ["quarterly revenue report"], [1])
    put(index, make_doc("t", "one"), ["quarterly staff outing"], [2])
    put(index, make_doc("t", "none"), ["canteen menu"], [3])
    fts = index.search_fts(T, "quarterly revenue", SearchFilter(), k=10)
    assert [h.chunk_id for h in fts] == ["both#0", "one#0"]
    assert fts[0].raw_score > fts[1].raw_score
    query = unit(2) + 0.5 * unit(1)
    vector = index.search_vector(T, query / np.linalg.norm(query), SearchFilter(), k=3)
    assert [h.chunk_id for h in vector][:2] == ["one#0", "both#0"]
    assert [h.raw_score for h in vector] == sorted((h.raw_score for h in vector), reverse=True)
    assert len(index.search_vector(T, unit(1), SearchFilter(), k=2)) == 2


def test_upsert_replaces_every_chunk_of_the_document(index):
    doc = make_doc("t", "d1")
    put(index, doc, ["old apple", "old beta", "old gamma"], [1, 2, 3])
    put(index, doc.model_copy(update={"content_hash": "h2"}), ["new banana"], [4])
    assert index.count_chunks("t") == 1
    assert index.search_fts(T, "apple", SearchFilter(), k=5) == []
    assert [h.chunk_id for h in index.search_fts(T, "banana", SearchFilter(), k=5)] == ["d1#0"]
    assert [h.chunk_id for h in index.search_vector(T, unit(1), SearchFilter(), k=5)] == ["d1#0"]
    assert index.get_chunks("t", ["d1#1", "d1#2"]) == {}
    chunk, document = index.get_chunks("t", ["d1#0"])["d1#0"]
    assert chunk.text == "new banana" and document.content_hash == "h2"
    index.replace_document(doc, [], np.zeros((0, DIM), dtype=np.float32))
    assert index.count_chunks("t") == 0


def test_delete_removes_the_document_from_both_modes(index):
    put(index, make_doc("t", "d1"), ["alpha beta"], [1])
    put(index, make_doc("t", "d2"), ["alpha gamma"], [2])
    assert index.delete_document("t", "d1") is True
    assert index.delete_document("t", "d1") is False
    assert doc_ids(index.search_fts(T, "alpha", SearchFilter(), 10)) == ["d2"]
    assert doc_ids(index.search_vector(T, unit(1), SearchFilter(), 10)) == ["d2"]
    assert index.get_chunks("t", ["d1#0"]) == {}
    assert index.count_chunks("t") == 1


def test_tenants_are_isolated_inside_the_top_k(index):
    for n in range(10):
        put(index, make_doc("a", f"a{n}"), ["quarterly revenue report"], [1])
    put(index, make_doc("a", "shared"), ["tenant a text"], [2])
    put(index, make_doc("b", "shared"), ["quarterly revenue report for b"], [1])
    b = Principal(tenant="b")
    assert [h.chunk_id for h in index.search_fts(b, "quarterly revenue", SearchFilter(), k=1)] == ["shared#0"]
    assert [h.chunk_id for h in index.search_vector(b, unit(1), SearchFilter(), k=1)] == ["shared#0"]
    assert index.get_chunks("b", ["shared#0"])["shared#0"][0].text == "quarterly revenue report for b"
    assert index.delete_document("a", "shared") is True
    assert index.count_chunks("b") == 1 and index.count_chunks("a") == 10


def test_acl_filters_apply_inside_the_top_k(index):
    for n in range(10):
        put(index, make_doc("t", f"secret{n}", acl=Acl(groups=("board",))), ["merger plan merger plan"], [1])
    for n in range(3):
        put(index, make_doc("t", f"open{n}"), [f"merger rumour {n}"], [100 + n])
    caller = Principal(tenant="t", groups=("staff",))
    assert doc_ids(index.search_vector(caller, unit(1), SearchFilter(), k=3)) == ["open0", "open1", "open2"]
    assert doc_ids(index.search_fts(caller, "merger plan", SearchFilter(), k=3)) == ["open0", "open1", "open2"]


def test_groups_users_and_tiers_agree_with_the_single_document_policy(index):
    docs = [
        make_doc("t", "open"),
        make_doc("t", "sales", acl=Acl(groups=("department:sales",))),
        make_doc("t", "ceo", acl=Acl(users=("ceo@example.com",))),
        make_doc("t", "secret", tier=Tier.privileged),
        make_doc("u", "other-tenant"),
    ]
    for doc in docs:
        put(index, doc, ["budget plan"], [1])
    principals = {
        ("open",): Principal(tenant="t", max_tier=Tier.standard),
        ("open", "sales"): Principal(tenant="t", groups=("department:sales",), max_tier=Tier.standard),
        ("ceo", "open"): Principal(tenant="t", user_id="ceo@example.com", max_tier=Tier.standard),
        ("open", "secret"): Principal(tenant="t"),
        ("other-tenant",): Principal(tenant="u"),
    }
    for expected, principal in principals.items():
        fts = doc_ids(index.search_fts(principal, "budget", SearchFilter(), 10))
        assert fts == doc_ids(index.search_vector(principal, unit(1), SearchFilter(), 10)) == list(expected)
        assert set(fts) == {d.doc_id for d in docs if can_read(principal, d)}, principal


def test_tag_source_id_date_and_metadata_filters(index):
    old = jan1(2020)
    put(index, make_doc("t", "d1", source="s1", tags=("x", "y"), created_at=old), ["alpha beta"], [1])
    put(index, make_doc("t", "d2", source="s2", tags=("x",), kind="note"), ["alpha gamma"], [2])
    put(index, make_doc("t", "d3", source="s2", tags=("z",), metadata={"lang": "en"}), ["alpha delta"], [3])

    def both(flt: SearchFilter) -> list[str]:
        fts = doc_ids(index.search_fts(T, "alpha", flt, 10))
        assert fts == doc_ids(index.search_vector(T, unit(1), flt, 10)), flt
        return fts

    cases: list[tuple[SearchFilter, list[str]]] = [
        (SearchFilter(), ["d1", "d2", "d3"]),
        (SearchFilter(sources=("s2",)), ["d2", "d3"]),
        (SearchFilter(sources=()), []),
        (SearchFilter(tags_any=("y", "z")), ["d1", "d3"]),
        (SearchFilter(tags_all=("x", "y")), ["d1"]),
        (SearchFilter(tags_any=("'; --",)), []),
        (SearchFilter(doc_ids=("d2", "d3")), ["d2", "d3"]),
        (SearchFilter(chunk_ids=("d1#0", "d3#0")), ["d1", "d3"]),
        (SearchFilter(kinds=("note",)), ["d2"]),
        (SearchFilter(created_after=old + timedelta(days=1)), ["d2", "d3"]),
        (SearchFilter(created_before=old + timedelta(days=1)), ["d1"]),
        (SearchFilter(metadata={"lang": ("fr", "en")}), ["d3"]),
        (SearchFilter(metadata={"lang": ("fr",)}), []),
    ]
    for flt, expected in cases:
        assert both(flt) == expected, flt


def test_untrusted_text_is_a_query_not_syntax(index):
    put(index, make_doc("t", "d"), ["robert'); DROP TABLE chunks;--"], [1])
    hits = index.search_fts(T, "robert'); DROP TABLE chunks;--", SearchFilter(), 10)
    assert [h.chunk_id for h in hits] == ["d#0"]
    assert index.count_chunks("t") == 1


def test_a_tenants_keyword_scores_ignore_every_other_tenants_documents(index):
    """Issue 25 M1: keyword statistics (document frequencies, lengths) are the tenant's own. Another
    tenant's documents, full of the query's words and of other lengths, change none of the tenant's
    scores, and a word only another tenant holds scores like any word the tenant holds as rarely."""
    put(index, make_doc("t", "mine"), ["zeta alpha report", "alpha quarterly numbers"], [1, 2])
    put(index, make_doc("t", "more"), ["beta report on the quarter"], [3])

    def scores() -> dict[str, list[tuple[str, float]]]:
        queries = ("alpha report", "zeta", "quarterly zeta beta")
        return {q: [(h.chunk_id, h.raw_score) for h in index.search_fts(T, q, SearchFilter(), 10)] for q in queries}

    alone = scores()
    for n in range(30):
        words = ["zeta"] * (n % 4 + 1) + ["report"] * (n % 3) + ["filler"] * (n % 7) * 5
        put(index, make_doc("u", f"other{n}"), [" ".join(words)], [n + 10])
    assert scores() == alone
    assert alone["zeta"] == [("mine#0", alone["zeta"][0][1])]


def test_named_chunks_are_scored_as_the_full_searches_score_them(index):
    """`score_chunks` (issue 27's fusion, one call a request): each ask's bm25 of the chunks it names that
    hold any of its words, and its cosine of the chunks it names, as the unrestricted searches give them;
    a chunk another tenant holds or the filter hides is left out."""
    texts = ["quarterly revenue report", "quarterly staff outing", "canteen menu", "revenue outlook", "menu prices"]
    for n, text in enumerate(texts):
        put(index, make_doc("t", f"d{n}", tags=("even",) if n % 2 == 0 else ()), [text], [n])
    put(index, make_doc("u", "theirs"), ["quarterly revenue report"], [0])
    every = [f"d{n}#0" for n in range(len(texts))]
    asked = [
        ScoresAsked("quarterly revenue", unit(1), (*every, "theirs#0"), (*every, "theirs#0")),
        ScoresAsked("menu", unit(3), ("d2#0", "d0#0"), ("d4#0",)),
    ]
    scored = index.score_chunks(T, SearchFilter(), asked)
    for ask, (bm25, cosines) in zip(asked, scored, strict=True):
        full_bm25 = {h.chunk_id: h.raw_score for h in index.search_fts(T, ask.query, SearchFilter(), 10)}
        full_cosine = {h.chunk_id: h.raw_score for h in index.search_vector(T, ask.vector, SearchFilter(), 10)}
        assert bm25 == pytest.approx({c: full_bm25[c] for c in ask.bm25_of if c in full_bm25}, rel=1e-6)
        assert cosines == pytest.approx({c: full_cosine[c] for c in ask.cosine_of if c in full_cosine}, abs=1e-4)
    (bm25, cosines), _ = index.score_chunks(T, SearchFilter(tags_any=("even",)), asked)
    assert sorted(bm25) == ["d0#0"] and sorted(cosines) == ["d0#0", "d2#0", "d4#0"]
    assert index.score_chunks(T, SearchFilter(), []) == []

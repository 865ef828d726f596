"""The embedded index with real SQLite (FTS5 + sqlite-vec) and synthetic vectors."""

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from ragmcp.adapters.local.database import STEMMED, UNSTEMMED, Database
from ragmcp.adapters.local.sqlite_index import SCHEMA_VERSION, SqliteSearchIndex, fts_query, query_terms
from ragmcp.domain.errors import IndexMismatch, IndexOutdated
from ragmcp.domain.models import Acl, Chunk, Document, Principal, SearchFilter, Tier

DIM = 8


def unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def make_doc(tenant: str, doc_id: str, **fields) -> Document:
    base = dict(
        tenant=tenant,
        doc_id=doc_id,
        source=fields.pop("source", "docs"),
        path=doc_id,
        title=doc_id,
        file_name=f"{doc_id}.md",
        file_type="md",
        content_hash="h",
    )
    base.update(fields)
    return Document(**base)


def chunks_for(doc: Document, texts: list[str]) -> list[Chunk]:
    return [
        Chunk(chunk_id=f"{doc.doc_id}#{i}", doc_id=doc.doc_id, ordinal=i, text=t, headline=t[:20], summary=t)
        for i, t in enumerate(texts)
    ]


@pytest.fixture
def index(tmp_path):
    idx = SqliteSearchIndex(Database(tmp_path / "t.db"))
    idx.ensure_model("test-model", DIM)
    return idx


def put(index, doc, texts, seeds):
    index.replace_document(doc, chunks_for(doc, texts), np.stack([unit(s) for s in seeds]))


def test_fts_query_quotes_every_term_so_no_syntax_leaks():
    terms = query_terms('cats AND "dogs" OR NEAR(x) cats')
    assert fts_query(terms) == '"cats" OR "and" OR "dogs" OR "or" OR "near" OR "x"'
    assert fts_query(query_terms("  ;;; ")) is None


def test_model_mismatch_is_a_clear_error(index):
    index.ensure_model("test-model", DIM)
    with pytest.raises(IndexMismatch, match="embedding dimension"):
        index.ensure_model("test-model", DIM * 2)
    with pytest.raises(IndexMismatch, match="embedding model"):
        index.ensure_model("other-model", DIM)


@pytest.mark.parametrize(("tokenizer", "found"), [(STEMMED, ["duck#0"]), (UNSTEMMED, [])])
def test_stemmed_query_matches_unstemmed_text(tmp_path, tokenizer, found):
    index = SqliteSearchIndex(Database(tmp_path / "t.db"), tokenizer=tokenizer)
    index.ensure_schema()
    put(index, make_doc("t", "duck"), ["The duck feeds at the surface.", "Geese graze on land."], [1, 2])
    hits = index.search_fts(Principal(tenant="t"), "ducks feeding", SearchFilter(), k=5)
    assert [h.chunk_id for h in hits] == found


def test_a_new_index_records_its_schema_and_an_empty_one_is_upgraded_silently(tmp_path):
    db = Database(tmp_path / "t.db")
    assert SqliteSearchIndex(db, tokenizer=UNSTEMMED).ensure_schema() is True
    assert SqliteSearchIndex(db, tokenizer=UNSTEMMED).ensure_schema() is False
    assert SqliteSearchIndex(db, tokenizer=STEMMED).ensure_schema() is True
    version = db.conn().execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
    assert int(version) == SCHEMA_VERSION


def test_another_tokenizer_is_refused_until_rebuilt_keeping_every_chunk(tmp_path):
    db = Database(tmp_path / "t.db")
    old = SqliteSearchIndex(db, tokenizer=UNSTEMMED)
    old.ensure_schema()
    put(old, make_doc("t", "duck"), ["The duck feeds at the surface.", "Geese graze on land."], [1, 2])
    new = SqliteSearchIndex(db, tokenizer=STEMMED)
    with pytest.raises(IndexOutdated, match="ragmcp reindex"):
        new.ensure_schema()
    assert new.ensure_schema(rebuild=True) is True
    assert new.ensure_schema() is False
    assert new.count_chunks("t") == 2
    assert [h.chunk_id for h in new.search_fts(Principal(tenant="t"), "ducks feeding", SearchFilter(), 5)] == [
        "duck#0"
    ]
    assert [h.chunk_id for h in new.search_vector(Principal(tenant="t"), unit(2), SearchFilter(), 1)] == ["duck#1"]


def test_an_index_of_a_newer_schema_is_refused_even_with_rebuild(tmp_path):
    db = Database(tmp_path / "t.db")
    with db.write() as conn:
        conn.execute("INSERT INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION + 1),))
    with pytest.raises(IndexOutdated, match="newer ragmcp"):
        SqliteSearchIndex(db).ensure_schema(rebuild=True)


def test_tenant_filter_applies_before_top_k(index):
    for i in range(30):
        put(index, make_doc("a", f"a{i}"), ["quarterly revenue report"], [1])
    put(index, make_doc("b", "b0"), ["quarterly revenue report"], [1])
    hits = index.search_fts(Principal(tenant="b"), "quarterly revenue", SearchFilter(), k=1)
    assert [h.chunk_id for h in hits] == ["b0#0"]
    hits = index.search_vector(Principal(tenant="b"), unit(1), SearchFilter(), k=1)
    assert [h.chunk_id for h in hits] == ["b0#0"]


def test_source_tags_doc_ids_and_dates(index):
    old = datetime(2020, 1, 1, tzinfo=UTC)
    put(index, make_doc("t", "d1", source="s1", tags=("x", "y"), created_at=old), ["alpha beta"], [1])
    put(index, make_doc("t", "d2", source="s2", tags=("x",)), ["alpha gamma"], [2])
    put(index, make_doc("t", "d3", source="s2", tags=("z",), metadata={"lang": "en"}), ["alpha delta"], [3])
    p = Principal(tenant="t")

    def ids(flt):
        return sorted(h.chunk_id.split("#")[0] for h in index.search_fts(p, "alpha", flt, 10))

    assert ids(SearchFilter()) == ["d1", "d2", "d3"]
    assert ids(SearchFilter(sources=("s2",))) == ["d2", "d3"]
    assert ids(SearchFilter(sources=())) == []
    assert ids(SearchFilter(tags_any=("y", "z"))) == ["d1", "d3"]
    assert ids(SearchFilter(tags_all=("x", "y"))) == ["d1"]
    assert ids(SearchFilter(doc_ids=("d2", "d3"))) == ["d2", "d3"]
    assert ids(SearchFilter(created_after=old + timedelta(days=1))) == ["d2", "d3"]
    assert ids(SearchFilter(created_before=old + timedelta(days=1))) == ["d1"]
    assert ids(SearchFilter(metadata={"lang": ("en",)})) == ["d3"]
    assert ids(SearchFilter(metadata={"lang": ("fr", "en")})) == ["d3"]
    assert ids(SearchFilter(metadata={"lang": ("fr",)})) == []
    vec = sorted(h.chunk_id for h in index.search_vector(p, unit(2), SearchFilter(tags_any=("x",)), 10))
    assert vec == ["d1#0", "d2#0"]


def test_acl_groups_users_and_tier(index):
    put(index, make_doc("t", "open"), ["budget plan"], [1])
    put(index, make_doc("t", "sales", acl=Acl(groups=("department:sales",))), ["budget plan"], [1])
    put(index, make_doc("t", "ceo", acl=Acl(users=("ceo@example.com",))), ["budget plan"], [1])
    put(index, make_doc("t", "secret", tier=Tier.privileged), ["budget plan"], [1])

    def visible(principal):
        hits = index.search_fts(principal, "budget", SearchFilter(), 10)
        assert sorted(h.chunk_id for h in hits) == sorted(
            h.chunk_id for h in index.search_vector(principal, unit(1), SearchFilter(), 10)
        )
        return sorted(h.chunk_id.split("#")[0] for h in hits)

    assert visible(Principal(tenant="t", max_tier=Tier.standard)) == ["open"]
    assert visible(Principal(tenant="t", groups=("department:sales",), max_tier=Tier.standard)) == ["open", "sales"]
    assert visible(Principal(tenant="t", user_id="ceo@example.com", max_tier=Tier.standard)) == ["ceo", "open"]
    assert visible(Principal(tenant="t")) == ["open", "secret"]


def test_replace_swaps_all_chunks_and_delete_removes_them(index):
    doc = make_doc("t", "d")
    put(index, doc, ["first version apple", "second chunk apple"], [1, 2])
    assert index.count_chunks("t") == 2
    put(index, doc, ["rewritten banana"], [3])
    p = Principal(tenant="t")
    assert index.search_fts(p, "apple", SearchFilter(), 10) == []
    assert [h.chunk_id for h in index.search_fts(p, "banana", SearchFilter(), 10)] == ["d#0"]
    assert index.count_chunks("t") == 1
    assert index.delete_document("t", "d") is True
    assert index.search_fts(p, "banana", SearchFilter(), 10) == []
    assert index.search_vector(p, unit(3), SearchFilter(), 10) == []
    assert index.delete_document("t", "d") is False


def test_scores_are_higher_is_better_and_chunks_come_back_with_documents(index):
    put(index, make_doc("t", "d"), ["cat cat cat", "cat dog"], [1, 2])
    p = Principal(tenant="t")
    fts = index.search_fts(p, "cat", SearchFilter(), 10)
    assert fts[0].raw_score >= fts[1].raw_score
    vec = index.search_vector(p, unit(2), SearchFilter(), 10)
    assert vec[0].chunk_id == "d#1" and vec[0].raw_score == pytest.approx(1.0, abs=1e-5)
    found = index.get_chunks("t", ["d#1", "missing"])
    assert list(found) == ["d#1"]
    chunk, doc = found["d#1"]
    assert chunk.text == "cat dog" and doc.file_name == "d.md"
    assert index.get_chunks("other", ["d#1"]) == {}


def test_untrusted_text_is_bound_not_interpolated(index):
    put(index, make_doc("t", "d"), ["robert'); DROP TABLE chunks;--"], [1])
    p = Principal(tenant="t")
    hits = index.search_fts(p, "robert'); DROP TABLE chunks;--", SearchFilter(tags_any=("'; --",)), 10)
    assert hits == []
    assert index.search_fts(p, "robert'); DROP TABLE chunks;--", SearchFilter(), 10)[0].chunk_id == "d#0"
    assert index.count_chunks("t") == 1


def test_single_document_policy_agrees_with_the_index_filter(index):
    from ragmcp.security.policy import can_read

    docs = [
        make_doc("t", "open"),
        make_doc("t", "sales", acl=Acl(groups=("department:sales",))),
        make_doc("t", "ceo", acl=Acl(users=("ceo@example.com",))),
        make_doc("t", "secret", tier=Tier.privileged),
        make_doc("u", "other-tenant"),
    ]
    for doc in docs:
        put(index, doc, ["budget plan"], [1])
    principals = [
        Principal(tenant="t", max_tier=Tier.standard),
        Principal(tenant="t", groups=("department:sales",), max_tier=Tier.confidential),
        Principal(tenant="t", user_id="ceo@example.com"),
        Principal(tenant="u"),
    ]
    for principal in principals:
        found = {h.chunk_id.split("#")[0] for h in index.search_fts(principal, "budget", SearchFilter(), 10)}
        allowed = {d.doc_id for d in docs if can_read(principal, d)}
        assert found == allowed, principal

"""The embedded index with real SQLite (FTS5 + sqlite-vec) and synthetic vectors."""

import numpy as np
import pytest

from ragmcp.adapters.local.database import STEMMED, UNSTEMMED, Database
from ragmcp.adapters.local.sqlite_index import SCHEMA_VERSION, SqliteSearchIndex, query_words
from ragmcp.domain.errors import IndexMismatch, IndexOutdated
from ragmcp.domain.models import Chunk, Document, Principal, SearchFilter
from ragmcp.text import keyword_text

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


def test_query_words_are_values_never_fts5_syntax(index):
    assert query_words('cats AND "dogs" OR NEAR(x) cats') == ["cats", "and", "dogs", "or", "near", "x"]
    assert query_words("  ;;; ") == []
    put(index, make_doc("t", "pets"), ["Cats and dogs, near the door"], [1])
    hits = index.search_fts(Principal(tenant="t"), 'cats AND "dogs" OR NEAR(x) cats', SearchFilter(), k=5)
    assert [h.chunk_id for h in hits] == ["pets#0"]
    assert index.search_fts(Principal(tenant="t"), 'NEAR("cats" "door", 0) * ^', SearchFilter(), k=5)[0].raw_score > 0


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
    assert [h.chunk_id for h in new.search_fts(Principal(tenant="t"), "ducks feeding", SearchFilter(), 5)] == ["duck#0"]
    assert [h.chunk_id for h in new.search_vector(Principal(tenant="t"), unit(2), SearchFilter(), 1)] == ["duck#1"]


def test_an_index_of_a_newer_schema_is_refused_even_with_rebuild(tmp_path):
    db = Database(tmp_path / "t.db")
    with db.write() as conn:
        conn.execute("INSERT INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION + 1),))
    with pytest.raises(IndexOutdated, match="newer ragmcp"):
        SqliteSearchIndex(db).ensure_schema(rebuild=True)


def test_bm25_weighs_headline_words_by_half_in_counts_and_lengths(index):
    """tf and the chunk length count a headline word as half a text word (Bm25.headline 0.5)."""
    import math

    doc = make_doc("t", "d")
    texts = {"d#0": ("otter river otter", "otter news"), "d#1": ("river bank", "otter"), "d#2": ("bank holiday", "")}
    chunks = [
        Chunk(chunk_id=cid, doc_id="d", ordinal=i, text=text, headline=headline, summary="")
        for i, (cid, (text, headline)) in enumerate(texts.items())
    ]
    index.replace_document(doc, chunks, np.stack([unit(i) for i in range(3)]))
    length = {cid: len(text.split()) + 0.5 * len(headline.split()) for cid, (text, headline) in texts.items()}
    avgdl = sum(length.values()) / 3
    idf = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))
    expected = {}
    for cid, (text, headline) in texts.items():
        tf = text.split().count("otter") + 0.5 * headline.split().count("otter")
        if tf:
            expected[cid] = idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length[cid] / avgdl))
    hits = index.search_fts(Principal(tenant="t"), "Otters", SearchFilter(), k=5)
    assert {h.chunk_id: h.raw_score for h in hits} == pytest.approx(expected, rel=1e-6)


CJK = [
    "2020.3.30. 0시 기준 현재 국내 확 진자는 9,661명, 사망자는 158명으로 나타났다.",
    "東京都に住む人は毎朝電車で通勤します。",
    "北京是中国的首都，也是政治和文化中心。",
]


@pytest.mark.parametrize(
    ("query", "found"), [("확진자 수", "cjk#0"), ("通勤する人", "cjk#1"), ("中国首都", "cjk#2"), ("东京 通勤", "cjk#1")]
)
def test_chinese_japanese_and_korean_words_are_found_inside_longer_runs(tmp_path, query, found):
    """Issue 27: a Korean question was not found by keyword (a Korean word carries its particle;
    Chinese and Japanese have no spaces between words). Query text goes through keyword_text as
    the search service sends it."""
    index = SqliteSearchIndex(Database(tmp_path / "t.db"))
    index.ensure_schema()
    put(index, make_doc("t", "cjk"), CJK, [1, 2, 3])
    hits = index.search_fts(Principal(tenant="t"), keyword_text(query), SearchFilter(), k=3)
    assert hits and hits[0].chunk_id == found


CODE = [
    # A prose passage that holds the identifier's parts as words, more often than the code holds the name.
    "Each customer has a tax ID. The customer sees the tax ID of a customer masked; a customer ID is not a tax ID.",
    "WHEN VERIFY_GROUP_FOR_USER ( SESSION_USER , 'TELLER' ) = 1\nTHEN C . CUSTOMER_TAX_ID\nELSE 'XXX-XX-XXXX'",
    "CREATE MASK MASK_TAX_ID_ON_EMPLOYEES FOR COLUMN TAX_ID RETURN CASE WHEN EMPLOYEES . USER_ID THEN TAX_ID END",
]


@pytest.mark.parametrize(
    ("query", "found"),
    [
        ("What does the mask return to tellers for CUSTOMER_TAX_ID?", "code#1"),
        ("Which statement creates MASK_TAX_ID_ON_EMPLOYEES?", "code#2"),
        ("What is a customer's tax ID?", "code#0"),
    ],
)
def test_a_name_in_code_is_found_whole_not_only_by_its_parts(tmp_path, query, found):
    """Issue 27, code questions: the keyword index cut CUSTOMER_TAX_ID into "customer", "tax", "id",
    so a question naming the column matched a passage that only uses those words (more often)
    above the code that holds the name. The name is also indexed whole, so the code holding it
    comes first, and a question in words still finds the prose."""
    index = SqliteSearchIndex(Database(tmp_path / "t.db"))
    index.ensure_schema()
    put(index, make_doc("t", "code"), CODE, [1, 2, 3])
    hits = index.search_fts(Principal(tenant="t"), keyword_text(query), SearchFilter(), k=3)
    assert hits and hits[0].chunk_id == found


def test_an_index_of_schema_2_is_refused_until_reindexed_then_finds_cjk(tmp_path):
    """Schema 3 indexes CJK character pairs: an index written before (schema 2, no pairs) is refused
    with the `ragmcp reindex` hint, and reindexing adds the pairs, keeping every chunk."""
    db = Database(tmp_path / "t.db")
    index = SqliteSearchIndex(db)
    index.ensure_schema()
    put(index, make_doc("t", "cjk"), CJK, [1, 2, 3])
    with db.write() as conn:  # what schema 2 wrote: the text alone, no pairs
        conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
        conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('delete-all')")
        conn.execute("INSERT INTO chunks_fts(rowid, text, headline) SELECT id, text, headline FROM chunks")
    assert not SqliteSearchIndex(db).search_fts(Principal(tenant="t"), keyword_text("확진자"), SearchFilter(), 3)
    with pytest.raises(IndexOutdated, match="ragmcp reindex"):
        SqliteSearchIndex(db).ensure_schema()
    rebuilt = SqliteSearchIndex(db)
    assert rebuilt.ensure_schema(rebuild=True) is True
    assert rebuilt.count_chunks("t") == 3
    hits = rebuilt.search_fts(Principal(tenant="t"), keyword_text("확진자"), SearchFilter(), 3)
    assert [h.chunk_id for h in hits] == ["cjk#0"]

"""The OpenSearch adapter: its request bodies against the official API specification, its behaviour on a cluster.

The spec checks need no cluster (the spec is read from shared/opensearch-api-spec). The cluster
tests run against a real OpenSearch (>= 2.9, k-NN plugin) when OPENSEARCH_URL is set, for example
http://127.0.0.1:9200 without auth, and are skipped otherwise; on a cluster every request the adapter
sends is also checked against the spec on its way out. What every SearchIndex must do (upserts,
deletes, tenants, filters, ordering) is test_search_index_behaviour.py, run on the cluster too;
test_opensearch_serverless.py runs the write and delete flows on a double of each service.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from jsonschema import ValidationError
from opensearchpy import OpenSearch

from ragmcp.adapters.aws.ledger import DynamoChunkLedger
from ragmcp.adapters.aws.opensearch import (
    SCHEMA_VERSION,
    SIMILARITY,
    TEXT_ANALYZER,
    VECTOR_FIELD,
    OpenSearchIndex,
    bulk_lines,
    chunk_key,
    chunks_body,
    cosine_from_score,
    count_body,
    delete_lines,
    filter_clauses,
    fts_body,
    idf,
    index_body,
    index_template,
    knn_body,
    new_generation,
    query_words,
    recorded_schemas,
    request_params,
    stats_body,
)
from ragmcp.adapters.local.database import STEMMED, Database
from ragmcp.adapters.local.sqlite_index import SqliteSearchIndex
from ragmcp.domain.errors import IndexMismatch, IndexOutdated
from ragmcp.domain.models import Acl, Chunk, Document, Principal, SearchFilter, Tier

DIM = 8
TEMPLATE_FILE = Path(__file__).resolve().parents[2] / "infra" / "opensearch" / "index-template.json"
READER = Principal(tenant="t", user_id="alice", groups=("eng",))
EVERYONE = Principal(tenant="t", user_id="alice", groups=("eng", "ops"))

FILTER_CASES: list[tuple[str, Principal, SearchFilter]] = [
    ("caller's groups and name", READER, SearchFilter()),
    ("open documents only", Principal(tenant="t"), SearchFilter()),
    ("tier at most standard", EVERYONE.model_copy(update={"max_tier": Tier.standard}), SearchFilter()),
    ("tier at most confidential", EVERYONE.model_copy(update={"max_tier": Tier.confidential}), SearchFilter()),
    ("sources", EVERYONE, SearchFilter(sources=("s1",))),
    ("no sources", EVERYONE, SearchFilter(sources=())),
    ("doc ids", EVERYONE, SearchFilter(doc_ids=("d2", "d3"))),
    ("chunk ids", EVERYONE, SearchFilter(chunk_ids=("d1#1", "d3#0", "d4#1"))),
    ("kinds", EVERYONE, SearchFilter(kinds=("note", "row"))),
    ("tags any", EVERYONE, SearchFilter(tags_any=("y",))),
    ("tags all", EVERYONE, SearchFilter(tags_all=("x", "y"))),
    ("created after", EVERYONE, SearchFilter(created_after=datetime(2024, 6, 1, tzinfo=UTC))),
    ("created before", EVERYONE, SearchFilter(created_before=datetime(2024, 6, 1, tzinfo=UTC))),
    (
        "created between",
        EVERYONE,
        SearchFilter(created_after=datetime(2024, 1, 1, tzinfo=UTC), created_before=datetime(2025, 1, 1, tzinfo=UTC)),
    ),
    ("metadata any of", EVERYONE, SearchFilter(metadata={"lang": ("en", "de")})),
    ("metadata number", EVERYONE, SearchFilter(metadata={"year": ("2020",)})),
    ("metadata two keys", EVERYONE, SearchFilter(metadata={"lang": ("en", "de"), "year": ("2020",)})),
    ("metadata no values", EVERYONE, SearchFilter(metadata={"lang": ()})),
    ("other tenant", Principal(tenant="u", groups=("eng",)), SearchFilter()),
    (
        "everything at once",
        READER.model_copy(update={"max_tier": Tier.confidential}),
        SearchFilter(
            sources=("s1", "s2"),
            doc_ids=("d1", "d2"),
            chunk_ids=("d1#0", "d2#0", "d2#1"),
            kinds=("file", "note"),
            tags_any=("x",),
            tags_all=("x",),
            created_after=datetime(2019, 1, 1, tzinfo=UTC),
            created_before=datetime(2030, 1, 1, tzinfo=UTC),
            metadata={"lang": ("en", "de")},
        ),
    ),
]
CASE_IDS = [name for name, _, _ in FILTER_CASES]


def unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def make_doc(tenant: str, doc_id: str, **fields: Any) -> Document:
    base: dict[str, Any] = dict(
        tenant=tenant,
        doc_id=doc_id,
        source="docs",
        path=doc_id,
        title=doc_id,
        file_name=f"{doc_id}.md",
        file_type="md",
        content_hash="h",
    )
    return Document(**(base | fields))


def chunks_for(doc: Document, texts: list[str]) -> list[Chunk]:
    return [
        Chunk(
            chunk_id=f"{doc.doc_id}#{i}",
            doc_id=doc.doc_id,
            ordinal=i,
            text=text,
            headline=text[:20],
            summary=text,
            page_start=1,
            page_end=1,
            char_start=10 * i,
            char_end=10 * i + len(text),
        )
        for i, text in enumerate(texts)
    ]


def jan1(year: int) -> datetime:
    return datetime(year, 1, 1, tzinfo=UTC)


def corpus() -> list[tuple[Document, list[str], list[int]]]:
    """Documents that differ in every field a filter can look at, each with two chunks."""
    docs = [
        make_doc("t", "d1", source="s1", tags=("x", "y"), created_at=jan1(2020), metadata={"lang": "en", "year": 2020}),
        make_doc(
            "t",
            "d2",
            source="s2",
            kind="note",
            tags=("x",),
            acl=Acl(groups=("eng",)),
            tier=Tier.confidential,
            created_at=jan1(2024),
            metadata={"lang": "de"},
        ),
        make_doc(
            "t", "d3", source="s1", kind="row", acl=Acl(users=("alice",)), tier=Tier.privileged, created_at=jan1(2025)
        ),
        make_doc("t", "d4", source="s2", tags=("y",), acl=Acl(groups=("ops",)), created_at=jan1(2026)),
        make_doc("u", "d1", source="s1", acl=Acl(groups=("eng",)), created_at=jan1(2020)),
    ]
    return [
        (doc, [f"alpha {doc.doc_id} first part", f"alpha {doc.doc_id} second part"], [10 * n, 10 * n + 1])
        for n, doc in enumerate(docs)
    ]


def put(index: Any, doc: Document, texts: list[str], seeds: list[int]) -> None:
    index.replace_document(doc, chunks_for(doc, texts), np.stack([unit(s) for s in seeds]))


# --- the request bodies against the specification (no cluster) ---


def test_index_creation_body_is_valid(spec):
    body = index_body("test-model", DIM)
    spec.validate_body("indices.create", body)
    vector = body["mappings"]["properties"][VECTOR_FIELD]
    assert body["settings"]["index"]["knn"] is True
    assert vector["dimension"] == DIM
    assert vector["method"]["name"] == "hnsw" and vector["method"]["engine"] == "faiss"
    assert body["mappings"]["_meta"] == {
        "embedding_model": "test-model",
        "embedding_dimension": DIM,
        "schema_version": SCHEMA_VERSION,
    }


def test_keyword_fields_score_with_no_collection_statistics(spec):
    """Issue 25 M1 on OpenSearch: text and headline are scored by a scripted similarity that reads
    only the term's frequency and the field's length (no document frequency, document count or
    mean length of the index, which every tenant shares); the idf comes with the query, computed
    from the tenant's own counts (stats_body)."""
    body = index_body("test-model", DIM)
    similarity = body["settings"]["index"]["similarity"][SIMILARITY]
    spec.validate_component("indices._common.yaml", "IndexSettingsSimilarityScriptedTfidf", similarity)
    for field in ("text", "headline"):
        assert body["mappings"]["properties"][field]["similarity"] == SIMILARITY
    source = similarity["script"]["source"]
    assert "doc.freq" in source and "doc.length" in source and "query.boost" in source
    assert "term." not in source and "field." not in source, "no collection statistics"
    assert idf(10, 1) > idf(10, 5) > idf(10, 10) > 0


def test_keyword_fields_are_analysed_like_the_embedded_fts5_table():
    """text and headline both use the one analyzer the index settings define, and that analyzer
    is the FTS5 tokenizer of the embedded index in OpenSearch terms: lower-cased words,
    diacritics folded (remove_diacritics), Porter stems (porter), no stop-word removal."""
    body = index_body("test-model", DIM)
    properties = body["mappings"]["properties"]
    analyzers = {properties[field]["analyzer"] for field in ("text", "headline")}
    assert analyzers == {TEXT_ANALYZER}
    defined = body["settings"]["analysis"]["analyzer"][TEXT_ANALYZER]
    assert defined["tokenizer"] == "standard"
    fts5 = STEMMED.split()
    assert ("porter_stem" in defined["filter"]) == ("porter" in fts5)
    assert ("asciifolding" in defined["filter"]) == ("remove_diacritics" in fts5)
    assert "lowercase" in defined["filter"] and "stop" not in defined["filter"]


def test_template_file_and_adapter_agree_on_the_keyword_analysis():
    """infra's index template (what CloudFormation/LocalStack install) and the body the adapter
    creates an index with carry the same analysis settings, field analyzers and schema version."""
    template = json.loads(TEMPLATE_FILE.read_text(encoding="utf-8"))["template"]
    body = index_body("test-model", DIM)
    assert template["settings"]["analysis"] == body["settings"]["analysis"]
    for field in ("text", "headline"):
        assert template["mappings"]["properties"][field] == body["mappings"]["properties"][field]
    assert template["mappings"]["_meta"]["schema_version"] == body["mappings"]["_meta"]["schema_version"]


def test_schema_versions_are_read_from_each_index_behind_a_name():
    old = {"mappings": {"_meta": {"embedding_model": "m", "embedding_dimension": DIM}}}
    new = {"mappings": index_body("m", DIM)["mappings"]}
    assert recorded_schemas({"a": old}) == {1}
    assert recorded_schemas({"a": new}) == {SCHEMA_VERSION}
    assert recorded_schemas({"a": old, "b": new}) == {1, SCHEMA_VERSION}


def test_template_file_is_the_generated_template_and_valid(spec):
    template = json.loads(TEMPLATE_FILE.read_text(encoding="utf-8"))
    meta = template["template"]["mappings"]["_meta"]
    assert template == index_template(meta["embedding_model"], meta["embedding_dimension"])
    spec.validate_body("indices.put_index_template", template)


@pytest.mark.parametrize("with_ids", [True, False], ids=["managed", "serverless"])
def test_bulk_lines_are_valid_and_fit_the_strict_mapping(spec, with_ids):
    doc, texts, seeds = corpus()[1]
    lines = bulk_lines(
        doc, chunks_for(doc, texts), np.stack([unit(s) for s in seeds]), new_generation(), with_ids=with_ids
    )
    spec.validate_bulk(lines)
    spec.validate_params("bulk", request_params("t", serverless=not with_ids))
    mapped = set(index_body("m", DIM)["mappings"]["properties"])
    assert set(Chunk.model_fields) <= mapped
    for source in lines[1::2]:
        assert set(source) <= mapped
        assert len(source[VECTOR_FIELD]) == DIM
        assert Document.model_validate(source["document"]) == doc
    assert all(("_id" in action["index"]) == with_ids for action in lines[0::2])


def test_delete_lines_are_valid(spec):
    spec.validate_bulk(delete_lines(["a", "b"]))


@pytest.mark.parametrize(("principal", "flt"), [(p, f) for _, p, f in FILTER_CASES], ids=CASE_IDS)
def test_search_bodies_with_every_filter_are_valid(spec, principal, flt):
    spec.validate_body("search", stats_body(principal.tenant, ["alpha", "beta"]))
    spec.validate_body("search", fts_body(principal, [("alpha", 1.5), ("beta", 0.2)], flt, 10))
    spec.validate_body("search", knn_body(principal, unit(1), flt, 10))
    spec.validate_params("search", request_params(principal.tenant, serverless=False))


def test_filters_sit_inside_the_search_never_after_it():
    flt = FILTER_CASES[-1][2]
    clauses = filter_clauses(READER, flt)
    knn = knn_body(READER, unit(1), flt, 5)
    assert list(knn["query"]) == ["knn"] and "post_filter" not in knn
    assert knn["query"]["knn"][VECTOR_FIELD]["filter"] == {"bool": {"filter": clauses}}
    assert knn["query"]["knn"][VECTOR_FIELD]["k"] == knn["size"] == 5
    fts = fts_body(READER, [("alpha", 1.0)], flt, 5)
    assert fts["query"]["bool"]["filter"] == clauses and "post_filter" not in fts
    assert clauses[0] == {"term": {"tenant": "t"}}


def test_reads_and_counts_are_valid(spec):
    spec.validate_body("search", chunks_body("t", ["d1#0", "d1#1", "d1#0"]))
    spec.validate_body("count", count_body("t"))
    spec.validate_params("count", request_params("t", serverless=False))


def _without_dimension() -> dict:
    body = index_body("m", DIM)
    del body["mappings"]["properties"][VECTOR_FIELD]["dimension"]
    return body


@pytest.mark.parametrize(
    ("group", "body"),
    [
        ("search", {"query": {"knn": {VECTOR_FIELD: {"vector": "abc", "k": 5}}}}),
        ("search", {"query": {"knn": {VECTOR_FIELD: {"k": 5}}}}),
        ("search", {"query": {"term": {"tenant": "t"}, "match_all": {}}}),
        ("search", {"query": {"terms": {"tags": "x"}}}),
        ("search", {"size": "ten"}),
        ("indices.create", _without_dimension()),
        ("delete_by_query", {"query": {"bool": {"filter": "tenant"}}}),
    ],
    ids=[
        "vector not an array",
        "knn without vector",
        "two queries in one",
        "terms not a list",
        "size text",
        "knn_vector without dimension",
        "filter not a query",
    ],
)
def test_the_validator_rejects_what_the_spec_forbids(spec, group, body):
    with pytest.raises(ValidationError):
        spec.validate_body(group, body)


@pytest.mark.parametrize(
    "lines",
    [[{"index": {}, "delete": {"_id": "a"}}, {}], [{"upsert": {}}, {}], [{"index": {}}], [{"index": {"_id": 5}}, {}]],
    ids=["two actions", "unknown action", "no source", "id not a string"],
)
def test_the_validator_rejects_bad_bulk_lines(spec, lines):
    with pytest.raises(ValidationError):
        spec.validate_bulk(lines)


def test_the_validator_rejects_bad_query_parameters(spec):
    with pytest.raises(ValidationError):
        spec.validate_params("search", {"routting": "t"})
    with pytest.raises(ValidationError):
        spec.validate_params("bulk", {"refresh": "sometimes"})


# --- pure helpers ---


@pytest.mark.parametrize("dot", [-1.0, -0.4, 0.0, 0.35, 1.0])
def test_faiss_inner_product_scores_convert_back_to_the_cosine(dot):
    score = 1.0 / (1.0 - dot) if dot <= 0 else 1.0 + dot
    assert cosine_from_score(score) == pytest.approx(dot)


def test_serverless_requests_carry_no_routing():
    assert request_params("t", serverless=True) == {}
    assert request_params("t", serverless=False) == {"routing": "t"}


def test_ids_and_generations():
    assert chunk_key("a", "s:p#0", "g") != chunk_key("b", "s:p#0", "g") != chunk_key("a", "s:p#0", "h")
    older, newer = new_generation(), new_generation()
    assert sorted([older, newer]) == [newer, older]
    assert query_words("  ;;; ") == []
    assert query_words('cats AND "dogs" cats') == ["cats", "and", "dogs"]


def test_an_empty_filter_list_matches_nothing():
    clauses = filter_clauses(READER, SearchFilter(sources=(), metadata={"lang": ()}))
    assert clauses.count({"match_none": {}}) == 2


# --- behaviour on a real cluster (OPENSEARCH_URL) ---


@contextmanager
def fresh_index(client: OpenSearch, ledger: DynamoChunkLedger) -> Iterator[OpenSearchIndex]:
    name = f"ragmcp-test-{uuid.uuid4().hex[:12]}"
    index = OpenSearchIndex(client, name, ledger)
    index.create("test-model", DIM)
    try:
        yield index
    finally:
        client.indices.delete(index=name)


@pytest.fixture
def index(cluster, ledger) -> Iterator[OpenSearchIndex]:
    with fresh_index(cluster, ledger) as idx:
        yield idx


def test_model_mismatch_is_a_clear_error(index):
    assert index.create("test-model", DIM) is False
    with pytest.raises(IndexMismatch, match="embedding dimension"):
        index.create("test-model", DIM * 2)
    with pytest.raises(IndexMismatch, match="embedding model"):
        index.create("other-model", DIM)


def test_an_index_of_an_older_schema_is_refused_at_start(cluster):
    name = f"ragmcp-test-{uuid.uuid4().hex[:12]}"
    body = index_body("test-model", DIM)
    body["mappings"]["_meta"].pop("schema_version")
    for field in ("text", "headline"):
        body["mappings"]["properties"][field]["analyzer"] = "standard"
    cluster.indices.create(index=name, body=body)
    try:
        index = OpenSearchIndex(cluster, name)
        index.ensure_model("test-model", DIM)
        with pytest.raises(IndexOutdated, match="schema version 1"):
            index.ensure_schema()
    finally:
        cluster.indices.delete(index=name)


def test_stemmed_words_match_alike_on_both_back_ends(cluster, ledger, tmp_path):
    reference = SqliteSearchIndex(Database(tmp_path / "reference.db"))
    reference.ensure_model("test-model", DIM)
    doc = make_doc("t", "duck")
    with fresh_index(cluster, ledger) as index:
        for backend in (index, reference):
            put(backend, doc, ["The duck feeds at the surface.", "Geese graze on land."], [1, 2])
            hits = backend.search_fts(EVERYONE, "ducks feeding", SearchFilter(), 5)
            assert [h.chunk_id for h in hits] == ["duck#0"], type(backend).__name__


def test_serverless_mode_indexes_without_ids_and_deletes_by_id(cluster, index, ledger):
    """The Serverless code path on a cluster; the explicit refreshes stand in for the collection's interval."""
    serverless = OpenSearchIndex(cluster, index.index, ledger, serverless=True)
    serverless.ensure_model("test-model", DIM)
    doc = make_doc("t", "d1")
    put(serverless, doc, ["old alpha", "old beta", "old gamma"], [1, 2, 3])
    cluster.indices.refresh(index=index.index)
    assert serverless.count_chunks("t") == 3
    put(serverless, doc, ["new alpha"], [4])
    cluster.indices.refresh(index=index.index)
    assert serverless.count_chunks("t") == 1
    assert serverless.get_chunks("t", ["d1#0"])["d1#0"][0].text == "new alpha"
    assert [h.chunk_id for h in serverless.search_vector(Principal(tenant="t"), unit(4), SearchFilter(), k=3)] == [
        "d1#0"
    ]
    assert serverless.delete_document("t", "d1") is True
    cluster.indices.refresh(index=index.index)
    assert serverless.count_chunks("t") == 0


@pytest.fixture(scope="module")
def both_backends(cluster, ledger, tmp_path_factory) -> Iterator[tuple[OpenSearchIndex, SqliteSearchIndex]]:
    reference = SqliteSearchIndex(Database(tmp_path_factory.mktemp("reference") / "reference.db"))
    reference.ensure_model("test-model", DIM)
    with fresh_index(cluster, ledger) as index:
        for doc, texts, seeds in corpus():
            put(index, doc, texts, seeds)
            put(reference, doc, texts, seeds)
        yield index, reference


@pytest.mark.parametrize(("principal", "flt"), [(p, f) for _, p, f in FILTER_CASES], ids=CASE_IDS)
def test_filters_match_the_embedded_backend(both_backends, principal, flt):
    opensearch, reference = both_backends
    for search, query in (("search_vector", unit(0)), ("search_fts", "alpha")):
        got = {h.chunk_id for h in getattr(opensearch, search)(principal, query, flt, 50)}
        want = {h.chunk_id for h in getattr(reference, search)(principal, query, flt, 50)}
        assert got == want, search

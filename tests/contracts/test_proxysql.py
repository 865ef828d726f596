"""contracts/proxysql-rag-mcp.md: every request example replayed, response shapes field for field,
the shared filter object, caps and the error model."""

from __future__ import annotations

import base64
import itertools
import json

import numpy as np
import pytest

from tests.contracts.response_schemas import assert_valid

PATH = "/mcp/proxysql"
TOOLS = {
    "rag.search_fts",
    "rag.search_vector",
    "rag.search_hybrid",
    "rag.get_chunks",
    "rag.get_docs",
    "rag.fetch_from_source",
    "rag.admin.stats",
    "rag.admin.sync",
}


def payload(contract, tool, args):
    """The tool's payload, valid against the contract's response schema (schemas/proxysql/)."""
    result = contract.payload(tool, args, path=PATH)
    assert_valid(result, "proxysql", tool)
    return result


def error(contract, tool, args):
    body = contract.call(tool, args, path=PATH)
    assert "error" in body, body
    return body["error"]


def assert_stats(stats, **fixed):
    assert {key: stats[key] for key in fixed} == fixed


def assert_chunk_of_its_document(row):
    assert row["chunk_id"].startswith(row["doc_id"] + "#"), row


def test_tools_listed_on_the_profile_endpoint(contract):
    tools = contract.rpc("tools/list", path=PATH).json()["result"]["tools"]
    assert {t["name"] for t in tools} == TOOLS
    hybrid = next(t for t in tools if t["name"] == "rag.search_hybrid")["inputSchema"]
    assert set(hybrid["properties"]) >= {"query", "k", "filters", "mode", "fuse", "fts_then_vec"}


def test_search_fts_example_request(contract):
    request = {
        "query": "json_extract mysql",
        "k": 10,
        "offset": 0,
        "filters": {},
        "return": {"include_title": True, "include_metadata": True, "include_snippets": False},
    }
    result = payload(contract, "rag.search_fts", request)
    assert set(result) == {"results", "truncated", "stats"}
    assert result["truncated"] is False
    assert_stats(result["stats"], k_requested=10, k_returned=len(result["results"]))


def test_search_fts_finds_ranked_chunks(contract):
    request = {"query": "row permissions column masks", "k": 5, "return": {"include_snippets": True}}
    result = payload(contract, "rag.search_fts", request)
    rows = result["results"]
    assert len(rows) == 5 and result["stats"]["k_returned"] == 5
    assert rows[0]["doc_id"] == "docs:redp5110_sampled.pdf"
    for row in rows:
        assert_chunk_of_its_document(row)
        assert {"title", "metadata", "score_fts_raw"} <= set(row)
        assert 0 < row["score_fts"] <= 1 and row["snippet"]
    assert [r["score_fts"] for r in rows] == sorted((r["score_fts"] for r in rows), reverse=True)
    page2 = payload(contract, "rag.search_fts", {**request, "offset": 5})["results"]
    assert not {r["chunk_id"] for r in page2} & {r["chunk_id"] for r in rows}


def test_search_vector_text_example_request(contract):
    request = {
        "query_text": "How do I extract JSON fields in MySQL?",
        "k": 10,
        "filters": {},
        "embedding": {"model": "text-embedding-3-large"},
    }
    result = payload(contract, "rag.search_vector", request)
    assert len(result["results"]) == 10 and result["truncated"] is False
    for row in result["results"]:
        assert_chunk_of_its_document(row)
        assert -1 <= row["score_vec"] <= 1
    assert_stats(result["stats"], k_requested=10, k_returned=10, embedding_model="all-MiniLM-L6-v2-onnx-int8-dynamic")


def test_search_vector_precomputed_embedding(contract):
    vector = contract.services.embedder.embed(["ducks feeding on aquatic plants"])[0]
    request = {
        "query_embedding": {"dim": 384, "values_b64": base64.b64encode(vector.astype("<f4").tobytes()).decode()},
        "k": 3,
        "filters": {},
    }
    rows = payload(contract, "rag.search_vector", request)["results"]
    assert rows[0]["doc_id"] == "docs:wiki_duck.html"
    example = {"query_embedding": {"dim": 1536, "values_b64": "AAAA"}, "k": 10, "filters": {}}
    err = error(contract, "rag.search_vector", example)
    assert err["code"] == -32602 and err["data"]["code"] == "INVALID_ARGUMENT"
    assert "dimension 384" in err["message"]
    short = {"query_embedding": {"dim": 384, "values_b64": base64.b64encode(b"\0" * 16).decode()}}
    assert "holds 4 float32 values" in error(contract, "rag.search_vector", short)["message"]
    both = {"query_text": "x", "query_embedding": request["query_embedding"]}
    assert error(contract, "rag.search_vector", both)["data"]["code"] == "INVALID_ARGUMENT"
    assert error(contract, "rag.search_vector", {"k": 3})["code"] == -32602


def test_search_hybrid_fuse_example_request(contract):
    request = {
        "query": "json_extract mysql",
        "k": 10,
        "filters": {},
        "mode": "fuse",
        "fuse": {"fts_k": 50, "vec_k": 50, "rrf_k0": 60, "w_fts": 1.0, "w_vec": 1.0},
    }
    result = payload(contract, "rag.search_hybrid", request)
    assert_stats(result["stats"], mode="fuse", k_requested=10, k_returned=len(result["results"]))
    for row in result["results"]:
        assert isinstance(row["score"], float) and 0 < row["score"] <= 1
        assert set(row["debug"]) == {"rank_fts", "rank_vec"}


def test_search_hybrid_fuse_ranks_and_debug(contract):
    request = {"query": "who invented the word processor", "k": 5, "mode": "fuse"}
    rows = payload(contract, "rag.search_hybrid", request)["results"]
    assert rows[0]["doc_id"] == "docs:multi_page.pdf"
    top = rows[0]
    assert_chunk_of_its_document(top)
    assert isinstance(top["score_fts"], float) and isinstance(top["score_vec"], float)
    assert isinstance(top["debug"]["rank_fts"], int) and isinstance(top["debug"]["rank_vec"], int)
    vector_only = {**request, "fuse": {"w_fts": 0.0, "w_vec": 1.0}}
    ranked = payload(contract, "rag.search_hybrid", vector_only)["results"]
    by_vec = [r for r in ranked if r["debug"]["rank_vec"] is not None]
    assert [r["debug"]["rank_vec"] for r in by_vec] == sorted(r["debug"]["rank_vec"] for r in by_vec)


def test_search_hybrid_scores_are_normalised_as_the_fts_and_vector_tools_normalise_them(contract):
    """proxysql-rag-mcp.md §1.2: "Normalize scores in MCP layer so: higher is always better for agent
    ranking; raw internal ranking can still be returned as `score_fts_raw`, `distance_raw`"; §5.5 shows
    `"score": 0.91, "score_fts": 0.74, "score_vec": 0.86` side by side. So rag.search_hybrid's score_fts is
    rag.search_fts's score_fts of the chunk (0-1) and its score_vec rag.search_vector's, raw values beside."""
    query = "row permissions column masks"
    fts = {r["chunk_id"]: r for r in payload(contract, "rag.search_fts", {"query": query, "k": 50})["results"]}
    vec = {r["chunk_id"]: r for r in payload(contract, "rag.search_vector", {"query_text": query, "k": 50})["results"]}
    for mode in ("fuse", "fts_then_vec"):
        rows = payload(contract, "rag.search_hybrid", {"query": query, "k": 10, "mode": mode})["results"]
        by_fts = sorted((r for r in rows if r["debug"]["rank_fts"] is not None), key=lambda r: r["debug"]["rank_fts"])
        by_vec = sorted((r for r in rows if r["debug"]["rank_vec"] is not None), key=lambda r: r["debug"]["rank_vec"])
        assert len(by_vec) >= 5 and (mode == "fts_then_vec" or len(by_fts) >= 5), (mode, rows)
        for row in by_fts:
            assert 0 < row["score_fts"] <= 1
            assert row["score_fts"] == fts[row["chunk_id"]]["score_fts"]
            assert row["score_fts_raw"] == pytest.approx(fts[row["chunk_id"]]["score_fts_raw"])
        scores = [r["score_fts"] for r in by_fts]
        assert scores == sorted(scores, reverse=True) and len(set(scores)) == len(scores)
        assert all(r["score_fts_raw"] >= s["score_fts_raw"] for r, s in itertools.pairwise(by_fts))
        for row in by_vec:
            assert -1 <= row["score_vec"] <= 1
            assert row["score_vec"] == pytest.approx(vec[row["chunk_id"]]["score_vec"], abs=1e-5)
            assert row["distance_raw"] == pytest.approx(1 - row["score_vec"], abs=1e-6)
            assert vec[row["chunk_id"]]["distance_raw"] == pytest.approx(row["distance_raw"], abs=1e-5)
        similarities = [r["score_vec"] for r in by_vec]
        assert similarities == sorted(similarities, reverse=True)
        distances = [r["distance_raw"] for r in by_vec]
        assert distances == sorted(distances)
        for row in rows:
            assert (row["score_fts"] is None) == (row["debug"]["rank_fts"] is None) == (row["score_fts_raw"] is None)
            assert (row["score_vec"] is None) == (row["debug"]["rank_vec"] is None) == (row["distance_raw"] is None)


def test_search_hybrid_fts_then_vec_example_request(contract):
    request = {
        "query": "json_extract mysql",
        "k": 10,
        "filters": {},
        "mode": "fts_then_vec",
        "fts_then_vec": {"candidates_k": 200, "rerank_k": 50, "vec_metric": "cosine"},
    }
    result = payload(contract, "rag.search_hybrid", request)
    assert_stats(result["stats"], mode="fts_then_vec", k_requested=10)
    rerank = {**request, "query": "mallard duck plumage"}
    rows = payload(contract, "rag.search_hybrid", rerank)["results"]
    assert rows and rows[0]["doc_id"] == "docs:wiki_duck.html"
    assert all(r["score_vec"] is not None for r in rows)
    bad = {**request, "fts_then_vec": {"vec_metric": "l2"}}
    assert error(contract, "rag.search_hybrid", bad)["data"]["code"] == "INVALID_ARGUMENT"


def test_get_chunks_example_request(contract):
    found = payload(contract, "rag.search_fts", {"query": "mallard", "k": 2})["results"]
    ids = [r["chunk_id"] for r in found]
    request = {
        "chunk_ids": [*ids, "posts:12345#0"],
        "return": {"include_title": True, "include_doc_metadata": True, "include_chunk_metadata": True},
    }
    result = payload(contract, "rag.get_chunks", request)
    assert set(result) == {"chunks", "truncated", "stats"} and result["truncated"] is False
    assert [c["chunk_id"] for c in result["chunks"]] == ids
    for chunk in result["chunks"]:
        assert set(chunk) == {"chunk_id", "doc_id", "title", "body", "doc_metadata", "chunk_metadata"}
        assert "mallard" in chunk["body"].lower()
        assert chunk["chunk_metadata"]["chunk_index"] == int(chunk["chunk_id"].rsplit("#", 1)[1])
    bare = payload(contract, "rag.get_chunks", {"chunk_ids": ids, "return": {"include_title": False,
                                                                            "include_doc_metadata": False,
                                                                            "include_chunk_metadata": False}})
    assert set(bare["chunks"][0]) == {"chunk_id", "doc_id", "body"}


def test_get_docs_example_request(contract):
    request = {"doc_ids": ["docs:wiki.md", "posts:12345"], "return": {"include_body": True, "include_metadata": True}}
    result = payload(contract, "rag.get_docs", request)
    [doc] = result["docs"]
    assert set(doc) == {"doc_id", "source_id", "source_name", "pk_json", "title", "body", "metadata"}
    assert doc["pk_json"] == {"path": "wiki.md"} and isinstance(doc["source_id"], int)
    assert "International Business Machines" in doc["body"]
    row = payload(contract, "rag.get_docs", {"doc_ids": ["docs:bm25"]})["docs"][0]
    assert row["pk_json"] == {"id": "bm25"} and row["metadata"]["term"] == "BM25"


@pytest.fixture
def row_source(contract, tmp_path):
    folder = tmp_path / "catalogue"
    folder.mkdir()
    (folder / "parts.csv").write_text("id,name,price,secret\np1,Gearbox,1200,internal\np2,Blade,800,internal\n")
    name = f"parts_{tmp_path.name}"
    (folder / ".source.json").write_text(json.dumps({"name": name, "fetch_columns": ["id", "name", "price"]}))
    services = contract.services
    source = services.register_folder("default", f"rows-{tmp_path.name}", str(folder))
    services.ingest.sync(source)
    return folder, source


def test_fetch_from_source_example_request(contract, row_source):
    folder, source = row_source
    doc_id = f"{source.source_id}:p1"
    request = {"doc_ids": [doc_id], "columns": ["id", "name", "price"], "limits": {"max_rows": 10, "max_bytes": 200000}}
    result = payload(contract, "rag.fetch_from_source", request)
    assert result["rows"] == [{"doc_id": doc_id, "source_name": source.name,
                               "row": {"id": "p1", "name": "Gearbox", "price": "1200"}}]
    assert result["truncated"] is False
    (folder / "parts.csv").write_text("id,name,price,secret\np1,Gearbox,1350,internal\n")
    again = payload(contract, "rag.fetch_from_source", {"doc_ids": [doc_id]})
    assert again["rows"][0]["row"] == {"id": "p1", "name": "Gearbox", "price": "1350"}
    refused = error(contract, "rag.fetch_from_source", {"doc_ids": [doc_id], "columns": ["secret"]})
    assert refused["data"]["code"] == "INVALID_ARGUMENT" and "secret" in refused["message"]
    capped = payload(contract, "rag.fetch_from_source",
                     {"doc_ids": [doc_id, f"{source.source_id}:p2"], "limits": {"max_rows": 1}})
    assert len(capped["rows"]) == 1 and capped["truncated"] is True
    tiny = payload(contract, "rag.fetch_from_source", {"doc_ids": [doc_id], "limits": {"max_bytes": 10}})
    assert tiny["rows"] == [] and tiny["truncated"] is True


def test_fetch_from_source_of_a_file_gives_its_metadata(contract):
    rows = payload(contract, "rag.fetch_from_source", {"doc_ids": ["docs:multi_page.pdf"]})["rows"]
    row = rows[0]["row"]
    assert row["file_name"] == "multi_page.pdf" and row["pages"] == 5 and row["size_bytes"] == 128322


def test_admin_stats_example_request(contract):
    result = payload(contract, "rag.admin.stats", {})
    docs = next(s for s in result["sources"] if s["source_name"] == "docs")
    assert set(docs) == {"source_id", "source_name", "docs", "chunks", "last_sync"}
    assert isinstance(docs["source_id"], int) and docs["last_sync"].startswith("20")
    expected = contract.services.documents.list("default", "docs")
    assert docs["docs"] == len(expected)
    assert docs["chunks"] == sum(d.chunk_count for d in expected)


def test_admin_sync_example_request(contract, row_source):
    folder, source = row_source
    (folder / "more.csv").write_text("id,name,price,secret\np9,Rotor hub,5000,internal\n")
    (folder / "parts.csv").unlink()
    result = payload(contract, "rag.admin.sync", {"source_names": [source.name]})
    assert result["accepted"] is True and result["job_id"].startswith("sync-")
    contract.services.tasks.join()
    job = contract.services.jobs.get("default", result["job_id"])
    assert job.status == "succeeded" and job.counts["ingested"] == 1 and job.counts["deleted"] == 1
    assert contract.services.documents.get("default", f"{source.source_id}:p9") is not None
    assert contract.services.documents.get("default", f"{source.source_id}:p1") is None
    unknown = error(contract, "rag.admin.sync", {"source_names": ["stack_posts"]})
    assert unknown["data"]["code"] == "INVALID_ARGUMENT" and "stack_posts" in unknown["message"]


def test_shared_filter_object(contract, row_source):
    _, source = row_source
    numbers = {s.source_id: s.number for s in contract.services.sources.list("default")}

    def docs(filters, query="Gearbox duck mallard"):
        rows = payload(contract, "rag.search_fts", {"query": query, "k": 50, "filters": filters})["results"]
        return {r["doc_id"] for r in rows}

    everything = docs({})
    assert "docs:wiki_duck.html" in everything and f"{source.source_id}:p1" in everything
    assert docs({"source_ids": [numbers[source.source_id]]}) == {f"{source.source_id}:p1"}
    assert docs({"source_names": [source.name]}) == {f"{source.source_id}:p1"}
    assert docs({"source_ids": [numbers["docs"]], "source_names": [source.name]}) == set()
    assert docs({"doc_ids": ["docs:wiki_duck.html"]}) == {"docs:wiki_duck.html"}
    assert docs({"created_after": "2100-01-01T00:00:00Z"}) == set()
    assert docs({"created_before": "2100-01-01T00:00:00Z"}) == everything
    assert docs({"tags_all": ["collection:documents"]}) == everything
    assert docs({"tags_any": ["no-such-tag"]}) == set()
    mine = {"source_ids": [numbers[source.source_id]]}
    assert docs({**mine, "metadata": {"name": "Gearbox"}}) == {f"{source.source_id}:p1"}
    assert docs({**mine, "metadata": {"name": "Blade"}}) == set()
    assert docs({"post_type_ids": [1]}) == set()
    high = payload(contract, "rag.search_fts", {"query": "mallard", "k": 50, "filters": {"min_score": 0.99}})
    assert all(r["score_fts"] >= 0.99 for r in high["results"]) and len(high["results"]) == 1
    example = {"source_ids": [1, 2], "source_names": ["stack_posts"], "doc_ids": ["posts:12345"], "min_score": 5,
               "post_type_ids": [1], "tags_any": ["mysql", "json"], "tags_all": ["mysql", "json"],
               "created_after": "2022-01-01T00:00:00Z", "created_before": "2025-01-01T00:00:00Z"}
    assert docs(example) == set()


def test_caps_are_enforced_and_truncated_says_so(contract):
    result = payload(contract, "rag.search_fts", {"query": "the", "k": 200})
    assert len(result["results"]) == 50 and result["truncated"] is True
    assert result["stats"]["k_requested"] == 200 and result["stats"]["k_returned"] == 50
    exact = payload(contract, "rag.search_fts", {"query": "mallard", "k": 50})
    assert exact["truncated"] is False
    few = payload(contract, "rag.search_fts", {"query": "mallard", "k": 400})
    assert few["truncated"] is (len(few["results"]) == 50)
    long_query = error(contract, "rag.search_hybrid", {"query": "word " * 2000})
    assert long_query["code"] == -32602 and long_query["data"]["code"] == "LIMIT_EXCEEDED"
    too_many = error(contract, "rag.get_chunks", {"chunk_ids": [f"x#{i}" for i in range(501)]})
    assert too_many["data"]["code"] == "INVALID_ARGUMENT"


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("rag.search_fts", {}),
        ("rag.search_fts", {"query": "x", "k": 0}),
        ("rag.search_fts", {"query": "x", "filters": {"unknown": 1}}),
        ("rag.search_fts", {"query": "x", "filters": {"created_after": "yesterday"}}),
        ("rag.search_hybrid", {"query": "x", "mode": "magic"}),
        ("rag.get_docs", {"doc_ids": []}),
        ("rag.fetch_from_source", {"doc_ids": ["a"], "limits": {"max_rows": 0}}),
        ("rag.admin.stats", {"verbose": True}),
    ],
)
def test_invalid_arguments_carry_invalid_argument(contract, tool, arguments):
    err = error(contract, tool, arguments)
    assert err["code"] == -32602 and err["data"]["code"] == "INVALID_ARGUMENT"


def test_vector_search_and_fts_agree_on_filters_inside_the_query(contract):
    duck = contract.services.embedder.embed(["duck"])[0]
    rows = payload(contract, "rag.search_vector", {
        "query_embedding": {"dim": 384, "values_b64": base64.b64encode(np.asarray(duck, "<f4").tobytes()).decode()},
        "k": 5,
        "filters": {"doc_ids": ["docs:multi_page.pdf"]},
    })["results"]
    assert rows and {r["doc_id"] for r in rows} == {"docs:multi_page.pdf"}


@pytest.mark.parametrize("tool", ["rag.search_fts", "rag.search_vector", "rag.search_hybrid"])
def test_searches_keep_their_results_and_report_the_relevance_floor(contract, tool):
    floor = contract.services.settings.search.relevance_floor
    text = "query_text" if tool == "rag.search_vector" else "query"
    off = payload(contract, tool, {text: "Which wine pairs well with grilled salmon?", "k": 5})
    assert len(off["results"]) == 5, "the contract's top k, as before the floor"
    assert off["stats"]["floor"] == floor and off["stats"]["below_floor"] == 5
    on = payload(contract, tool, {text: "Who patented the typewriter in 1868?", "k": 5})
    assert on["results"] and on["stats"]["floor"] == floor
    assert on["stats"]["below_floor"] < on["stats"]["k_returned"]

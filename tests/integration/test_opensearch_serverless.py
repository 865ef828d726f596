"""The OpenSearch adapter's ingest, re-ingest and delete flows on a double with OpenSearch Serverless
semantics (writes searchable only after the refresh interval, no routing, no custom ids, no
refresh) and on a managed-domain double, with the chunk ledger in DynamoDB (moto, in process).

What would go wrong without ids recorded at write time: a re-ingest or delete right after an
ingest searches for the chunks to remove, finds none (not yet visible), and leaves them searchable
for good. Two ingests of one document at once must leave exactly one whole generation.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import numpy as np
import pytest
from moto import mock_aws

from ragmcp.adapters.aws.index_setup import handle
from ragmcp.adapters.aws.ledger import DynamoChunkLedger
from ragmcp.adapters.aws.opensearch import Generation, OpenSearchIndex
from ragmcp.domain.errors import DeadlineExceeded, IndexMismatch
from ragmcp.domain.models import Principal, SearchFilter
from ragmcp.ports import ScoresAsked

from .opensearch_double import Clock, OpenSearchDouble
from .test_opensearch_adapter import DIM, chunks_for, make_doc, unit

INDEX = "ragmcp-chunks"
MODEL = "test-model"
INTERVAL = 10.0
T = Principal(tenant="t")


@pytest.fixture
def table(monkeypatch) -> Iterator[Any]:
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        dynamodb = boto3.resource("dynamodb", region_name="us-east-1")
        yield dynamodb.create_table(
            TableName="ragmcp-documents",
            BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
        )


def make_index(spec, table, *, serverless: bool) -> tuple[OpenSearchIndex, OpenSearchDouble, Clock]:
    clock = Clock()
    double = OpenSearchDouble(spec, clock, serverless=serverless, delay=INTERVAL)
    index = OpenSearchIndex(double, INDEX, DynamoChunkLedger(table), serverless=serverless)
    index.create(MODEL, DIM)
    return index, double, clock


def put(index: OpenSearchIndex, doc, texts: list[str], seeds: list[int]) -> None:
    vectors = np.stack([unit(s) for s in seeds]) if seeds else np.zeros((0, DIM), dtype=np.float32)
    index.replace_document(doc, chunks_for(doc, texts), vectors)


def fts(index: OpenSearchIndex, words: str) -> list[str]:
    return [h.chunk_id for h in index.search_fts(T, words, SearchFilter(), k=10)]


def test_a_quick_reingest_leaves_no_stale_chunk_searchable(spec, table) -> None:
    index, double, clock = make_index(spec, table, serverless=True)
    doc = make_doc("t", "d1")
    put(index, doc, ["old alpha", "old beta", "old gamma"], [1, 2, 3])
    clock.advance(1)
    put(index, doc.model_copy(update={"content_hash": "h2"}), ["new alpha"], [4])
    assert fts(index, "alpha") == [], "nothing is searchable before the refresh interval"
    clock.advance(INTERVAL + 1)
    assert fts(index, "old") == []
    assert fts(index, "alpha") == ["d1#0"]
    assert index.count_chunks("t") == 1
    assert index.get_chunks("t", ["d1#1", "d1#2"]) == {}
    assert index.get_chunks("t", ["d1#0"])["d1#0"][0].text == "new alpha"
    assert len(double.stored(INDEX)) == 1


def test_the_document_stays_searchable_while_its_new_generation_is_not_yet(spec, table) -> None:
    index, _, clock = make_index(spec, table, serverless=True)
    doc = make_doc("t", "d1")
    put(index, doc, ["alpha one", "beta two"], [1, 2])
    clock.advance(INTERVAL + 1)
    put(index, doc, ["alpha three"], [3])
    for _ in range(int(INTERVAL)):
        assert fts(index, "alpha") == ["d1#0"], "never missing: the old generation until the new one shows"
        clock.advance(1)
    clock.advance(1)
    assert index.get_chunks("t", ["d1#0"])["d1#0"][0].text == "alpha three"
    assert index.count_chunks("t") == 1


def test_an_early_delete_leaves_nothing_searchable(spec, table) -> None:
    index, double, clock = make_index(spec, table, serverless=True)
    put(index, make_doc("t", "d1"), ["alpha", "beta"], [1, 2])
    clock.advance(1)
    assert index.delete_document("t", "d1") is True
    assert index.delete_document("t", "d1") is False
    clock.advance(INTERVAL + 1)
    assert fts(index, "alpha beta") == [] and index.count_chunks("t") == 0
    assert double.stored(INDEX) == {}


def test_serverless_requests_use_generated_ids_and_no_refresh(spec, table) -> None:
    index, double, _clock = make_index(spec, table, serverless=True)
    put(index, make_doc("t", "d1"), ["alpha", "beta"], [1, 2])
    put(index, make_doc("t", "d1"), ["gamma"], [3])
    assert all(doc_id.startswith("gen") for doc_id in double.stored(INDEX))
    assert ("indices.refresh", INDEX) not in double.calls


def test_a_managed_domain_refreshes_once_per_document(spec, table) -> None:
    index, double, _ = make_index(spec, table, serverless=False)
    doc = make_doc("t", "d1")
    put(index, doc, [f"old {n}" for n in range(250)], list(range(250)))
    assert double.calls.count(("indices.refresh", INDEX)) == 1
    put(index, doc, ["new alpha"], [4])
    assert double.calls.count(("indices.refresh", INDEX)) == 2
    assert fts(index, "old") == [] and fts(index, "alpha") == ["d1#0"], "visible when replace_document returns"
    assert index.delete_document("t", "d1") is True
    assert index.count_chunks("t") == 0


def test_two_ingests_of_one_document_at_once_leave_one_whole_generation(spec, table) -> None:
    index, double, _ = make_index(spec, table, serverless=False)
    doc = make_doc("t", "d1")
    put(index, doc, ["first alpha"], [1])
    both_written = threading.Barrier(2, timeout=30)
    write = double.bulk

    def bulk(body: list[dict[str, Any]], index: str, params: Any = None, **kwargs: Any) -> Any:
        response = write(body, index, params, **kwargs)
        if "index" in body[0]:
            both_written.wait()  # each ingest has written its chunks before either replaces anything
        return response

    double.bulk = bulk
    contents = {"a": ["alpha a0", "alpha a1", "alpha a2"], "b": ["alpha b0", "alpha b1"]}
    errors: list[BaseException] = []

    def ingest(name: str) -> None:
        try:
            put(
                index,
                doc.model_copy(update={"content_hash": name}),
                contents[name],
                [10, 11, 12][: len(contents[name])],
            )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=ingest, args=(name,)) for name in contents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    current = index.ledger.current("t", "d1")
    assert isinstance(current, Generation)
    stored = double.stored(INDEX)
    assert {s["generation"] for s in stored.values()} == {current.generation}, "one generation, the current one"
    texts = sorted(s["text"] for s in stored.values())
    assert texts in (contents["a"], contents["b"])
    assert index.count_chunks("t") == len(texts) and sorted(index.ledger.ids("t", "d1", current)) == sorted(stored)


def test_the_ledger_swaps_only_from_the_generation_it_was_read_as(table) -> None:
    ledger = DynamoChunkLedger(table)
    first = ledger.record("t", "d1", "g1", ["x1", "x2"])
    assert ledger.swap("t", "d1", None, first) is True
    assert ledger.swap("t", "d1", None, first) is False
    second = ledger.record("t", "d1", "g2", [f"y{n}" for n in range(4500)])
    assert second.parts == 3
    assert ledger.swap("t", "d1", Generation(generation="g0", parts=1), second) is False
    assert ledger.swap("t", "d1", first, second) is True
    assert ledger.current("t", "d1") == second
    assert len(ledger.ids("t", "d1", second)) == 4500 and ledger.ids("t", "d1", first) == ["x1", "x2"]
    ledger.forget("t", "d1", first)
    assert ledger.ids("t", "d1", first) == []
    assert ledger.swap("t", "d1", first, None) is False
    assert ledger.swap("t", "d1", second, None) is True and ledger.current("t", "d1") is None


# ---- R7: the index is created once, at deploy time, by the custom resource only ----


@pytest.fixture
def cloudformation() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A stand-in for the presigned ResponseURL on 127.0.0.1: the answers CloudFormation would get."""
    answers: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:  # noqa: N802
            length = int(self.headers["content-length"])
            answers.append({"content-type": self.headers.get("content-type"), **json.loads(self.rfile.read(length))})
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/response?X-Amz-Signature=x", answers
    server.shutdown()


def request(kind: str, url: str, dimension: int = DIM) -> dict[str, Any]:
    return {
        "RequestType": kind,
        "ResponseURL": url,
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/ragmcp/1",
        "RequestId": f"req-{kind}",
        "LogicalResourceId": "SearchIndex",
        "ResourceType": "Custom::SearchIndex",
        "ResourceProperties": {"ServiceToken": "arn", "EmbeddingModelId": MODEL, "EmbeddingDimension": str(dimension)},
        **({"PhysicalResourceId": INDEX} if kind != "Create" else {}),
    }


@pytest.mark.parametrize(
    "faults",
    [
        {2: "refuse"},  # the second of two bulk requests is throttled (429): the first one's 100 chunks are in
        {2: "refuse", 3: "refuse"},  # ... and the clean-up is throttled too
        {2: "timeout"},  # the second request is applied, but its answer (the generated ids) is lost
    ],
)
def test_a_write_that_fails_part_way_leaves_nothing_searchable(spec, table, faults) -> None:
    """R4: chunks written before a bulk request fails are recorded before they are written (the
    generation is in the ledger first), removed at once when they can be, and by a later delete of
    the document otherwise: a document that failed to ingest never stays searchable."""
    index, double, clock = make_index(spec, table, serverless=True)
    doc = make_doc("t", "d1")
    double.faults = {n + double._bulks: fault for n, fault in faults.items()}
    with pytest.raises(Exception):  # noqa: B017 - the service's error, whichever it is, reaches the caller
        put(index, doc, [f"alpha number {n}" for n in range(150)], list(range(150)))
    double.faults = {}
    clock.advance(INTERVAL + 1)
    index.delete_document("t", "d1")
    clock.advance(INTERVAL + 1)
    assert fts(index, "alpha") == []
    assert double.stored(INDEX) == {}, "no chunk of the failed write is left in the collection"
    assert index.ledger.generations("t", "d1") == []


def test_runtime_functions_never_create_the_index(spec, table) -> None:
    double = OpenSearchDouble(spec, Clock(), serverless=True)
    runtime = OpenSearchIndex(double, INDEX, DynamoChunkLedger(table), serverless=True)
    runtime.ensure_model(MODEL, DIM)
    assert double.calls == [], "starting a function calls nothing"
    with pytest.raises(IndexMismatch, match="custom resource creates it"):
        fts(runtime, "alpha")
    with pytest.raises(IndexMismatch):
        put(runtime, make_doc("t", "d1"), ["alpha"], [1])
    assert double.indexes == {}


def test_the_custom_resource_creates_checks_and_keeps_the_index(spec, table, cloudformation) -> None:
    url, answers = cloudformation
    double = OpenSearchDouble(spec, Clock(), serverless=True)
    setup = OpenSearchIndex(double, INDEX, DynamoChunkLedger(table), serverless=True)
    assert handle(request("Create", url), lambda: setup).created is True
    assert handle(request("Update", url), lambda: setup).created is False
    failed = handle(request("Update", url, dimension=DIM * 2), lambda: setup)
    assert failed.status == "FAILED" and "embedding dimension" in failed.reason
    assert handle(request("Delete", url), lambda: setup).status == "SUCCESS"
    assert [a["Status"] for a in answers] == ["SUCCESS", "SUCCESS", "FAILED", "SUCCESS"]
    assert all(a["PhysicalResourceId"] == INDEX and a["LogicalResourceId"] == "SearchIndex" for a in answers)
    assert {a["content-type"] for a in answers} == {""}, "the presigned PUT is signed without a content type"
    assert double.calls.count(("indices.create", INDEX)) == 1 and INDEX in double.indexes
    runtime = OpenSearchIndex(double, INDEX, DynamoChunkLedger(table), serverless=True)
    runtime.ensure_model(MODEL, DIM)
    assert fts(runtime, "alpha") == []


def test_the_first_deploy_waits_for_the_data_access_policy(spec, table, cloudformation) -> None:
    """AOSS refuses the setup function's role with 403 until the new data access policy propagates:
    the custom resource retries (with backoff, inside its deadline) instead of failing the stack."""
    url, answers = cloudformation
    double = OpenSearchDouble(spec, Clock(), serverless=True, access_after=2.5)
    setup = OpenSearchIndex(double, INDEX, DynamoChunkLedger(table), serverless=True)
    outcome = handle(request("Create", url), lambda: setup)
    assert outcome.status == "SUCCESS" and outcome.created, outcome
    assert double.refused >= 1 and INDEX in double.indexes
    assert [a["Status"] for a in answers] == ["SUCCESS"]


def test_the_wait_for_access_has_a_deadline(spec, table, cloudformation) -> None:
    url, answers = cloudformation
    double = OpenSearchDouble(spec, Clock(), serverless=True, access_after=3600)
    setup = OpenSearchIndex(double, INDEX, DynamoChunkLedger(table), serverless=True)
    started = time.monotonic()
    outcome = handle(request("Create", url), lambda: setup, deadline_seconds=1.5)
    assert time.monotonic() - started < 5
    assert outcome.status == "FAILED" and "403" in outcome.reason and "data access policy" in outcome.reason
    assert [a["Status"] for a in answers] == ["FAILED"]


def test_the_custom_resource_answers_even_when_it_cannot_reach_the_index(cloudformation) -> None:
    url, answers = cloudformation

    def unreachable() -> OpenSearchIndex:
        raise ValueError("search_backend opensearch needs RAGMCP_OPENSEARCH_ENDPOINT")

    outcome = handle(request("Create", url), unreachable)
    assert outcome.status == "FAILED" and "RAGMCP_OPENSEARCH_ENDPOINT" in outcome.reason
    assert [(a["Status"], a["PhysicalResourceId"]) for a in answers] == [("FAILED", INDEX)]


@pytest.mark.parametrize("serverless", [True, False])
def test_a_search_deadline_bounds_each_request_and_a_cut_short_search_is_refused(spec, table, serverless) -> None:
    """A search's deadline goes to OpenSearch as the time left: the client's request_timeout and the
    search body's `timeout` (the cluster stops there); a search the cluster cut short (timed_out, partial
    hits) is DeadlineExceeded, never a short answer; a deadline passed sends no request at all."""
    index, double, clock = make_index(spec, table, serverless=serverless)
    put(index, make_doc("t", "d1"), ["alpha one", "alpha two", "beta"], [1, 2, 3])
    clock.advance(INTERVAL + 1)
    before = time.monotonic()
    deadline = before + 30
    assert [h.chunk_id for h in index.search_fts(T, "alpha", SearchFilter(), 10, deadline=deadline)] == ["d1#0", "d1#1"]
    assert len(index.search_vector(T, unit(3), SearchFilter(), 2, deadline=deadline)) == 2
    sent = double.search_timeouts[-3:]  # the keyword search's statistics and search, then the vector search
    assert all(waited is not None and 0 < waited <= 30 for waited, _ in sent), sent
    assert all(cut is not None and 0 < int(cut.removesuffix("ms")) <= 30_000 for _, cut in sent), sent
    assert index.search_fts(T, "alpha", SearchFilter(), 10) and double.search_timeouts[-1] == (None, None)

    double.cut_short = True
    with pytest.raises(DeadlineExceeded):
        index.search_vector(T, unit(3), SearchFilter(), 2, deadline=time.monotonic() + 30)
    searches = len(double.search_timeouts)
    with pytest.raises(DeadlineExceeded):
        index.search_fts(T, "alpha", SearchFilter(), 10, deadline=time.monotonic() - 1)
    assert len(double.search_timeouts) == searches, "a search past its deadline sent a request"


@pytest.mark.parametrize("serverless", [True, False])
def test_scoring_named_chunks_is_two_multi_searches_bounded_by_the_deadline(spec, table, serverless) -> None:
    """`score_chunks` (issue 27's fusion: each phrase's one-sided candidates scored on the other side) asks
    every phrase at once: one multi-search of the phrases' word statistics, one of their restricted bm25 and
    k-NN searches; the scores are those of the restricted searches; each search carries the deadline as
    search_fts does, and a search the cluster cut short is DeadlineExceeded."""
    index, double, clock = make_index(spec, table, serverless=serverless)
    put(index, make_doc("t", "d1"), ["alpha one", "alpha two", "beta"], [1, 2, 3])
    clock.advance(INTERVAL + 1)
    asked = [
        ScoresAsked("alpha", unit(1), ("d1#0", "d1#2"), ("d1#1",)),
        ScoresAsked("beta one", unit(2), ("d1#2",), ("d1#0", "d1#1")),
        ScoresAsked("", unit(3), (), ("d1#2",)),
    ]
    before, searches = len(double.calls), len(double.search_timeouts)
    scored = index.score_chunks(T, SearchFilter(), asked, deadline=time.monotonic() + 30)
    assert [call for call, _ in double.calls[before:] if call == "msearch"] == ["msearch", "msearch"]
    sent = double.search_timeouts[searches:]  # two phrases' statistics, then five restricted searches
    assert len(sent) == 7 and all(waited is not None and 0 < waited <= 30 and cut for waited, cut in sent), sent
    for ask, (bm25, cosines) in zip(asked, scored, strict=True):
        alone_fts = dict(index.search_fts(T, ask.query, SearchFilter(chunk_ids=tuple(ask.bm25_of)), 10))
        alone_vec = dict(index.search_vector(T, ask.vector, SearchFilter(chunk_ids=tuple(ask.cosine_of)), 10))
        assert (bm25, cosines) == ({c: s for c, s in alone_fts.items() if ask.bm25_of}, alone_vec)
    double.cut_short = True
    with pytest.raises(DeadlineExceeded):
        index.score_chunks(T, SearchFilter(), asked, deadline=time.monotonic() + 30)

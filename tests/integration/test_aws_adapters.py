"""The AWS adapters on their own.

Bedrock is not emulated anywhere: the embedder and generator are checked with botocore's Stubber,
which validates every request against the service model (parameter names, types, required
fields) and answers with responses shaped like Bedrock's. The Step Functions runner likewise.
The DynamoDB stores run against moto (in process): expiry checked on read, conditional counting,
the rate limits and upload sessions (the audit chain: test_aws_audit.py).
"""

from __future__ import annotations

import io
import json
from datetime import timedelta

import boto3
import numpy as np
import pytest
from aws_lambda_powertools.utilities.data_classes import DynamoDBStreamEvent
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber
from moto import mock_aws

from ragmcp.adapters.aws.bedrock import BedrockEmbedder, BedrockGenerator, titan_request
from ragmcp.adapters.aws.dynamodb import DynamoRateLimiter, DynamoUploadStore
from ragmcp.adapters.aws.janitor import ttl_removed_sessions
from ragmcp.adapters.aws.stepfunctions import StepFunctionsRunner, execution_input
from ragmcp.adapters.local.files import LocalBlobStore
from ragmcp.domain.errors import RagError
from ragmcp.domain.models import Principal, UploadSession, utcnow
from ragmcp.security.models import RateLimits
from ragmcp.synthesis.models import Answer, Passage, SynthesisRequest
from ragmcp.synthesis.stash import PassageStash

REGION = "us-east-1"
EMBEDDING_MODEL = "amazon.titan-embed-text-v2:0"
GENERATION_MODEL = "anthropic.claude-3-haiku-20240307-v1:0"


def bedrock():
    return boto3.client("bedrock-runtime", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")


def embedding_response(vector: list[float]) -> dict:
    data = json.dumps({"embedding": vector, "inputTextTokenCount": 3}).encode()
    return {"body": StreamingBody(io.BytesIO(data), len(data)), "contentType": "application/json"}


def test_titan_embedder_requests_and_normalises() -> None:
    client = bedrock()
    embedder = BedrockEmbedder(client, EMBEDDING_MODEL, 4, concurrency=1)
    with Stubber(client) as stub:
        for text, vector in (("first text", [3.0, 4.0, 0.0, 0.0]), ("second", [0.0, 0.0, 2.0, 0.0])):
            expected = {
                "modelId": EMBEDDING_MODEL,
                "body": titan_request(text, 4),
                "contentType": "application/json",
                "accept": "application/json",
            }
            stub.add_response("invoke_model", embedding_response(vector), expected)
        vectors = embedder.embed(["first text", "second"])
        stub.assert_no_pending_responses()
    assert json.loads(titan_request("x", 4)) == {"inputText": "x", "dimensions": 4, "normalize": True}
    np.testing.assert_allclose(vectors, [[0.6, 0.8, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]], rtol=1e-6)


def test_titan_embedder_rejects_a_wrong_dimension_and_reports_errors() -> None:
    client = bedrock()
    embedder = BedrockEmbedder(client, EMBEDDING_MODEL, 4, concurrency=1)
    with Stubber(client) as stub:
        stub.add_response("invoke_model", embedding_response([1.0, 0.0]))
        with pytest.raises(RagError, match="2 dimensions"):
            embedder.embed(["a"])
        stub.add_client_error("invoke_model", service_error_code="ThrottlingException", http_status_code=429)
        with pytest.raises(RagError, match="embedder unavailable: ThrottlingException"):
            embedder.embed(["a"])


def test_converse_generator_request_shape_and_citations() -> None:
    client = bedrock()
    generator = BedrockGenerator(client, GENERATION_MODEL, max_tokens=256)
    passages = [Passage(passage_id="d#0", text="Links last a day.", title="FAQ"), Passage(passage_id="d#1", text="x")]
    response = {
        "output": {"message": {"role": "assistant", "content": [{"text": "Links are valid for a day [1]."}]}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": 10, "outputTokens": 8, "totalTokens": 18},
        "metrics": {"latencyMs": 120},
    }
    expected = {
        "modelId": GENERATION_MODEL,
        "system": [{"text": ANY}],
        "messages": [{"role": "user", "content": [{"text": ANY}]}],
        "inferenceConfig": {"maxTokens": 256, "temperature": 0.0},
    }
    with Stubber(client) as stub:
        stub.add_response("converse", response, expected)
        draft = generator.generate("How long do links last?", passages, "short", ["earlier question"])
        stub.add_client_error("converse", service_error_code="ValidationException", http_status_code=400)
        with pytest.raises(RagError, match="generator unavailable: ValidationException"):
            generator.generate("q", passages, None, [])
    assert draft.text == "Links are valid for a day [1]." and draft.used == [0] and draft.model == GENERATION_MODEL


def test_step_functions_runner_starts_a_named_sync_execution(tmp_path) -> None:
    client = boto3.client("stepfunctions", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    arn = "arn:aws:states:us-east-1:123456789012:stateMachine:ragmcp-synthesis"
    runner = StepFunctionsRunner(client, arn, GENERATION_MODEL, PassageStash(LocalBlobStore(), str(tmp_path)))
    request = SynthesisRequest(principal=Principal(tenant="t"), question="why?")
    answer = Answer(question="why?", text="because", confidence=0.9, citations=[], model=GENERATION_MODEL)
    base = {"executionArn": f"{arn}:run", "startDate": utcnow(), "stopDate": utcnow()}
    with Stubber(client) as stub:
        expected = {"stateMachineArn": arn, "name": ANY, "input": execution_input(request)}
        stub.add_response("start_sync_execution", {**base, "status": "SUCCEEDED", "output": answer.model_dump_json()},
                          expected)
        assert runner.run(request) == answer
        stub.add_response("start_sync_execution", {**base, "status": "FAILED", "error": "SynthesisFailed"})
        with pytest.raises(RagError, match="synthesis failed: SynthesisFailed"):
            runner.run(request)


@pytest.fixture
def dynamodb(monkeypatch):
    for name, value in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": REGION}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        yield boto3.resource("dynamodb", region_name=REGION)


def table(dynamodb, name: str):
    keys = [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}]
    attributes = [{"AttributeName": a, "AttributeType": "S"} for a in ("pk", "sk")]
    return dynamodb.create_table(
        TableName=name, KeySchema=keys, AttributeDefinitions=attributes, BillingMode="PAY_PER_REQUEST"
    )


def session(expires_in: timedelta) -> UploadSession:
    now = utcnow()
    return UploadSession(tenant="t", upload_id="u1", filename="a.md", total_size=10, created_at=now,
                         expires_at=now + expires_in)


def test_upload_sessions_expire_on_read_whatever_ttl_has_done(dynamodb) -> None:
    store = DynamoUploadStore(table(dynamodb, "uploads"))
    store.put(session(timedelta(minutes=10)))
    assert store.add_part("t", "u1", 0, 4).parts == {0: 4}
    assert store.add_part("t", "u1", 1, 6).parts == {0: 4, 1: 6}
    store.put(session(timedelta(seconds=-1)))
    assert store.get("t", "u1") is None
    assert store.add_part("t", "u1", 2, 1) is None
    assert [s.upload_id for s in store.expired(utcnow())] == ["u1"]


def test_rate_limits_count_conditionally_and_release(dynamodb) -> None:
    limiter = DynamoRateLimiter(table(dynamodb, "limits"), lease_seconds=60, clock=lambda: 1_000_020.0)
    limits = RateLimits(per_minute=3, synthesis_per_minute=1, concurrent=2)
    first = limiter.acquire("k", limits, synthesis=True)
    assert first.allowed and first.remaining == 2
    assert not limiter.acquire("k", limits, synthesis=True).allowed  # synthesis limit, not counted
    assert limiter.acquire("k", limits, synthesis=False).allowed
    refused = limiter.acquire("k", limits, synthesis=False)
    assert not refused.allowed and "concurrent" in refused.reason
    limiter.release("k")
    assert limiter.acquire("k", limits, synthesis=False).allowed
    over = limiter.acquire("k", limits, synthesis=False)
    assert not over.allowed and "requests a minute" in over.reason


def test_the_janitor_takes_only_ttl_removals(dynamodb) -> None:
    from boto3.dynamodb.types import TypeSerializer

    item = {"pk": "t", "sk": "u1", "body": session(timedelta(seconds=-5)).model_dump_json(exclude={"parts"}),
            "parts": {"0": 4}, "expires_at": 1}
    image = {k: TypeSerializer().serialize(v) for k, v in item.items()}
    ttl = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}
    records = [
        {"eventName": "REMOVE", "userIdentity": ttl, "dynamodb": {"OldImage": image}},
        {"eventName": "REMOVE", "dynamodb": {"OldImage": image}},
        {"eventName": "MODIFY", "userIdentity": ttl, "dynamodb": {"OldImage": image, "NewImage": image}},
    ]
    sessions = ttl_removed_sessions(DynamoDBStreamEvent({"Records": records}))
    assert [(s.upload_id, s.parts) for s in sessions] == [("u1", {0: 4})]


def test_the_document_stores_count_a_tenant_and_a_source_alike(dynamodb, tmp_path) -> None:
    from ragmcp.adapters.aws.dynamodb import DynamoDocumentStore
    from ragmcp.adapters.local.database import Database
    from ragmcp.adapters.local.sqlite_stores import SqliteDocumentStore
    from ragmcp.domain.models import Document
    from tests.fakes import MemoryDocumentStore

    def doc(tenant: str, source: str, n: int) -> Document:
        return Document(
            tenant=tenant,
            doc_id=f"{source}:{n}.md",
            source=source,
            path=f"{n}.md",
            title=str(n),
            file_name=f"{n}.md",
            file_type="md",
            content_hash=str(n),
        )

    stores = [
        MemoryDocumentStore(),
        SqliteDocumentStore(Database(tmp_path / "index.db")),
        DynamoDocumentStore(table(dynamodb, "catalog")),
    ]
    for store in stores:
        for n in range(3):
            store.put(doc("t", "docs", n))
        store.put(doc("t", "notes", 9))
        store.put(doc("other", "docs", 5))
        store.delete("t", "docs:0.md")
        counts = (store.count("t"), store.count("t", "docs"), store.count("t", "notes"), store.count("none"))
        assert counts == (3, 2, 1, 0), type(store).__name__


def test_unused_versions_are_pruned_keeping_live_and_the_one_before(monkeypatch) -> None:
    from ragmcp.adapters.aws.versions import prune_versions

    from .aws_harness import placeholder_zip
    from .iam_tier import published_function

    for name, value in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": REGION}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        session = boto3.session.Session(region_name=REGION)
        published_function(session, "ragmcp-mcp", 5)
        client = session.client("lambda")
        client.update_function_code(FunctionName="ragmcp-mcp", ZipFile=placeholder_zip())
        assert client.publish_version(FunctionName="ragmcp-mcp")["Version"] == "6"  # a deploy in progress: kept
        assert prune_versions(client, "ragmcp-mcp") == ["1", "2", "3"]
        left = [v["Version"] for v in client.list_versions_by_function(FunctionName="ragmcp-mcp")["Versions"]]
        assert sorted(left) == ["$LATEST", "4", "5", "6"]
        assert prune_versions(client, "ragmcp-mcp") == []

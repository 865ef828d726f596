"""OpenSearch fixtures shared by the adapter's tests and the SearchIndex behaviour suite: the official
API specification, a real cluster when OPENSEARCH_URL is set (every request checked against the
spec on its way out), and the chunk ledger in DynamoDB (moto, in process)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from opensearchpy import OpenSearch

from ragmcp.adapters.aws.ledger import DynamoChunkLedger
from ragmcp.adapters.aws.opensearch import opensearch_client

from .opensearch_spec import SPEC_DIR, OpenSearchSpec


@pytest.fixture(scope="session")
def spec() -> OpenSearchSpec:
    if not (SPEC_DIR / "namespaces").is_dir():
        pytest.skip(f"OpenSearch API spec not found at {SPEC_DIR} (set OPENSEARCH_API_SPEC)")
    return OpenSearchSpec()


_OPERATIONS = {"_bulk": "bulk", "_search": "search", "_count": "count", "_delete_by_query": "delete_by_query"}


def _operation(method: str, url: str) -> str | None:
    parts = [p for p in url.split("?")[0].split("/") if p]
    if method == "PUT" and len(parts) == 1:
        return "indices.create"
    return _OPERATIONS.get(parts[-1]) if parts else None


def _checked_against(spec: OpenSearchSpec, client: OpenSearch, monkeypatch: pytest.MonkeyPatch) -> None:
    """Check every request body and query parameter the client sends, then send it on unchanged."""
    send = client.transport.perform_request

    def perform_request(method: str, url: str, params: Any = None, body: Any = None, **kwargs: Any) -> Any:
        group = _operation(method, url)
        if group == "bulk":
            text = body.decode() if isinstance(body, bytes) else body
            spec.validate_bulk([json.loads(line) for line in text.splitlines() if line.strip()])
        elif group is not None and body is not None:
            spec.validate_body(group, body)
        if group is not None:
            spec.validate_params(group, params or {})
        return send(method, url, params=params, body=body, **kwargs)

    monkeypatch.setattr(client.transport, "perform_request", perform_request)


@pytest.fixture(scope="module")
def cluster(spec) -> Iterator[OpenSearch]:
    url = os.environ.get("OPENSEARCH_URL")
    if not url:
        pytest.skip("OPENSEARCH_URL is not set: the adapter's behaviour tests need a real OpenSearch cluster")
    client = opensearch_client(url)
    with pytest.MonkeyPatch.context() as monkeypatch:
        _checked_against(spec, client, monkeypatch)
        yield client


@pytest.fixture(scope="module")
def ledger() -> Iterator[DynamoChunkLedger]:
    """The chunk ledger in a DynamoDB table (moto, in process)."""
    with pytest.MonkeyPatch.context() as monkeypatch, mock_aws():
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
        table = boto3.resource("dynamodb", region_name="us-east-1").create_table(
            TableName="ragmcp-documents",
            BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
        )
        yield DynamoChunkLedger(table)

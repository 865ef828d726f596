"""The stack's SearchIndex custom resource: CloudFormation asks, the chunk index is created for the
embedding model (or checked, when it exists), and the answer is PUT to the presigned ResponseURL.

Create and Update create the index unless it exists and check its model; a model change fails the
update with the mismatch as the reason (the stack rolls back). Delete leaves the index alone: its
chunks go with the domain or collection (dev) or stay with it (prod).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import requests
from pydantic import BaseModel, ConfigDict, Field

from ragmcp.adapters.aws.opensearch import OpenSearchIndex

RESPONSE_TIMEOUT_SECONDS = 30
_REASON_CHARS = 2000


class IndexProperties(BaseModel):
    model_config = ConfigDict(extra="ignore")

    EmbeddingModelId: str
    EmbeddingDimension: int = Field(gt=0)


class CustomResourceEvent(BaseModel):
    model_config = ConfigDict(extra="ignore")

    RequestType: Literal["Create", "Update", "Delete"]
    ResponseURL: str
    StackId: str
    RequestId: str
    LogicalResourceId: str
    PhysicalResourceId: str | None = None
    ResourceProperties: dict[str, Any] = Field(default_factory=dict)


class Outcome(BaseModel):
    status: Literal["SUCCESS", "FAILED"]
    reason: str = ""
    created: bool = False


def apply(event: CustomResourceEvent, index: OpenSearchIndex) -> Outcome:
    if event.RequestType == "Delete":
        return Outcome(status="SUCCESS", reason="the index is left as it is")
    wanted = IndexProperties.model_validate(event.ResourceProperties)
    created = index.create(wanted.EmbeddingModelId, wanted.EmbeddingDimension)
    return Outcome(status="SUCCESS", reason="created" if created else "exists with this model", created=created)


def respond(event: CustomResourceEvent, outcome: Outcome, physical_id: str) -> None:
    """Tell CloudFormation (an S3 presigned PUT whose signature covers no content type)."""
    body: dict[str, Any] = {
        "Status": outcome.status,
        "Reason": outcome.reason[:_REASON_CHARS],
        "PhysicalResourceId": physical_id,
        "StackId": event.StackId,
        "RequestId": event.RequestId,
        "LogicalResourceId": event.LogicalResourceId,
        "Data": {"IndexName": physical_id},
    }
    response = requests.put(
        event.ResponseURL, json=body, headers={"content-type": ""}, timeout=RESPONSE_TIMEOUT_SECONDS
    )
    response.raise_for_status()


def handle(raw: dict[str, Any], index: Callable[[], OpenSearchIndex]) -> Outcome:
    """Apply the request and always answer it: an unanswered request leaves the stack waiting an hour.
    `index` builds the index client (inside the answer, so a bad setting fails the resource too)."""
    event = CustomResourceEvent.model_validate(raw)
    name = event.PhysicalResourceId or "ragmcp-chunks"
    try:
        target = index()
        name = event.PhysicalResourceId or target.index
        outcome = apply(event, target)
    except Exception as exc:  # reported to CloudFormation as the resource's failure reason
        outcome = Outcome(status="FAILED", reason=f"{type(exc).__name__}: {exc}")
    respond(event, outcome, name)
    return outcome

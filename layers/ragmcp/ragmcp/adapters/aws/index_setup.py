"""The stack's SearchIndex custom resource: CloudFormation asks, the chunk index is created for the
embedding model (or checked, when it exists), and the answer is PUT to the presigned ResponseURL.

Create and Update create the index unless it exists and check its model; a model change fails the
update with the mismatch as the reason (the stack rolls back). Delete leaves the index alone: its
chunks go with the domain or collection (dev) or stay with it (prod).

On a first deploy the collection's data access policy is new, and OpenSearch Serverless enforces a
new policy only after it has propagated (up to about a minute): until then the setup role is
refused with 403. Those refusals are retried with backoff until `deadline_seconds`
(ACCESS_DEADLINE_SECONDS, or what the invocation has left less the time the answer needs), then the
resource fails with the refusal as its reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal

import requests
from opensearchpy.exceptions import AuthorizationException
from pydantic import BaseModel, ConfigDict, Field

from ragmcp.adapters.aws.opensearch import OpenSearchIndex

RESPONSE_TIMEOUT_SECONDS = 30
ACCESS_DEADLINE_SECONDS = 180
"""How long a 403 is retried: AWS documents up to about a minute for a data access policy to apply."""
_FIRST_WAIT_SECONDS = 1.0
_LONGEST_WAIT_SECONDS = 15.0
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


def apply(event: CustomResourceEvent, index: OpenSearchIndex, deadline_seconds: float) -> Outcome:
    if event.RequestType == "Delete":
        return Outcome(status="SUCCESS", reason="the index is left as it is")
    wanted = IndexProperties.model_validate(event.ResourceProperties)
    created = when_allowed(lambda: index.create(wanted.EmbeddingModelId, wanted.EmbeddingDimension), deadline_seconds)
    return Outcome(status="SUCCESS", reason="created" if created else "exists with this model", created=created)


def when_allowed(call: Callable[[], bool], deadline_seconds: float) -> bool:
    """`call`, retried while the data access policy is not yet in force (403), within the deadline."""
    give_up = time.monotonic() + deadline_seconds
    wait = _FIRST_WAIT_SECONDS
    while True:
        try:
            return call()
        except AuthorizationException as exc:
            if time.monotonic() + wait > give_up:
                raise PermissionError(
                    f"still refused ({exc.status_code}) after {deadline_seconds:.0f} s: the setup role is not "
                    "in the index's data access policy, or the policy has not propagated yet"
                ) from exc
            time.sleep(wait)
            wait = min(wait * 2, _LONGEST_WAIT_SECONDS)


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


def handle(
    raw: dict[str, Any], index: Callable[[], OpenSearchIndex], deadline_seconds: float = ACCESS_DEADLINE_SECONDS
) -> Outcome:
    """Apply the request and always answer it: an unanswered request leaves the stack waiting (until
    the resource's ServiceTimeout). `index` builds the index client (inside the answer, so a bad
    setting fails the resource too); 403s are retried for `deadline_seconds`."""
    event = CustomResourceEvent.model_validate(raw)
    name = event.PhysicalResourceId or "ragmcp-chunks"
    try:
        target = index()
        name = event.PhysicalResourceId or target.index
        outcome = apply(event, target, deadline_seconds)
    except Exception as exc:  # reported to CloudFormation as the resource's failure reason
        outcome = Outcome(status="FAILED", reason=f"{type(exc).__name__}: {exc}")
    respond(event, outcome, name)
    return outcome

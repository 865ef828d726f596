"""What the janitor function is asked to clean: sessions DynamoDB's TTL removed (stream records),
or, on its schedule, whatever has expired meanwhile."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.data_classes import DynamoDBStreamEvent
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecordEventName

from ragmcp.adapters.aws.dynamodb import DynamoUploadStore
from ragmcp.domain.models import UploadSession

TTL_PRINCIPAL = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}


def is_schedule(event: dict[str, Any]) -> bool:
    """An EventBridge Scheduler or scheduled-rule invocation (not a stream batch)."""
    return "Records" not in event


def ttl_removed_sessions(event: DynamoDBStreamEvent) -> list[UploadSession]:
    """The sessions of the batch's REMOVE records that DynamoDB's TTL made (not a user's delete)."""
    return [
        DynamoUploadStore.session_of(record.dynamodb.old_image)
        for record in event.records
        if record.event_name == DynamoDBRecordEventName.REMOVE
        and record.user_identity == TTL_PRINCIPAL
        and record.dynamodb is not None
    ]

"""The drop bucket's change events (S3 -> SQS) -> ragmcp.ingest.events, one message at a time.

Failed messages are reported back (partial batch response), so SQS retries only those and
moves a message that keeps failing to the dead-letter queue. Each change is idempotent on
(key, version): a redelivered event returns the first outcome and changes nothing.
"""

from functools import cache
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.idempotency.serialization.pydantic import PydanticSerializer
from aws_lambda_powertools.utilities.typing import LambdaContext

from ragmcp.bootstrap import DROP_EVENTS_SETTINGS, build_drop_events
from ragmcp.ingest.events import ChangeOutcome, DropEvents, ObjectChange, changes_of
from ragmcp.logs import configure_lambda
from ragmcp.settings import load_groups

logger = Logger()
configure_lambda(logger)
tracer = Tracer()
metrics = Metrics()
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
settings = load_groups(*DROP_EVENTS_SETTINGS)  # the groups of settings it uses, no other
idempotency = IdempotencyConfig(event_key_jmespath="[key, version]", raise_on_no_idempotency_key=True)
persistence = DynamoDBPersistenceLayer(table_name=settings.aws.idempotency_table)


@cache
def drop_events() -> DropEvents:
    return build_drop_events(settings)


@idempotent_function(
    data_keyword_argument="change",
    config=idempotency,
    persistence_store=persistence,
    output_serializer=PydanticSerializer,
)
def apply(change: ObjectChange) -> ChangeOutcome:
    return drop_events().apply(change)


@tracer.capture_method
def record_handler(record: SQSRecord) -> None:
    for change in changes_of(record.body):
        outcome = apply(change=change)
        logger.info("applied", extra={"key": change.key, "version": change.version, "action": outcome.action})
        metrics.add_metric(name=f"Objects{outcome.action.capitalize()}", unit=MetricUnit.Count, value=1)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    idempotency.register_lambda_context(context)
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)

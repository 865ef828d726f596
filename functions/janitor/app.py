"""Expired upload sessions and their staged parts: the uploads table's stream (TTL removals) and a
schedule (TTL deletes late, so the schedule sweeps what has expired meanwhile). The schedule also
deletes the MCP function's unused published versions (RAGMCP_PRUNE_VERSIONS_OF; adapters/aws/versions.py)."""

from functools import cache
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes import DynamoDBStreamEvent
from aws_lambda_powertools.utilities.typing import LambdaContext

from ragmcp.adapters.aws.janitor import is_schedule, ttl_removed_sessions
from ragmcp.adapters.aws.versions import prune_versions
from ragmcp.bootstrap import UPLOAD_JANITOR_SETTINGS, build_upload_janitor
from ragmcp.ingest.uploads import UploadService
from ragmcp.logs import configure_lambda
from ragmcp.settings import Settings, load_groups

logger = Logger()
configure_lambda(logger)
tracer = Tracer()
metrics = Metrics()


@cache
def settings() -> Settings:
    """Read when the janitor first runs, as every part it builds: the groups of settings it uses, no other."""
    return load_groups(*UPLOAD_JANITOR_SETTINGS)


@cache
def uploads() -> UploadService:
    return build_upload_janitor(settings())


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    if is_schedule(event):
        removed = uploads().sweep()
        function = settings().aws.prune_versions_of
        if function:
            pruned = prune_versions(boto3.session.Session().client("lambda"), function)
            logger.info("pruned versions", extra={"function": function, "versions": pruned})
    else:
        sessions = ttl_removed_sessions(DynamoDBStreamEvent(event))
        for session in sessions:
            uploads().discard(session)
        removed = len(sessions)
    metrics.add_metric(name="UploadSessionsRemoved", unit=MetricUnit.Count, value=removed)
    return {"removed": removed}

"""The SearchIndex custom resource: creates the chunk index once, at deploy time (ragmcp.adapters.aws.index_setup)."""

from functools import cache
from typing import Any

import boto3
from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from ragmcp.adapters.aws.index_setup import ACCESS_DEADLINE_SECONDS, RESPONSE_TIMEOUT_SECONDS, handle
from ragmcp.adapters.aws.opensearch import OpenSearchIndex
from ragmcp.bootstrap import build_opensearch_index
from ragmcp.settings import AwsSettings, load_group

logger = Logger()


@cache
def search_index() -> OpenSearchIndex:
    aws = load_group(AwsSettings)  # the only settings it uses
    if aws.search_backend != "opensearch":
        raise RuntimeError("the index setup function needs RAGMCP_SEARCH_BACKEND=opensearch")
    session = boto3.session.Session()
    return build_opensearch_index(aws, session.resource("dynamodb").Table(aws.documents_table), session.region_name)


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    # Retry 403s no longer than the invocation can afford and still answer CloudFormation.
    left = context.get_remaining_time_in_millis() / 1000 - RESPONSE_TIMEOUT_SECONDS - 5
    outcome = handle(event, search_index, min(ACCESS_DEADLINE_SECONDS, max(left, 0)))
    logger.info("answered", extra={"request": event.get("RequestType"), "status": outcome.status})
    return outcome.model_dump()

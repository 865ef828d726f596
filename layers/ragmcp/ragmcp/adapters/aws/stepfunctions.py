"""The synthesis state machine (Express) as a SynthesisRunner: StartSyncExecution, then the answer.

StartSyncExecution is served by `sync-states.<region>`: botocore puts the `sync-` prefix the API
model declares in front of the regional host. An emulator behind an endpoint URL (LocalStack) has
no such host, so only a client with an endpoint URL is made without the prefix (`sfn_client`).
"""

from __future__ import annotations

import json
import uuid
from typing import Any
from urllib.parse import urlparse

from botocore.config import Config

from ragmcp.domain.errors import RagError
from ragmcp.synthesis.models import Answer, SynthesisRequest
from ragmcp.synthesis.stash import PassageStash
from ragmcp.synthesis.tasks import answer_of

SfnClient = Any  # boto3 Step Functions client
Session = Any  # boto3 Session

SYNC_TIMEOUTS = (2, 25)
"""(connect, read) seconds of StartSyncExecution: the read outlasts the state machine's own 24 s
timeout, and both end before the MCP function's 29 s and the HTTP API's 30 s."""
_AWS_SUFFIXES = (".amazonaws.com", ".amazonaws.com.cn", ".api.aws")


def _config(*, host_prefix: bool) -> Config:
    connect, read = SYNC_TIMEOUTS
    # No retry: a retried synchronous execution would run the synthesis again past the budget.
    return Config(
        connect_timeout=connect,
        read_timeout=read,
        retries={"mode": "standard", "max_attempts": 1},
        inject_host_prefix=host_prefix,
    )


def is_aws_endpoint(url: str) -> bool:
    host = urlparse(url).hostname or ""
    return host.startswith("states.") and host.endswith(_AWS_SUFFIXES)


def sfn_client(session: Session) -> SfnClient:
    """A Step Functions client for StartSyncExecution: AWS's own endpoint with the `sync-` host
    prefix, or an endpoint URL from the environment (AWS_ENDPOINT_URL...) without it."""
    client = session.client("stepfunctions", config=_config(host_prefix=True))
    if is_aws_endpoint(client.meta.endpoint_url):
        return client
    return session.client("stepfunctions", config=_config(host_prefix=False))


def execution_input(request: SynthesisRequest) -> str:
    """The state machine's input: the request under `request` (each state adds its result beside it)."""
    return json.dumps({"request": request.model_dump(mode="json")})


class StepFunctionsRunner:
    """Caller-provided passages go to the stash and the execution carries their reference (the
    execution's input and state data are limited to 256 KB)."""

    def __init__(self, client: SfnClient, state_machine_arn: str, model_id: str, stash: PassageStash):
        self.client = client
        self.state_machine_arn = state_machine_arn
        self.model_id = model_id
        self.stash = stash

    def run(self, request: SynthesisRequest) -> Answer:
        response = self.client.start_sync_execution(
            stateMachineArn=self.state_machine_arn,
            name=uuid.uuid4().hex,
            input=execution_input(self.stash.stashed(request)),
        )
        if response["status"] != "SUCCEEDED":
            raise RagError(f"synthesis {response['status'].lower()}: {response.get('error') or 'no error named'}")
        return answer_of(response["output"], self.stash)

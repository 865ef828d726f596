"""The synthesis state machine (Express) as a SynthesisRunner: StartSyncExecution, then the answer.

The client must be created with `Config(inject_host_prefix=False)` when an endpoint URL is set
(LocalStack, an emulator): the sync API otherwise prefixes the host with `sync-`.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from ragmcp.domain.errors import RagError
from ragmcp.synthesis.models import Answer, SynthesisRequest

SfnClient = Any  # boto3 Step Functions client


def execution_input(request: SynthesisRequest) -> str:
    """The state machine's input: the request under `request` (each state adds its result beside it)."""
    return json.dumps({"request": request.model_dump(mode="json")})


class StepFunctionsRunner:
    def __init__(self, client: SfnClient, state_machine_arn: str, model_id: str):
        self.client = client
        self.state_machine_arn = state_machine_arn
        self.model_id = model_id

    def run(self, request: SynthesisRequest) -> Answer:
        response = self.client.start_sync_execution(
            stateMachineArn=self.state_machine_arn, name=uuid.uuid4().hex, input=execution_input(request)
        )
        if response["status"] != "SUCCEEDED":
            raise RagError(f"synthesis {response['status'].lower()}: {response.get('error') or 'no error named'}")
        return Answer.model_validate_json(response["output"])

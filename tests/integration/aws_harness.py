"""The AWS emulator for the integration tests: moto in server mode on 127.0.0.1, provisioned by the
LocalStack init script, with our Lambda handlers loaded from functions/ and driven by real event
payloads.

What stands in for AWS here, and nothing else:
- Lambda's SQS event source mapping: `drain` receives from the queue, calls the ingest handler
  with an SQS event, deletes what succeeded and makes what failed visible again at once (as the
  visibility timeout running out would);
- Lambda invocation from Step Functions: moto runs Lambda in Docker, so its function runner is
  patched to call our handler in this process;
- StartSyncExecution, which moto lacks: `SyncExecutions` starts the execution and waits for it.

The search index is the embedded SQLite one and the embedder the local ONNX model (both ports;
there is no OpenSearch and no Bedrock here), under the AWS stores, blobs and queues.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import httpx
import pytest
from botocore.config import Config

from ragmcp.bootstrap import build_services
from ragmcp.domain.models import Tier
from ragmcp.settings import Settings

REPO = Path(__file__).resolve().parents[2]
PROVISION = REPO / "localstack" / "init" / "ready.d" / "provision.py"
STATE_MACHINE = REPO / "infra" / "statemachines" / "synthesis.asl.json"
REGION = "us-east-1"
ACCOUNT = "123456789012"
SYNTHESIS_FUNCTION = "ragmcp-synthesis"

Handler = Callable[[dict[str, Any], Any], Any]


@dataclass
class LambdaContext:
    """The parts of the Lambda context Powertools reads."""

    function_name: str
    memory_limit_in_mb: int = 1024
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return 300_000


def emulator_env(endpoint: str, port: int, data_dir: Path) -> dict[str, str]:
    """The environment the functions see: AWS pointed at the emulator, the AWS backend with the
    embedded index and embedder, Powertools without X-Ray."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        "MOTO_PORT": str(port),
        "RAGMCP_BACKEND": "aws",
        "RAGMCP_SEARCH_BACKEND": "sqlite",
        "RAGMCP_EMBEDDER": "onnx",
        "RAGMCP_GENERATOR": "extractive",
        "RAGMCP_DATA_DIR": str(data_dir),
        "RAGMCP_DNS_REBINDING_PROTECTION": "false",
        "POWERTOOLS_METRICS_NAMESPACE": "ragmcp-test",
        "POWERTOOLS_SERVICE_NAME": "ragmcp-test",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_DEV": "false",
    }


def provision(env: dict[str, str]) -> None:
    """Run the LocalStack init script against the emulator, as LocalStack runs it."""
    subprocess.run([sys.executable, str(PROVISION)], env={**os.environ, **env}, check=True, timeout=120)


def load_handler_module(name: str) -> ModuleType:
    """functions/<name>/app.py as its own module (every function's file is called app.py)."""
    spec = importlib.util.spec_from_file_location(f"functions_{name}_app", REPO / "functions" / name / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def route_lambda_invocations(monkeypatch, handlers: dict[str, Handler]) -> None:
    """moto's Lambda runner calls our handlers in this process instead of a Docker container."""
    from moto.awslambda.models import LambdaFunction

    def invoke(function: LambdaFunction, event: Any = None) -> tuple[str, bool, str]:
        payload = json.loads(event) if isinstance(event, str | bytes) else event
        try:
            result = handlers[function.function_name](payload, LambdaContext(function.function_name))
        except Exception as exc:  # reported to the caller as Lambda reports a function error
            return json.dumps({"errorType": type(exc).__name__, "errorMessage": str(exc)}), True, ""
        return json.dumps(result), False, ""

    monkeypatch.setattr(LambdaFunction, "_invoke_lambda", invoke)


def enable_state_machine_execution(endpoint: str) -> None:
    config = {"stepfunctions": {"execute_state_machine": True}}
    httpx.post(f"{endpoint}/moto-api/config", json=config).raise_for_status()


def create_synthesis_state_machine(session: boto3.session.Session) -> str:
    """The synthesis function (a placeholder package: invocations are routed to our handler) and
    the state machine from infra/statemachines, with the template's substitution applied."""
    iam = session.client("iam")
    assume = {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}
    trust = {"Version": "2012-10-17", "Statement": [assume]}
    role = iam.create_role(RoleName=f"ragmcp-{uuid.uuid4().hex[:8]}", AssumeRolePolicyDocument=json.dumps(trust))
    function = session.client("lambda").create_function(
        FunctionName=SYNTHESIS_FUNCTION,
        Runtime="python3.11",
        Role=role["Role"]["Arn"],
        Handler="app.handler",
        Code={"ZipFile": placeholder_zip()},
    )
    definition = STATE_MACHINE.read_text().replace("${SynthesisFunctionArn}", function["FunctionArn"])
    machine = session.client("stepfunctions").create_state_machine(
        name="ragmcp-synthesis", definition=definition, roleArn=role["Role"]["Arn"], type="EXPRESS"
    )
    return machine["stateMachineArn"]


def placeholder_zip() -> bytes:
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("app.py", "def handler(event, context):\n    raise RuntimeError('routed in process')\n")
    return buffer.getvalue()


STATE_DATA_LIMIT = 256 * 1024
"""Step Functions' limit on an execution's input and on every state's input and output, in bytes."""


def oversized_state_data(history: dict[str, Any]) -> str | None:
    """The first state input or output above the 256 KB limit in an execution's history, named."""
    for event in history["events"]:
        for key, details in event.items():
            if not (key.endswith("EventDetails") and isinstance(details, dict)):
                continue
            for name in ("input", "output"):
                size = len(str(details.get(name) or "").encode())
                if size > STATE_DATA_LIMIT:
                    return f"{event['type']} {name} is {size} bytes"
    return None


class SyncExecutions:
    """StartSyncExecution for an emulator without it: start the execution (with the given name),
    wait until it ends, answer in StartSyncExecution's shape. Like Step Functions, an execution whose
    input, or any state's input or output, exceeds 256 KB fails with States.DataLimitExceeded (moto's
    own check does not cover every state's data: its execution history is read for the sizes)."""

    def __init__(self, client: Any, timeout: float = 60.0, check: Callable[[str], None] | None = None):
        self.client = client
        self.timeout = timeout
        self.check = check  # the role-checked tier: may the caller's role StartSyncExecution this machine?

    def start_sync_execution(self, *, stateMachineArn: str, name: str, input: str) -> dict[str, Any]:  # noqa: A002
        if self.check is not None:
            self.check(stateMachineArn)
        if len(input.encode()) > STATE_DATA_LIMIT:
            raise self.client.exceptions.InvalidExecutionInput(
                {"Error": {"Code": "InvalidExecutionInput", "Message": "input exceeds 256 KB"}}, "StartSyncExecution"
            )
        arn = self.client.start_execution(stateMachineArn=stateMachineArn, name=name, input=input)["executionArn"]
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            described = self.client.describe_execution(executionArn=arn)
            if described["status"] != "RUNNING":
                oversized = oversized_state_data(self.client.get_execution_history(executionArn=arn))
                if oversized:
                    return {
                        "executionArn": arn,
                        "status": "FAILED",
                        "error": "States.DataLimitExceeded",
                        "cause": oversized,
                    }
                keys = ("executionArn", "status", "output", "error", "cause")
                return {k: described[k] for k in keys if k in described}
            time.sleep(0.05)
        raise TimeoutError(f"execution {name} still running after {self.timeout} s")


def sfn_client(session: boto3.session.Session) -> Any:
    return session.client("stepfunctions", config=Config(inject_host_prefix=False))


def sqs_event(messages: list[dict[str, Any]], queue_arn: str) -> dict[str, Any]:
    """The event Lambda's SQS event source mapping passes to a function."""
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m.get("Attributes", {}),
                "messageAttributes": m.get("MessageAttributes", {}),
                "md5OfBody": m["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": REGION,
            }
            for m in messages
        ]
    }


@dataclass
class Drained:
    invocations: int = 0
    succeeded: int = 0
    failed: int = 0


def drain(sqs: Any, queue_url: str, handler: Handler, *, rounds: int = 20) -> Drained:
    """Deliver the queue's messages to the handler until the queue is empty (or `rounds` batches)."""
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    drained = Drained()
    for _ in range(rounds):
        messages = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0, AttributeNames=["All"]
        ).get("Messages", [])
        if not messages:
            break
        response = handler(sqs_event(messages, queue_arn), LambdaContext("ragmcp-ingest"))
        failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
        drained.invocations += 1
        for message in messages:
            if message["MessageId"] in failed:
                sqs.change_message_visibility(
                    QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
                )
                drained.failed += 1
            else:
                sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
                drained.succeeded += 1
    return drained


def http_api_event(body: Any, path: str = "/mcp", headers: dict[str, str] | None = None) -> dict[str, Any]:
    """An API Gateway HTTP API (payload 2.0) event for a POST."""
    return {
        "version": "2.0",
        "routeKey": f"ANY {path}",
        "rawPath": path,
        "rawQueryString": "",
        "headers": {"content-type": "application/json", "host": "abc.execute-api.us-east-1.amazonaws.com",
                    **(headers or {})},
        "requestContext": {
            "http": {"method": "POST", "path": path, "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1"},
            "requestId": uuid.uuid4().hex,
            "stage": "$default",
            "domainName": "abc.execute-api.us-east-1.amazonaws.com",
        },
        "body": json.dumps(body),
        "isBase64Encoded": False,
    }


@dataclass
class AwsEmulator:
    endpoint: str
    session: boto3.session.Session
    queue_url: str
    dead_letter_url: str
    bucket: str
    functions: dict[str, ModuleType]
    secret: str
    iam: Any = None  # iam_tier.IamLedger when every call is checked against its function's role

    @property
    def s3(self) -> Any:
        return self.session.client("s3")

    @property
    def sqs(self) -> Any:
        return self.session.client("sqs")

    def handler(self, name: str) -> Handler:
        handler = self.functions[name].handler
        return handler if self.iam is None else self.iam.as_function(name, handler)

    def drain(self) -> Drained:
        return drain(self.sqs, self.queue_url, self.handler("ingest"))

    def mcp(self, body: Any, path: str = "/mcp", headers: dict[str, str] | None = None) -> dict[str, Any]:
        headers = {"authorization": f"Bearer {self.secret}", **(headers or {})}
        response = self.handler("mcp_api")(http_api_event(body, path, headers), LambdaContext("ragmcp-mcp"))
        return {"status": response["statusCode"], "body": json.loads(response["body"])}


def start_emulator(data_dir: Path, monkeypatch, translated: dict[str, Any] | None = None) -> tuple[Any, AwsEmulator]:
    """moto on 127.0.0.1, provisioned, the synthesis state machine created, the handlers loaded.

    With `translated` (the template as SAM translates it) every function runs with credentials of
    its own role there, moto enforcing IAM and a hook checking each call's resource (iam_tier).

    With RAGMCP_TEST_AWS_ENDPOINT set (`make localstack-test`: LocalStack on 127.0.0.1:4566) that
    endpoint is used instead of moto, provisioned by its own init hook, and synthesis runs in process.
    """
    from moto.server import ThreadedMotoServer

    from tests.conftest import free_port

    external = os.environ.get("RAGMCP_TEST_AWS_ENDPOINT")
    port = int(external.rsplit(":", 1)[1]) if external else free_port()
    server = None if external else ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    endpoint = external or f"http://127.0.0.1:{port}"
    env = emulator_env(endpoint, port, data_dir)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    session = boto3.session.Session()
    ledger = None
    if server is not None:
        server.start()
        # moto keeps its backends per process, not per server: start from an empty account.
        httpx.post(f"{endpoint}/moto-api/reset").raise_for_status()
        provision(env)
        enable_state_machine_execution(endpoint)
        machine = create_synthesis_state_machine(session)
        monkeypatch.setenv("RAGMCP_SYNTHESIS_STATE_MACHINE_ARN", machine)
        if translated is not None:
            from . import iam_tier

            ledger = iam_tier.prepare(translated, session, endpoint, machine, monkeypatch)
            session = iam_tier.operator_session(ledger)
    sqs = session.client("sqs")
    queue_url = sqs.get_queue_url(QueueName="ragmcp-ingest")["QueueUrl"]
    monkeypatch.setenv("RAGMCP_INGEST_QUEUE_URL", queue_url)
    functions = {}
    # The console is the MCP function's code deployed again with its own role (template.yaml).
    code = {"mcp_api": "mcp_api", "ingest": "ingest", "synthesis": "synthesis", "janitor": "janitor"}
    if ledger:
        code["console"] = "mcp_api"
    for name, directory in code.items():
        with ledger.acting_as(name) if ledger else contextlib.nullcontext():
            functions[name] = load_handler_module(directory)
    if server is not None:
        synthesis = functions["synthesis"].handler
        synthesis = ledger.as_function("synthesis", synthesis) if ledger else synthesis
        route_lambda_invocations(monkeypatch, {SYNTHESIS_FUNCTION: synthesis})
        check = (
            (lambda arn: ledger.check("mcp_api", "sfn:StartSyncExecution", "states:StartSyncExecution", arn))
            if ledger
            else None
        )
        functions["mcp_api"].services.synthesis.runner.client = SyncExecutions(sfn_client(session), check=check)
    # The AWS deployment is closed: the tests call it with a key, as `ragmcp keys create --backend aws` makes one
    # (a platform key, since the chat and mindset contracts assert the end user) with the operator's credentials.
    with ledger.acting_as("operator") if ledger else contextlib.nullcontext():
        keys = build_services(Settings()).keys if ledger else functions["mcp_api"].services.keys
        key = keys.create(
            "default", name="emulator", scopes=("read", "write", "admin"), max_tier=Tier.privileged, platform=True
        )
    emulator = AwsEmulator(
        endpoint=endpoint,
        session=session,
        queue_url=queue_url,
        dead_letter_url=sqs.get_queue_url(QueueName="ragmcp-ingest-dlq")["QueueUrl"],
        bucket="ragmcp-drop",
        functions=functions,
        secret=key.secret,
        iam=ledger,
    )
    return server, emulator


def running_emulator(
    tmp_path_factory: pytest.TempPathFactory, translated: dict[str, Any] | None = None
) -> Iterator[AwsEmulator]:
    """An emulator for a test module's fixture (its handlers keep their services warm across the tests);
    with `translated`, role-checked (see start_emulator)."""
    monkeypatch = pytest.MonkeyPatch()
    server, emulator = start_emulator(tmp_path_factory.mktemp("aws") / "data", monkeypatch, translated)
    if emulator.iam is not None:
        from .iam_tier import iam_enforced

        with iam_enforced():
            yield emulator
    else:
        yield emulator
    monkeypatch.undo()
    if server is not None:
        server.stop()


def call(name: str, arguments: dict[str, Any], request_id: int = 1) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def tool_payload(response: dict[str, Any]) -> Any:
    """A tool result's JSON payload (its text content)."""
    assert response["status"] == 200, response
    result = response["body"]["result"]
    assert not result.get("isError"), result
    return json.loads(result["content"][0]["text"])


# One read call per profile, with the tool's contract arguments.
PROFILE_CALLS = {
    "mindset": ("rag_search", {"search_phrases": ["how long is a shared link valid"]}),
    "chat": ("rag_get_raw_results", {"username": "ana", "query": "how long is a shared link valid", "top_k": 3}),
    "proxysql": ("rag.search_hybrid", {"query": "how long is a shared link valid", "k": 3}),
    "kb": ("kb_search", {"query": "how long is a shared link valid"}),
    "ragbox": ("search_documents", {"query": "how long is a shared link valid"}),
}

"""StartSyncExecution goes where AWS serves it: `sync-states.<region>` when no endpoint URL is set,
the emulator's URL (without the `sync-` prefix) when one is. Requests are caught by a botocore
`before-send` hook, which answers them itself, so nothing leaves the process."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlparse

import boto3
import pytest
from botocore.awsrequest import AWSResponse

from ragmcp.adapters.aws.stepfunctions import SYNC_TIMEOUTS, StepFunctionsRunner, sfn_client
from ragmcp.adapters.local.files import LocalBlobStore
from ragmcp.bootstrap import build_services
from ragmcp.domain.errors import InvalidArgument
from ragmcp.domain.models import Principal
from ragmcp.settings import Settings
from ragmcp.synthesis.models import Answer, Passage, SynthesisRequest
from ragmcp.synthesis.stash import PassageStash

ARN = "arn:aws:states:eu-west-1:123456789012:stateMachine:synthesis"
ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SFN")


class Headers(dict):
    """What AWSResponse needs of urllib3's headers."""


def answered(sent: list[Any]):
    answer = Answer(question="q", text="a", confidence=0.9, citations=[], model="m")
    body = json.dumps({"status": "SUCCEEDED", "output": answer.model_dump_json(), "executionArn": ARN}).encode()

    def before_send(request: Any, **_: Any) -> AWSResponse:
        sent.append(request)
        raw = type("Raw", (), {"stream": lambda self, *a, **k: iter([body])})()
        return AWSResponse(request.url, 200, Headers({"content-type": "application/x-amz-json-1.0"}), raw)

    return before_send


def request() -> SynthesisRequest:
    return SynthesisRequest(principal=Principal(tenant="t"), question="what?")


@pytest.fixture
def session(monkeypatch) -> boto3.session.Session:
    for name in ENDPOINT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    return boto3.session.Session(region_name="eu-west-1")


def run_through(client: Any, stash: PassageStash | None = None, synthesis: SynthesisRequest | None = None) -> Any:
    sent: list[Any] = []
    client.meta.events.register("before-send.sfn.StartSyncExecution", answered(sent))
    runner = StepFunctionsRunner(client, ARN, "m", stash or PassageStash(LocalBlobStore(), "/nonexistent"))
    answer = runner.run(synthesis or request())
    assert answer.text == "a"
    (only,) = sent
    return only


def test_start_sync_execution_goes_to_the_sync_states_host_on_aws(session) -> None:
    sent = run_through(sfn_client(session))
    assert urlparse(sent.url).hostname == "sync-states.eu-west-1.amazonaws.com"


def test_an_endpoint_url_is_used_as_given(session, monkeypatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:4566")
    client = sfn_client(session)
    sent = run_through(client)
    assert urlparse(sent.url).netloc == "127.0.0.1:4566"
    assert client.meta.config.inject_host_prefix is False


def test_the_composition_root_builds_the_prefixed_client(session, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    settings = Settings(
        backend="aws",
        search_backend="sqlite",
        embedder="onnx",
        generator="extractive",
        data_dir=tmp_path,
        synthesis_state_machine_arn=ARN,
    )
    runner = build_services(settings).synthesis.runner
    assert isinstance(runner, StepFunctionsRunner)
    sent = run_through(runner.client)
    assert urlparse(sent.url).hostname == "sync-states.eu-west-1.amazonaws.com"
    connect, read = SYNC_TIMEOUTS
    assert runner.client.meta.config.read_timeout == read and runner.client.meta.config.connect_timeout == connect


def test_provided_passages_go_into_the_execution_by_reference(session, tmp_path) -> None:
    """Twenty provided passages of 20,000 characters (400 KB) would not fit the 256 KB input."""
    provided = [Passage(passage_id=f"provided:{n}", text=f"passage {n} " + "x" * 20_000) for n in range(20)]
    stash = PassageStash(LocalBlobStore(), str(tmp_path))
    asked = request().model_copy(update={"provided": provided})
    sent = run_through(sfn_client(session), stash, asked)
    body = json.loads(sent.body)
    assert len(body["input"].encode()) < 2_000, "the input carries the reference, not the passages"
    carried = SynthesisRequest.model_validate(json.loads(body["input"])["request"])
    assert carried.provided is None and carried.provided_ref
    assert stash.restored(carried).provided == provided
    with pytest.raises(InvalidArgument):
        stash.get("../../etc/passwd")

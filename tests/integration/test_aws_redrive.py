"""`ragmcp jobs redrive` on the emulator: a change event that failed its retries lands in the
dead-letter queue (SQS's redrive policy, three receives), the command moves it back once the cause is
gone, and the ingest function then indexes the document."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ragmcp.cli import main

from .aws_harness import AwsEmulator, call, running_emulator, tool_payload

KEY = "sources/default/handbook/lighthouse.md"
BODY = b"# Lighthouse\n\nThe keeper trims the lamp wick every evening at the Skerry lighthouse.\n"


@pytest.fixture(scope="module")
def aws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AwsEmulator]:
    yield from running_emulator(tmp_path_factory)


def waiting(aws: AwsEmulator, url: str) -> int:
    attributes = aws.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    return int(attributes["Attributes"]["ApproximateNumberOfMessages"])


def found(aws: AwsEmulator) -> list[str]:
    payload = tool_payload(aws.mcp(call("rag_search", {"search_phrases": ["lamp wick keeper"]}), "/mcp/mindset"))
    return [s["source_file_name"] for s in payload["segments"]]


class Broken:
    def apply(self, change):
        raise RuntimeError("the parser is down")


def test_a_dead_letter_goes_back_and_is_ingested(aws: AwsEmulator, monkeypatch, capsys) -> None:
    aws.drain()  # what the emulator queued before (the bucket's test event)
    ingest = aws.functions["ingest"]
    working = ingest.drop_events
    monkeypatch.setattr(ingest, "drop_events", lambda: Broken())
    aws.s3.put_object(Bucket=aws.bucket, Key=KEY, Body=BODY)
    drained = aws.drain()
    assert drained.failed == 3 and drained.succeeded == 0, "three receives, then SQS moves it aside"
    assert waiting(aws, aws.queue_url) == 0 and waiting(aws, aws.dead_letter_url) == 1
    monkeypatch.setattr(ingest, "drop_events", working)

    monkeypatch.setenv("RAGMCP_INGEST_DEAD_LETTER_QUEUE_URL", aws.dead_letter_url)
    assert main(["jobs", "redrive", "--backend", "aws"]) == 0
    assert "moved 1 change events back to the ingest queue; 0 still waiting" in capsys.readouterr().out
    assert waiting(aws, aws.dead_letter_url) == 0 and waiting(aws, aws.queue_url) == 1
    assert aws.drain().succeeded == 1
    assert "lighthouse.md" in found(aws)
    assert main(["jobs", "redrive", "--backend", "aws"]) == 0
    assert "moved 0" in capsys.readouterr().out


def test_redrive_names_what_it_needs(monkeypatch, capsys) -> None:
    monkeypatch.delenv("RAGMCP_INGEST_DEAD_LETTER_QUEUE_URL", raising=False)
    assert main(["jobs", "redrive", "--backend", "aws"]) == 2
    assert "RAGMCP_INGEST_DEAD_LETTER_QUEUE_URL" in capsys.readouterr().err

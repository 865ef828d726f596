"""The drop bucket's flow on the AWS emulator: S3 -> SQS -> the ingest handler -> stores and index.

moto (server mode, 127.0.0.1) provides S3 with its event notifications, SQS with the dead-letter
redrive, and DynamoDB; the search index is the embedded SQLite index and the embedder the local
ONNX model (both ports: there is no OpenSearch or Bedrock here). `drain` plays Lambda's SQS event
source mapping (see aws_harness).
"""

from __future__ import annotations

import base64
import json

import pytest

from .aws_harness import AwsEmulator, LambdaContext, call, running_emulator, sqs_event, tool_payload


@pytest.fixture(scope="module")
def aws(tmp_path_factory: pytest.TempPathFactory):
    yield from running_emulator(tmp_path_factory)


TEXT = (
    b"# Lighthouse keeping\n\nThe keeper of the Skerry lighthouse trims the lamp wick every evening "
    b"and logs the passing ships in a leather-bound book.\n"
)
KEY = "sources/default/manuals/lighthouse keeping.md"
DOC_ID = "manuals:lighthouse keeping.md"


def services(aws: AwsEmulator):
    return aws.functions["mcp_api"].services


def search(aws: AwsEmulator, phrase: str) -> list[str]:
    payload = tool_payload(aws.mcp(call("rag_search", {"search_phrases": [phrase]}), "/mcp/mindset"))
    return [s["source_file_name"] for s in payload["segments"]]


def test_a_dropped_file_is_ingested_and_searchable(aws: AwsEmulator) -> None:
    aws.s3.put_object(Bucket=aws.bucket, Key=KEY, Body=TEXT)
    drained = aws.drain()
    assert drained.succeeded >= 1 and drained.failed == 0
    doc = services(aws).documents.get("default", DOC_ID)
    assert doc is not None and doc.chunk_count >= 1
    assert "lighthouse keeping.md" in search(aws, "who trims the lamp wick of the lighthouse")
    jobs = services(aws).jobs.list("default")
    assert any(j.target == "lighthouse keeping.md" and j.status == "succeeded" for j in jobs)


def test_a_redelivered_message_changes_nothing(aws: AwsEmulator) -> None:
    body = b"# Tides\n\nSpring tides follow the new and full moon.\n"
    aws.s3.put_object(Bucket=aws.bucket, Key="sources/default/manuals/tides.md", Body=body)
    sqs = aws.sqs
    messages = sqs.receive_message(QueueUrl=aws.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0)["Messages"]
    event = sqs_event(messages, "arn:aws:sqs:us-east-1:123456789012:ragmcp-ingest")
    ingest = aws.handler("ingest")
    assert ingest(event, LambdaContext("ragmcp-ingest")) == {"batchItemFailures": []}
    store = services(aws)
    before_doc = store.documents.get("default", "manuals:tides.md")
    before_jobs = len(store.jobs.list("default", limit=10_000))
    before_chunks = store.index.count_chunks("default")
    assert ingest(event, LambdaContext("ragmcp-ingest")) == {"batchItemFailures": []}
    assert store.documents.get("default", "manuals:tides.md") == before_doc
    assert len(store.jobs.list("default", limit=10_000)) == before_jobs
    assert store.index.count_chunks("default") == before_chunks
    for message in messages:
        sqs.delete_message(QueueUrl=aws.queue_url, ReceiptHandle=message["ReceiptHandle"])


def test_deleting_the_object_removes_the_document(aws: AwsEmulator) -> None:
    """Every version is deleted: moto sends no event for a delete marker (S3 sends
    ObjectRemoved:DeleteMarkerCreated), but does for the removal of an object's last version."""
    versions = aws.s3.list_object_versions(Bucket=aws.bucket, Prefix=KEY)["Versions"]
    for version in versions:
        aws.s3.delete_object(Bucket=aws.bucket, Key=KEY, VersionId=version["VersionId"])
    assert aws.drain().failed == 0
    store = services(aws)
    assert store.documents.get("default", DOC_ID) is None
    assert store.documents.known("default", DOC_ID)
    assert "lighthouse keeping.md" not in search(aws, "who trims the lamp wick of the lighthouse")


def test_a_poison_file_ends_in_the_dead_letter_queue_with_a_failed_job(aws: AwsEmulator) -> None:
    poison = b"%PDF-1.7 not really a pdf"
    aws.s3.put_object(Bucket=aws.bucket, Key="sources/default/manuals/broken.pdf", Body=poison)
    drained = aws.drain()
    assert drained.failed == 3 and drained.succeeded == 0
    dead = aws.sqs.receive_message(QueueUrl=aws.dead_letter_url, MaxNumberOfMessages=10)["Messages"]
    assert len(dead) == 1 and "broken.pdf" in dead[0]["Body"]
    store = services(aws)
    failed = [j for j in store.jobs.list("default", "failed") if j.target == "broken.pdf"]
    assert failed and failed[0].error
    assert store.documents.by_path("default", "manuals", "broken.pdf") == []


def test_a_note_job_is_queued_then_completed_by_the_ingest_function(aws: AwsEmulator) -> None:
    note = {"text": "The harbour master keeps the spare keys.", "collection": "ops"}
    added = tool_payload(aws.mcp(call("kb_addnote", note), "/mcp/kb"))
    assert added["status"] == "queued"
    assert aws.drain().failed == 0
    jobs = tool_payload(aws.mcp(call("kb_jobs", {"job_id": added["job_id"]}), "/mcp/kb"))
    assert jobs["jobs"][0]["status"] == "succeeded"
    fetched = tool_payload(aws.mcp(call("kb_get", {"document_id": added["document_id"]}), "/mcp/kb"))
    assert "spare keys" in json.dumps(fetched)


def test_an_upload_is_assembled_in_the_bucket_and_ingested(aws: AwsEmulator) -> None:
    data = b"# Rota\n\nThe night watch changes at four bells in the morning.\n"
    start = {"filename": "rota.md", "total_size": len(data)}
    started = tool_payload(aws.mcp(call("kb_upload_start", start), "/mcp/kb"))
    upload_id = started["upload_id"]
    for index, part in enumerate((data[:20], data[20:])):
        chunk = {"upload_id": upload_id, "chunk_index": index, "data": base64.b64encode(part).decode()}
        tool_payload(aws.mcp(call("kb_upload_chunk", chunk), "/mcp/kb"))
    finished = tool_payload(aws.mcp(call("kb_upload_finish", {"upload_id": upload_id}), "/mcp/kb"))
    assert finished["status"] == "queued"
    staged = aws.s3.list_objects_v2(Bucket=aws.bucket, Prefix="staging/").get("KeyCount", 0)
    assert staged == 0
    assert aws.drain().failed == 0
    jobs = tool_payload(aws.mcp(call("kb_jobs", {"job_id": finished["job_id"]}), "/mcp/kb"))
    assert jobs["jobs"][0]["status"] == "succeeded"


def test_an_ingest_of_an_older_version_never_becomes_current_over_a_newer_one(aws: AwsEmulator, monkeypatch) -> None:
    """R5: two changes of one object ingested at once. The first reads version 1, and is slow; the
    object gets version 2, whose ingest runs meanwhile. Whichever finishes last must not make
    version 1 current: the ingests of one object take turns, so the later one reads version 2."""
    import threading

    from ragmcp.ingest.events import ObjectChange

    key = "sources/default/manuals/race.md"
    old, new = b"# Race\n\nThe old harbour opens at dawn.\n", b"# Race\n\nThe new harbour opens at noon.\n"
    put = aws.s3.put_object(Bucket=aws.bucket, Key=key, Body=old)
    events = aws.functions["ingest"].drop_events()
    blobs = events.blobs
    first_read, release = threading.Event(), threading.Event()
    original = type(blobs).read

    def slow_first_read(self, location: str, path: str) -> bytes:
        data = original(self, location, path)
        if path == "race.md" and not first_read.is_set():
            first_read.set()
            release.wait(30)
        return data

    monkeypatch.setattr(type(blobs), "read", slow_first_read)
    change = ObjectChange(bucket=aws.bucket, key=key, version=put["VersionId"], removed=False)
    first = threading.Thread(target=events.apply, args=(change,))
    first.start()
    assert first_read.wait(30)
    put = aws.s3.put_object(Bucket=aws.bucket, Key=key, Body=new)
    newer = ObjectChange(bucket=aws.bucket, key=key, version=put["VersionId"], removed=False)
    second = threading.Thread(target=events.apply, args=(newer,))
    second.start()
    second.join(3)  # on main it finishes now, with version 2, before the first one does
    release.set()
    first.join(60)
    second.join(60)
    phrases = {"search_phrases": ["when does the harbour open"]}
    found = json.dumps(tool_payload(aws.mcp(call("rag_search", phrases), "/mcp/mindset")))
    assert "noon" in found and "dawn" not in found, found

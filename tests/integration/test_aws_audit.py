"""The audit trail on AWS, on moto: per-tenant chains in DynamoDB with conditional writes and
jittered backoff (many writers at once), the key in Secrets Manager, signed checkpoints in the
Object Lock bucket with checksums set explicitly, and verify finding a rewrite of the table.

moto applies a DynamoDB transaction by copying the table and restoring the copy on failure, which
is not atomic between threads (a restore can undo another thread's write); DynamoDB itself
serialises each item's writes. The concurrency test therefore runs moto's item operations under
one lock, which keeps each call atomic while the writers still interleave between their calls.
"""

from __future__ import annotations

import base64
import hashlib
import random
import threading
from collections import Counter
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.stub import Stubber
from moto import mock_aws
from moto.dynamodb.models import DynamoDBBackend

from ragmcp.adapters.aws.audit import CHECKPOINTS, S3CheckpointStore, secrets_manager_key
from ragmcp.adapters.aws.dynamodb import DynamoAuditStore
from ragmcp.domain.errors import RagError
from ragmcp.domain.models import Principal, utcnow
from ragmcp.security.audit import AuditLog, Checkpointer, verify
from ragmcp.security.models import AuditCheckpoint

REGION = "us-east-1"
KEY = b"an audit key of at least 32 bytes!"


@pytest.fixture
def aws(monkeypatch):
    for name, value in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": REGION}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        yield


def audit_table(name: str = "audit") -> Any:
    dynamodb = boto3.resource("dynamodb", region_name=REGION)
    keys = [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}]
    attributes = [{"AttributeName": a, "AttributeType": "S"} for a in ("pk", "sk")]
    dynamodb.create_table(
        TableName=name, KeySchema=keys, AttributeDefinitions=attributes, BillingMode="PAY_PER_REQUEST"
    )
    return dynamodb.Table(name)


def locked_bucket(s3: Any, name: str = "archive") -> None:
    s3.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    s3.put_object_lock_configuration(
        Bucket=name,
        ObjectLockConfiguration={
            "ObjectLockEnabled": "Enabled",
            "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}},
        },
    )


def aws_log(table: Any, s3: Any) -> AuditLog:
    checkpoints = S3CheckpointStore(s3, "archive")
    return AuditLog(DynamoAuditStore(table), lambda: KEY, Checkpointer(checkpoints, lambda: KEY, 3600.0))


@pytest.mark.parametrize("calculation", ["when_supported", "when_required"])
def test_checkpoints_go_to_the_object_lock_bucket_with_explicit_checksums(aws, calculation: str) -> None:
    """Whatever the runtime SDK's checksum default (`when_required`: what an SDK without default
    checksums does), each PUT carries Content-MD5 and SHA-256 of its body, as Object Lock wants."""
    s3 = boto3.client("s3", region_name=REGION, config=Config(request_checksum_calculation=calculation))
    locked_bucket(s3)
    sent: list[Any] = []
    s3.meta.events.register("before-send.s3.PutObject", lambda request, **_: sent.append(request))
    store = S3CheckpointStore(s3, "archive")
    checkpoint = AuditCheckpoint(at=utcnow(), heads={"a": (3, "f" * 64)}, mac="0" * 64)
    store.append(checkpoint)
    (request,) = sent
    body = checkpoint.model_dump_json().encode()
    assert request.headers["Content-MD5"].decode() == base64.b64encode(hashlib.md5(body).digest()).decode()
    assert request.headers["x-amz-checksum-sha256"].decode() == base64.b64encode(hashlib.sha256(body).digest()).decode()
    assert list(store.all()) == [checkpoint]
    (listed,) = s3.list_objects_v2(Bucket="archive", Prefix=CHECKPOINTS)["Contents"]
    head = s3.head_object(Bucket="archive", Key=listed["Key"])
    assert head["ObjectLockMode"] == "GOVERNANCE"  # the bucket's default retention applies to each checkpoint


def test_the_audit_key_comes_from_secrets_manager(aws) -> None:
    client = boto3.client("secretsmanager", region_name=REGION)
    client.create_secret(Name="audit-key", SecretString="k" * 64)
    client.create_secret(Name="binary-key", SecretBinary=bytes(range(40)))
    client.create_secret(Name="short-key", SecretString="too short")
    assert secrets_manager_key(client, "audit-key") == b"k" * 64
    assert secrets_manager_key(client, "binary-key") == bytes(range(40))
    with pytest.raises(RagError, match="shorter than 32 bytes"):
        secrets_manager_key(client, "short-key")


def test_a_lone_writer_appends_in_one_round_trip(aws) -> None:
    table = audit_table()
    calls: Counter[str] = Counter()
    table.meta.client.meta.events.register("before-call.dynamodb", lambda model, **_: calls.update([model.name]))
    log = aws_log(table, boto3.client("s3", region_name=REGION))
    for n in range(5):
        log.append(Principal(tenant="t"), "kb_search", {"n": n}, None, "ok")
    assert calls == {"GetItem": 1, "TransactWriteItems": 5}


def test_lost_races_back_off_with_jitter_then_give_up(aws) -> None:
    table = audit_table()
    pauses: list[float] = []
    store = DynamoAuditStore(table, attempts=6, base_delay=0.01, max_delay=0.1, sleep=pauses.append)
    log = AuditLog(store, lambda: KEY, Checkpointer(S3CheckpointStore(None, "unused"), lambda: KEY, 3600.0))
    random.seed(7)
    with Stubber(table.meta.client) as stub:
        for _ in range(6):
            stub.add_response("get_item", {})
            stub.add_client_error("transact_write_items", service_error_code="TransactionCanceledException")
        with pytest.raises(RagError, match="audit trail busy: 6 attempts lost to other writers of tenant 't'"):
            log.append(Principal(tenant="t"), "kb_search", {}, None, "ok")
    assert len(pauses) == 6 and store.conflicts == 6
    assert all(0 <= p <= min(0.1, 0.01 * 2**i) for i, p in enumerate(pauses))
    assert len(set(pauses)) == 6 and max(pauses[3:]) > max(pauses[:2])  # jittered, and growing


@pytest.fixture
def atomic_moto(monkeypatch):
    """moto's DynamoDB item operations made atomic (see the module's docstring)."""
    lock = threading.RLock()
    for name in ("transact_write_items", "get_item", "query"):
        original = getattr(DynamoDBBackend, name)

        def atomic(self, *args, __original=original, **kwargs):
            with lock:
                return __original(self, *args, **kwargs)

        monkeypatch.setattr(DynamoDBBackend, name, atomic)


def test_concurrent_writers_of_one_tenant_keep_one_chain_and_never_slow_another(aws, atomic_moto) -> None:
    """Six writers (six Lambdas: six stores) append to one tenant at once while a seventh appends
    to another tenant: every append lands, each chain is whole, and the quiet tenant's writer
    never lost a race (its head is its own item)."""
    table = audit_table()
    s3 = boto3.client("s3", region_name=REGION)
    locked_bucket(s3)
    busy = [DynamoAuditStore(table) for _ in range(6)]
    quiet = DynamoAuditStore(table)
    checkpoints = S3CheckpointStore(s3, "archive")
    logs = [AuditLog(s, lambda: KEY, Checkpointer(checkpoints, lambda: KEY, 3600.0)) for s in [*busy, quiet]]
    start = threading.Barrier(len(logs))
    failures: list[BaseException] = []

    def write(log: AuditLog, tenant: str) -> None:
        start.wait()
        try:
            for n in range(10):
                log.append(Principal(tenant=tenant), "kb_search", {"n": n}, None, "ok")
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=write, args=(log, "busy")) for log in logs[:-1]]
    threads.append(threading.Thread(target=write, args=(logs[-1], "quiet")))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert failures == []
    for log in logs:
        log.close()
    records = list(quiet.records("busy"))
    assert [r.seq for r in records] == list(range(1, 61))
    assert quiet.head("busy") == (60, records[-1].hash) and quiet.head("quiet")[0] == 10
    assert sum(s.conflicts for s in busy) > 0 and quiet.conflicts == 0
    check = verify(quiet, checkpoints.all(), KEY)
    assert check.ok and (check.records, check.chains, check.unvouched) == (70, 2, 0), check


def test_verify_on_aws_finds_a_truncated_table(aws) -> None:
    """An intruder with the table but not the secret or the bucket deletes the last record and moves the head back."""
    table = audit_table()
    s3 = boto3.client("s3", region_name=REGION)
    locked_bucket(s3)
    log = aws_log(table, s3)
    for tenant in ("a", "b", "a"):
        log.append(Principal(tenant=tenant), "kb_search", {}, None, "ok")
    log.close()
    assert log.verify().ok
    first = next(log.store.records("a"))
    table.delete_item(Key={"pk": "record#a", "sk": f"{2:012d}"})
    table.put_item(Item={"pk": "head", "sk": "a", "seq": 1, "hash": first.hash})
    assert log.verify().problem == "tenant 'a': the chain ends at record 1, but checkpoint 1 vouches for 2"

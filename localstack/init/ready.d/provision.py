"""Create what the functions of template.yaml need, in LocalStack (a ready.d init hook) or any
endpoint AWS_ENDPOINT_URL names: the DynamoDB tables, the drop bucket and its events to the
ingest queue (with its dead-letter queue), the audit archive bucket with Object Lock, the audit
key in Secrets Manager, and, when OPENSEARCH_URL is set, the chunk index template and the index.
The names are ragmcp's settings defaults.
Running it again changes nothing.
"""

import json
import os
import secrets
import urllib.error
import urllib.request
from pathlib import Path

import boto3
from botocore.exceptions import ClientError

PREFIX = os.environ.get("RAGMCP_RESOURCE_PREFIX", "ragmcp")
TEMPLATE = Path(os.environ.get("RAGMCP_INDEX_TEMPLATE", "/etc/localstack/ragmcp/index-template.json"))
MAX_RECEIVES = 3
VISIBILITY_SECONDS = int(os.environ.get("RAGMCP_INGEST_VISIBILITY_SECONDS", "1800"))

KEYS = [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}]
TABLES = {
    "documents": {"indexes": {"by_path": [("path_key", "HASH")]}},
    "jobs": {"indexes": {"by_created": [("pk", "HASH"), ("created_at", "RANGE")]}, "ttl": "expires_at"},
    "catalog": {},
    "keys": {},
    "uploads": {"ttl": "expires_at", "stream": "OLD_IMAGE"},
    "conversations": {"ttl": "expires_at"},
    "rate-limits": {"ttl": "expires_at"},
    "audit": {},
    "embedding-cache": {"ttl": "expires_at"},
}


def create_table(dynamodb, name: str, spec: dict) -> None:
    attributes = {"pk", "sk"} | {a for keys in spec.get("indexes", {}).values() for a, _ in keys}
    request = {
        "TableName": name,
        "BillingMode": "PAY_PER_REQUEST",
        "KeySchema": KEYS,
        "AttributeDefinitions": [{"AttributeName": a, "AttributeType": "S"} for a in sorted(attributes)],
    }
    if spec.get("indexes"):
        request["GlobalSecondaryIndexes"] = [
            {
                "IndexName": index,
                "KeySchema": [{"AttributeName": a, "KeyType": kind} for a, kind in keys],
                "Projection": {"ProjectionType": "ALL"},
            }
            for index, keys in spec["indexes"].items()
        ]
    if spec.get("stream"):
        request["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": spec["stream"]}
    ensure_table(dynamodb, request, spec.get("ttl"))


def ensure_table(dynamodb, request: dict, ttl: str | None) -> None:
    try:
        dynamodb.create_table(**request)
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ResourceInUseException":
            raise
    dynamodb.get_waiter("table_exists").wait(TableName=request["TableName"])
    if ttl:
        spec = {"Enabled": True, "AttributeName": ttl}
        dynamodb.update_time_to_live(TableName=request["TableName"], TimeToLiveSpecification=spec)


def ensure_bucket(s3, name: str, **extra) -> None:
    try:
        s3.create_bucket(Bucket=name, **extra)
    except ClientError as exc:
        if exc.response["Error"]["Code"] not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise


def main() -> None:
    session = boto3.session.Session(region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))
    dynamodb, s3, sqs = session.client("dynamodb"), session.client("s3"), session.client("sqs")
    for table, spec in TABLES.items():
        create_table(dynamodb, f"{PREFIX}-{table}", spec)
    idempotency = {
        "TableName": f"{PREFIX}-idempotency",
        "BillingMode": "PAY_PER_REQUEST",
        "KeySchema": [{"AttributeName": "id", "KeyType": "HASH"}],
        "AttributeDefinitions": [{"AttributeName": "id", "AttributeType": "S"}],
    }
    ensure_table(dynamodb, idempotency, "expiration")

    dead = sqs.create_queue(QueueName=f"{PREFIX}-ingest-dlq")["QueueUrl"]
    dead_arn = sqs.get_queue_attributes(QueueUrl=dead, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    redrive = json.dumps({"deadLetterTargetArn": dead_arn, "maxReceiveCount": str(MAX_RECEIVES)})
    queue = sqs.create_queue(
        QueueName=f"{PREFIX}-ingest",
        Attributes={"VisibilityTimeout": str(VISIBILITY_SECONDS), "RedrivePolicy": redrive},
    )["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]

    drop = f"{PREFIX}-drop"
    ensure_bucket(s3, drop)
    s3.put_bucket_versioning(Bucket=drop, VersioningConfiguration={"Status": "Enabled"})
    only_sources = {"Key": {"FilterRules": [{"Name": "prefix", "Value": "sources/"}]}}
    s3.put_bucket_notification_configuration(
        Bucket=drop,
        NotificationConfiguration={
            "QueueConfigurations": [
                {"QueueArn": queue_arn, "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"], "Filter": only_sources}
            ]
        },
    )
    archive = f"{PREFIX}-audit-archive"
    ensure_bucket(s3, archive, ObjectLockEnabledForBucket=True)
    lock = s3.get_object_lock_configuration(Bucket=archive)["ObjectLockConfiguration"]
    if "Rule" not in lock:
        s3.put_object_lock_configuration(
            Bucket=archive,
            ObjectLockConfiguration={
                "ObjectLockEnabled": "Enabled",
                "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}},
            },
        )

    try:
        session.client("secretsmanager").create_secret(Name=f"{PREFIX}-audit-key", SecretString=secrets.token_hex(32))
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ResourceExistsException":
            raise

    opensearch = os.environ.get("OPENSEARCH_URL")
    if opensearch:
        request = urllib.request.Request(
            f"{opensearch.rstrip('/')}/_index_template/ragmcp-chunks",
            data=TEMPLATE.read_bytes(),
            method="PUT",
            headers={"content-type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
        # The index itself, as the stack's SearchIndex custom resource makes it (the functions never do).
        index = urllib.request.Request(f"{opensearch.rstrip('/')}/{PREFIX}-chunks", data=b"{}", method="PUT",
                                       headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(index, timeout=30) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            if exc.code != 400:  # 400: it exists already
                raise
    print(f"ragmcp resources ready: queue {queue}, bucket {drop}")


if __name__ == "__main__":
    main()

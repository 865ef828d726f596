"""The audit trail's parts outside DynamoDB: its key in Secrets Manager, its checkpoints in the
Object Lock bucket.

Each checkpoint is its own object under `audit/checkpoints/`, never overwritten, kept by the
bucket's default retention. Object Lock refuses a PUT without an integrity checksum, and the
layer leaves boto3 out (the Lambda runtime's own, whichever version, is used), so the checksums
are set here explicitly (Content-MD5 and SHA-256) instead of relying on a version's defaults.
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from collections.abc import Iterator
from typing import Any

from ragmcp.domain.errors import RagError
from ragmcp.security.audit import MIN_KEY_BYTES
from ragmcp.security.models import AuditCheckpoint

CHECKPOINTS = "audit/checkpoints/"


class S3CheckpointStore:
    def __init__(self, client: Any, bucket: str):
        self.client = client
        self.bucket = bucket

    def append(self, checkpoint: AuditCheckpoint) -> None:
        body = checkpoint.model_dump_json().encode()
        key = f"{CHECKPOINTS}{checkpoint.at:%Y%m%dT%H%M%S%fZ}-{uuid.uuid4().hex[:12]}.json"
        self.client.put_object(
            Bucket=self.bucket,
            Key=key,
            Body=body,
            ContentType="application/json",
            ContentMD5=base64.b64encode(hashlib.md5(body, usedforsecurity=False).digest()).decode(),
            ChecksumSHA256=base64.b64encode(hashlib.sha256(body).digest()).decode(),
        )

    def all(self) -> Iterator[AuditCheckpoint]:
        keys: list[str] = []
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=CHECKPOINTS):
            keys += [item["Key"] for item in page.get("Contents", [])]
        for key in sorted(keys):  # keys start with the time written
            body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            yield AuditCheckpoint.model_validate_json(body)


def secrets_manager_key(client: Any, secret_id: str) -> bytes:
    """The audit key: the secret's binary value, or its string's bytes (at least MIN_KEY_BYTES)."""
    answer = client.get_secret_value(SecretId=secret_id)
    key = answer.get("SecretBinary") or answer.get("SecretString", "").encode()
    if len(key) < MIN_KEY_BYTES:
        raise RagError(f"the audit key secret {secret_id!r} is shorter than {MIN_KEY_BYTES} bytes")
    return key

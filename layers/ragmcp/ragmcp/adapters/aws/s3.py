"""Originals and staged upload parts on S3, and presigned links to originals.

A location is `s3://<bucket>/<prefix>`; a path inside it is the rest of the object key.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from ragmcp.domain.errors import NotFound
from ragmcp.domain.models import Document, Principal
from ragmcp.security.links import link_expiry
from ragmcp.security.originals import Originals
from ragmcp.security.policy import can_read

S3Client = Any  # boto3 S3 client
_MISSING = frozenset({"NoSuchKey", "404", "NotFound"})


def is_missing(exc: ClientError) -> bool:
    return exc.response.get("Error", {}).get("Code") in _MISSING


def s3_location(bucket: str, prefix: str) -> str:
    return f"s3://{bucket}/{prefix.strip('/')}"


def split_location(location: str) -> tuple[str, str]:
    """(bucket, key prefix ending in '/') of a location."""
    if not location.startswith("s3://"):
        raise ValueError(f"not an S3 location: {location!r}")
    bucket, _, prefix = location[len("s3://") :].partition("/")
    return bucket, f"{prefix.strip('/')}/" if prefix.strip("/") else ""


def object_key(location: str, path: str) -> tuple[str, str]:
    bucket, prefix = split_location(location)
    clean = path.lstrip("/")
    if not clean or ".." in clean.split("/"):
        raise FileNotFoundError(path)
    return bucket, prefix + clean


class S3BlobStore:
    def __init__(self, client: S3Client):
        self.client = client

    def read(self, location: str, path: str) -> bytes:
        bucket, key = object_key(location, path)
        try:
            return self.client.get_object(Bucket=bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if is_missing(exc):
                raise FileNotFoundError(path) from None
            raise

    def size(self, location: str, path: str) -> int:
        bucket, key = object_key(location, path)
        try:
            return int(self.client.head_object(Bucket=bucket, Key=key)["ContentLength"])
        except ClientError as exc:
            if is_missing(exc):
                raise FileNotFoundError(path) from None
            raise

    def list(self, location: str) -> list[str]:
        bucket, prefix = split_location(location)
        paths = []
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            paths += [item["Key"][len(prefix) :] for item in page.get("Contents", [])]
        return sorted(paths)

    def write(self, location: str, path: str, data: bytes) -> None:
        bucket, key = object_key(location, path)
        self.client.put_object(Bucket=bucket, Key=key, Body=data)

    def delete(self, location: str, path: str) -> None:
        bucket, key = object_key(location, path)
        self.client.delete_object(Bucket=bucket, Key=key)

    def presigned_url(self, location: str, path: str, expires_seconds: int) -> str:
        bucket, key = object_key(location, path)
        params = {"Bucket": bucket, "Key": key}
        return self.client.generate_presigned_url("get_object", Params=params, ExpiresIn=expires_seconds)


class S3Links:
    """Links to originals as presigned S3 URLs: S3 serves the object, so the access check happens
    here, before presigning, and the object is what security/originals.py says a link may serve
    (the redacted rendition of a redacting source). A presigned URL lives no longer than the link
    lifetime, the caller's credential, or the credentials that sign it (S3 refuses a URL whose
    signing credentials have expired, so a longer promise would be false)."""

    def __init__(
        self,
        blobs: S3BlobStore,
        originals: Originals,
        ttl_seconds: int,
        credentials: Callable[[], Any],
        clock: Callable[[], float] = time.time,
    ):
        self.blobs = blobs
        self.originals = originals
        self.ttl_seconds = min(ttl_seconds, 7 * 24 * 3600)
        self.credentials = credentials
        self.clock = clock

    def lifetime(self, principal: Principal) -> int:
        """Seconds a URL presigned now may live; NotFound when the signing credentials are spent."""
        now = self.clock()
        seconds = link_expiry(principal, self.ttl_seconds, now) - int(now)
        left = seconds_left(self.credentials(), now)
        if left is not None:
            seconds = min(seconds, left)
        if seconds < 1:
            raise NotFound("no link can be made now: the signing credentials or the caller's have expired")
        return seconds

    def url(self, principal: Principal, doc: Document, page: int | None = None) -> str:
        if not can_read(principal, doc):
            raise NotFound(f"document {doc.doc_id} not found")
        stored = self.originals.stored(doc)
        if stored is None:
            raise NotFound(f"document {doc.doc_id} not found")
        url = self.blobs.presigned_url(stored.location, stored.path, self.lifetime(principal))
        return f"{url}#page={page}" if page else url

    def verify(self, tenant: str, doc_id: str, expires: int, grant: str, signature: str) -> Principal | None:
        return None


def seconds_left(credentials: Any, now: float) -> int | None:
    """Seconds until botocore credentials expire; None when they do not (long-term keys). botocore's
    refreshable credentials (a role's, or env keys with AWS_CREDENTIAL_EXPIRATION) keep their
    expiry in `_expiry_time`, with no public accessor."""
    expiry = getattr(credentials, "_expiry_time", None)
    if expiry is None:
        return None
    return int(expiry.timestamp() - now)


"""Originals and staged upload parts on S3, and presigned links to originals.

A location is `s3://<bucket>/<prefix>`; a path inside it is the rest of the object key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from ragmcp.domain.errors import NotFound
from ragmcp.ports import DocumentStore

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
    """Links to originals as presigned S3 URLs: S3 serves the file, so this server signs no /files/ links."""

    def __init__(
        self,
        blobs: S3BlobStore,
        documents: DocumentStore,
        location_for: Callable[[str, str], str],
        ttl_seconds: int,
    ):
        self.blobs = blobs
        self.documents = documents
        self.location_for = location_for
        self.ttl_seconds = min(ttl_seconds, 7 * 24 * 3600)

    def url(self, tenant: str, doc_id: str, page: int | None = None) -> str:
        doc = self.documents.get(tenant, doc_id)
        if doc is None:
            raise NotFound(f"document {doc_id} not found")
        url = self.blobs.presigned_url(self.location_for(tenant, doc.source), doc.path, self.ttl_seconds)
        return f"{url}#page={page}" if page else url

    def verify(self, tenant: str, doc_id: str, expires: int, signature: str) -> bool:
        return False

"""Presigned links on AWS (S3 on moto, in process): the access check happens before presigning, a
redacting source's link opens its redacted rendition (stored at ingest under renditions/, beside
the originals and outside the watched sources/ prefix), and a URL never lives longer than the link
lifetime, the caller's token, or the credentials that sign it (a longer promise would be false:
S3 refuses a URL whose signing credentials have expired)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest
from botocore.config import Config
from moto import mock_aws

from ragmcp.adapters.aws.s3 import S3BlobStore, S3Links, s3_location
from ragmcp.adapters.local.database import Database
from ragmcp.adapters.local.sqlite_stores import SqliteSourceStore
from ragmcp.domain.errors import NotFound
from ragmcp.domain.models import Acl, Document, Principal, Source, Tier
from ragmcp.security.originals import Originals, rendition_path

BUCKET = "ragmcp-drop"
RAW = b"Call ana.lopez@example.com about the contract.\n"
REDACTED = "Call [EMAIL] about the contract."


def renditions_for(tenant: str, source: str) -> str:
    return s3_location(BUCKET, f"renditions/{tenant}/{source}")


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[S3BlobStore, Originals, Document]]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1", config=Config(signature_version="s3v4"))
        client.create_bucket(Bucket=BUCKET)
        blobs = S3BlobStore(client)
        sources = SqliteSourceStore(Database(tmp_path / "catalog.db"))
        source = Source(tenant="acme", source_id="docs", name="docs", location=s3_location(BUCKET, "sources/acme/docs"))
        sources.put(source)
        blobs.write(source.location, "contacts.txt", RAW)
        doc = Document(
            tenant="acme",
            doc_id="docs:contacts.txt",
            source="docs",
            path="contacts.txt",
            title="Contacts",
            file_name="contacts.txt",
            file_type="txt",
            content_hash="x",
            acl=Acl(groups=("sales",)),
            tier=Tier.confidential,
        )
        originals = Originals(blobs, sources, renditions_for)
        originals.save_rendition(source, doc, REDACTED)
        yield blobs, originals, doc


def expiring_credentials(monkeypatch: pytest.MonkeyPatch, seconds: int):
    """Credentials as a role's arrive: with an expiry (botocore reads AWS_CREDENTIAL_EXPIRATION)."""
    expiry = datetime.now(UTC) + timedelta(seconds=seconds)
    monkeypatch.setenv("AWS_CREDENTIAL_EXPIRATION", expiry.strftime("%Y-%m-%dT%H:%M:%SZ"))
    return boto3.session.Session().get_credentials


def presigned_for(url: str) -> tuple[str, int]:
    """The object key a presigned URL opens (virtual-hosted: the path is the key) and its lifetime."""
    parts = urlsplit(url)
    assert parts.netloc.startswith(f"{BUCKET}.")
    return parts.path.lstrip("/"), int(parse_qs(parts.query)["X-Amz-Expires"][0])


SALES = Principal(tenant="acme", via="key", key_id="k1", user_id="ana", groups=("sales",), max_tier=Tier.confidential)


def test_a_presigned_link_opens_the_redacted_rendition_after_the_access_check(aws, monkeypatch) -> None:
    blobs, originals, doc = aws
    links = S3Links(blobs, originals, 15 * 60, boto3.session.Session().get_credentials)
    path, lifetime = presigned_for(links.url(SALES, doc))
    assert path == f"renditions/acme/docs/{rendition_path(doc.doc_id)}" and lifetime == 15 * 60
    stored = blobs.client.get_object(Bucket=BUCKET, Key=path)["Body"].read().decode()
    assert stored == REDACTED and "ana.lopez" not in stored
    for outsider in (
        SALES.model_copy(update={"groups": ("support",)}),
        SALES.model_copy(update={"max_tier": Tier.standard}),
        SALES.model_copy(update={"tenant": "other"}),
    ):
        with pytest.raises(NotFound):
            links.url(outsider, doc)


def test_a_raw_original_only_when_the_source_opts_in(aws) -> None:
    blobs, originals, doc = aws
    source = originals.sources.get("acme", "docs")
    originals.sources.put(source.model_copy(update={"serve_originals": "raw"}))
    links = S3Links(blobs, originals, 15 * 60, boto3.session.Session().get_credentials)
    assert presigned_for(links.url(SALES, doc))[0] == "sources/acme/docs/contacts.txt"


def test_a_link_never_outlives_its_signing_credentials(aws, monkeypatch) -> None:
    blobs, originals, doc = aws
    links = S3Links(blobs, originals, 15 * 60, expiring_credentials(monkeypatch, 120))
    lifetime = presigned_for(links.url(SALES, doc))[1]
    assert 100 <= lifetime <= 120
    token = SALES.model_copy(update={"via": "token", "expires_at": int(time.time()) + 60})
    assert 50 <= presigned_for(links.url(token, doc))[1] <= 60
    spent = S3Links(blobs, originals, 15 * 60, expiring_credentials(monkeypatch, -30))
    with pytest.raises(NotFound, match="signing credentials"):
        spent.url(SALES, doc)


def test_a_rows_link_opens_the_rows_rendition_never_the_file_of_every_row(aws) -> None:
    blobs, originals, _ = aws
    source = originals.sources.get("acme", "docs")
    raw = source.model_copy(update={"serve_originals": "raw", "redact_pii": False, "hidden_columns": ("salary",)})
    originals.sources.put(raw)
    blobs.write(raw.location, "people.csv", b"id,name,salary\n1,Ada Heron,91000\n2,Bo Egret,87000\n")
    row = Document(
        tenant="acme",
        doc_id="docs:1",
        source="docs",
        path="people.csv",
        title="Ada Heron",
        file_name="people.csv",
        file_type="csv",
        kind="row",
        pk="1",
        content_hash="y",
    )
    assert originals.save_rendition(raw, row, "id: 1\nname: Ada Heron")
    links = S3Links(blobs, originals, 15 * 60, boto3.session.Session().get_credentials)
    path, _ = presigned_for(links.url(SALES, row))
    assert path == f"renditions/acme/docs/{rendition_path(row.doc_id)}"
    served = blobs.client.get_object(Bucket=BUCKET, Key=path)["Body"].read().decode()
    assert "Ada Heron" in served and "Bo Egret" not in served and "91000" not in served

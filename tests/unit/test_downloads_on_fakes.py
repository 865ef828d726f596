"""The links a tool answers with, opened as GET /files/... opens them (security/originals.py's
Downloads), on the in-memory fakes: for a genuine link what the source serves (here its redacted
rendition: sources redact by default) and a row's rendition for a row; 403 for a forged, moved or
expired link; 404 once its minter lost access (as for a document that does not exist); all audited."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from ragmcp.bootstrap import build_services
from ragmcp.domain.models import Principal, UserRecord
from ragmcp.security.identity import key_credential
from ragmcp.security.links import LinkSigner, document_url
from ragmcp.security.originals import Download
from ragmcp.services import Services
from tests import fakes
from tests.contract_examples import LEAVE, TENANT, USER, write_corpus


@pytest.fixture
def services(tmp_path: Path) -> Services:
    adapters = fakes.adapters()
    built = build_services(fakes.settings(tmp_path / "data"), adapters)
    write_corpus(adapters, built)
    return built


def reader(services: Services) -> Principal:
    """USER, asserted by a platform key (whose links are re-checked against the key and the directory)."""
    key = services.keys.create(TENANT, scopes=("read",), platform=True)
    stored = services.keys.store.get(key.key.key_id)
    assert stored is not None
    return services.identities.principal(key_credential(stored), user=USER)


def link_parts(url: str) -> tuple[str, str, int, str, str]:
    """(tenant, doc_id, expires, grant, signature) of a /files/<tenant>/<doc_id>?... link."""
    parts = urlsplit(url)
    _files, tenant, doc_id = parts.path.strip("/").split("/", 2)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    return tenant, unquote(doc_id), int(query["expires"]), query["grant"], query["sig"]


def open_link(services: Services, url: str) -> Download:
    return services.downloads.open(*link_parts(url))


def test_a_genuine_link_opens_what_its_source_serves_and_a_rows_link_its_row(services: Services) -> None:
    principal = reader(services)
    doc = services.documents.get(TENANT, "handbook:leave-policy.md")
    assert doc is not None
    opened = open_link(services, document_url(services.links, principal, doc))
    assert opened.status == 200, opened
    assert opened.data.decode() == "Leave policy\n" + LEAVE.split("\n\n")[1].strip()  # the indexed text: it redacts
    assert opened.file_name == "leave-policy.md.redacted.txt"
    row = services.documents.get(TENANT, "posts:12345")
    assert row is not None
    rendition = open_link(services, document_url(services.links, principal, row))
    assert rendition.status == 200 and b"JSON_EXTRACT" in rendition.data and rendition.file_name.endswith(".txt")
    assert [r.tool for r in services.audit.store.records(TENANT)][-2:] == ["GET /files", "GET /files"]


def test_a_link_is_refused_when_forged_moved_expired_or_its_minter_lost_access(services: Services) -> None:
    principal = reader(services)
    doc = services.documents.get(TENANT, "handbook:leave-policy.md")
    assert doc is not None
    tenant, doc_id, expires, grant, signature = link_parts(document_url(services.links, principal, doc))
    forged = services.downloads.open(tenant, doc_id, expires, grant, signature[:-4] + "0000")
    moved = services.downloads.open(tenant, "office:cancellation.md", expires, grant, signature)
    later = services.downloads.open(tenant, doc_id, expires + 3600, grant, signature)
    assert [d.status for d in (forged, moved, later)] == [403, 403, 403]
    assert forged.error == "link invalid, expired or revoked"

    expired_signer = LinkSigner(b"s" * 32, "http://testserver", -1)  # the fakes' secret, links already expired
    assert open_link(services, expired_signer.url(principal, doc)).status == 403

    assert services.downloads.open(tenant, doc_id, expires, grant, signature).status == 200
    services.users.put(UserRecord(tenant=TENANT, user_id=USER, groups=()))  # out of `users` since the link
    gone = services.downloads.open(tenant, doc_id, expires, grant, signature)
    assert (gone.status, gone.error) == (404, "document not found")  # as if it did not exist
    services.audit.flush_refusals(everything=True)
    outcomes = [r.outcome for t in services.audit.store.tenants() for r in services.audit.store.records(t)]
    assert outcomes.count("refused 403") >= 1 and "error 404" in outcomes

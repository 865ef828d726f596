"""Documents as MCP resources, through the real HTTP app: listed a page at a time, read as their
indexed (redacted) text, one template per document with pages; a caller sees only what the
tools would show them, and everything else reads exactly like a document that does not exist."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from ragmcp.bootstrap import Services, build_registry, build_services
from ragmcp.domain.models import UserRecord
from ragmcp.http import create_app
from ragmcp.settings import Settings

from .conftest import ContractClient

FINANCE = {"x-user-id": "fin@example.com"}
PHONE = "+44 20 7946 0958"


@pytest.fixture(scope="module")
def library(shared_documents: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ContractClient]:
    root = tmp_path_factory.mktemp("resources")
    docs = root / "docs"
    docs.mkdir()
    (docs / ".source.json").write_text(json.dumps({"redact_pii": True}))
    for n in range(4):
        (docs / f"note-{n}.md").write_text(f"# Note {n}\n\nOtters number {n} hold hands while they sleep.\n")
    (docs / "budget.md").write_text("# Budget 2027\n\nThe finance team plans a 4% rise in the travel budget.\n")
    (docs / "budget.md.metadata.json").write_text(json.dumps({"groups": ["finance"]}))
    (docs / "contact.md").write_text(f"# Contact\n\nCall the desk on {PHONE} about otters.\n")
    (docs / "multi_page.pdf").write_bytes((shared_documents / "source" / "multi_page.pdf").read_bytes())
    settings = Settings(data_dir=root / "index", host="testserver", resource_page_size=3, open=True)
    services: Services = build_services(settings)
    services.users.put(UserRecord(tenant="default", user_id="fin@example.com", groups=("finance",)))
    source = services.register_folder("default", "docs", str(docs))
    report = services.ingest.sync(source)
    assert report.failed == 0, [j.error for j in report.jobs]
    with TestClient(create_app(services, build_registry(services)), base_url="http://testserver") as http:
        yield ContractClient(http, services)


def result(client: ContractClient, method: str, params: dict, headers: dict | None = None) -> dict:
    body = client.rpc(method, params, headers=headers).json()
    assert "result" in body, body
    return body["result"]


def every(client: ContractClient, method: str, field: str, headers: dict | None = None) -> list[dict]:
    items, cursor, pages = [], None, 0
    while True:
        page = result(client, method, {"cursor": cursor} if cursor else {}, headers)
        assert len(page[field]) <= 3 + (method == "resources/templates/list")
        items += page[field]
        pages += 1
        cursor = page.get("nextCursor")
        if cursor is None:
            return items


def test_resources_are_listed_a_page_at_a_time_and_filtered_by_access(library):
    public = every(library, "resources/list", "resources")
    names = [r["name"] for r in public]
    assert len(names) == len(set(names)) == 6
    assert "docs:budget.md" not in names
    assert all(r["uri"].startswith("ragmcp://documents/") and r["mimeType"] == "text/plain" for r in public)
    finance = [r["name"] for r in every(library, "resources/list", "resources", FINANCE)]
    assert sorted(finance) == sorted([*names, "docs:budget.md"])


def test_reading_returns_the_redacted_text_and_hides_what_the_caller_may_not_read(library):
    uri = "ragmcp://documents/docs%3Acontact.md"
    contents = result(library, "resources/read", {"uri": uri})["contents"]
    assert contents[0]["uri"] == uri and "otters" in contents[0]["text"]
    assert PHONE not in contents[0]["text"] and "7946" not in contents[0]["text"]

    budget = "ragmcp://documents/docs%3Abudget.md"
    denied = library.rpc("resources/read", {"uri": budget}).json()
    missing = library.rpc("resources/read", {"uri": "ragmcp://documents/docs%3Anothing.md"}).json()
    assert denied["error"]["code"] == missing["error"]["code"] == -32002
    assert denied["error"]["message"] == missing["error"]["message"].replace("nothing", "budget")
    allowed = result(library, "resources/read", {"uri": budget}, FINANCE)
    assert "travel budget" in allowed["contents"][0]["text"]


def test_each_document_with_pages_has_a_page_template_that_reads_one_page(library):
    templates = every(library, "resources/templates/list", "resourceTemplates")
    uris = [t["uriTemplate"] for t in templates]
    assert uris[0] == "ragmcp://documents/{doc_id}"
    assert uris[1:] == ["ragmcp://documents/docs%3Amulti_page.pdf/pages/{page}"]
    doc = result(library, "resources/read", {"uri": "ragmcp://documents/docs%3Amulti_page.pdf"})
    page = result(library, "resources/read", {"uri": "ragmcp://documents/docs%3Amulti_page.pdf/pages/2"})
    whole, one = doc["contents"][0]["text"], page["contents"][0]["text"]
    assert one and one in whole and len(one) < len(whole)
    beyond = library.rpc("resources/read", {"uri": "ragmcp://documents/docs%3Amulti_page.pdf/pages/999"}).json()
    assert beyond["error"]["code"] == -32002


@pytest.mark.parametrize("cursor", ["abc", "-1", "9" * 20, ""])
def test_a_forged_cursor_is_invalid_params(library, cursor):
    body = library.rpc("resources/list", {"cursor": cursor}).json()
    assert body["error"]["code"] == -32602, body


@pytest.mark.parametrize(
    "uri", ["ragmcp://documents/", "file:///etc/passwd", "ragmcp://documents/docs%3Acontact.md/pages/0", "x" * 5000]
)
def test_unknown_uris_are_not_found(library, uri):
    body = library.rpc("resources/read", {"uri": uri}).json()
    assert body["error"]["code"] in (-32002, -32602), body

"""contracts/mindset-rag-mcp.md: rag_search and verify_document_access, examples replayed."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import pytest

from ragmcp.domain.models import UserRecord
from tests.contracts.response_schemas import assert_valid, item_fields

PATH = "/mcp/mindset"
HEADERS = {
    "Authorization": "Bearer YOUR_API_KEY",
    "x-user-id": "user@example.com",
    "x-session-tags": '["department:sales", "region:north", "Q4-2024", "premium_access"]',
}
SEGMENT_FIELDS = item_fields("mindset", "rag_search", "segments")


def call(contract, tool: str, arguments: dict, headers: dict = HEADERS) -> dict:
    """The JSON-RPC body of a tools/call; a result is valid against the contract's schema (schemas/mindset/)."""
    body = contract.call(tool, arguments, path=PATH, headers=headers)
    if "result" in body:
        assert_valid(body["result"], "mindset", tool)
    return body


def test_request_example_five_phrases(contract):
    body = call(
        contract,
        "rag_search",
        {
            "search_phrases": [
                "key features?",
                "Product X capabilities and specifications",
                "How does product X compare to competitors?",
                "Product X technical documentation",
                "Benefits and limitations of product X",
            ]
        },
    )
    result = body["result"]
    assert result["status"] == "success"
    assert 1 <= len(result["segments"]) <= 20
    assert all(set(segment) == SEGMENT_FIELDS for segment in result["segments"])
    assert result["structuredContent"]["segments"] == result["segments"]


def test_pdf_segments_link_to_their_page(contract):
    segments = call(contract, "rag_search", {"search_phrases": ["history of the word processor"]})["result"]["segments"]
    pdf = next(s for s in segments if s["source_file_type"] == "pdf")
    assert urlsplit(pdf["source_url"]).fragment.startswith("page=")


def test_verify_document_access_expected_response(contract):
    segment = call(contract, "rag_search", {"search_phrases": ["mallard duck"]})["result"]["segments"][0]
    body = call(contract, "verify_document_access", {"segment_uid": segment["segment_uid"]})
    result = body["result"]
    assert result["has_access"] is True and result["access_level"] == "view" and result["error"] is None
    fresh = urlsplit(result["refreshed_url"])
    assert fresh.path == urlsplit(segment["source_url"]).path
    original = contract.http.get(f"{fresh.path}?{fresh.query}")
    assert original.status_code == 200 and b"Mallard" in original.content
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]


@pytest.fixture
def protected(contract, tmp_path):
    folder = tmp_path / "sales"
    folder.mkdir()
    (folder / "pricing.md").write_text("# Pricing\n\nThe enterprise plan of Product Zephyr costs 900 euros a month.\n")
    (folder / "pricing.md.metadata.json").write_text('{"groups": ["department:sales"]}')
    services = contract.services
    source = services.register_folder("default", f"sales-{tmp_path.name}", str(folder))
    services.ingest.sync(source)
    # The directory, not the session tags, makes the example's user a member of sales (tags only narrow).
    services.users.put(UserRecord(tenant="default", user_id="user@example.com", groups=("department:sales",)))
    yield folder, source
    services.users.put(UserRecord(tenant="default", user_id="user@example.com"))


def test_verify_uses_the_current_callers_headers(contract, protected):
    _, source = protected
    phrases = {"search_phrases": ["Product Zephyr enterprise plan price"]}
    segments = call(contract, "rag_search", phrases)["result"]["segments"]
    uid = next(s["segment_uid"] for s in segments if s["segment_uid"].startswith(source.source_id + ":"))
    support = {**HEADERS, "x-user-id": "someone@example.com", "x-session-tags": '["department:support"]'}
    denied = call(contract, "verify_document_access", {"segment_uid": uid}, support)["result"]
    assert denied["has_access"] is False and denied["refreshed_url"] is None and denied["error"] == "Access denied"
    hidden = call(contract, "rag_search", phrases, support)["result"]["segments"]
    assert not [s for s in hidden if s["source_file_name"] == "pricing.md"]
    allowed = call(contract, "verify_document_access", {"segment_uid": uid})["result"]
    assert allowed["has_access"] is True


def test_access_denied_response_for_a_deleted_document(contract, protected):
    folder, source = protected
    segments = call(contract, "rag_search", {"search_phrases": ["Product Zephyr price"]})["result"]["segments"]
    uid = next(s["segment_uid"] for s in segments if s["segment_uid"].startswith(source.source_id + ":"))
    (folder / "pricing.md").unlink()
    contract.services.ingest.sync(source, allow_mass_delete=True)  # the source's only document, removed on purpose
    result = call(contract, "verify_document_access", {"segment_uid": uid})["result"]
    assert {k: result[k] for k in ("has_access", "refreshed_url", "error")} == {
        "has_access": False,
        "refreshed_url": None,
        "error": "Document has been deleted",
    }
    unknown = call(contract, "verify_document_access", {"segment_uid": "nope:x#1"})
    assert unknown["result"]["error"] == "Document not found"


@pytest.mark.parametrize("arguments", [{}, {"segment_uid": ""}, {"segment_uid": 5}, {"segment_uid": "a", "extra": 1}])
def test_verify_document_access_invalid_params(contract, arguments):
    body = call(contract, "verify_document_access", arguments)
    assert body["error"]["code"] == -32602


def test_error_example_shape(contract):
    body = call(contract, "rag_search", {"search_phrases": []})
    assert set(body) == {"jsonrpc", "error", "id"}
    assert set(body["error"]) >= {"code", "message"} and body["error"]["code"] == -32602

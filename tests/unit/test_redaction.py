"""PII redaction: the checks that keep digits honest, and the cases issue 15 found (precision and recall on the
labelled set: test_guards_eval.py)."""

from __future__ import annotations

from ragmcp.ingest.parsed import Block, ParsedDocument
from ragmcp.ingest.redaction import card_length_ok, find_pii, redact, redact_document


def test_cards_need_a_networks_length_and_the_luhn_check():
    assert [(f.kind, f.start, f.end) for f in find_pii("Card 4111 1111 1111 1111.")] == [("CARD", 5, 24)]
    assert find_pii("Card 4111 1111 1111 1112.") == []
    assert find_pii("Barcode 5901234123457 on the shelf.") == []  # passes Luhn; no network issues 13 digits from 5
    assert card_length_ok("4222222222222") and card_length_ok("378282246310005") and not card_length_ok("5901234123457")


def test_ibans_need_their_countrys_format_and_check_digits():
    assert [f.kind for f in find_pii("IBAN GB82 WEST 1234 5698 7654 32")] == ["IBAN"]
    assert find_pii("IBAN GB82 WEST 1234 5698 7654 33") == [] and find_pii("IBAN DE00 5001 0517 5402 4242 42") == []


def test_the_cases_issue_15_found():
    assert redact("Write to o'connor@example.ie today.")[0] == "Write to [EMAIL] today."
    assert redact("SSN 078051120 on file.")[0] == "SSN [SSN] on file."
    assert redact("Applicant (SSN: 488291034) withdrew.")[0] == "Applicant (SSN: [SSN]) withdrew."
    assert redact("Order 123456789 ships on Monday.")[0] == "Order 123456789 ships on Monday."
    assert redact("'tom@example.net'")[0] == "'[EMAIL]'"


def test_placeholders_are_typed_and_counted():
    text, counts = redact("Mail ana@example.com, card 4111 1111 1111 1111, SSN 078-05-1120.")
    assert text == "Mail [EMAIL], card [CARD], SSN [SSN]."
    assert counts == {"EMAIL": 1, "CARD": 1, "SSN": 1}


def test_redact_document_covers_blocks_headings_heading_paths_and_rows():
    doc = ParsedDocument(
        blocks=[Block("Call +1 415 555 2671", heading="ops@acme.io", path=("a@b.io",))],
        title="x@y.com",
        pk="1",
        row={"email": "x@y.com", "n": 3},
    )
    counts = redact_document(doc)
    assert doc.blocks[0].text == "Call [PHONE]" and doc.blocks[0].heading == "[EMAIL]"
    assert doc.blocks[0].path == ("[EMAIL]",) and doc.title == "[EMAIL]"
    assert doc.row == {"email": "[EMAIL]", "n": 3}
    assert counts == {"redacted_phone": 1, "redacted_email": 4}

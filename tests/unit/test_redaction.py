"""PII redaction: precision and recall on a labelled set, and the checks that keep digits honest."""

from __future__ import annotations

import json
from pathlib import Path

from ragmcp.ingest.parsed import Block, ParsedDocument
from ragmcp.ingest.redaction import find_pii, iban_valid, luhn_valid, redact, redact_document

LABELLED = Path(__file__).resolve().parents[1] / "data" / "pii_labelled.jsonl"


def test_precision_and_recall_on_the_labelled_set():
    true_pos = false_pos = false_neg = 0
    kinds = set()
    for line in LABELLED.read_text().splitlines():
        row = json.loads(line)
        text = row["text"]
        gold = {(p["kind"], text.index(p["value"]), text.index(p["value"]) + len(p["value"])) for p in row["pii"]}
        found = {(f.kind, f.start, f.end) for f in find_pii(text)}
        true_pos += len(gold & found)
        false_pos += len(found - gold)
        false_neg += len(gold - found)
        kinds |= {k for k, _, _ in gold}
    precision = true_pos / (true_pos + false_pos)
    recall = true_pos / (true_pos + false_neg)
    print(f"PII redaction: precision {precision:.3f}, recall {recall:.3f} over {true_pos + false_neg} labelled items")
    assert kinds == {"EMAIL", "PHONE", "SSN", "CARD", "IBAN"}
    assert true_pos + false_neg >= 40
    assert precision >= 0.95 and recall >= 0.95


def test_checksums():
    assert luhn_valid("4111111111111111") and not luhn_valid("4111111111111112")
    assert iban_valid("GB82 WEST 1234 5698 7654 32") and not iban_valid("GB82 WEST 1234 5698 7654 33")


def test_placeholders_are_typed_and_counted():
    text, counts = redact("Mail ana@example.com, card 4111 1111 1111 1111, SSN 078-05-1120.")
    assert text == "Mail [EMAIL], card [CARD], SSN [SSN]."
    assert counts == {"EMAIL": 1, "CARD": 1, "SSN": 1}


def test_redact_document_covers_blocks_headings_headers_and_rows():
    doc = ParsedDocument(
        blocks=[Block("Call +1 415 555 2671", heading="ops@acme.io", header="| a@b.io |")],
        title="x@y.com",
        pk="1",
        row={"email": "x@y.com", "n": 3},
    )
    counts = redact_document(doc)
    assert doc.blocks[0].text == "Call [PHONE]" and doc.blocks[0].heading == "[EMAIL]"
    assert doc.blocks[0].header == "| [EMAIL] |" and doc.title == "[EMAIL]"
    assert doc.row == {"email": "[EMAIL]", "n": 3}
    assert counts == {"redacted_phone": 1, "redacted_email": 4}

"""PII redaction: the checks that keep digits honest, and the cases issue 15 found (precision and recall on the
labelled set: test_guards_eval.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from ragmcp.ingest.parsed import Block, ParsedDocument
from ragmcp.ingest.redaction import (
    DEFAULT_REGIONS,
    MIN_PHONE_DIGITS,
    PHONE_SEPARATORS,
    _phones,
    card_length_ok,
    find_pii,
    redact,
    redact_document,
)

PII_CORPUS = Path(__file__).resolve().parents[1] / "data" / "pii_labelled.jsonl"


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


def _phones_by_the_full_matcher(text: str) -> list[tuple[int, int]]:
    """What `_phones` found before it looked at windows: libphonenumber's matcher over the whole text."""
    import phonenumbers

    return sorted(
        (m.start, m.end)
        for region in DEFAULT_REGIONS
        for m in phonenumbers.PhoneNumberMatcher(text, region, leniency=phonenumbers.Leniency.STRICT_GROUPING)
        if sum(c.isdigit() for c in m.raw_string) >= MIN_PHONE_DIGITS
    )


def _phones_found(text: str) -> list[tuple[int, int]]:
    return sorted((f.start, f.end) for f in _phones(text, DEFAULT_REGIONS))


def test_phone_windows_find_what_the_full_matcher_finds_on_the_labelled_corpus():
    texts = [json.loads(line)["text"] for line in PII_CORPUS.read_text().splitlines() if line.strip()]
    joined = " ".join(texts[::3])  # numbers beside other text, letters and other numbers
    assert sum(bool(_phones_by_the_full_matcher(t)) for t in texts) >= 10  # the corpus has phone numbers to find
    # a letter, "%" or "$" right beside a number (the matcher's context check), a time after it
    beside = ["Tel4155552671", "4155552671b", "$415 555 2671", "415 555 2671%", "Call +1 415 555 2671:30 d"]
    assert not _phones_by_the_full_matcher("Tel4155552671") and _phones_by_the_full_matcher("Tel 4155552671")
    for text in [*texts, joined, *beside]:
        assert _phones_found(text) == _phones_by_the_full_matcher(text), text


_PHONEISH = st.sampled_from(
    [*"0123456789 -.()+/:,#x%$abd\n\u00a0\u2013\uff10\u0663", "  ", "ext. ", " ext ", "Tel", "Tel ", "call "]
    + ["+44 ", "+1 ", "(0)", "1:30", "p. ", "4155552671", "+44 20 7946 0958"]
)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(_PHONEISH, max_size=40).map("".join))
def test_phone_windows_find_what_the_full_matcher_finds_on_digit_heavy_text(text):
    assert _phones_found(text) == _phones_by_the_full_matcher(text)


def test_the_window_separators_cannot_be_part_of_a_phone_number():
    """Where `_phones` cuts its windows: no character libphonenumber's candidate pattern can match, in any case."""
    from phonenumbers.phonenumbermatcher import _PATTERN

    literals = re.sub(r"\\.", "", _PATTERN.pattern)  # the pattern without its escapes (\\d, \\t, \\.)
    for char in PHONE_SEPARATORS:
        assert char.lower() not in literals.lower() and char.upper() not in literals.upper() and not char.isdigit()
        for text in (f"+1 415{char}555 2671", f"(0)20 7946 0958{char}ext. 12", f"0301234567{char}890 x 12"):
            assert all(char not in m.group() for m in _PATTERN.finditer(text)), text

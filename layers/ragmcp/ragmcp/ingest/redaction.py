"""PII redaction at ingest: e-mail addresses, phone numbers, US SSNs, payment cards and IBANs
become typed placeholders such as `[EMAIL]` before anything is chunked, embedded or stored.

Phone numbers are found by `phonenumbers` (Google's libphonenumber), valid for one of the
configured regions; cards must have a card network's length for their first digits and pass the
Luhn check, and IBANs their country's format and the ISO 13616 mod-97 check (both checks from
`python-stdnum`), so that order numbers, barcodes and other digit runs are left alone. An SSN is
three, two and four digits apart, or nine digits in a row right after the word SSN (or "social
security number"). An e-mail address may have an apostrophe inside its local part (o'connor@...).
Measured on labelled items by `ragmcp eval-guards` (BENCHMARKS.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from stdnum import iban, luhn

from ragmcp.ingest.parsed import ParsedDocument

DEFAULT_REGIONS = ("US", "GB", "DE", "FR")
MIN_PHONE_DIGITS = 9

_EMAIL = re.compile(r"(?<![\w.+-])\w[\w.+'-]*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![\w-])")
_SSN_DIGITS = r"(?!000|666|9\d\d)\d{3}(?P<a>[- ]?)(?!00)\d{2}(?P=a)(?!0000)\d{4}"
_SSN = re.compile(rf"(?<![\d-])(?=\d{{3}}[- ])({_SSN_DIGITS})(?![\d-])")
_SSN_NAMED = re.compile(
    rf"(?i:\bSSN\b|\bsocial security (?:number|no\.?|#))\W{{0,4}}(?<![\d-])({_SSN_DIGITS})(?![\d-])"
)
_CARD = re.compile(r"(?<![\w-])[2-6](?:[ -]?\d){12,18}(?![\w-])")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b")


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    start: int
    end: int


_CARD_LENGTHS = {"4": (13, 16, 19), "34": (15,), "37": (15,), "36": (14,), "30": (14,), "38": (14,), "39": (14,)}
"""Lengths of the card networks whose numbers start so (Visa, American Express, Diners Club);
every other network's numbers have 16 to 19 digits."""


def card_length_ok(digits: str) -> bool:
    lengths = _CARD_LENGTHS.get(digits[:2]) or _CARD_LENGTHS.get(digits[:1]) or range(16, 20)
    return len(digits) in lengths


def _cards(text: str) -> Iterator[Finding]:
    for match in _CARD.finditer(text):
        digits = re.sub(r"\D", "", match.group())
        if card_length_ok(digits) and luhn.is_valid(digits):
            yield Finding("CARD", match.start(), match.end())


def _phones(text: str, regions: Iterable[str]) -> Iterator[Finding]:
    """Valid, conventionally grouped numbers of at least MIN_PHONE_DIGITS digits (no short codes).
    libphonenumber's metadata loads on the first call, as the parsers do on the first parse: the MCP
    function imports this module but redacts only what a tool parses.

    The matcher runs only on the windows that can hold such a number (`_phone_windows`), not over
    the whole text: it parses every digit run it meets (a paper's statistics, dates, page numbers)
    once a region, and that was most of the ingest's CPU outside the model."""
    import phonenumbers

    for at, window in _phone_windows(text):
        for region in regions:
            for match in phonenumbers.PhoneNumberMatcher(
                window, region, leniency=phonenumbers.Leniency.STRICT_GROUPING
            ):
                if sum(c.isdigit() for c in match.raw_string) >= MIN_PHONE_DIGITS:
                    yield Finding("PHONE", at + match.start, at + match.end)


PHONE_SEPARATORS = "bcdfghjklmpqruvwyzBCDFGHJKLMPQRUVWYZ%$@!&_<>\"'\n\r"
"""Characters that libphonenumber's candidate pattern never matches (in any case): a number, its
punctuation and its extension ("ext.", "x", "#", "доб") lie between two of them."""
_PHONE_RUN = re.compile(
    rf"(?<![^{re.escape(PHONE_SEPARATORS)}])(?=(?:[^\d{re.escape(PHONE_SEPARATORS)}]*\d){{{MIN_PHONE_DIGITS}}})"
    rf"[^{re.escape(PHONE_SEPARATORS)}]+"
)
"""A whole run between separators with at least MIN_PHONE_DIGITS digits (matched only from a run's start)."""


def _phone_windows(text: str) -> Iterator[tuple[int, str]]:
    """The runs that can hold a number of MIN_PHONE_DIGITS digits, each with the character either
    side (the matcher rejects a number right after or before a letter, "%" or a currency sign), and
    their offsets. The matcher finds in a window exactly what it finds there in the whole text: a
    candidate never spans a separator, and it looks at no more than the one character either side
    (tests/unit/test_redaction.py checks both on the labelled corpus and generated text)."""
    for run in _PHONE_RUN.finditer(text):
        at = max(run.start() - 1, 0)
        yield at, text[at : run.end() + 1]


def find_pii(text: str, regions: Iterable[str] = DEFAULT_REGIONS) -> list[Finding]:
    """Non-overlapping findings, earliest first; where two overlap the longer (then the earlier kind) wins."""
    found = [
        *(Finding("EMAIL", m.start(), m.end()) for m in _EMAIL.finditer(text)),
        *(Finding("IBAN", m.start(), m.end()) for m in _IBAN.finditer(text) if iban.is_valid(m.group())),
        *_cards(text),
        *(Finding("SSN", m.start(1), m.end(1)) for pattern in (_SSN, _SSN_NAMED) for m in pattern.finditer(text)),
        *_phones(text, regions),
    ]
    chosen: list[Finding] = []
    for finding in sorted(found, key=lambda f: (-(f.end - f.start), f.start)):
        if all(finding.end <= c.start or finding.start >= c.end for c in chosen):
            chosen.append(finding)
    return sorted(chosen, key=lambda f: f.start)


def redact(text: str, regions: Iterable[str] = DEFAULT_REGIONS) -> tuple[str, dict[str, int]]:
    """The text with each finding replaced by its placeholder, and how many of each kind."""
    counts: dict[str, int] = {}
    parts: list[str] = []
    at = 0
    for finding in find_pii(text, regions):
        parts += [text[at : finding.start], f"[{finding.kind}]"]
        counts[finding.kind] = counts.get(finding.kind, 0) + 1
        at = finding.end
    parts.append(text[at:])
    return "".join(parts), counts


def redact_document(doc: ParsedDocument, regions: Iterable[str] = DEFAULT_REGIONS) -> dict[str, int]:
    """Redact a parsed document in place (block text, headings, table headers, row values)."""
    counts: dict[str, int] = {}

    def clean(text: str | None) -> str | None:
        if not text:
            return text
        result, found = redact(text, regions)
        for kind, n in found.items():
            counts[f"redacted_{kind.lower()}"] = counts.get(f"redacted_{kind.lower()}", 0) + n
        return result

    for block in doc.blocks:
        block.text = clean(block.text) or ""
        block.heading = clean(block.heading)
        block.path = tuple(clean(h) or "" for h in block.path)
    if doc.row is not None:
        doc.row = {k: clean(v) if isinstance(v, str) else v for k, v in doc.row.items()}
    doc.title = clean(doc.title)
    return counts

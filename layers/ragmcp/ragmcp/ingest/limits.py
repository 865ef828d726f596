"""The budgets one file's parse is held to, checked while it is read: a file over one fails alone
with a one-line reason naming the limit (and the setting that raises it).

`parsers.parse` runs under a ParseLimits (`using`); the parsers ask `current()` for it. The parse's
process limits (CPU time, memory, wall clock) are the sandbox's (`ingest.sandbox`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from ragmcp.domain.errors import ParseFailure


@dataclass(frozen=True, slots=True)
class ParseLimits:
    max_chars: int = 10_000_000
    """Characters of text one file may yield (all its blocks, or all its rows)."""
    max_inflated_bytes: int = 128 * 1024 * 1024
    """DOCX/PPTX/XLSX: the package's parts (zip members) inflated together."""
    max_pages: int = 2_000
    """PDF: pages."""
    max_ocr_pages: int = 50
    """PDF: pages without a text layer that would be read by OCR."""
    max_cells: int = 1_000_000
    """XLSX: cells with a value, and cells covered by merged ranges, in all sheets."""
    max_rows: int = 500_000
    """CSV/JSONL: records."""
    max_columns: int = 16_384
    """CSV/JSONL: fields of one record (XLSX's own limit is 16,384 columns)."""
    max_tags: int = 500_000
    """HTML, Markdown (its raw HTML), DOCX and PPTX: markup tags, counted as "<" characters before
    the file is parsed (their parsers build the whole tree, up to 1 KB a tag, and python-docx spends
    about 0.2 ms on each paragraph, even an empty one). XLSX sheets are streamed and held to
    `max_cells` instead."""


_DEFAULTS = ParseLimits()
_CURRENT: ContextVar[ParseLimits | None] = ContextVar("parse_limits", default=None)


def current() -> ParseLimits:
    return _CURRENT.get() or _DEFAULTS


@contextlib.contextmanager
def using(limits: ParseLimits) -> Iterator[None]:
    token = _CURRENT.set(limits)
    try:
        yield
    finally:
        _CURRENT.reset(token)


OVER_LIMIT = " (over the limit RAGMCP_"


def over(what: str, setting: str, limit: object) -> ParseFailure:
    """The failure of a file over a budget: "<what> (over the limit RAGMCP_<setting>=<limit>)"."""
    return ParseFailure(f"{what}{OVER_LIMIT}{setting}={limit})")


def is_over_limit(reason: str) -> bool:
    """Whether a parse failed for being over a budget or a process limit (`over`), not for being unreadable."""
    return OVER_LIMIT in reason


class Budget:
    """Counts what a parse yields of one kind (characters, cells, ...); raises once the count
    passes the limit."""

    def __init__(self, what: str, setting: str, limit: int) -> None:
        self.what, self.setting, self.limit = what, setting, limit
        self.used = 0

    def spend(self, amount: int = 1) -> None:
        self.used += amount
        if self.used > self.limit:
            raise over(f"more than {self.limit} {self.what}", self.setting, self.limit)


def char_budget() -> Budget:
    return Budget("characters of text", "PARSE_MAX_CHARS", current().max_chars)

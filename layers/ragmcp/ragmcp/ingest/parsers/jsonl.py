"""JSONL: one document per line, each line a JSON object."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from ragmcp.domain.errors import ParseFailure
from ragmcp.ingest.parsed import ParsedDocument
from ragmcp.ingest.parsers.blocks import decode
from ragmcp.ingest.parsers.rows import Shown, row_documents


def parse(data: bytes, pk_column: str, text_columns: Sequence[str], shown: Shown) -> list[ParsedDocument]:
    return row_documents(_records(decode(data)), pk_column, text_columns, shown)


def _records(text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise ParseFailure(f"invalid JSON on line {number}") from None
        if not isinstance(record, dict):
            raise ParseFailure(f"line {number} is not a JSON object")
        yield number, record

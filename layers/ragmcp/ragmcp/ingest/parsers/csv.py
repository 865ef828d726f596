"""CSV: one document per row, the dialect sniffed, columns named by the header row."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Sequence
from typing import Any

from ragmcp.domain.errors import ParseFailure
from ragmcp.ingest.parsed import ParsedDocument
from ragmcp.ingest.parsers.blocks import decode
from ragmcp.ingest.parsers.rows import Shown, check_columns, row_documents


def parse(data: bytes, pk_column: str, text_columns: Sequence[str], shown: Shown) -> list[ParsedDocument]:
    text = decode(data)
    reader = csv.reader(io.StringIO(text, newline=""), _sniff(text))
    header = [name.strip() for name in next(reader, [])]
    check_columns(len(header))
    return row_documents(_records(reader, header), pk_column, text_columns, shown)


def _sniff(text: str) -> type[csv.Dialect] | csv.Dialect:
    try:
        return csv.Sniffer().sniff(text[:65536], delimiters=",;\t|")
    except csv.Error:
        return csv.excel


def _records(reader: Iterator[list[str]], header: list[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, values in enumerate((v for v in reader if any(cell.strip() for cell in v)), start=1):
        if len(values) > len(header) and any(cell.strip() for cell in values[len(header) :]):
            raise ParseFailure(f"row {number} has more fields than the header")
        yield number, dict(zip(header, [*values, *[""] * (len(header) - len(values))], strict=False))

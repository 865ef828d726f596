"""What the CSV and JSONL parsers share: a record becomes one document, keyed by its primary key."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ragmcp.domain.errors import ParseFailure
from ragmcp.ingest.limits import Budget, char_budget, current, over
from ragmcp.ingest.parsed import Block, ParsedDocument
from ragmcp.ingest.parsers.blocks import MAX_TITLE, clean, one_line

Shown = Callable[[str], bool] | None
"""Whether a column may reach a row's text, title and metadata (the source's whitelist); None: all."""


def row_documents(
    records: Iterable[tuple[int, dict[str, Any]]], pk_column: str, text_columns: Sequence[str], shown: Shown
) -> list[ParsedDocument]:
    """One document per record, keyed by its primary key, its text from `_row_lines`; held to the
    file's limits on records, fields per record and characters."""
    documents = []
    seen: set[str] = set()
    rows = Budget("records", "PARSE_MAX_ROWS", current().max_rows)
    chars = char_budget()
    for number, record in records:
        rows.spend()
        check_columns(len(record))
        row = {k: v for k, v in record.items() if k == pk_column or shown is None or shown(k)}
        value = row.get(pk_column)
        if value is None or not str(value).strip():
            raise ParseFailure(one_line(f"primary-key column '{pk_column}' missing in row {number}"))
        pk = str(value)
        if pk in seen:
            raise ParseFailure(one_line(f"duplicate primary key '{pk}' in row {number}"))
        seen.add(pk)
        lines = _row_lines(row, text_columns)
        chars.spend(sum(map(len, lines)))
        title = next((_field_text(row[key]) for key in ("title", "name") if row.get(key)), pk)
        documents.append(
            ParsedDocument([Block("\n".join(lines))], title=one_line(title, MAX_TITLE), pk=pk, row=row)
        )
    if not documents:
        raise ParseFailure("no data rows")
    return documents


def check_columns(count: int) -> None:
    limit = current().max_columns
    if count > limit:
        raise over(f"a record of {count} fields", "PARSE_MAX_COLUMNS", limit)


def _row_lines(row: dict[str, Any], text_columns: Sequence[str]) -> list[str]:
    """The named columns' values alone, in order (prose fields such as title and abstract), or,
    with no columns named, a "key: value" line per non-empty field."""
    if text_columns:
        return [text for key in text_columns if (text := clean(_field_text(row.get(key))))]
    return [f"{clean(key)}: {text}" for key, item in row.items() if (text := clean(_field_text(item)))]


def _field_text(value: object) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

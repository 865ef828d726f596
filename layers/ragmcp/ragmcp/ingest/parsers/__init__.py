"""Turn an uploaded file's bytes into ParsedDocuments: text blocks that keep their provenance.

`parse` picks a parser from the file extension: one module per format (`pdf`, `docx`, `pptx`,
`xlsx`, `html`, `markdown`, `text`, `csv`, `jsonl`), each writing into the shared `blocks.Blocks`.
Documents become one ParsedDocument each; CSV and JSONL files become one per row.
Every failure, expected or not, surfaces as a ParseFailure carrying a one-line reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ragmcp.domain.errors import ParseFailure
from ragmcp.ingest.filetypes import SUPPORTED_TYPES, file_type
from ragmcp.ingest.limits import ParseLimits, using
from ragmcp.ingest.ocr import PageOcr
from ragmcp.ingest.parsed import ParsedDocument
from ragmcp.ingest.parsers import csv, docx, html, jsonl, markdown, pdf, pptx, text, xlsx
from ragmcp.ingest.parsers.blocks import binary_reason, one_line
from ragmcp.ingest.parsers.ooxml import check_package
from ragmcp.ingest.parsers.pdf import NO_TEXT_NO_OCR
from ragmcp.ingest.parsers.rows import Shown

__all__ = ["NO_TEXT", "NO_TEXT_NO_OCR", "SUPPORTED_TYPES", "file_type", "parse"]

NO_TEXT = "no extractable text"

_DOCUMENT_PARSERS: dict[str, Callable[[bytes], ParsedDocument]] = {
    "docx": docx.parse,
    "pptx": pptx.parse,
    "xlsx": xlsx.parse,
    "html": html.parse,
    "htm": html.parse,
    "md": markdown.parse,
    "markdown": markdown.parse,
    "txt": text.parse,
}
_TEXT_TYPES = frozenset({"html", "htm", "md", "markdown", "txt", "csv", "jsonl"})
_OOXML_TYPES = frozenset({"docx", "pptx", "xlsx"})
_ROW_PARSERS: dict[str, Callable[[bytes, str, Sequence[str], Shown], list[ParsedDocument]]] = {
    "csv": csv.parse,
    "jsonl": jsonl.parse,
}


def parse(
    data: bytes,
    file_name: str,
    *,
    pk_column: str = "id",
    text_columns: Sequence[str] = (),
    column_shown: Shown = None,
    ocr: PageOcr | None = None,
    limits: ParseLimits | None = None,
) -> list[ParsedDocument]:
    """Parse `data` according to the extension of `file_name`; PDF pages without a text layer
    are read by `ocr` when given.

    CSV and JSONL yield one document per row, keyed by `pk_column`, its text from
    `text_columns` (see `rows.row_documents`); every other type yields a single document. A row
    keeps only its primary key and the columns `column_shown` allows (the source's whitelist), so
    no other column reaches its text, title or metadata.
    Text formats holding binary content are refused; every format is held to `limits` (the
    defaults when None), see `ragmcp.ingest.limits`.
    Raises ParseFailure with a one-line reason on any problem.
    """
    if limits is None:
        return _parse(data, file_name, pk_column, text_columns, column_shown, ocr)
    with using(limits):
        return _parse(data, file_name, pk_column, text_columns, column_shown, ocr)


def _parse(
    data: bytes,
    file_name: str,
    pk_column: str,
    text_columns: Sequence[str],
    column_shown: Shown,
    ocr: PageOcr | None,
) -> list[ParsedDocument]:
    kind = file_type(file_name)
    if kind not in SUPPORTED_TYPES:
        shown = f".{kind}" if kind else "no extension"
        raise ParseFailure(f"unsupported file type: {shown}")
    if not data:
        raise ParseFailure("empty file")
    if kind in _TEXT_TYPES and (reason := binary_reason(data)):
        raise ParseFailure(reason)
    try:
        if kind in _OOXML_TYPES:
            check_package(data, count_tags=kind != "xlsx")
        if kind in _ROW_PARSERS:
            return _ROW_PARSERS[kind](data, pk_column, text_columns, column_shown)
        document = pdf.parse(data, ocr) if kind == "pdf" else _DOCUMENT_PARSERS[kind](data)
    except (ParseFailure, MemoryError):
        raise
    except Exception as exc:  # a library failing on a bad file must not escape as itself
        reason = str(exc) or type(exc).__name__
        raise ParseFailure(one_line(f"corrupt or unreadable {kind}: {reason}")) from exc
    if not document.blocks:
        raise ParseFailure(NO_TEXT)
    return [document]

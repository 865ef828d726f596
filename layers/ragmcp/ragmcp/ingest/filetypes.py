"""Which files ragmcp reads, by extension. Light on purpose: the parsers' libraries load only
when a file is parsed, which keeps them off the MCP function's cold start."""

from __future__ import annotations

from pathlib import PurePosixPath

SUPPORTED_TYPES: frozenset[str] = frozenset(
    {"pdf", "docx", "pptx", "xlsx", "html", "htm", "md", "markdown", "txt", "csv", "jsonl"}
)


def file_type(file_name: str) -> str:
    """The lower-case extension of `file_name` without the dot ("pdf"), or "" if it has none."""
    return PurePosixPath(file_name.replace("\\", "/")).suffix.lstrip(".").lower()

PARSER_VERSIONS: dict[str, int] = {
    "pdf": 6, "md": 6, "markdown": 6, "docx": 5, "pptx": 5, "xlsx": 5, "html": 5, "htm": 5,
}
"""The version of each type's reading (parser and chunk layout), 2 where not named here. A file
indexed by an older version is read again, chunked and embedded again by the next sync even though
its bytes did not change. 2 (every type): chunks open with their heading path, table rows name
their cells by their columns (an HTML form's field by its label), PDF running headers and footers
are left out. pdf 2: PDFium text
layers (font encodings mapped) and OCR of pages without one, instead of pypdf. md/markdown 2:
CommonMark by markdown-it-py (code spans, entities, raw HTML and block quotes read right) instead
of patterns. docx, pptx, xlsx, html, htm 3 and md/markdown 4: a table's caption line (a chart's
title) is in its rows' heading path, and their chunk ends with the table. pdf 4: ruled tables
(found by pdfplumber) read as rows that name their cells by the header, in their place on the
page, under their caption, as the other formats' tables do. pdf 5: table of contents lines lose
their dot leaders and page numbers (one paragraph of entries, never a heading). docx, pptx,
xlsx, html, htm 4 and md/markdown 5: a heading of any level (not only the first two) starts a
chunk, so a chunk's heading path names the section of all its text (a table's caption below the
second level still continues its chunk). pdf 6, html, htm 5 and md/markdown 6: a code block that
fits a chunk is kept whole, with the paragraph that introduces it; PDF code (lines in a fixed-pitch
font) is one block that keeps its lines, and a PDF line set apart by its font (larger, bold or
italic) and followed by body text is a heading; an HTML figure's caption is read at the end of
its section, not at its start. docx, pptx, xlsx 5 (and the versions above): a chunk's heading path
line counts in its token budget when passages are packed into it, so the embedding model's window
holds the chunk; DOCX
paragraphs in a row in a fixed-pitch font or a code style are one code block."""


def parser_version(kind: str) -> int:
    return PARSER_VERSIONS.get(kind, 2)

"""DOCX: paragraphs and tables in document order, heading levels from styles, Word's list numbers;
paragraphs in a row set in a fixed-pitch font or a code style are one code block."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from typing import Any

import docx
from docx.document import Document as DocxDocument
from docx.oxml.ns import qn
from docx.styles.style import BaseStyle
from docx.table import Table, _Cell
from docx.text.paragraph import Paragraph

from ragmcp.ingest.parsed import ParsedDocument
from ragmcp.ingest.parsers.blocks import Blocks, to_int
from ragmcp.ingest.parsers.ooxml import format_number, xpath

_HEADING_STYLE = re.compile(r"heading ([1-9])", re.IGNORECASE)
_CODE_FONT = re.compile(r"courier|consolas|menlo|monaco|lucida console|mono|source code", re.IGNORECASE)
_CODE_STYLE = re.compile(r"code|preformatted|macro|source", re.IGNORECASE)
_STYLE_CHAIN_LIMIT = 16  # "based on" links followed, so a cyclic chain cannot loop forever


def parse(data: bytes) -> ParsedDocument:
    document = docx.Document(io.BytesIO(data))
    numbering = _Numbering(document)
    out = Blocks()
    code: list[str] = []
    for element in _body(document.element.body):
        paragraph = Paragraph(element, document) if element.tag == qn("w:p") else None
        if paragraph is not None and paragraph.text.strip() and _is_code(paragraph):
            code.append(paragraph.text)
            continue
        if code:
            out.add("\n".join(code), "code")
            code = []
        if paragraph is None:
            out.table(_rows(element, Table(element, document)))
        else:
            _paragraph(element, paragraph, numbering, out)
    if code:
        out.add("\n".join(code), "code")
    return out.document(document.core_properties.title)


def _is_code(paragraph: Paragraph) -> bool:
    """A paragraph in a code style ("HTML Preformatted", "Source Code") or whose every run with text
    is set in a fixed-pitch font (its own, else its style's)."""
    styles = []
    style = paragraph.style
    while style is not None and len(styles) < _STYLE_CHAIN_LIMIT:
        styles.append(style)
        style = style.base_style
    if any(_CODE_STYLE.search(s.name or "") for s in styles if s.name not in (None, "Normal")):
        return True
    inherited = next((s.font.name for s in styles if s.font.name), None)
    fonts = [run.font.name or inherited for run in paragraph.runs if run.text.strip()]
    return bool(fonts) and all(font is not None and _CODE_FONT.search(font) for font in fonts)


def _body(container: Any) -> Iterator[Any]:
    """Paragraph and table elements in document order, looking inside content controls."""
    for child in container:
        if child.tag in (qn("w:p"), qn("w:tbl")):
            yield child
        elif child.tag == qn("w:sdt"):
            content = child.find(qn("w:sdtContent"))
            if content is not None:
                yield from _body(content)


def _paragraph(element: Any, paragraph: Paragraph, numbering: _Numbering, out: Blocks) -> None:
    label = numbering.label(element, paragraph.style)
    if not paragraph.text.strip():
        return
    text = f"{label} {paragraph.text}" if label else paragraph.text
    level = _heading_level(paragraph.style)
    out.add(text, "heading" if level else "text", level=level)


def _heading_level(style: BaseStyle | None) -> int:
    """1-9 for "Heading N" styles, 1 for "Title", 0 for anything else."""
    name = style.name if style is not None and style.name else ""
    if name == "Title":
        return 1
    match = _HEADING_STYLE.fullmatch(name)
    return int(match.group(1)) if match else 0


def _rows(element: Any, table: Table) -> list[list[str]]:
    """Cell texts per row on the layout grid (see `Blocks.table` for merged cells)."""
    rows: list[list[str]] = []
    for tr in xpath(element, "w:tr"):
        cells = [""] * to_int(xpath(tr, "string(w:trPr/w:gridBefore/@w:val)"), 0)
        for tc in xpath(tr, "w:tc"):
            merge = xpath(tc, "w:tcPr/w:vMerge")
            continued = bool(merge) and merge[0].get(qn("w:val"), "continue") == "continue"
            above = rows[-1][len(cells)] if continued and rows and len(rows[-1]) > len(cells) else ""
            cells.append(above if continued else _Cell(tc, table).text)
            cells.extend([""] * (to_int(xpath(tc, "string(w:tcPr/w:gridSpan/@w:val)"), 1) - 1))
        rows.append(cells)
    return rows


class _Numbering:
    """Word's automatic paragraph numbers ("1.2.", "a)"), counted the way Word displays them."""

    def __init__(self, document: DocxDocument) -> None:
        self._levels: dict[str, dict[int, tuple[int, str, str]]] = {}
        self._counters: dict[str, dict[int, int]] = {}
        try:
            root = document.part.numbering_part.element
        except (KeyError, NotImplementedError):
            return
        abstract = {a.get(qn("w:abstractNumId")): _numbering_levels(a) for a in xpath(root, "w:abstractNum")}
        for num in xpath(root, "w:num"):
            levels = dict(abstract.get(xpath(num, "string(w:abstractNumId/@w:val)"), {}))
            for override in xpath(num, "w:lvlOverride[w:startOverride]"):
                level = to_int(override.get(qn("w:ilvl")), 0)
                if level in levels:
                    start = to_int(xpath(override, "string(w:startOverride/@w:val)"), 0)
                    levels[level] = (start, *levels[level][1:])
            self._levels[num.get(qn("w:numId"), "")] = levels

    def label(self, element: Any, style: BaseStyle | None) -> str:
        """Advance the paragraph's list counter and return its visible number ("" for bullets)."""
        num_id, level = _numbering_reference(element, style)
        levels = self._levels.get(num_id, {})
        if level not in levels:
            return ""
        counters = self._counters.setdefault(num_id, {})
        counters[level] = counters.get(level, levels[level][0] - 1) + 1
        for deeper in [key for key in counters if key > level]:
            del counters[deeper]
        _, number_format, template = levels[level]
        if number_format in ("bullet", "none"):
            return ""
        return re.sub(r"%([1-9])", lambda m: self._number(num_id, int(m.group(1)) - 1), template)

    def _number(self, num_id: str, level: int) -> str:
        start, number_format, _ = self._levels[num_id].get(level, (1, "decimal", ""))
        return format_number(self._counters[num_id].get(level, start), number_format)


def _numbering_levels(abstract: Any) -> dict[int, tuple[int, str, str]]:
    return {
        to_int(lvl.get(qn("w:ilvl")), 0): (
            to_int(xpath(lvl, "string(w:start/@w:val)"), 0),
            xpath(lvl, "string(w:numFmt/@w:val)") or "decimal",
            xpath(lvl, "string(w:lvlText/@w:val)"),
        )
        for lvl in xpath(abstract, "w:lvl")
    }


def _numbering_reference(element: Any, style: BaseStyle | None) -> tuple[str, int]:
    """(numId, level) from the paragraph's own properties, else from its style chain."""
    sources = [element]
    while style is not None and len(sources) <= _STYLE_CHAIN_LIMIT:
        sources.append(style.element)
        style = style.base_style
    num_id = level = ""
    for source in sources:
        num_id = num_id or xpath(source, "string(w:pPr/w:numPr/w:numId/@w:val)")
        level = level or xpath(source, "string(w:pPr/w:numPr/w:ilvl/@w:val)")
    return num_id, to_int(level, 0)

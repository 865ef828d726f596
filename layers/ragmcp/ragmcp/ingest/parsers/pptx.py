"""PPTX: slide by slide, the title as a heading, then every shape in order, then the speaker notes."""

from __future__ import annotations

import io
import re
from typing import Any

from pptx import Presentation
from pptx.shapes.base import BaseShape
from pptx.shapes.group import GroupShape
from pptx.slide import Slide
from pptx.table import Table

from ragmcp.ingest.parsed import ParsedDocument
from ragmcp.ingest.parsers.blocks import Blocks, to_int
from ragmcp.ingest.parsers.charts import chart_blocks
from ragmcp.ingest.parsers.ooxml import format_number, xpath

_AUTONUMBER = re.compile(r"(arabic|alphaLc|alphaUc|romanLc|romanUc)(ParenBoth|ParenR|Period|Plain)")
_AUTONUMBER_FORMATS = {
    "arabic": "decimal",
    "alphaLc": "lowerLetter",
    "alphaUc": "upperLetter",
    "romanLc": "lowerRoman",
    "romanUc": "upperRoman",
}
_AUTONUMBER_WRAP = {"ParenBoth": "({})", "ParenR": "{})", "Period": "{}.", "Plain": "{}"}


def parse(data: bytes) -> ParsedDocument:
    presentation = Presentation(io.BytesIO(data))
    out = Blocks()
    slides = list(presentation.slides)
    for number, slide in enumerate(slides, start=1):
        out.page, out.heading = number, None
        _slide(slide, out)
    return out.document(presentation.core_properties.title, pages=len(slides), page_unit="slide")


def _slide(slide: Slide, out: Blocks) -> None:
    """Title first, then every shape in order, then the speaker notes."""
    title = slide.shapes.title
    if title is not None:
        out.add(title.text_frame.text, "heading", level=1)
    for shape in slide.shapes:
        if title is None or shape.shape_id != title.shape_id:
            _shape(shape, out)
    if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
        for paragraph in slide.notes_slide.notes_text_frame.paragraphs:
            out.add(paragraph.text)


def _shape(shape: BaseShape, out: Blocks) -> None:
    if isinstance(shape, GroupShape):
        for child in shape.shapes:
            _shape(child, out)
    elif shape.has_table:
        out.table(_rows(shape.table))
    elif shape.has_chart:
        chart_blocks(shape.chart.element, out)
    elif shape.has_text_frame:
        _text(shape, out)


def _text(shape: Any, out: Blocks) -> None:
    """One block per paragraph, auto-numbered paragraphs prefixed with the number shown."""
    counters: dict[int, int] = {}
    for element, paragraph in zip(xpath(shape.element, "p:txBody/a:p"), shape.text_frame.paragraphs, strict=True):
        label = _autonumber(element, paragraph.level, counters)
        out.add(f"{label} {paragraph.text}" if label else paragraph.text)


def _autonumber(paragraph: Any, level: int, counters: dict[int, int]) -> str:
    """Advance the list counter of `level` and render it ("3.", "b)"); "" if not auto-numbered."""
    for deeper in [key for key in counters if key > level]:
        del counters[deeper]
    scheme = xpath(paragraph, "a:pPr/a:buAutoNum")
    if not scheme:
        counters.pop(level, None)
        return ""
    counters[level] = counters.get(level, to_int(scheme[0].get("startAt"), 1) - 1) + 1
    match = _AUTONUMBER.match(scheme[0].get("type", ""))
    style, wrap = (match.group(1), match.group(2)) if match else ("arabic", "Period")
    return _AUTONUMBER_WRAP[wrap].format(format_number(counters[level], _AUTONUMBER_FORMATS[style]))


def _rows(table: Table) -> list[list[str]]:
    """Cell texts on the table grid (see `Blocks.table` for merged cells)."""
    rows = [["" for _ in table.columns] for _ in table.rows]
    for r, row in enumerate(table.rows):
        for c, cell in enumerate(row.cells):
            if cell.is_merge_origin:
                for covered in rows[r : r + cell.span_height]:
                    covered[c] = cell.text
            elif not cell.is_spanned:
                rows[r][c] = cell.text
    return rows

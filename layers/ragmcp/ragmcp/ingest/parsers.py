"""Turn an uploaded file's bytes into ParsedDocuments: text blocks that keep their provenance.

`parse` picks a parser from the file extension. Documents (PDF, DOCX, PPTX, XLSX, HTML,
Markdown, text) become one ParsedDocument each; CSV and JSONL files become one per row.
Every failure, expected or not, surfaces as a ParseFailure carrying a one-line reason.
"""

from __future__ import annotations

import codecs
import csv
import functools
import io
import json
import posixpath
import re
import unicodedata
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time
from typing import Any

import docx
import openpyxl
import pypdfium2 as pdfium
from bs4 import BeautifulSoup, NavigableString, Tag
from docx.document import Document as DocxDocument
from docx.oxml.ns import qn
from docx.styles.style import BaseStyle
from docx.table import Table, _Cell
from docx.text.paragraph import Paragraph
from lxml import etree
from pptx import Presentation
from pptx.shapes.base import BaseShape
from pptx.shapes.group import GroupShape
from pptx.slide import Slide
from pptx.table import Table as PptxTable

from ragmcp.domain.errors import ParseFailure
from ragmcp.ingest.filetypes import SUPPORTED_TYPES, file_type
from ragmcp.ingest.ocr import PageOcr
from ragmcp.ingest.parsed import Block, BlockKind, ParsedDocument

NO_TEXT = "no extractable text"
NO_TEXT_NO_OCR = "no extractable text (scanned or image-only document; OCR is turned off)"
_MAX_REASON = 200
_MAX_TITLE = 200


def parse(
    data: bytes,
    file_name: str,
    *,
    pk_column: str = "id",
    text_columns: Sequence[str] = (),
    ocr: PageOcr | None = None,
) -> list[ParsedDocument]:
    """Parse `data` according to the extension of `file_name`; PDF pages without a text layer
    are read by `ocr` when given.

    CSV and JSONL yield one document per row, keyed by `pk_column`, its text from
    `text_columns` (see `_row_lines`); every other type yields a single document.
    Raises ParseFailure with a one-line reason on any problem.
    """
    kind = file_type(file_name)
    if kind not in SUPPORTED_TYPES:
        shown = f".{kind}" if kind else "no extension"
        raise ParseFailure(f"unsupported file type: {shown}")
    if not data:
        raise ParseFailure("empty file")
    try:
        if kind in _ROW_PARSERS:
            return _ROW_PARSERS[kind](data, pk_column, text_columns)
        document = _parse_pdf(data, ocr) if kind == "pdf" else _DOCUMENT_PARSERS[kind](data)
    except ParseFailure:
        raise
    except Exception as exc:  # a library failing on a bad file must not escape as itself
        reason = str(exc) or type(exc).__name__
        raise ParseFailure(_one_line(f"corrupt or unreadable {kind}: {reason}")) from exc
    if not document.blocks:
        raise ParseFailure(NO_TEXT)
    return [document]


# ---------------------------------------------------------------- text helpers

_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
_CONTROL = re.compile(r"[\x01-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_INVISIBLE = re.compile(r"[\x00\u00ad\u200b\u2060\ufeff]")


def _clean(text: str) -> str:
    """One paragraph: drop invisible characters and collapse every whitespace run to a space."""
    return " ".join(_CONTROL.sub(" ", _INVISIBLE.sub("", text)).split())


def _clean_code(text: str) -> str:
    """Code keeps its lines and indentation; only trailing spaces and blank edges go."""
    lines = _CONTROL.sub(" ", _INVISIBLE.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))).split("\n")
    return "\n".join(line.rstrip() for line in lines).strip("\n")


_OOXML_NAMESPACES = {
    "w": "http://schemas.openxmlformats.org/wordprocessingml/2006/main",
    "a": "http://schemas.openxmlformats.org/drawingml/2006/main",
    "c": "http://schemas.openxmlformats.org/drawingml/2006/chart",
    "p": "http://schemas.openxmlformats.org/presentationml/2006/main",
}


@functools.cache
def _compiled_xpath(path: str) -> etree.XPath:
    return etree.XPath(path, namespaces=_OOXML_NAMESPACES)


def _xpath(element: Any, path: str) -> Any:
    """Evaluate an XPath on an Office Open XML element with the usual w, a, c and p prefixes."""
    return _compiled_xpath(path)(element)


def _one_line(text: str, limit: int = _MAX_REASON) -> str:
    text = _clean(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _decode(data: bytes) -> str:
    """Decode text: a byte-order mark wins, then UTF-8, then Latin-1 (which accepts any byte)."""
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return data.decode(codec, errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def _to_int(text: str | None, default: int) -> int:
    try:
        return int(text) if text else default
    except ValueError:
        return default


def _row_text(cells: Sequence[str]) -> str:
    """A Markdown-style table row: "| a | b |"."""
    return _clean("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")


def _trim_table(rows: Iterable[Sequence[str]]) -> list[list[str]]:
    """Clean cells, pad rows to one width and drop rows and columns that are entirely empty."""
    cleaned = [[_clean(cell) for cell in row] for row in rows]
    cleaned = [row for row in cleaned if any(row)]
    width = max((len(row) for row in cleaned), default=0)
    padded = [row + [""] * (width - len(row)) for row in cleaned]
    keep = [col for col in range(width) if any(row[col] for row in padded)]
    return [[row[col] for col in keep] for row in padded]


def _default_title(blocks: Sequence[Block]) -> str | None:
    """The first heading, else the first line of the first block."""
    first = next((b for b in blocks if b.kind == "heading"), blocks[0] if blocks else None)
    return first.text.split("\n", 1)[0] if first else None


def _title(declared: object, fallback: str | None) -> str | None:
    """The title the file declares, else `fallback`; one line of at most 200 characters."""
    title = _one_line(str(declared or ""), _MAX_TITLE) or _one_line(fallback or "", _MAX_TITLE)
    return title or None


@dataclass
class _Blocks:
    """Collects blocks, stamping each with the current page and the nearest heading above it."""

    page: int | None = None
    heading: str | None = None
    items: list[Block] = field(default_factory=list)

    def add(self, text: str, kind: BlockKind = "text", *, level: int = 0, header: str | None = None) -> None:
        text = _clean_code(text) if kind == "code" else _clean(text)
        if not text:
            return
        if kind == "heading":
            self.heading = text
        self.items.append(Block(text, kind, self.page, self.heading, level, header))

    def table(self, rows: Iterable[Sequence[str]], *, has_header: bool = True) -> None:
        """Add a table row by row; rows after the header carry it. A lone cell is plain text.

        Parsers render a merged cell once per row: a horizontal span leaves the spanned
        columns empty, a vertical span repeats the value in each row it covers, so that
        every row block stands on its own.
        """
        trimmed = _trim_table(rows)
        if len(trimmed) == 1 and len(trimmed[0]) == 1:
            self.add(trimmed[0][0])
            return
        header = _row_text(trimmed[0]) if trimmed and has_header else None
        for index, row in enumerate(trimmed):
            self.add(_row_text(row), "table_row", header=header if index else None)


# ---------------------------------------------------------------- PDF

_WORD_CHAR = re.compile(r"[^\W_]")
_PDFIUM_LINE_HYPHEN = "\x02"
"""PDFium's mark of a hyphen that ended a line (the line break itself dropped): put both back, so
paragraphs rebuild as from any other line break."""
_HYPHEN_BREAK = re.compile(r"(?<=[^\W\d_])-\n(?=[a-z])")
_LIST_MARK = re.compile(r"(?:[•◦▪▫●○■□‣⁃∙·*–—-]|\(?\d{1,3}[.)]|\(?[a-z][.)])\s")
_SHORT_LINE = 0.7
_LIGATURES = {code: unicodedata.normalize("NFKC", chr(code)) for code in range(0xFB00, 0xFB07)}  # ﬁ -> fi


def _parse_pdf(data: bytes, ocr: PageOcr | None) -> ParsedDocument:
    """Each page's text layer as PDFium reads it (font encodings and ToUnicode maps applied, in
    content order); a page without one but with images is read by `ocr`, or skipped without it."""
    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        if "password" in str(exc).lower():
            raise ParseFailure("encrypted PDF") from None
        raise
    texts: list[str] = []
    scanned: list[int] = []
    try:
        for number in range(1, len(pdf) + 1):
            page = pdf[number - 1]
            text, needs_ocr = _pdf_page_text(page)
            if needs_ocr:
                scanned.append(number)
                text = ocr.read(page) if ocr is not None else ""
            texts.append(text)
        declared = pdf.get_metadata_dict(skip_empty=True).get("Title")
    finally:
        pdf.close()
    out = _Blocks()
    for number, text in enumerate(texts, start=1):
        out.page = number
        for paragraph in _pdf_paragraphs(text):
            if _WORD_CHAR.search(paragraph):  # not a run of glyphs no font maps to text
                out.add(paragraph)
    if not out.items and scanned and ocr is None:
        raise ParseFailure(NO_TEXT_NO_OCR)
    first_line = next((line for text in texts for line in map(_clean, text.splitlines()) if line), None)
    return ParsedDocument(
        out.items,
        title=_title(declared, first_line),
        pages=len(texts),
        page_unit="page",
        ocr_pages=tuple(scanned) if ocr is not None else (),
    )


def _pdf_page_text(page: pdfium.PdfPage) -> tuple[str, bool]:
    """The page's text layer, and whether the page needs OCR: no word in its text but an image."""
    textpage = page.get_textpage()
    try:
        text = textpage.get_text_bounded()
    finally:
        textpage.close()
    text = text.replace(_PDFIUM_LINE_HYPHEN, "-\n")
    if _WORD_CHAR.search(text):
        return text, False
    images = page.get_objects(filter=(pdfium.raw.FPDF_PAGEOBJ_IMAGE,), max_depth=2)
    return text, next(images, None) is not None


def _pdf_paragraphs(text: str) -> Iterator[str]:
    """Rebuild paragraphs from extracted lines.

    A blank line, a list marker or a line clearly shorter than the page's typical line
    width ends a paragraph; a word hyphenated across two lines is joined again.
    """
    lines = [_clean(line) for line in text.translate(_LIGATURES).splitlines()]
    lengths = sorted(len(line) for line in lines if line)
    if not lengths:
        return
    typical = lengths[(len(lengths) - 1) * 4 // 5]
    current: list[str] = []
    for line in lines:
        if current and (not line or _LIST_MARK.match(line)):
            yield _join_lines(current)
            current = []
        if not line:
            continue
        current.append(line)
        if len(line) < _SHORT_LINE * typical:
            yield _join_lines(current)
            current = []
    if current:
        yield _join_lines(current)


def _join_lines(lines: list[str]) -> str:
    return _HYPHEN_BREAK.sub("", "\n".join(lines)).replace("\n", " ")


# ---------------------------------------------------------------- DOCX

_HEADING_STYLE = re.compile(r"heading ([1-9])", re.IGNORECASE)
_STYLE_CHAIN_LIMIT = 16  # "based on" links followed, so a cyclic chain cannot loop forever


def _parse_docx(data: bytes) -> ParsedDocument:
    document = docx.Document(io.BytesIO(data))
    numbering = _Numbering(document)
    out = _Blocks()
    for element in _docx_body(document.element.body):
        if element.tag == qn("w:tbl"):
            out.table(_docx_rows(element, Table(element, document)))
        else:
            _docx_paragraph(element, Paragraph(element, document), numbering, out)
    return ParsedDocument(out.items, title=_title(document.core_properties.title, _default_title(out.items)))


def _docx_body(container: Any) -> Iterator[Any]:
    """Paragraph and table elements in document order, looking inside content controls."""
    for child in container:
        if child.tag in (qn("w:p"), qn("w:tbl")):
            yield child
        elif child.tag == qn("w:sdt"):
            content = child.find(qn("w:sdtContent"))
            if content is not None:
                yield from _docx_body(content)


def _docx_paragraph(element: Any, paragraph: Paragraph, numbering: _Numbering, out: _Blocks) -> None:
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


def _docx_rows(element: Any, table: Table) -> list[list[str]]:
    """Cell texts per row on the layout grid (see `_Blocks.table` for merged cells)."""
    rows: list[list[str]] = []
    for tr in _xpath(element, "w:tr"):
        cells = [""] * _to_int(_xpath(tr, "string(w:trPr/w:gridBefore/@w:val)"), 0)
        for tc in _xpath(tr, "w:tc"):
            merge = _xpath(tc, "w:tcPr/w:vMerge")
            continued = bool(merge) and merge[0].get(qn("w:val"), "continue") == "continue"
            above = rows[-1][len(cells)] if continued and rows and len(rows[-1]) > len(cells) else ""
            cells.append(above if continued else _Cell(tc, table).text)
            cells.extend([""] * (_to_int(_xpath(tc, "string(w:tcPr/w:gridSpan/@w:val)"), 1) - 1))
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
        abstract = {a.get(qn("w:abstractNumId")): _numbering_levels(a) for a in _xpath(root, "w:abstractNum")}
        for num in _xpath(root, "w:num"):
            levels = dict(abstract.get(_xpath(num, "string(w:abstractNumId/@w:val)"), {}))
            for override in _xpath(num, "w:lvlOverride[w:startOverride]"):
                level = _to_int(override.get(qn("w:ilvl")), 0)
                if level in levels:
                    start = _to_int(_xpath(override, "string(w:startOverride/@w:val)"), 0)
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
        return _format_number(self._counters[num_id].get(level, start), number_format)


def _numbering_levels(abstract: Any) -> dict[int, tuple[int, str, str]]:
    return {
        _to_int(lvl.get(qn("w:ilvl")), 0): (
            _to_int(_xpath(lvl, "string(w:start/@w:val)"), 0),
            _xpath(lvl, "string(w:numFmt/@w:val)") or "decimal",
            _xpath(lvl, "string(w:lvlText/@w:val)"),
        )
        for lvl in _xpath(abstract, "w:lvl")
    }


def _numbering_reference(element: Any, style: BaseStyle | None) -> tuple[str, int]:
    """(numId, level) from the paragraph's own properties, else from its style chain."""
    sources = [element]
    while style is not None and len(sources) <= _STYLE_CHAIN_LIMIT:
        sources.append(style.element)
        style = style.base_style
    num_id = level = ""
    for source in sources:
        num_id = num_id or _xpath(source, "string(w:pPr/w:numPr/w:numId/@w:val)")
        level = level or _xpath(source, "string(w:pPr/w:numPr/w:ilvl/@w:val)")
    return num_id, _to_int(level, 0)


def _format_number(value: int, number_format: str) -> str:
    if value < 1:
        return str(value)
    if number_format in ("lowerLetter", "upperLetter"):
        letters = chr(ord("a") + (value - 1) % 26) * ((value - 1) // 26 + 1)
        return letters.upper() if number_format == "upperLetter" else letters
    if number_format in ("lowerRoman", "upperRoman"):
        roman = _roman(value)
        return roman.lower() if number_format == "lowerRoman" else roman
    return str(value)


def _roman(value: int) -> str:
    numerals = ((1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
                (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"))
    result = []
    for amount, numeral in numerals:
        count, value = divmod(value, amount)
        result.append(numeral * count)
    return "".join(result)


# ---------------------------------------------------------------- PPTX


def _parse_pptx(data: bytes) -> ParsedDocument:
    presentation = Presentation(io.BytesIO(data))
    out = _Blocks()
    slides = list(presentation.slides)
    for number, slide in enumerate(slides, start=1):
        out.page, out.heading = number, None
        _pptx_slide(slide, out)
    return ParsedDocument(
        out.items,
        title=_title(presentation.core_properties.title, _default_title(out.items)),
        pages=len(slides),
        page_unit="slide",
    )


def _pptx_slide(slide: Slide, out: _Blocks) -> None:
    """Title first, then every shape in order, then the speaker notes."""
    title = slide.shapes.title
    if title is not None:
        out.add(title.text_frame.text, "heading", level=1)
    for shape in slide.shapes:
        if title is None or shape.shape_id != title.shape_id:
            _pptx_shape(shape, out)
    if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
        for paragraph in slide.notes_slide.notes_text_frame.paragraphs:
            out.add(paragraph.text)


def _pptx_shape(shape: BaseShape, out: _Blocks) -> None:
    if isinstance(shape, GroupShape):
        for child in shape.shapes:
            _pptx_shape(child, out)
    elif shape.has_table:
        out.table(_pptx_rows(shape.table))
    elif shape.has_chart:
        _chart_blocks(shape.chart.element, out)
    elif shape.has_text_frame:
        _pptx_text(shape, out)


def _pptx_text(shape: Any, out: _Blocks) -> None:
    """One block per paragraph, auto-numbered paragraphs prefixed with the number shown."""
    counters: dict[int, int] = {}
    for element, paragraph in zip(_xpath(shape.element, "p:txBody/a:p"), shape.text_frame.paragraphs, strict=True):
        label = _autonumber(element, paragraph.level, counters)
        out.add(f"{label} {paragraph.text}" if label else paragraph.text)


def _autonumber(paragraph: Any, level: int, counters: dict[int, int]) -> str:
    """Advance the list counter of `level` and render it ("3.", "b)"); "" if not auto-numbered."""
    for deeper in [key for key in counters if key > level]:
        del counters[deeper]
    scheme = _xpath(paragraph, "a:pPr/a:buAutoNum")
    if not scheme:
        counters.pop(level, None)
        return ""
    counters[level] = counters.get(level, _to_int(scheme[0].get("startAt"), 1) - 1) + 1
    match = _AUTONUMBER.match(scheme[0].get("type", ""))
    style, wrap = (match.group(1), match.group(2)) if match else ("arabic", "Period")
    return _AUTONUMBER_WRAP[wrap].format(_format_number(counters[level], _AUTONUMBER_FORMATS[style]))


def _pptx_rows(table: PptxTable) -> list[list[str]]:
    """Cell texts on the table grid (see `_Blocks.table` for merged cells)."""
    rows = [["" for _ in table.columns] for _ in table.rows]
    for r, row in enumerate(table.rows):
        for c, cell in enumerate(row.cells):
            if cell.is_merge_origin:
                for covered in rows[r : r + cell.span_height]:
                    covered[c] = cell.text
            elif not cell.is_spanned:
                rows[r][c] = cell.text
    return rows


_AUTONUMBER = re.compile(r"(arabic|alphaLc|alphaUc|romanLc|romanUc)(ParenBoth|ParenR|Period|Plain)")
_AUTONUMBER_FORMATS = {
    "arabic": "decimal",
    "alphaLc": "lowerLetter",
    "alphaUc": "upperLetter",
    "romanLc": "lowerRoman",
    "romanUc": "upperRoman",
}
_AUTONUMBER_WRAP = {"ParenBoth": "({})", "ParenR": "{})", "Period": "{}.", "Plain": "{}"}


# ---------------------------------------------------------------- DrawingML charts (PPTX and XLSX)


def _chart_blocks(chart_space: Any, out: _Blocks) -> None:
    """A caption (title and chart type), then the cached data: a row per category, a column per series."""
    plots = _xpath(chart_space, "c:chart/c:plotArea/*[c:ser]")
    kinds = " and ".join(dict.fromkeys(_chart_kind(plot) for plot in plots))
    caption = f"{kinds} chart" if kinds else ""
    title = _clean(" ".join(_xpath(chart_space, "c:chart/c:title//a:t/text()")))
    out.add(f"{title} ({caption})" if title and caption else title or caption.capitalize())
    for plot in plots:
        series = _xpath(plot, "c:ser")
        names = [_xpath(one, "string(c:tx//c:v)") for one in series]
        values = [_chart_points(one, "c:val|c:yVal", _number_text) for one in series]
        categories = _chart_points(series[0], "c:cat|c:xVal", str)
        indexes = sorted(set(categories).union(*values))
        rows = [[categories.get(i, ""), *(v.get(i, "") for v in values)] for i in indexes]
        out.table([["", *names], *rows])


def _chart_kind(plot: Any) -> str:
    """"bar 3d" for a <c:bar3DChart>, "line" for a <c:lineChart>."""
    name = etree.QName(plot).localname.removesuffix("Chart")
    return re.sub(r"(?<=[a-z])(?=[A-Z0-9])", " ", name).lower()


def _chart_points(series: Any, path: str, render: Callable[[str], str]) -> dict[int, str]:
    """Point index -> cached value of a series' categories or values."""
    points = _xpath(series, f"({path})//c:pt")
    return {_to_int(pt.get("idx"), 0): render(_xpath(pt, "string(c:v)")) for pt in points}


def _number_text(text: str) -> str:
    try:
        return _cell_text(float(text))
    except ValueError:
        return text


# ---------------------------------------------------------------- XLSX


def _parse_xlsx(data: bytes) -> ParsedDocument:
    workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=False, data_only=True)
    charts = _xlsx_charts(data)
    out = _Blocks()
    for number, sheet in enumerate(workbook.worksheets, start=1):
        out.page, out.heading = number, None
        regions = _sheet_regions(sheet)
        if regions or charts.get(sheet.title):
            out.add(sheet.title, "heading", level=1)
        for region in regions:
            out.table(region)
        for chart in charts.get(sheet.title, []):
            _chart_blocks(chart, out)
    return ParsedDocument(
        out.items,
        title=_title(workbook.properties.title, _default_title(out.items)),
        pages=len(workbook.worksheets),
        page_unit="sheet",
    )


def _sheet_regions(sheet: Any) -> list[list[list[str]]]:
    """Each contiguous block of non-empty (or merged) cells as a grid of cell texts, top to bottom.

    A merged range's value is repeated down its rows (see `_Blocks.table`).
    """
    values = {
        (row, col): text
        for row, cells in enumerate(sheet.iter_rows(values_only=True), start=1)
        for col, value in enumerate(cells, start=1)
        if (text := _cell_text(value).strip())
    }
    occupied = set(values)
    for merged in sheet.merged_cells.ranges:
        text = values.get((merged.min_row, merged.min_col))
        if text:
            occupied.update(merged.cells)
            below = range(merged.min_row + 1, merged.max_row + 1)
            values.update(((row, merged.min_col), text) for row in below)
    grids = []
    for region in sorted(_connected(occupied), key=min):
        rows = range(min(r for r, _ in region), max(r for r, _ in region) + 1)
        cols = range(min(c for _, c in region), max(c for _, c in region) + 1)
        grids.append([[values.get((r, c), "") if (r, c) in region else "" for c in cols] for r in rows])
    return grids


def _connected(cells: set[tuple[int, int]]) -> list[set[tuple[int, int]]]:
    """Group cells that touch, diagonals included."""
    remaining = set(cells)
    regions = []
    while remaining:
        stack = [remaining.pop()]
        region = set(stack)
        while stack:
            row, col = stack.pop()
            for neighbour in ((row + dr, col + dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1)):
                if neighbour in remaining:
                    remaining.remove(neighbour)
                    region.add(neighbour)
                    stack.append(neighbour)
        regions.append(region)
    return regions


def _xlsx_charts(data: bytes) -> dict[str, list[Any]]:
    """Chart XML per sheet name, found through the workbook -> sheet -> drawing -> chart relationships."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        package = _Package(archive)
        workbook = package.first_related("", "officeDocument")
        if workbook is None:
            return {}
        sheet_parts = package.related(workbook)
        charts: dict[str, list[Any]] = {}
        for sheet in package.xml(workbook).iter(f"{{{_SPREADSHEET_NS}}}sheet"):
            _, sheet_part = sheet_parts.get(sheet.get(f"{{{_OFFICE_RELATIONSHIPS_NS}}}id", ""), ("", ""))
            drawings = [target for kind, target in package.related(sheet_part).values() if kind == "drawing"]
            charts[sheet.get("name", "")] = [
                package.xml(target)
                for drawing in drawings
                for kind, target in package.related(drawing).values()
                if kind == "chart"
            ]
        return charts


_SPREADSHEET_NS = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_OFFICE_RELATIONSHIPS_NS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_PACKAGE_RELATIONSHIP = "{http://schemas.openxmlformats.org/package/2006/relationships}Relationship"


class _Package:
    """Just enough of an Open Packaging (zip of XML parts) reader to follow relationships."""

    def __init__(self, archive: zipfile.ZipFile) -> None:
        self._archive = archive
        self._names = set(archive.namelist())

    def xml(self, part: str) -> Any:
        return etree.fromstring(self._archive.read(part))

    def related(self, part: str) -> dict[str, tuple[str, str]]:
        """Relationship id -> (type name such as "chart", target part) for the internal targets of `part`."""
        folder, name = posixpath.split(part)
        rels = posixpath.join(folder, "_rels", f"{name}.rels")
        if rels not in self._names:
            return {}
        return {
            rel.get("Id", ""): (
                rel.get("Type", "").rsplit("/", 1)[-1],
                _part_name(folder, rel.get("Target", "")),
            )
            for rel in self.xml(rels).iter(_PACKAGE_RELATIONSHIP)
            if rel.get("TargetMode") != "External"
        }

    def first_related(self, part: str, kind: str) -> str | None:
        return next((target for rel_kind, target in self.related(part).values() if rel_kind == kind), None)


def _part_name(folder: str, target: str) -> str:
    """The zip member a relationship target points to (targets are relative to the source part's folder)."""
    if target.startswith("/"):
        return target.lstrip("/")
    return posixpath.normpath(posixpath.join(folder, target))


def _cell_text(value: object) -> str:
    """A cell value the way a spreadsheet shows it in General format (1.0 -> "1")."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else format(value, ".15g")
    if isinstance(value, datetime):
        return value.date().isoformat() if value.time() == time() else value.isoformat(sep=" ")
    if isinstance(value, (date, time)):
        return value.isoformat()
    return str(value)


# ---------------------------------------------------------------- HTML

_HTML_DROPPED = (
    "script, style, noscript, template, iframe, svg, nav, footer, aside, form, button, select, textarea, "
    "[hidden], [role=navigation], [role=search], a[hreflang], "
    ".navbox, .vertical-navbox, .mw-editsection, .mw-jump-link"
)
_HTML_ROOTS = ("main", "[role=main]", "article", "#content", "#mw-content-text")
_HTML_HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
_HTML_TEXT_BLOCKS = frozenset({
    "address", "article", "blockquote", "body", "caption", "center", "dd", "details", "dialog", "div", "dl",
    "dt", "fieldset", "figcaption", "figure", "header", "hgroup", "hr", "li", "main", "ol", "p", "section",
    "summary", "ul",
})


def _parse_html(data: bytes) -> ParsedDocument:
    soup = BeautifulSoup(data, "lxml")
    root = _html_root(soup)
    for element in root.select(_HTML_DROPPED):
        if not element.decomposed:
            element.decompose()
    for header in root.find_all("header"):
        if not header.decomposed and header.find_parent(["main", "article"]) is None:
            header.decompose()
    out = _Blocks()
    _HtmlText(out).walk(root)
    page_title = soup.title.get_text() if soup.title else ""
    return ParsedDocument(out.items, title=_title(page_title, _default_title(out.items)))


def _html_root(soup: BeautifulSoup) -> Tag:
    """The main content element if the page marks exactly one, else the body."""
    for selector in _HTML_ROOTS:
        found = soup.select(selector)
        if len(found) == 1:
            return found[0]
    return soup.body or soup


class _HtmlText:
    """Walks an HTML tree, turning block elements into blocks and gathering inline text."""

    def __init__(self, out: _Blocks) -> None:
        self._out = out
        self._inline: list[str] = []

    def walk(self, node: Tag) -> None:
        """Emit everything under `node`, ending with the text gathered so far."""
        self._children(node)
        self._flush()

    def _children(self, node: Tag) -> None:
        for child in node.children:
            if isinstance(child, Tag):
                self._element(child)
            elif type(child) is NavigableString:
                self._inline.append(str(child))

    def _element(self, tag: Tag) -> None:
        name = tag.name
        if name in _HTML_HEADINGS:
            self._flush()
            self._out.add(tag.get_text(" "), "heading", level=int(name[1]))
        elif name == "pre":
            self._flush()
            self._out.add(tag.get_text(), "code")
        elif name == "table":
            self._flush()
            self._table(tag)
        elif name == "br":
            self._inline.append(" ")
        elif name in _HTML_TEXT_BLOCKS:
            self._flush()
            self._inline.append(_list_number(tag))
            self.walk(tag)
        else:
            self._children(tag)

    def _flush(self) -> None:
        self._out.add("".join(self._inline))
        self._inline.clear()

    def _table(self, table: Tag) -> None:
        if table.caption:
            self._out.add(table.caption.get_text(" "))
        rows = [tr for tr in table.find_all("tr") if tr.find_parent("table") is table]
        grid = []
        for tr in rows:
            cells: list[str] = []
            for cell in tr.find_all(["th", "td"], recursive=False):
                cells.append(cell.get_text(" "))
                cells.extend([""] * (_to_int(str(cell.get("colspan", "")), 1) - 1))
            grid.append(cells)
        self._out.table(grid, has_header=bool(rows) and _is_header_row(rows[0]))


def _is_header_row(tr: Tag) -> bool:
    cells = tr.find_all(["th", "td"], recursive=False)
    return tr.find_parent("thead") is not None or all(cell.name == "th" for cell in cells)


def _list_number(tag: Tag) -> str:
    """"3. " for the third item of an ordered list, "" for anything else."""
    parent = tag.parent
    if tag.name != "li" or parent is None or parent.name != "ol":
        return ""
    start = _to_int(str(parent.get("start", "")), 1)
    return f"{start + len(tag.find_previous_siblings('li'))}. "


# ---------------------------------------------------------------- Markdown and plain text

_MD_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_MD_ATX = re.compile(r"^\s{0,3}(#{1,6})(?:\s+(.*?))?(?:\s+#+)?\s*$")
_MD_SETEXT = re.compile(r"^\s{0,3}(=+|-+)\s*$")
_MD_RULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
_MD_TABLE_DELIMITER = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
_MD_BULLET = re.compile(r"^\s*[-*+]\s+(\[[ xX]\]\s+)?")
_MD_ORDERED = re.compile(r"^\s*\d{1,9}[.)]\s+")
_MD_QUOTE = re.compile(r"^\s*(>\s?)+")
_MD_LINK_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*\S+")
_MD_CELL_SPLIT = re.compile(r"(?<!\\)\|")
_MD_INLINE: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"`+([^`]*)`+"), r"\1"),
    (re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\((?:[^()]|\([^()]*\))*\)"), r"\1"),
    (re.compile(r"<((?:https?|mailto):[^>\s]+)>"), r"\1"),
    (re.compile(r"</?[A-Za-z][^>]*>"), " "),
    (re.compile(r"(\*{1,3}|~~)(?=\S)(.+?)(?<=\S)\1"), r"\2"),
    (re.compile(r"(?<!\w)(_{1,3})(?=\S)(.+?)(?<=\S)\1(?!\w)"), r"\2"),
    (re.compile(r"\\([\\`*_{}\[\]()#+\-.!|>~])"), r"\1"),
)


def _md_inline(text: str) -> str:
    """Readable text from Markdown inline syntax: link text without URLs, no emphasis markers."""
    for pattern, replacement in _MD_INLINE:
        text = pattern.sub(replacement, text)
    return text


def _md_cells(line: str) -> list[str]:
    line = line.strip()
    line = line[1:] if line.startswith("|") else line
    line = line[:-1] if line.endswith("|") and not line.endswith("\\|") else line
    return [_md_inline(cell) for cell in _MD_CELL_SPLIT.split(line)]


def _parse_markdown(data: bytes) -> ParsedDocument:
    out = _Blocks()
    _markdown_blocks(_decode(data).splitlines(), out)
    return ParsedDocument(out.items, title=_title(None, _default_title(out.items)))


def _markdown_blocks(lines: Sequence[str], out: _Blocks) -> None:
    paragraph: list[str] = []

    def flush() -> None:
        out.add(_md_inline(" ".join(paragraph)))
        paragraph.clear()

    index = 0
    while index < len(lines):
        line = lines[index]
        if fence := _MD_FENCE.match(line):
            flush()
            end = _first_line_from(lines, index + 1, lambda text: text.strip().startswith(fence.group(1)))
            out.add("\n".join(lines[index + 1 : end]), "code")
            index = end + 1
            continue
        if paragraph and (setext := _MD_SETEXT.match(line)):
            out.add(_md_inline(" ".join(paragraph)), "heading", level=1 if setext.group(1)[0] == "=" else 2)
            paragraph.clear()
        elif heading := _MD_ATX.match(line):
            flush()
            out.add(_md_inline(heading.group(2) or ""), "heading", level=len(heading.group(1)))
        elif "|" in line and index + 1 < len(lines) and _MD_TABLE_DELIMITER.match(lines[index + 1]):
            flush()
            end = _first_line_from(lines, index + 2, lambda text: "|" not in text or not text.strip())
            out.table([_md_cells(row) for row in [lines[index], *lines[index + 2 : end]]])
            index = end
            continue
        elif not line.strip() or _MD_RULE.match(line) or _MD_LINK_DEFINITION.match(line):
            flush()
        elif _MD_BULLET.match(line) or _MD_ORDERED.match(line):
            flush()
            paragraph.append(_MD_BULLET.sub("", line))
        else:
            paragraph.append(_MD_QUOTE.sub("", line))
        index += 1
    flush()


def _first_line_from(lines: Sequence[str], start: int, matches: Callable[[str], bool]) -> int:
    """Index of the first line at or after `start` that `matches`, else len(lines)."""
    return next((i for i in range(start, len(lines)) if matches(lines[i])), len(lines))


def _parse_text(data: bytes) -> ParsedDocument:
    out = _Blocks()
    for paragraph in re.split(r"\n\s*\n", _decode(data).replace("\r\n", "\n").replace("\r", "\n")):
        out.add(paragraph)
    return ParsedDocument(out.items, title=_title(None, _default_title(out.items)))


# ---------------------------------------------------------------- CSV and JSONL


def _parse_csv(data: bytes, pk_column: str, text_columns: Sequence[str]) -> list[ParsedDocument]:
    text = _decode(data)
    reader = csv.reader(io.StringIO(text, newline=""), _sniff(text))
    header = [name.strip() for name in next(reader, [])]
    return _row_documents(_csv_records(reader, header), pk_column, text_columns)


def _sniff(text: str) -> type[csv.Dialect] | csv.Dialect:
    try:
        return csv.Sniffer().sniff(text[:65536], delimiters=",;\t|")
    except csv.Error:
        return csv.excel


def _csv_records(reader: Iterator[list[str]], header: list[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, values in enumerate((v for v in reader if any(cell.strip() for cell in v)), start=1):
        if len(values) > len(header) and any(cell.strip() for cell in values[len(header) :]):
            raise ParseFailure(f"row {number} has more fields than the header")
        yield number, dict(zip(header, [*values, *[""] * (len(header) - len(values))], strict=False))


def _parse_jsonl(data: bytes, pk_column: str, text_columns: Sequence[str]) -> list[ParsedDocument]:
    return _row_documents(_jsonl_records(_decode(data)), pk_column, text_columns)


def _jsonl_records(text: str) -> Iterator[tuple[int, dict[str, Any]]]:
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


def _row_documents(
    records: Iterable[tuple[int, dict[str, Any]]], pk_column: str, text_columns: Sequence[str]
) -> list[ParsedDocument]:
    """One document per record, keyed by its primary key, its text from `_row_lines`."""
    documents = []
    seen: set[str] = set()
    for number, row in records:
        value = row.get(pk_column)
        if value is None or not str(value).strip():
            raise ParseFailure(_one_line(f"primary-key column '{pk_column}' missing in row {number}"))
        pk = str(value)
        if pk in seen:
            raise ParseFailure(_one_line(f"duplicate primary key '{pk}' in row {number}"))
        seen.add(pk)
        lines = _row_lines(row, text_columns)
        title = next((_field_text(row[key]) for key in ("title", "name") if row.get(key)), pk)
        documents.append(
            ParsedDocument([Block("\n".join(lines))], title=_one_line(title, _MAX_TITLE), pk=pk, row=row)
        )
    if not documents:
        raise ParseFailure("no data rows")
    return documents


def _row_lines(row: dict[str, Any], text_columns: Sequence[str]) -> list[str]:
    """The named columns' values alone, in order (prose fields such as title and abstract), or,
    with no columns named, a "key: value" line per non-empty field."""
    if text_columns:
        return [text for key in text_columns if (text := _clean(_field_text(row.get(key))))]
    return [f"{_clean(key)}: {text}" for key, item in row.items() if (text := _clean(_field_text(item)))]


def _field_text(value: object) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


_DOCUMENT_PARSERS: dict[str, Callable[[bytes], ParsedDocument]] = {
    "docx": _parse_docx,
    "pptx": _parse_pptx,
    "xlsx": _parse_xlsx,
    "html": _parse_html,
    "htm": _parse_html,
    "md": _parse_markdown,
    "markdown": _parse_markdown,
    "txt": _parse_text,
}
_ROW_PARSERS: dict[str, Callable[[bytes, str, Sequence[str]], list[ParsedDocument]]] = {
    "csv": _parse_csv,
    "jsonl": _parse_jsonl,
}

"""PDF: each page's text layer through PDFium, paragraphs rebuilt from its lines; OCR for scans."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterator

import pypdfium2 as pdfium

from ragmcp.domain.errors import ParseFailure
from ragmcp.ingest.limits import current, over
from ragmcp.ingest.ocr import PageOcr
from ragmcp.ingest.parsed import ParsedDocument
from ragmcp.ingest.parsers.blocks import Blocks, clean, document_title

NO_TEXT_NO_OCR = "no extractable text (scanned or image-only document; OCR is turned off or not installed)"

_WORD_CHAR = re.compile(r"[^\W_]")
_PDFIUM_LINE_HYPHEN = "\x02"
"""PDFium's mark of a hyphen that ended a line (the line break itself dropped): put both back, so
paragraphs rebuild as from any other line break."""
_HYPHEN_BREAK = re.compile(r"(?<=[^\W\d_])-\n(?=[a-z])")
_LIST_MARK = re.compile(r"(?:[•◦▪▫●○■□‣⁃∙·*–—-]|\(?\d{1,3}[.)]|\(?[a-z][.)])\s")
_SHORT_LINE = 0.7
_LIGATURES = {code: unicodedata.normalize("NFKC", chr(code)) for code in range(0xFB00, 0xFB07)}  # ﬁ -> fi
_EDGE_LINES = 2
"""How many lines at the top and at the bottom of a page may be a running header or footer."""
_PAGE_NUMBER = re.compile(r"^(?:\d{1,4}|[ivxlc]{1,6}|\d{1,3}[-–]\d{1,4})$", re.IGNORECASE)
_NUMBER_AT_EDGE = re.compile(r"^(?:\d{1,4}|[ivxlc]{1,6})\s+|\s+(?:\d{1,4}|[ivxlc]{1,6})$", re.IGNORECASE)
_MIN_PAGES_FOR_RUNNING = 3
_DIGITS = re.compile(r"\d+")
_SECTION_START = re.compile(r"^\d{1,2}(?:\.\d{1,2}){1,3}\s+[A-Z]")
_SECTION_HEADING = re.compile(r"^(\d{1,2}(?:\.\d{1,2}){1,3})\s+[A-Z][^.:;!?]*$")
"""A numbered section heading on a line of its own ("2.1.6 Change Function Usage CL command"): not a
table of contents line (dot leaders, a page number at its end), not a sentence."""
_HEADING_WORDS = 12
_TOC_LINE = re.compile(r"(?:\.\s*){3}|\s\d{1,4}$")


def _section_level(line: str) -> int:
    """1 for a numbered section heading, 0 for any other line. Every numbered heading is level 1:
    it starts a chunk and is the whole heading path of what follows it, since a PDF's pages may be
    a sample of its sections (redp5110_sampled.pdf goes from 2.2 to 3.2.2), which a path built
    from the numbers' depth would nest wrongly."""
    match = _SECTION_HEADING.match(line)
    return int(bool(match) and len(line.split()) <= _HEADING_WORDS and not _TOC_LINE.search(line))


def parse(data: bytes, ocr: PageOcr | None) -> ParsedDocument:
    """Each page's text layer as PDFium reads it (font encodings and ToUnicode maps applied, in
    content order); a page without one but with images is read by `ocr`, or skipped without it.
    A file over `max_pages`, or with more than `max_ocr_pages` such pages to read, is refused
    before any page is read by OCR."""
    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        if "password" in str(exc).lower():
            raise ParseFailure("encrypted PDF") from None
        raise
    texts: list[str] = []
    scanned: list[int] = []
    limits = current()
    try:
        if len(pdf) > limits.max_pages:
            raise over(f"{len(pdf)} pages", "PARSE_MAX_PAGES", limits.max_pages)
        for number in range(1, len(pdf) + 1):
            text, needs_ocr = _page_text(pdf[number - 1])
            if needs_ocr:
                scanned.append(number)
            texts.append(text)
        if ocr is not None:
            if len(scanned) > limits.max_ocr_pages:
                what = f"{len(scanned)} pages without a text layer to read by OCR"
                raise over(what, "PARSE_MAX_OCR_PAGES", limits.max_ocr_pages)
            for number in scanned:
                texts[number - 1] = ocr.read(pdf[number - 1])
        declared = pdf.get_metadata_dict(skip_empty=True).get("Title")
    finally:
        pdf.close()
    texts = _without_running_lines(texts)
    out = Blocks()
    for number, text in enumerate(texts, start=1):
        out.page = number
        for paragraph in _paragraphs(text):
            if _WORD_CHAR.search(paragraph):  # not a run of glyphs no font maps to text
                level = _section_level(paragraph)
                out.add(paragraph, "heading" if level else "text", level=level)
    if not out.items and scanned and ocr is None:
        raise ParseFailure(NO_TEXT_NO_OCR)
    first_line = next((line for text in texts for line in map(clean, text.splitlines()) if line), None)
    return ParsedDocument(
        out.items,
        title=document_title(declared, first_line),
        pages=len(texts),
        page_unit="page",
        ocr_pages=tuple(scanned) if ocr is not None else (),
    )


def _page_text(page: pdfium.PdfPage) -> tuple[str, bool]:
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


def _running_key(line: str) -> str:
    """A line as a running header or footer repeats it: numbers, case and spacing aside."""
    return " ".join(_DIGITS.sub("#", _NUMBER_AT_EDGE.sub("", clean(line))).lower().split())


def _without_running_lines(texts: list[str]) -> list[str]:
    """The pages' texts without running headers and footers: a line among the first or last two
    non-blank lines of a page that, page numbers aside, is also at the edge of another page (in a
    document of at least three pages), or that is only a page number ("7", "xi", "7-45"). Every
    other line, blank ones too (they end paragraphs), is kept where it was. A header or footer frames
    a page's text: a page that would keep no words keeps its lines."""
    pages = [text.splitlines() for text in texts]
    edges = []
    for lines in pages:
        filled = [i for i, line in enumerate(lines) if line.strip()]
        edges.append({*filled[:_EDGE_LINES], *filled[-_EDGE_LINES:]})
    seen = Counter(
        key for lines, edge in zip(pages, edges, strict=True) for key in {_running_key(lines[i]) for i in edge} if key
    )
    running = {key for key, n in seen.items() if n >= 2} if len(pages) >= _MIN_PAGES_FOR_RUNNING else set()

    def repeated(line: str) -> bool:
        return _running_key(line) in running or bool(_PAGE_NUMBER.match(clean(line)))

    def framed(lines: list[str], edge: set[int]) -> str:
        kept = [line for i, line in enumerate(lines) if not (i in edge and repeated(line))]
        return "\n".join(kept if any(_WORD_CHAR.search(line) for line in kept) else lines)

    return [framed(lines, edge) for lines, edge in zip(pages, edges, strict=True)]


def _paragraphs(text: str) -> Iterator[str]:
    """Rebuild paragraphs from extracted lines.

    A blank line, a list marker, a section number ("2.1.6 Title") or a line clearly shorter than
    the page's typical line width ends a paragraph; a numbered section heading is a paragraph of
    its own; a word hyphenated across two lines is joined again.
    """
    lines = [clean(line) for line in text.translate(_LIGATURES).splitlines()]
    lengths = sorted(len(line) for line in lines if line)
    if not lengths:
        return
    typical = lengths[(len(lengths) - 1) * 4 // 5]
    current: list[str] = []
    for line in lines:
        if current and (not line or _LIST_MARK.match(line) or _SECTION_START.match(line)):
            yield _join_lines(current)
            current = []
        if not line:
            continue
        current.append(line)
        if len(line) < _SHORT_LINE * typical or _section_level(line):
            yield _join_lines(current)
            current = []
    if current:
        yield _join_lines(current)


def _join_lines(lines: list[str]) -> str:
    return _HYPHEN_BREAK.sub("", "\n".join(lines)).replace("\n", " ")

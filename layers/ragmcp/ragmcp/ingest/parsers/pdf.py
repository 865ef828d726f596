"""PDF: each page's text layer through PDFium, paragraphs rebuilt from its lines; OCR for scans."""

from __future__ import annotations

import re
import unicodedata
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
    out = Blocks()
    for number, text in enumerate(texts, start=1):
        out.page = number
        for paragraph in _paragraphs(text):
            if _WORD_CHAR.search(paragraph):  # not a run of glyphs no font maps to text
                out.add(paragraph)
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


def _paragraphs(text: str) -> Iterator[str]:
    """Rebuild paragraphs from extracted lines.

    A blank line, a list marker or a line clearly shorter than the page's typical line
    width ends a paragraph; a word hyphenated across two lines is joined again.
    """
    lines = [clean(line) for line in text.translate(_LIGATURES).splitlines()]
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

"""PDF: each page's text layer through PDFium, paragraphs rebuilt from its lines; ruled tables found
by pdfplumber read as rows named by their header; OCR for scans. Each line's look (the height,
weight and slant of its glyphs, and whether they are evenly spaced) marks headings set apart by
their font and code set in a fixed-pitch one (`_Look`)."""

from __future__ import annotations

import ctypes
import io
import logging
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise

import pdfplumber
import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from ragmcp.domain.errors import ParseFailure
from ragmcp.ingest.limits import current, over
from ragmcp.ingest.ocr import PageOcr
from ragmcp.ingest.parsed import BlockKind, ParsedDocument
from ragmcp.ingest.parsers.blocks import MAX_TITLE, Blocks, clean, clean_code, document_title, is_caption

log = logging.getLogger(__name__)

Rows = list[list[str]]
Segment = str | Rows
"""A piece of a page in reading order: text (its lines), or a table's rows."""

NO_TEXT_NO_OCR = "no extractable text (scanned or image-only document; OCR is turned off or not installed)"

_WORD_CHAR = re.compile(r"[^\W_]")
_LETTER_RE = re.compile(r"[^\W\d_]")
_NUMBERED_CAPTION = re.compile(r"(?:Figure|Fig\.|Table|Example|Listing|Chart)\s*[0-9]", re.IGNORECASE)
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
_LEADER = re.compile(r"\s*\.(?:\s?\.){3,}\s*(?:(?:\d{1,4}|[ivxlc]{1,6})(?=\s|$))?\s*", re.IGNORECASE)
"""A table of contents' dot leader (four dots or more, spaced or not) and the page number after it."""
_TOC_LINE = re.compile(r"(?:\.\s*){3}|\s\d{1,4}$")
_TABLE_FILL = 0.6
"""The least share of filled cells of a ruled box read as a table: a diagram's boxes or a form's
grid leave most of pdfplumber's cells empty."""
TABLE_PAGES = 400
"""The most pages of a file searched for tables: pdfplumber reads a page in about 50 ms (PDFium in
about 2), so a file of many pages stays well inside the parser's CPU limit; later pages are read
as text."""


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
    pages: list[list[Segment]] = []
    looks: list[dict[str, _Look]] = []
    scanned: list[int] = []
    limits = current()
    tables = _Tables(data)
    try:
        if len(pdf) > limits.max_pages:
            raise over(f"{len(pdf)} pages", "PARSE_MAX_PAGES", limits.max_pages)
        for number in range(1, len(pdf) + 1):
            text, segments, needs_ocr, page_looks = _page_segments(pdf[number - 1], tables, number)
            if needs_ocr:
                scanned.append(number)
            texts.append(text)
            pages.append(segments)
            looks.append(page_looks)
        if ocr is not None:
            if len(scanned) > limits.max_ocr_pages:
                what = f"{len(scanned)} pages without a text layer to read by OCR"
                raise over(what, "PARSE_MAX_OCR_PAGES", limits.max_ocr_pages)
            for number in scanned:
                texts[number - 1] = ocr.read(pdf[number - 1])
        declared = pdf.get_metadata_dict(skip_empty=True).get("Title")
    finally:
        pdf.close()
        tables.close()
    kept = _without_running_lines(texts)
    pages = [
        [page_kept] if len(segments) == 1 else _drop_lines(segments, text, page_kept)
        for text, page_kept, segments in zip(texts, kept, pages, strict=True)
    ]
    out = Blocks()
    body = _body_look(looks)
    for number, (segments, page_looks) in enumerate(zip(pages, looks, strict=True), start=1):
        out.page = number
        typical = _typical_line(segment for segment in segments if isinstance(segment, str))
        layout = _Layout(page_looks, body)
        for segment, after in zip(segments, [*segments[1:], ""], strict=True):
            if not isinstance(segment, str):
                out.table(_two_row_header(segment))
                continue
            text = segment if isinstance(after, str) else _caption_apart(segment)
            for kind, paragraph, level in _paragraphs(text, typical, layout):
                if _WORD_CHAR.search(paragraph):  # not a run of glyphs no font maps to text
                    out.add(paragraph, kind, level=level)
    if not out.items and scanned and ocr is None:
        raise ParseFailure(NO_TEXT_NO_OCR)
    first_line = next((line for text in kept for line in map(clean, text.splitlines()) if line), None)
    return ParsedDocument(
        out.items,
        title=document_title(declared, first_line),
        pages=len(pages),
        page_unit="page",
        ocr_pages=tuple(scanned) if ocr is not None else (),
    )


class _Tables:
    """The ruled tables of a PDF's pages as pdfplumber finds them (`find_tables`: cells bounded by
    the page's lines and rectangles), opened only for a page that draws paths. Table finding is
    a reading aid: a file pdfplumber cannot read, and the pages after the first `TABLE_PAGES`
    searched, are read without it, as text."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pdf: pdfplumber.PDF | None = None
        self._failed = False
        self._searched = 0

    def find(self, number: int) -> list[tuple[tuple[float, float, float, float], Rows]]:
        """Each table of page `number` (1-based) that reads as one (`_is_table`): its box (left,
        top, right, bottom, in points from the page's top left) and its rows, top to bottom."""
        if self._failed or self._searched >= TABLE_PAGES:
            return []
        self._searched += 1
        try:
            if self._pdf is None:
                self._pdf = pdfplumber.open(io.BytesIO(self._data))
            found = self._pdf.pages[number - 1].find_tables()
            # a cell's rotated text (a narrow column's header) reads bottom to top
            tables = [
                (table.bbox, [[cell or "" for cell in row] for row in table.extract(char_dir_rotated="btt")])
                for table in found
            ]
        except Exception as exc:  # pdfminer raises many kinds on a file PDFium reads
            log.info(
                "pdf tables: pdfplumber could not read page %d (%s); its text is read as text",
                number,
                type(exc).__name__,
            )
            self._failed = True
            return []
        return sorted(((box, rows) for box, rows in tables if _is_table(rows)), key=lambda found: found[0][1])

    def close(self) -> None:
        if self._pdf is not None:
            self._pdf.close()


def _is_table(rows: Sequence[Sequence[str]]) -> bool:
    """At least two rows and two columns, and most cells filled (`_TABLE_FILL`)."""
    cells = [clean(cell) for row in rows for cell in row]
    width = max((len(row) for row in rows), default=0)
    return len(rows) >= 2 and width >= 2 and sum(map(bool, cells)) >= _TABLE_FILL * len(cells)


def _two_row_header(rows: Rows) -> Rows:
    """The rows with a header of two rows made one: when the first row spans columns (a filled
    cell, then empty ones: "TEDs", "", "") and the second names only those spanned columns
    ("simple", "complex", "all"), each such column is named by both ("TEDs simple")."""
    if len(rows) < 3:
        return rows
    top, sub = [clean(cell) for cell in rows[0]], [clean(cell) for cell in rows[1]]
    spanned, carry, names = set(), "", []
    for i, cell in enumerate(top):
        carry = cell or carry
        if not cell or (i + 1 < len(top) and not top[i + 1]):
            spanned.add(i)
        names.append(carry)
    if not any(sub) or any(cell and i not in spanned for i, cell in enumerate(sub)) or not all(top[:1]):
        return rows
    header = [
        f"{name} {cell}".strip() if cell else top[i] for i, (name, cell) in enumerate(zip(names, sub, strict=True))
    ]
    return [header, *rows[2:]]


def _page_segments(
    page: pdfium.PdfPage, tables: _Tables, number: int
) -> tuple[str, list[Segment], bool, dict[str, _Look]]:
    """The page's text layer, the page in reading order, whether it needs OCR (no word in its
    text but an image), and the look of its lines (`_looks`). A page that draws paths is searched
    for tables; each is put between the text above it and the text below it, and the text beside
    it follows it. Without a table (or
    on a rotated page, or one whose box does not start at 0, 0) the page is its text layer."""
    textpage = page.get_textpage()
    try:
        text = _text(textpage)
        if not _WORD_CHAR.search(text):
            images = page.get_objects(filter=(pdfium.raw.FPDF_PAGEOBJ_IMAGE,), max_depth=2)
            return text, [text], next(images, None) is not None, {}
        looks = _looks(textpage)
        paths = page.get_objects(filter=(pdfium.raw.FPDF_PAGEOBJ_PATH,), max_depth=2)
        upright = page.get_rotation() == 0 and page.get_bbox()[:2] == (0, 0)  # pdfplumber's boxes are PDFium's
        found = tables.find(number) if upright and next(paths, None) is not None else []
        if not found:
            return text, [text], False, looks
        width, height = page.get_size()
        segments: list[Segment] = []
        cursor = 0.0  # points from the top that are read
        for (left, top, right, bottom), rows in found:
            if top < cursor:  # beside a table already read: its text was read with that one
                continue
            segments.append(_text(textpage, 0, height - top, width, height - cursor))
            segments.append(rows)
            beside = [_text(textpage, 0, height - bottom, left, height - top)]
            beside.append(_text(textpage, right, height - bottom, width, height - top))
            segments.append("\n".join(beside))
            cursor = bottom
        segments.append(_text(textpage, 0, 0, width, height - cursor))
        return text, segments, False, looks
    finally:
        textpage.close()


def _text(
    textpage: pdfium.PdfTextPage,
    left: float = 0,
    bottom: float = 0,
    right: float | None = None,
    top: float | None = None,
) -> str:
    """The text in a box of the page (PDF points, origin at the bottom left), the whole page by default."""
    return textpage.get_text_bounded(left, bottom, right, top).replace(_PDFIUM_LINE_HYPHEN, "-\n")


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


def _drop_lines(segments: list[Segment], text: str, kept: str) -> list[Segment]:
    """A page's segments without the lines its whole `text` lost on the way to `kept` (its running
    lines, found on the page's text as a whole, where they are at its edges), each line once."""
    dropped = Counter(text.splitlines())
    dropped.subtract(kept.splitlines())
    out: list[Segment] = []
    for segment in segments:
        if isinstance(segment, str):
            lines = []
            for line in segment.splitlines():
                if dropped[line] > 0:
                    dropped[line] -= 1
                else:
                    lines.append(line)
            segment = "\n".join(lines)
        out.append(segment)
    return out


def _caption_apart(text: str) -> str:
    """The text above a table with its last line a paragraph of its own when it reads as the
    table's caption (`is_caption`), not joined to the sentence before it."""
    head, _, last = text.rstrip().rpartition("\n")
    return f"{head}\n\n{last}" if head and is_caption(clean(last)) else text


def _typical_line(texts: Iterable[str]) -> int:
    """A page's typical line width in characters: its longer lines' (the 80th percentile)."""
    lengths = sorted(
        len(line) for text in texts for line in map(clean, text.translate(_LIGATURES).splitlines()) if line
    )
    return lengths[(len(lengths) - 1) * 4 // 5] if lengths else 0


def _paragraphs(text: str, typical: int, layout: _Layout | None = None) -> Iterator[tuple[BlockKind, str, int]]:
    """Rebuild paragraphs from extracted lines, as (kind, text, heading level).

    A blank line, a list marker, a section number ("2.1.6 Title") or a line clearly shorter than
    the page's `typical` line width ends a paragraph; a numbered section heading is a paragraph of
    its own; a word hyphenated across two lines is joined again; table of contents lines (dot
    leaders) in a row are one paragraph (`_contents`). With the page's `layout`, lines set apart by
    their font and followed by body text are a heading (`_Layout.heading`), a numbered caption in
    another font is a paragraph of its own, and lines in a row in a fixed-pitch font are one code
    block that keeps its lines and their indentation.
    """
    raw_lines = text.translate(_LIGATURES).splitlines()
    lines = [clean(line) for line in raw_lines]
    current: list[str] = []
    contents: list[str] = []
    code: list[str] = []
    at = 0
    while at < len(lines):
        line, raw = lines[at], raw_lines[at]
        at += 1
        if layout is not None and line and layout.is_code(line):
            if current:
                yield "text", _join_lines(current), 0
                current = []
            code.append(raw)
            continue
        if code and line:
            yield "code", clean_code("\n".join(code)), 0
            code = []
        if _LEADER.search(line):
            if current:
                yield "text", _join_lines(current), 0
                current = []
            contents.extend(entry for entry in map(str.strip, _LEADER.split(line)) if entry)
            continue
        if contents:
            yield "text", _contents(contents), 0
            contents = []
        if layout is not None and line and layout.is_caption(line):
            if current:
                yield "text", _join_lines(current), 0
                current = []
            yield "text", line, 0
            continue
        level, after = _section_level(line), at
        if not level and layout is not None and line:
            level, after = layout.heading(lines, at - 1)
        if current and (not line or _LIST_MARK.match(line) or _SECTION_START.match(line) or level):
            yield "text", _join_lines(current), 0
            current = []
        if not line:
            continue
        if level:
            yield "heading", " ".join(lines[at - 1 : after]), level
            at = after
            continue
        current.append(line)
        if len(line) < _SHORT_LINE * typical:
            yield "text", _join_lines(current), 0
            current = []
    if current:
        yield "text", _join_lines(current), 0
    if code:
        yield "code", clean_code("\n".join(code)), 0
    if contents:
        yield "text", _contents(contents), 0


def _contents(entries: list[str]) -> str:
    """Table of contents lines as one paragraph, their entries without dot leaders and page numbers
    ("1.1 Security fundamentals; 1.2 Current state of IBM i security."): searchable, never quoted
    with runs of dots, never a section heading."""
    return "; ".join(entry.rstrip(" .") for entry in entries) + "."


def _join_lines(lines: list[str]) -> str:
    return _HYPHEN_BREAK.sub("", "\n".join(lines)).replace("\n", " ")


_LOOK_CHARS = 40
"""The most glyphs of a line whose look is read (its first ones): enough to tell its font apart."""
_PITCH_SPREAD = 0.1
_PITCH_SHARE = 0.8
"""In a fixed-pitch line at least this share of the steps from one glyph to the next are within
`_PITCH_SPREAD` of their median (a typesetter's small shifts aside); in proportional text few are."""
_MIN_PITCH_STEPS = 4
"""The fewest steps between glyphs (not across a space) that tell whether a line's font is fixed-pitch."""
_LARGER = 1.15
"""How much taller than the body's a line's glyphs are when it is set in a larger font."""
_BOLD_WEIGHT = 600
_FONT_ITALIC = 1 << 6
_FONT_FORCE_BOLD = 1 << 18
_BOLD_NAME = re.compile(r"bold|black|heavy|demi", re.IGNORECASE)
_ITALIC_NAME = re.compile(r"italic|oblique", re.IGNORECASE)
_FONT_NAME_BYTES = 128
_LINE_ENDS = frozenset({"\r", "\n", _PDFIUM_LINE_HYPHEN})
_SENTENCE_END = (".", "!", "?", ":", ";", ",")


@dataclass(frozen=True, slots=True)
class _Look:
    """How a line is set: the font of its first glyph, its glyphs' (loose box) height in points,
    whether they are all bold or all italic, and whether they step evenly (True: a fixed-pitch
    font, as code is set in; None: too few steps to tell)."""

    font: str
    height: float
    bold: bool
    italic: bool
    fixed: bool | None
    chars: int

    @property
    def face(self) -> tuple[str, float, bool, bool]:
        """The font, size and style, whatever the line's length."""
        return self.font, round(self.height, 1), self.bold, self.italic


@dataclass(slots=True)
class _Glyph:
    font: str
    height: float
    bold: bool
    italic: bool
    x: float
    after_space: bool


def _looks(textpage: pdfium.PdfTextPage) -> dict[str, _Look]:
    """The look of each line of the page, by its cleaned text (`clean`), read from its first
    `_LOOK_CHARS` glyphs (PDFium's per-glyph font, weight, box and origin)."""
    looks: dict[str, _Look] = {}
    line: list[str] = []
    read: list[_Glyph] = []
    rect = pdfium_c.FS_RECTF()
    x, y = ctypes.c_double(), ctypes.c_double()
    flags = ctypes.c_int()
    name = ctypes.create_string_buffer(_FONT_NAME_BYTES)

    def close() -> None:
        key = clean("".join(line).translate(_LIGATURES))
        if key and read and key not in looks:
            looks[key] = _look(read, len(key))
        line.clear()
        read.clear()

    for index in range(pdfium_c.FPDFText_CountChars(textpage)):
        char = chr(pdfium_c.FPDFText_GetUnicode(textpage, index))
        if char in _LINE_ENDS:
            if char == _PDFIUM_LINE_HYPHEN:
                line.append("-")
            close()
            continue
        line.append(char)
        if char.isspace() or len(read) >= _LOOK_CHARS:
            continue
        pdfium_c.FPDFText_GetLooseCharBox(textpage, index, rect)
        pdfium_c.FPDFText_GetCharOrigin(textpage, index, x, y)
        pdfium_c.FPDFText_GetFontInfo(textpage, index, name, _FONT_NAME_BYTES, flags)
        font = name.value.decode("latin-1").split("+", 1)[-1]  # a subset's tag ("ABCDEF+") aside
        weight = pdfium_c.FPDFText_GetFontWeight(textpage, index)
        bold = weight >= _BOLD_WEIGHT or bool(flags.value & _FONT_FORCE_BOLD) or bool(_BOLD_NAME.search(font))
        italic = bool(flags.value & _FONT_ITALIC) or bool(_ITALIC_NAME.search(font))
        after_space = len(line) > 1 and line[-2].isspace()
        read.append(_Glyph(font, abs(rect.top - rect.bottom), bold, italic, x.value, after_space))
    close()
    return looks


def _look(read: list[_Glyph], chars: int) -> _Look:
    heights = sorted(glyph.height for glyph in read)
    steps = [b.x - a.x for a, b in pairwise(read) if not b.after_space]
    fixed = None
    if len(steps) >= _MIN_PITCH_STEPS:
        median = sorted(steps)[len(steps) // 2]
        even = sum(abs(step - median) <= _PITCH_SPREAD * median for step in steps)
        fixed = median > 0 and even >= _PITCH_SHARE * len(steps)
    return _Look(
        font=read[0].font,
        height=heights[len(heights) // 2],
        bold=all(glyph.bold for glyph in read),
        italic=all(glyph.italic for glyph in read),
        fixed=fixed,
        chars=chars,
    )


@dataclass(frozen=True, slots=True)
class _Body:
    """The look most of a document's characters are set in, and the fonts its lines show to be
    fixed-pitch (every line of them long enough to tell steps evenly)."""

    height: float
    bold: bool
    italic: bool
    font: str
    fixed_fonts: frozenset[str]


def _body_look(pages: Sequence[dict[str, _Look]]) -> _Body | None:
    """The look most of the document's characters are set in, fixed-pitch fonts aside unless the
    whole document is set in them (a page of code outweighs its prose but is not the body)."""
    looks = [look for page in pages for look in page.values()]
    pitch: dict[str, bool] = {}
    for look in looks:
        if look.fixed is not None:
            pitch[look.font] = pitch.get(look.font, True) and look.fixed
    fixed_fonts = frozenset(name for name, fixed in pitch.items() if fixed)
    counts: Counter[tuple[str, float, bool, bool]] = Counter()
    for look in looks:
        counts[look.face] += look.chars
    proportional = Counter({face: n for face, n in counts.items() if face[0] not in fixed_fonts})
    if not counts:
        return None
    (font, height, bold, italic), _ = (proportional or counts).most_common(1)[0]
    return _Body(height, bold, italic, font, fixed_fonts)


@dataclass(frozen=True, slots=True)
class _Layout:
    """A page's line looks against the document's body look."""

    looks: dict[str, _Look]
    body: _Body | None

    def is_code(self, line: str) -> bool:
        """A line in a fixed-pitch font where the body's is not (a typewritten document has no code
        told apart)."""
        look = self.looks.get(line)
        body = self.body
        if look is None or body is None:
            return False
        return look.font in body.fixed_fonts and body.font not in body.fixed_fonts

    def is_caption(self, line: str) -> bool:
        """A numbered caption ("Example 3-9 Creating a mask on the TAX_ID column") set in another
        font than the body's: a paragraph of its own, so it stays with the code or figure it names."""
        look, body = self.looks.get(line), self.body
        if look is None or body is None or not _NUMBERED_CAPTION.match(line) or len(line) > MAX_TITLE:
            return False
        return look.face != (body.font, body.height, body.bold, body.italic)

    def heading(self, lines: Sequence[str], at: int) -> tuple[int, int]:
        """The level of a heading set apart by its font that starts at `lines[at]`, and the index of
        the line after it; (0, at + 1) for none. A heading is one or more lines (of at most
        `_HEADING_WORDS` words together, none a sentence, a list item, a numbered caption or a
        contents line) in one look set apart from the body's, followed by a line in the body's
        font: level 1 for a larger font than the body's, 2 for bold or italic where the body is not.
        A diagram's labels (in another font after them) and a cover's lines are not headings."""
        none = (0, at + 1)
        look, body = self.looks.get(lines[at]), self.body
        if look is None or body is None or self.is_code(lines[at]):
            return none
        if look.height >= _LARGER * body.height:
            level = 1
        elif (look.bold and not body.bold) or (look.italic and not body.italic):
            level = 2 if look.height * _LARGER >= body.height else 0
        else:
            level = 0
        end = at
        while end < len(lines) and lines[end] and (same := self.looks.get(lines[end])) and same.face == look.face:
            end += 1
        heading = lines[at:end]
        words = sum(len(line.split()) for line in heading)
        if not level or words > _HEADING_WORDS or not all(map(_heading_like, heading)):
            return none
        following = next((line for line in lines[end:] if line), None)
        after = self.looks.get(following) if following is not None else None
        in_body = after is not None and after.font == body.font and abs(after.height - body.height) < 0.1 * body.height
        return (level, end) if in_body else none


def _heading_like(line: str) -> bool:
    """A line that may be (part of) a heading: words with letters, not a sentence, list item,
    numbered caption ("Figure 3-1 …", left to `is_caption`) or contents line."""
    if not _LETTER_RE.search(line) or line.endswith(_SENTENCE_END) or _NUMBERED_CAPTION.match(line):
        return False
    return not (_TOC_LINE.search(line) or _LIST_MARK.match(line))

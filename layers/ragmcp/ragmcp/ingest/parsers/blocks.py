"""What every format's parser writes with: the block collector and the text helpers they share.

A parser fills a `Blocks` and takes the `ParsedDocument` it makes (the model is
`ragmcp.ingest.parsed`); text goes through `clean` on the way in, so every format normalises
whitespace and invisible characters the same way.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ragmcp.ingest.limits import Budget, char_budget
from ragmcp.ingest.parsed import Block, BlockKind, PageUnit, ParsedDocument

MAX_REASON = 200
MAX_TITLE = 200

_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
_CONTROL = re.compile(r"[\x01-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_INVISIBLE = re.compile(r"[\x00\u00ad\u200b\u2060\ufeff]")


def clean(text: str) -> str:
    """One paragraph: drop invisible characters and collapse every whitespace run to a space."""
    return " ".join(_CONTROL.sub(" ", _INVISIBLE.sub("", text)).split())


def clean_code(text: str) -> str:
    """Code keeps its lines and indentation; only trailing spaces and blank edges go."""
    lines = _CONTROL.sub(" ", _INVISIBLE.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))).split("\n")
    return "\n".join(line.rstrip() for line in lines).strip("\n")


def one_line(text: str, limit: int = MAX_REASON) -> str:
    text = clean(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def decode(data: bytes) -> str:
    """Decode text: a byte-order mark wins, then UTF-8, then Latin-1 (which accepts any byte)."""
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return data.decode(codec, errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


_TEXT_BYTES = bytes([7, 8, 9, 10, 11, 12, 13, 27, *range(0x20, 0x7F), *range(0x80, 0x100)])
_SAMPLE = 64 * 1024
BINARY_SHARE = 0.05
"""A text file whose sample has more than this share of control bytes (other than tabs, line and
page breaks, bell, backspace and escape) is binary: text in any 8-bit encoding has next to none,
random bytes about 12%."""


def binary_reason(data: bytes) -> str | None:
    """Why `data` is not text (a NUL byte, or too many control bytes in its first and middle
    64 KiB), or None. UTF-16 with its byte-order mark is text."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return None
    if b"\0" in data:
        return "binary content (NUL bytes), not text"
    middle = len(data) // 2
    sample = data[:_SAMPLE] + data[max(_SAMPLE, middle) : max(_SAMPLE, middle) + _SAMPLE]
    control = len(sample.translate(None, _TEXT_BYTES))
    if control > BINARY_SHARE * len(sample):
        return f"binary content ({control / len(sample):.0%} control bytes), not text"
    return None


def to_int(text: str | None, default: int) -> int:
    try:
        return int(text) if text else default
    except ValueError:
        return default


def _first_heading_or_line(blocks: Sequence[Block]) -> str | None:
    """The first heading, else the first line of the first block."""
    first = next((b for b in blocks if b.kind == "heading"), blocks[0] if blocks else None)
    return first.text.split("\n", 1)[0] if first else None


def document_title(declared: object, fallback: str | None) -> str | None:
    """The title the file declares, else `fallback`; one line of at most 200 characters."""
    found = one_line(str(declared or ""), MAX_TITLE) or one_line(fallback or "", MAX_TITLE)
    return found or None


def _row_text(cells: Sequence[str]) -> str:
    """A Markdown-style table row: "| a | b |"."""
    return clean("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")


def row_sentence(header: Sequence[str], cells: Sequence[str]) -> str:
    """A table row that reads on its own: each cell named by its column's header, an unnamed cell
    (the row's label) as it is: "Berries; Food: Blueberry, Strawberry; Calories per portion: 150."."""
    named = zip(header, cells, strict=True)
    parts = [f"{name}: {cell}" if name and name != cell else cell for name, cell in named if cell]
    text = "; ".join(parts)
    return text if not text or text.endswith((".", "!", "?")) else f"{text}."


_NUMBERED_CAPTION = re.compile(r"(?:Table|Tab\.)\s*[0-9IVX]+(?:[.:-][0-9]+)*\b", re.IGNORECASE)
CAPTION_WORDS = 12
_LETTER = re.compile(r"[^\W\d_]")
"""The most words of an unnumbered line read as the caption of the table after it."""


def is_caption(text: str) -> bool:
    """A line that names the table after it: "Table 3-2 Built-in global variables" (up to the
    title limit), or a short line (at most `CAPTION_WORDS` words, one of letters) that is not a
    sentence. A number alone (a form field's marker, "3") is not a caption."""
    if _NUMBERED_CAPTION.match(text):
        return len(text) <= MAX_TITLE
    short = "\n" not in text and len(text.split()) <= CAPTION_WORDS and not text.endswith((".", "!", "?"))
    return short and bool(_LETTER.search(text))


def _trim_table(rows: Iterable[Sequence[str]]) -> list[list[str]]:
    """Clean cells, pad rows to one width and drop rows and columns that are entirely empty."""
    cleaned = [[clean(cell) for cell in row] for row in rows]
    cleaned = [row for row in cleaned if any(row)]
    width = max((len(row) for row in cleaned), default=0)
    padded = [row + [""] * (width - len(row)) for row in cleaned]
    keep = [col for col in range(width) if any(row[col] for row in padded)]
    return [[row[col] for col in keep] for row in padded]


@dataclass
class Blocks:
    """Collects blocks, stamping each with the current page and the nearest heading above it."""

    page: int | None = None
    heading: str | None = None
    items: list[Block] = field(default_factory=list)
    budget: Budget = field(default_factory=char_budget)
    """The characters added so far, held to the file's `max_chars` (counted before cleaning)."""
    _open: list[tuple[int, str]] = field(default_factory=list)
    """The headings the next block stands under, with their levels, outermost first."""

    def add(self, text: str, kind: BlockKind = "text", *, level: int = 0, header: Sequence[str] = ()) -> None:
        self.budget.spend(len(text))
        text = clean_code(text) if kind == "code" else clean(text)
        if not text:
            return
        if kind == "heading":
            self.heading = text
            depth = level or 1
            self._open = [*(h for h in self._open if h[0] < depth), (depth, text)]
        path = tuple(h for _, h in self._open)
        self.items.append(Block(text, kind, self.page, self.heading, level, path, tuple(header)))

    def table(self, rows: Iterable[Sequence[str]], *, has_header: bool = True) -> None:
        """Add a table row by row. With a header, each row after it is a sentence that names every
        cell by its column (`row_sentence`), and the header line itself is not a block of its own;
        without one, rows are Markdown-style lines. A lone cell is plain text. A caption line just
        before the table (`is_caption`) becomes a heading the rows stand under, and only they.

        Parsers render a merged cell once per row: a horizontal span leaves the spanned
        columns empty, a vertical span repeats the value in each row it covers, so that
        every row block stands on its own.
        """
        trimmed = _trim_table(rows)
        if not trimmed:
            return
        if len(trimmed) == 1 and len(trimmed[0]) == 1:
            self.add(trimmed[0][0])
            return
        opened, heading = list(self._open), self.heading
        self._caption()
        if has_header and len(trimmed) > 1:
            for row in trimmed[1:]:
                self.add(row_sentence(trimmed[0], row), "table_row", header=trimmed[0])
        else:
            for row in trimmed:
                self.add(_row_text(row), "table_row")
        self._open, self.heading = opened, heading

    def _caption(self) -> None:
        """Make the line just before a table its caption when it reads as one (`is_caption`): a
        heading one level below the open ones, so the table's rows stand under it (their chunk's
        path names the table) and the blocks after the table do not."""
        last = self.items[-1] if self.items else None
        if last is None or last.kind != "text" or not is_caption(last.text):
            return
        depth = (self._open[-1][0] if self._open else 0) + 1
        self._open = [*self._open, (depth, last.text)]
        self.heading = last.text
        path = tuple(h for _, h in self._open)
        self.items[-1] = Block(last.text, "heading", last.page, last.text, depth, path, caption=True)

    def document(
        self, declared_title: object = None, *, pages: int | None = None, page_unit: PageUnit | None = None
    ) -> ParsedDocument:
        """The blocks as a document, titled as the file declares, else by its first heading or line."""
        fallback = _first_heading_or_line(self.items)
        title = document_title(declared_title, fallback)
        return ParsedDocument(self.items, title=title, pages=pages, page_unit=page_unit)

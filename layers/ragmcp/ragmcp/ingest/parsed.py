"""What a parser hands the chunker: text blocks that keep their provenance."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

BlockKind = Literal["heading", "text", "table_row", "code"]
PageUnit = Literal["page", "slide", "sheet"]

PATH_MARK = "§ "
PATH_SEPARATOR = " › "


def body(text: str) -> str:
    """A chunk's text without its heading path line."""
    return text.split("\n", 1)[1] if text.startswith(PATH_MARK) and "\n" in text else text


def heading_path(path: tuple[str, ...]) -> str:
    """The path line of a passage under these headings ("" under none)."""
    return PATH_MARK + PATH_SEPARATOR.join(path) if path else ""


@dataclass(slots=True)
class Block:
    """One unit the chunker never cuts across (a table row) or may split (long text).

    `page` is 1-based (page, slide or sheet number); `heading` is the nearest heading
    above the block; `path` the headings it stands under, outermost first. A table row
    names its cells by their columns itself (`blocks.row_sentence`), so it reads alone;
    `header` holds those column names; `caption` marks a heading that is a table's caption line
    (`blocks.Blocks.table`), which stands over the table's rows only.
    """

    text: str
    kind: BlockKind = "text"
    page: int | None = None
    heading: str | None = None
    level: int = 0
    path: tuple[str, ...] = ()
    header: tuple[str, ...] = ()
    caption: bool = False


@dataclass(slots=True)
class ParsedDocument:
    """A file's text, or one row of a CSV/JSONL file (then `pk` and `row` are set)."""

    blocks: list[Block]
    title: str | None = None
    pages: int | None = None
    page_unit: PageUnit | None = None
    pk: str | None = None
    row: dict[str, Any] | None = field(default=None)
    ocr_pages: tuple[int, ...] = ()
    """Pages (1-based) whose text was read from their image by OCR, for lack of a text layer."""

    @property
    def text(self) -> str:
        return "\n".join(b.text for b in self.blocks)

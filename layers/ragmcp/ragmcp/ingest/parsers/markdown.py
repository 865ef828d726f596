"""Markdown (CommonMark with GitHub's tables and strikethrough, read by markdown-it-py): headings,
paragraphs and list items as blocks of readable text, code blocks kept verbatim, tables row by row,
raw HTML read as HTML."""

from __future__ import annotations

import re
from collections.abc import Sequence

from markdown_it import MarkdownIt
from markdown_it.token import Token

from ragmcp.ingest.parsed import ParsedDocument
from ragmcp.ingest.parsers.blocks import Blocks, decode
from ragmcp.ingest.parsers.html import check_tags, fragment_blocks

_MARKDOWN = MarkdownIt("commonmark").enable(["table", "strikethrough"])
_TASK_BOX = re.compile(r"\[[ xX]\]\s+")
"""A task list item's check box ("- [x] done"), GitHub's syntax that CommonMark reads as text."""


def parse(data: bytes) -> ParsedDocument:
    check_tags(data)  # raw HTML in Markdown is read as HTML
    out = Blocks()
    _write(_MARKDOWN.parse(decode(data)), out)
    return out.document()


def _write(tokens: Sequence[Token], out: Blocks) -> None:
    """Add a block per heading, paragraph, code block and table row of markdown-it's token stream."""
    rows: list[list[str]] = []
    for index, token in enumerate(tokens):
        if token.type == "inline":
            opener = tokens[index - 1]
            text = _inline_text(token.children or [])
            if opener.type == "heading_open":
                out.add(text, "heading", level=int(opener.tag[1:]))
            elif opener.type in ("th_open", "td_open"):
                rows[-1].append(text)
            elif index >= 2 and tokens[index - 2].type == "list_item_open":
                out.add(_item_text(tokens[index - 2], text))
            else:
                out.add(text)
        elif token.type in ("fence", "code_block"):
            out.add(token.content, "code")
        elif token.type == "html_block":
            fragment_blocks(token.content, out)
        elif token.type == "tr_open":
            rows.append([])
        elif token.type == "table_close":
            out.table(rows)
            rows = []


def _item_text(item: Token, text: str) -> str:
    """A list item's first paragraph: "3. text" in an ordered list, without a task's check box in a bullet list."""
    if item.info:
        return f"{item.info}{item.markup} {text}"
    box = _TASK_BOX.match(text)
    return text[box.end() :] if box else text


def _inline_text(tokens: Sequence[Token]) -> str:
    """Readable text: link and image text without their URLs, code spans' content, no emphasis markers."""
    parts = []
    for token in tokens:
        if token.type in ("text", "code_inline"):
            parts.append(token.content)
        elif token.type == "image":
            parts.append(_inline_text(token.children or []))
        elif token.type in ("softbreak", "hardbreak", "html_inline"):
            parts.append(" ")
    return "".join(parts)

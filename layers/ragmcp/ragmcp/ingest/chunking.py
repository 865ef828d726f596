"""Token-sized, structure-aware chunks.

Blocks are packed into chunks of about `max_tokens` tokens and at most `max_chars` characters,
the heading path line included (`_room`): the embedding model reads a chunk's first `max_tokens`
tokens only, so a passage filled to `max_tokens` under a path line lost its end to the vector side.
A table row is never cut (and names its cells by their columns, so it reads alone in any chunk); a
long paragraph is split on sentence and word boundaries by semantic-text-splitter, first to
`max_chars` characters (a word over 100 characters is one WordPiece token, [UNK], however long:
only a character limit bounds text without spaces), then to `max_tokens`;
a heading of any level starts a new chunk, so a chunk never runs on into the next section and its
heading path names the section of all its text (headings in a row stay together, with what follows
them; a table's caption line below the second level does not: its rows continue the chunk),
and so does the first block after a captioned table (the caption is in the table's path only);
consecutive chunks overlap by the last sentences of the previous one.
A code block (`Block.kind` "code") is one piece when it fits a chunk: one that does not fit the open
chunk starts the next one together with the paragraph that introduces it ("run this statement:"),
which moves over rather than being repeated; a larger one is cut between its lines.
Each chunk records the first and last page it draws on.

A chunk's text opens with its heading path, one line: `parsed.PATH_MARK` and the headings its
first passage stands under ("§ Duck › Behaviour › Feeding"), so what is indexed and embedded
carries the section a passage belongs to; the headings the path names are not repeated below
it. The document's title is not in the path: the same words on every chunk of a document made
its short chunks (a list of links) outrank the passage asked about (BENCHMARKS.md). A chunk
under no heading has no path line. `parsed.body` takes the line off again.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from semantic_text_splitter import TextSplitter
from tokenizers import Encoding, Tokenizer

from ragmcp.ingest.parsed import PATH_MARK, Block, ParsedDocument, heading_path
from ragmcp.ingest.summaries import headline, sentences, summary


@dataclass(slots=True)
class ChunkDraft:
    text: str
    headline: str
    summary: str
    page_start: int | None
    page_end: int | None
    char_start: int
    char_end: int


@dataclass(slots=True)
class _Piece:
    text: str
    block: Block
    tokens: int
    offset: int


@dataclass(slots=True)
class _Open:
    pieces: list[_Piece] = field(default_factory=list)
    tokens: int = 0
    chars: int = 0
    """The characters of the chunk's text so far (its pieces joined by newlines)."""

    def add(self, piece: _Piece) -> None:
        self.chars += len(piece.text) + (1 if self.pieces else 0)
        self.pieces.append(piece)
        self.tokens += piece.tokens

    def pop(self) -> _Piece:
        piece = self.pieces.pop()
        self.chars -= len(piece.text) + (1 if self.pieces else 0)
        self.tokens -= piece.tokens
        return piece

    def room_for(self, piece: _Piece, max_chars: int) -> bool:
        return self.chars + len(piece.text) + (1 if self.pieces else 0) <= max_chars


class Chunker:
    def __init__(self, tokenizer: Tokenizer, max_tokens: int = 256, overlap: int = 32, max_chars: int = 2048):
        self._tokenizer = tokenizer
        self.max_tokens = max_tokens
        self.overlap = overlap
        self.max_chars = max_chars
        self._char_splitter = TextSplitter(max_chars)
        self._rooms: dict[tuple[str, ...], int] = {}

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def chunk(self, doc: ParsedDocument) -> list[ChunkDraft]:
        drafts: list[ChunkDraft] = []
        current = _Open()
        for piece in self._pieces(doc.blocks):
            starts_section = piece.block.kind == "heading" and (piece.block.level <= 2 or not piece.block.caption)
            starts_section = starts_section or _leaves_table(current, piece)
            only_headings = all(p.block.kind == "heading" for p in current.pieces)
            room = self._room(next((p.block for p in current.pieces if p.block.kind != "heading"), piece.block))
            full = current.tokens + piece.tokens > room or not current.room_for(piece, self.max_chars)
            if current.pieces and not only_headings and (starts_section or full):
                introduction = self._introduction(current, piece) if not starts_section else None
                if introduction is not None:
                    drafts.append(self._draft(current))
                    current = _Open()
                    current.add(introduction)
                else:
                    drafts.append(self._draft(current))
                    current = self._carry(current) if not starts_section else _Open()
                if not current.room_for(piece, self.max_chars):
                    current = _Open()
            current.add(piece)
        if current.pieces and any(p.block.kind != "heading" for p in current.pieces):
            drafts.append(self._draft(current))
        return drafts

    def _pieces(self, blocks: list[Block]) -> list[_Piece]:
        pieces: list[_Piece] = []
        offset = 0
        for block in blocks:
            for at, segment in self._segments(block.text):
                encoding = self._tokenizer.encode(segment, add_special_tokens=False)
                if len(encoding.ids) <= self.max_tokens:
                    pieces.append(_Piece(segment, block, len(encoding.ids), offset + at))
                else:
                    # Cut to max_tokens by the splitter, which sizes its candidate pieces from this one encoding.
                    within = _TokensWithin(segment, encoding, self.count)
                    splitter = TextSplitter.from_callback(within.size, capacity=self.max_tokens, overlap=0)
                    for start, text in splitter.chunk_indices(segment):
                        tokens = within.count(start, start + len(text))
                        pieces.append(_Piece(text, block, tokens, offset + at + start))
            offset += len(block.text) + 1
        return pieces

    def _room(self, block: Block) -> int:
        """The tokens a chunk opening with `block` holds: `max_tokens` less its heading path line's,
        but at least half of them (a deep path is cut to fit, `_fitted`). Text with no heading
        (a plain text file) has all of `max_tokens`. A paragraph is still cut into pieces of
        `max_tokens` (cut to the room, one passage question's words fell across two pieces of
        normal_4pages.pdf), so a chunk of one such piece passes the window by its path line."""
        if block.path not in self._rooms:
            path = self.count(heading_path(block.path)) if block.path else 0
            self._rooms[block.path] = max(self.max_tokens - path, self.max_tokens // 2)
        return self._rooms[block.path]

    def _segments(self, text: str) -> Iterator[tuple[int, str]]:
        """`text` in pieces of at most `max_chars` characters (with their offsets), cut on sentence
        and word boundaries. The splitter is handed windows of a few pieces' length: its time grows
        with the square of a text's length where the text has no spaces."""
        if len(text) <= self.max_chars:
            yield 0, text
            return
        for start, window in _windows(text, 4 * self.max_chars):
            for at, segment in self._char_splitter.chunk_indices(window):
                yield start + at, segment

    def _introduction(self, current: _Open, piece: _Piece) -> _Piece | None:
        """The paragraph that ends the open chunk, taken off it, when `piece` is code that does not
        fit there, the paragraph introduces it (`_INTRODUCES`) and the two fit a chunk together;
        None when the chunk would keep no passage."""
        if piece.block.kind != "code" or len(current.pieces) < 2:
            return None
        last = current.pieces[-1]
        fits = last.tokens + piece.tokens <= self._room(last.block)
        fits = fits and len(last.text) + len(piece.text) < self.max_chars
        fits = fits and last.block.kind == "text" and bool(_INTRODUCES.search(last.text))
        if not fits or all(p.block.kind == "heading" for p in current.pieces[:-1]):
            return None
        return current.pop()

    def _carry(self, previous: _Open) -> _Open:
        """Start the next chunk with the tail sentences of the previous one (prose only)."""
        carried = _Open()
        last = previous.pieces[-1]
        if self.overlap == 0 or last.block.kind != "text":
            return carried
        tail: list[str] = []
        budget = self.overlap
        for sentence in reversed(sentences(last.text)):
            cost = self.count(sentence)
            if cost > budget:
                break
            tail.insert(0, sentence)
            budget -= cost
        if tail:
            text = " ".join(tail)
            at = last.text.find(tail[0])
            carried.add(_Piece(text, last.block, self.overlap - budget, last.offset + max(at, 0)))
        return carried

    def _draft(self, current: _Open) -> ChunkDraft:
        pieces = current.pieces
        opening = next((i for i, p in enumerate(pieces) if p.block.kind != "heading"), 0)
        under = pieces[opening].block.path
        shown = [p for p in pieces[:opening] if p.text not in under] + pieces[opening:]
        passage = "\n".join(p.text for p in shown)
        path = _fitted(heading_path(under), self.max_chars - len(passage) - 1)
        text = f"{path}\n{passage}" if path else passage
        pages = [p.block.page for p in pieces if p.block.page is not None]
        first_heading = next((p.text for p in pieces if p.block.kind == "heading"), None)
        body = "\n".join(p.text for p in pieces if p.block.kind != "heading") or "\n".join(p.text for p in pieces)
        last = pieces[-1]
        return ChunkDraft(
            text=text,
            headline=headline(body, first_heading or pieces[0].block.heading),
            summary=summary(body),
            page_start=min(pages) if pages else None,
            page_end=max(pages) if pages else None,
            char_start=pieces[0].offset,
            char_end=last.offset + len(last.text),
        )


class _TokensWithin:
    """Token counts of a text's pieces read from the whole text's one encoding. A piece that starts
    and ends between words has the tokens it would have alone (the tokenizer cuts words apart before
    it splits them into word pieces); one cut inside a word (a "##" piece next, or a token across
    its edge) is encoded alone."""

    def __init__(self, text: str, encoding: Encoding, count: Callable[[str], int]):
        self._text = text
        self._count = count
        self._starts = [start for start, _ in encoding.offsets]
        self._ends = [end for _, end in encoding.offsets]
        self._tokens = encoding.tokens

    def count(self, start: int, end: int) -> int:
        """The tokens of text[start:end] encoded alone."""
        first, after = bisect_left(self._starts, start), bisect_left(self._starts, end)
        for edge, at in ((start, first), (end, after)):
            if (at > 0 and self._ends[at - 1] > edge) or (at < len(self._tokens) and self._tokens[at].startswith("##")):
                return self._count(self._text[start:end])
        return after - first

    def size(self, piece: str) -> int:
        """The tokens of `piece`, a part of the text, encoded alone (the splitter's sizer)."""
        start = self._text.find(piece)
        return self.count(start, start + len(piece)) if start >= 0 else self._count(piece)


def _leaves_table(current: _Open, piece: _Piece) -> bool:
    """Whether `piece` follows a table's last row and stands under fewer headings than the chunk's
    first passage: the chunk opened under the table's caption (`Blocks.table`), which names the
    table and no text after it."""
    if not current.pieces or current.pieces[-1].block.kind != "table_row" or piece.block.kind == "table_row":
        return False
    opening = next((p.block for p in current.pieces if p.block.kind != "heading"), None)
    return opening is not None and len(piece.block.path) < len(opening.path)


def _fitted(path: str, room: int) -> str:
    """The path line cut to `room` characters (ending in "…"), so the passage stays within the
    character limit; none when not even its mark and a word fit."""
    if len(path) <= room:
        return path
    return path[: room - 1] + "…" if room >= len(PATH_MARK) + _MIN_PATH_CHARS else ""


_INTRODUCES = re.compile(r":\s*$|^(?:Example|Listing|Figure|Fig\.|Table|Code)\s*[0-9]", re.IGNORECASE)
"""A paragraph that introduces the code after it: it ends in a colon ("run this statement:"), or it
is the code's numbered caption ("Example 3-9 Creating a mask on the TAX_ID column"). Any other
paragraph (a list's last item before a page's footnotes) stays where it is."""

_MIN_PATH_CHARS = 8
"""The fewest characters of a heading path worth showing."""

_WINDOW_ENDS = (" ", "\n", "\t", "。", "！", "？", "．", ". ", "! ", "? ")
"""Where a window may end: after whitespace or a sentence's end (CJK text has no spaces)."""


def _windows(text: str, size: int) -> Iterator[tuple[int, str]]:
    """`text` cut into windows of at most `size` characters, each ending after the last whitespace
    or full stop in its second half when there is one."""
    start = 0
    while len(text) - start > size:
        end = start + size
        cut = max(text.rfind(mark, start + size // 2, end - len(mark) + 1) + len(mark) for mark in _WINDOW_ENDS)
        cut = cut if cut > start + size // 2 else end
        yield start, text[start:cut]
        start = cut
    yield start, text[start:]

"""Token-sized, structure-aware chunks.

Blocks are packed into chunks of about `max_tokens` tokens. A table row is never cut (a
chunk that opens inside a table repeats the table's header line); a long paragraph is
split on sentence and word boundaries by semantic-text-splitter; a top-level heading
starts a new chunk; consecutive chunks overlap by the last sentences of the previous
one. Each chunk records the first and last page it draws on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from semantic_text_splitter import TextSplitter
from tokenizers import Tokenizer

from ragmcp.ingest.parsed import Block, ParsedDocument
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

    def add(self, piece: _Piece) -> None:
        self.pieces.append(piece)
        self.tokens += piece.tokens


class Chunker:
    def __init__(self, tokenizer: Tokenizer, max_tokens: int = 256, overlap: int = 32):
        self._tokenizer = tokenizer
        self.max_tokens = max_tokens
        self.overlap = overlap
        self._splitter = TextSplitter.from_huggingface_tokenizer(tokenizer, capacity=max_tokens, overlap=0)

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def chunk(self, doc: ParsedDocument) -> list[ChunkDraft]:
        drafts: list[ChunkDraft] = []
        current = _Open()
        for piece in self._pieces(doc.blocks):
            starts_section = piece.block.kind == "heading" and piece.block.level <= 2
            if current.pieces and (starts_section or current.tokens + piece.tokens > self.max_tokens):
                drafts.append(self._draft(current))
                current = self._carry(current) if not starts_section else _Open()
            if _needs_header(current, piece):
                current.add(self._header(piece))
            current.add(piece)
        if current.pieces and any(p.block.kind != "heading" for p in current.pieces):
            drafts.append(self._draft(current))
        return drafts

    def _pieces(self, blocks: list[Block]) -> list[_Piece]:
        pieces: list[_Piece] = []
        offset = 0
        for block in blocks:
            tokens = self.count(block.text)
            if tokens <= self.max_tokens:
                pieces.append(_Piece(block.text, block, tokens, offset))
            else:
                for start, text in self._splitter.chunk_indices(block.text):
                    pieces.append(_Piece(text, block, self.count(text), offset + start))
            offset += len(block.text) + 1
        return pieces

    def _header(self, piece: _Piece) -> _Piece:
        header = piece.block.header or ""
        block = Block(header, "table_row", piece.block.page, piece.block.heading)
        return _Piece(header, block, self.count(header), piece.offset)

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
        text = "\n".join(p.text for p in pieces)
        pages = [p.block.page for p in pieces if p.block.page is not None]
        first_heading = next((p.text for p in pieces if p.block.kind == "heading"), None)
        body = "\n".join(p.text for p in pieces if p.block.kind != "heading") or text
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


def _needs_header(current: _Open, piece: _Piece) -> bool:
    header = piece.block.header
    if piece.block.kind != "table_row" or not header or piece.text == header:
        return False
    return not any(p.text == header for p in current.pieces)

"""Plain text: one block per paragraph, paragraphs split on blank lines."""

from __future__ import annotations

import re

from ragmcp.ingest.parsed import ParsedDocument
from ragmcp.ingest.parsers.blocks import Blocks, decode


def parse(data: bytes) -> ParsedDocument:
    out = Blocks()
    for paragraph in re.split(r"\n\s*\n", decode(data).replace("\r\n", "\n").replace("\r", "\n")):
        out.add(paragraph)
    return out.document()

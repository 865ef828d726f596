"""Sections a question names come first (issue 27, heading questions: "What does the Morphology
section say?").

Every chunk of a section opens with the same heading path (`ingest.chunking`), so the heading's
words tie the section's chunks with each other, and a chunk of another section that holds more of
the question's other words ("duck", "article") ranks above them. A chunk whose own heading (the
last of its path) the question names, its words in a row as the heading has them (with or without
the heading's section number, "1.2"; the question's "Section 1.1" names "1.1. Section 1.1"), rises
by `LIFT` above the fused score it had (above every chunk the question does not name; the scores
are then divided by the best, which stays 1). Whole words in a row, not stems: "introduced" does
not name "Introduction", nor "bar chart" "Bar 3d chart". Only the chunks under the most specific
heading named (the most words) rise, and never for a heading that is only the document's title
("Duck" in the duck article), and only for chunks the search itself placed near the top: a fused
score at least `NEAR` of the best (a one-word heading such as "HEADER" that a question about a
table's "Header 0.1" holds by chance does not lift a chunk neither side found close). The chunks
of one named section then take its scores in their document order, so the section reads from the
passage that opens under its heading. Chunks without a heading path (prose, SciFact's abstracts)
never move.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from ragmcp.domain.models import Chunk, Document
from ragmcp.ingest.parsed import PATH_MARK, PATH_SEPARATOR

LIFT = 1.0
"""What a chunk under a named heading gains on the fused score (1, the best of the query's candidates:
the named section's chunks come before every other)."""
NEAR = 0.5
"""The share of the best fused score a chunk needs for a heading it names to lift it."""
WINDOW = 20
"""How many of the fused candidates are looked at (when the top ones have heading paths): a named
section's chunks below them stay."""

_WORD = re.compile(r"\w+")
_NUMBERED = re.compile(r"^\s*(?:\d+(?:\.\d+)*|[A-Z](?:\.\d+)+)\.?\s+(?=\w)")
"""A heading's leading section number ("1.2 ", "1.1. ", "A.1 ")."""


def named_sections_first(
    phrases: Sequence[str], ranked: Sequence[tuple[str, float]], found: dict[str, tuple[Chunk, Document]]
) -> list[tuple[str, float]]:
    """`ranked` (chunk id, fused score; best first) with the chunks of the section the phrases name
    most specifically lifted and in document order; unchanged when no phrase names a section."""
    questions = [f" {' '.join(_words(p))} " for p in phrases]
    named: dict[str, int] = {}
    near = NEAR * max((score for _, score in ranked), default=0.0)
    for cid, score in ranked:
        if cid in found and score >= near:
            chunk, document = found[cid]
            heading = _heading(chunk.text)
            if heading:
                named[cid] = max(_named(heading, document.title, question) for question in questions)
    best = max(named.values(), default=0)
    if best == 0:
        return list(ranked)
    lifted = {cid: score + LIFT if named.get(cid) == best else score for cid, score in ranked}
    sections: dict[tuple[str, str], list[str]] = {}
    for cid, _ in ranked:
        if named.get(cid) == best:
            chunk = found[cid][0]
            sections.setdefault((chunk.doc_id, chunk.text.split("\n", 1)[0]), []).append(cid)
    for members in sections.values():
        scores = sorted((lifted[cid] for cid in members), reverse=True)
        in_order = sorted(members, key=lambda cid: found[cid][0].char_start)
        lifted.update(zip(in_order, scores, strict=True))
    top = max(lifted.values())
    return sorted(((cid, score / top) for cid, score in lifted.items()), key=lambda item: item[1], reverse=True)


def has_headings(found: Iterable[tuple[Chunk, Document]]) -> bool:
    """Whether any of these chunks opens with a heading path: when none of a query's top chunks
    does, the collection's texts have no headings (abstracts, rows), and the chunks below the top
    are not fetched to look for a named section."""
    return any(chunk.text.startswith(PATH_MARK) for chunk, _ in found)


def _words(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


def _heading(text: str) -> str:
    """The last heading of a chunk's path line, "" for a chunk without one."""
    if not text.startswith(PATH_MARK):
        return ""
    return text.split("\n", 1)[0][len(PATH_MARK) :].rsplit(PATH_SEPARATOR, 1)[-1].rstrip("…")


def _named(heading: str, title: str, question: str) -> int:
    """How specifically the question (its words, spaced, between spaces) names the heading: the
    words of it that stand in the question in a row, with its section number or without; 0 when
    it does not, or when the heading is no more than the document's title."""
    held = 0
    for form in dict.fromkeys((heading, _NUMBERED.sub("", heading))):
        words = _words(form)
        if words and f" {' '.join(words)} " in question:
            held = max(held, len(words))
    title_words = set(_words(title))
    return 0 if not held or set(_words(heading)) <= title_words else held

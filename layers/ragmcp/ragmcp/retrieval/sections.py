"""Sections a question names come first (issue 27, heading questions: "What does the Morphology
section say?", or in its own words: "What does the part on what ducks eat say?").

Every chunk of a section opens with the same heading path (`ingest.chunking`), so the heading's
words tie the section's chunks with each other, and a chunk of another section that holds more of
the question's other words ("duck", "article") ranks above them. So each chunk under a heading
gets a heading signal h between 0 and 1, and its fused score s becomes s + (1 - s) * h: a pull
towards 1, the best score a query's candidates can have. A chunk without a signal keeps its fused
score exactly (no rescaling: a caller's `min_score` means the same with or without headings), no
score passes 1, and among equal scores the stronger signal goes first. The signal is the larger of
two:

- named (h = 1): the question names the chunk's own heading (the last of its path), its words in a
  row as the heading has them (with or without the heading's section number, "1.2"; the question's
  "Section 1.1" names "1.1. Section 1.1"). Whole words in a row, not stems: "introduced" does not
  name "Introduction", nor "bar chart" "Bar 3d chart". Only the chunks under the most specific
  heading named (the most words) count, never a heading that is only the document's title ("Duck"
  in the duck article), and only chunks the search itself placed near the top: a fused score at
  least `NEAR` of the best (a one-word heading such as "HEADER" that a question about a table's
  "Header 0.1" holds by chance names a chunk neither side found close), or `NEAR_SPECIFIC` of it
  for a heading named by `SPECIFIC` words or more ("Section 2.1"). When the question names
  documents by their titles ("the introduction of the IBM article"), only their headings count as
  named (not another document's "Introduction"). The chunks of one named section then take its
  scores in their document order, so the section reads from the passage that opens under its
  heading.
- close (h up to `CLOSE`): the cosine of the question to the heading path's own vector (the path
  line embedded alone, by the search service), against the closest heading among the chunks near
  the top (a fused score at least `CLOSE_NEAR` of the best): `CLOSE` for the closest, falling to 0
  at `MARGIN` below it. A paraphrase ("what ducks eat" for "Feeding") has no heading word to name.
  Relative to the closest, so a heading about as close as the others (a title such as "Duck" near
  every duck question) gains little over them, and only among the passages the search already
  ranked near the top, so a chunk ranked lower stays there; and only when the closest reaches
  `CLOSE_LEAST` (a question with no section in mind is far from every heading).

After the signal, near ties are ordered by the question's own words (`near_ties_by_coverage`): the
chunks of one section repeat its heading path, which both sides of the search weigh alike for each of
them, so a near tie between siblings (two chunks under "Boots Self-Locking Nut") is decided by
the words under the path, not by the fusion's small raw differences.

Chunks without a heading path (prose, SciFact's abstracts) never move, and a query whose
candidates have none is returned as fused. Fitted on the heading questions of
tests/data/qa_passages.jsonl, _v2 and _v3, and the constants `NEAR_SPECIFIC` and `CLOSE_LEAST` on all
the questions of those and _v4, one set left out at a time (bench/heading_fit.py; BENCHMARKS.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

from ragmcp.domain.models import Chunk, Document
from ragmcp.ingest.parsed import PATH_MARK, PATH_SEPARATOR, body
from ragmcp.retrieval.coverage import TextStems

CLOSE = 0.6
"""The heading signal of the heading path closest to the question (a named heading's is 1)."""
MARGIN = 0.1
"""How far below the closest heading's cosine a heading's signal falls to 0."""
CLOSE_NEAR = 0.85
"""The share of the best fused score a chunk needs for its heading's closeness to pull it: a chunk
the search placed lower does not climb over the passages it ranked near the top (hit@5 held)."""
CLOSE_LEAST = 0.4
"""The cosine the closest heading near the top needs for closeness to pull at all: a question with no
section in mind is only distantly close to every heading (0.2-0.36 for the code questions about a
column mask), and the closest of those by a wide margin is no paraphrase of the question."""
NEAR = 0.5
"""The share of the best fused score a chunk needs for a heading it names to lift it."""
NEAR_SPECIFIC = 0.3
"""The same share for a heading named by `SPECIFIC` words or more in a row ("Section 2.1"): a longer
name is held by chance far less often than a one-word heading ("Introduction", "HEADER"), so its
chunk is lifted from further down (a document's first chunk holding the question's words for the
document, "test document", can lead the fused scores by twice)."""
SPECIFIC = 2
"""How many of a heading's words in a row the question holds for `NEAR_SPECIFIC` to apply."""
WINDOW = 20
"""How many of the fused candidates are looked at (when the top ones have heading paths): a named
section's chunks below them stay."""
SIBLING_NEAR = 0.97
"""The share of the best score within which the chunks of the first chunk's own section (the same
document and heading path) are ordered by how many of the question's content words their text under the
path holds (`near_ties_by_coverage`). Fitted on the passage sets v1-v4, one left out at a time
(bench/heading_fit.py fit --ties; BENCHMARKS.md)."""
TIE_NEAR = 0.99
"""The same share for any chunk, when the question names no heading. Fitted with `SIBLING_NEAR`."""

KEPT = 4096
"""How many headings' and titles' word forms are kept (they repeat from search to search)."""
_WORD = re.compile(r"\w+")
_NUMBERED = re.compile(r"^\s*(?:\d+(?:\.\d+)*|[A-Z](?:\.\d+)+)\.?\s+(?=\w)")
"""A heading's leading section number ("1.2 ", "1.1. ", "A.1 ")."""


def headed_first(
    phrases: Sequence[str],
    ranked: Sequence[tuple[str, float]],
    found: dict[str, tuple[Chunk, Document]],
    closeness: Mapping[str, float],
) -> list[tuple[str, float]]:
    """`ranked` (chunk id, fused score; best first) with each chunk under a heading pulled towards 1
    by its heading signal, and the chunks of the section the phrases name most specifically in
    document order; unchanged when no chunk has a signal. `closeness`: each heading path line's
    (`path_line`) best cosine to a phrase; empty when the phrases have no vectors."""
    return _headed(phrases, ranked, found, closeness)[0]


def passages_first(
    phrases: Sequence[str],
    ranked: Sequence[tuple[str, float]],
    found: dict[str, tuple[Chunk, Document]],
    closeness: Mapping[str, float],
) -> list[tuple[str, float]]:
    """`headed_first`, then its near ties ordered by the question's words (`near_ties_by_coverage`)."""
    headed, named = _headed(phrases, ranked, found, closeness)
    return near_ties_by_coverage(phrases, headed, found, named)


def _headed(
    phrases: Sequence[str],
    ranked: Sequence[tuple[str, float]],
    found: dict[str, tuple[Chunk, Document]],
    closeness: Mapping[str, float],
) -> tuple[list[tuple[str, float]], bool]:
    """`headed_first`, and whether the phrases name a heading."""
    paths = {cid: path_line(found[cid][0].text) for cid, _ in ranked if cid in found}
    paths = {cid: line for cid, line in paths.items() if line}
    if not paths:
        return list(ranked), False
    signal = _close(ranked, paths, closeness)
    named = _named_chunks(phrases, ranked, found, paths)
    signal.update(dict.fromkeys(named, 1.0))
    if not any(signal.values()):
        return list(ranked), bool(named)
    pulled = {cid: score + max(0.0, 1.0 - score) * signal.get(cid, 0.0) for cid, score in ranked}
    place: dict[str, int] = {}
    sections: dict[tuple[str, str], list[str]] = {}
    for cid in named:
        sections.setdefault((found[cid][0].doc_id, paths[cid]), []).append(cid)
    for members in sections.values():
        scores = sorted((pulled[cid] for cid in members), reverse=True)
        in_order = sorted(members, key=lambda cid: found[cid][0].char_start)
        pulled.update(zip(in_order, scores, strict=True))
        place.update((cid, at) for at, cid in enumerate(in_order))
    order = sorted(pulled, key=lambda cid: (-pulled[cid], -signal.get(cid, 0.0), place.get(cid, 0)))
    return [(cid, pulled[cid]) for cid in order], bool(named)


def near_ties_by_coverage(
    phrases: Sequence[str],
    ranked: Sequence[tuple[str, float]],
    found: Mapping[str, tuple[Chunk, Document]],
    named: bool = False,
) -> list[tuple[str, float]]:
    """`ranked` with its near ties reordered among their own places by the share of a phrase's content
    words their text below the heading path holds, the most first (equal shares keep their order; the
    scores stay in their places). Near ties: the first chunk's section siblings (the same document and
    heading path) with a score at least `SIBLING_NEAR` of the best, and, unless the phrases name a
    heading (`named`: the named section reads in document order), any chunk at least `TIE_NEAR` of it.
    Every chunk of a section repeats its heading path, which both sides of the search weigh alike for
    each sibling, so a near tie between siblings says little about which one holds the answer; their own
    words do."""
    if not ranked or ranked[0][0] not in found:
        return list(ranked)
    first, best = found[ranked[0][0]][0], ranked[0][1]
    section = (first.doc_id, path_line(first.text))
    places = [
        i
        for i, (cid, score) in enumerate(ranked)
        if cid in found
        and (
            (not named and score >= TIE_NEAR * best)
            or (
                score >= SIBLING_NEAR * best
                and bool(section[1])
                and (found[cid][0].doc_id, path_line(found[cid][0].text)) == section
            )
        )
    ]
    if len(places) < 2:
        return list(ranked)
    shares = {i: _body_coverage(phrases, found[ranked[i][0]][0].text) for i in places}
    out = list(ranked)
    for place, i in zip(places, sorted(places, key=lambda i: -shares[i]), strict=True):
        out[place] = (ranked[i][0], ranked[place][1])
    return out


def _body_coverage(phrases: Sequence[str], text: str) -> float:
    """The best share of a phrase's content words held by a chunk's text below its heading path."""
    held = TextStems.of(body(text))
    return max(held.coverage(phrase)[0] for phrase in phrases)


def path_line(text: str) -> str:
    """A chunk's heading path without its mark ("Duck › Behaviour › Feeding"), "" for a chunk without one."""
    return text.split("\n", 1)[0][len(PATH_MARK) :] if text.startswith(PATH_MARK) else ""


def _close(
    ranked: Sequence[tuple[str, float]], paths: Mapping[str, str], closeness: Mapping[str, float]
) -> dict[str, float]:
    """The signal of each chunk near the top from its heading path's cosine to the question,
    against the closest of theirs."""
    near = CLOSE_NEAR * max((score for _, score in ranked), default=0.0)
    cosines = {cid: closeness[paths[cid]] for cid, score in ranked if score >= near and paths.get(cid, "") in closeness}
    if not cosines or max(cosines.values()) < CLOSE_LEAST:
        return {}
    floor = max(cosines.values()) - MARGIN
    return {cid: CLOSE * max(0.0, cosine - floor) / MARGIN for cid, cosine in cosines.items()}


def _named_chunks(
    phrases: Sequence[str],
    ranked: Sequence[tuple[str, float]],
    found: dict[str, tuple[Chunk, Document]],
    paths: Mapping[str, str],
) -> list[str]:
    """The chunks near the top whose heading the phrases name most specifically, best first; when the
    phrases name documents by their titles ("the introduction of the IBM article"), only chunks of
    those documents."""
    questions = [f" {' '.join(_words(p))} " for p in phrases]
    top = max((score for _, score in ranked), default=0.0)
    named = {}
    for cid, score in ranked:
        if cid in paths and score >= NEAR_SPECIFIC * top:
            held = max(_named(_last(paths[cid]), found[cid][1].title, question) for question in questions)
            if held >= SPECIFIC or score >= NEAR * top:
                named[cid] = held
    if named:
        titles = {found[cid][0].doc_id: found[cid][1].title for cid in paths}
        titled = {doc_id for doc_id, title in titles.items() if _names(title, questions)}
        if titled:
            named = {cid: held for cid, held in named.items() if found[cid][0].doc_id in titled}
    best = max(named.values(), default=0)
    return [cid for cid, held in named.items() if best and held == best]


def has_headings(found: Iterable[tuple[Chunk, Document]]) -> bool:
    """Whether any of these chunks opens with a heading path: when none of a query's top chunks
    does, the collection's texts have no headings (abstracts, rows), and the chunks below the top
    are not fetched to look for a named section."""
    return any(chunk.text.startswith(PATH_MARK) for chunk, _ in found)


def _words(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


def _last(path: str) -> str:
    """The last heading of a path line (a path cut to fit ends in "…")."""
    return path.rsplit(PATH_SEPARATOR, 1)[-1].rstrip("…")


def _names(title: str, questions: Sequence[str]) -> bool:
    """Whether a question (its words, spaced) holds a document's title, its words in a row."""
    spaced = _spaced(title)
    return bool(spaced.strip()) and any(spaced in question for question in questions)


def _named(heading: str, title: str, question: str) -> int:
    """How specifically the question (its words, spaced, between spaces) names the heading: the
    words of it that stand in the question in a row, with its section number or without; 0 when
    it does not, or when the heading is no more than the document's title."""
    held = max((count for spaced, count in _forms(heading) if spaced in question), default=0)
    return 0 if not held or _word_set(heading) <= _word_set(title) else held


@lru_cache(maxsize=KEPT)
def _forms(heading: str) -> tuple[tuple[str, int], ...]:
    """The heading with its section number and without, each as its words spaced, with their count."""
    forms = ((_spaced(form), len(_words(form))) for form in dict.fromkeys((heading, _NUMBERED.sub("", heading))))
    return tuple((spaced, count) for spaced, count in forms if count)


@lru_cache(maxsize=KEPT)
def _spaced(text: str) -> str:
    """The text's words, casefolded, between single spaces and with one at each end."""
    return f" {' '.join(_words(text))} "


@lru_cache(maxsize=KEPT)
def _word_set(text: str) -> frozenset[str]:
    return frozenset(_words(text))

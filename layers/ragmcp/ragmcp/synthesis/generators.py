"""The extractive generator (no LLM, the embedded default) and the grounded prompt that the model
adapters (adapters/openai_compat.py, adapters/aws/bedrock.py) send."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ragmcp.ingest.parsed import body
from ragmcp.ports import Embedder
from ragmcp.retrieval.coverage import TextStems, content_words
from ragmcp.retrieval.service import vector_share
from ragmcp.synthesis.models import Draft, Passage
from ragmcp.text import is_cjk

STYLE_SENTENCES = {"short": 2, "default": 3, "detailed": 5}
_WORD = re.compile(r"\w+", re.UNICODE)
_MIN_WORDS = 4
PARAGRAPH_WORDS = 8
WHOLE_CHARS = 600
"""A passage this short is a whole document (a chunk is cut only near its token budget): its last line is whole."""
_FOCUS = 0.2
"""A sentence joins the answer only if it scores within this of the best one."""
_OVERLAP = 0.05
"""What each of the question's content words a sentence holds adds to its score (four at most)."""
_LEAD = 0.1
"""What a sentence loses for its passage's relevance below the first passage's (1: as relevant)."""
_DUPLICATE = 0.7
"""Sentences sharing this share of their words (Jaccard) say the same thing: the first one is kept."""
_MARKER = re.compile(r"\s*\[\s*(?:\d+|[a-z]|citation needed|note \d+)\s*\](?::\s*\d+)?|\^", re.IGNORECASE)
_BULLET = re.compile(r"^\s*(?:[•◦▪‣·*\-–—]|\d{1,2}[.)](?=\s))\s*")
"""A list item's bullet or number: a sentence starts after it."""
_STRAY_START = re.compile(r"^\W*\d+\]\s*")
"""The tail of a reference marker that a chunk boundary cut ("9] The perching ducks...")."""
_STARTS_WELL = re.compile(r"^[\"'“‘(「『]?[^\W_a-z]")
"""A capital, a digit, or a letter of a script without case (Korean, Chinese, Japanese)."""
_ENDS_WELL = re.compile(r"[.!?。！？][\"'”’)」』]?$")
_ROW = re.compile(r"^[^;]*(?:; [^;:]+: [^;]+)+\.$|^[^;:]+: [^;]+(?:; [^;:]+: [^;]+)+\.$")
"""A table row as `ingest.parsers.blocks.row_sentence` or `table_rows` writes it."""
_FIELD = re.compile(r"^[^\W_][^;:.!?]{0,40}: [^;]+\.$")
"""A form's field, a row of one cell named by its label ("Server: Quack Quackling.")."""
_FIELD_WORDS = 6
"""A form field's value is at most this many words (a name, a date, an amount)."""
_NAMED_BY = 3
"""A value's column is named among the question's words just before it ("when first is 5")."""
_NUMBER = re.compile(r"(?<![\w.-])\d+(?:[.,]\d+)*(?![\w-])")
"""A number standing alone in a question ("when col-1 is 4": 4; not the 1 of the column "col-1")."""
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'”’)]?\s+(?=[\"'“‘(「『]?[^\W_a-z])|(?<=[。！？])[」』]?\s*")


def sentence_count(style: str | None) -> int:
    return STYLE_SENTENCES.get(style or "default", STYLE_SENTENCES["default"])


@dataclass(frozen=True, slots=True)
class Unit:
    """One citable piece of a passage: a whole sentence, or a table row read with its header."""

    passage: int
    position: int
    text: str

    @property
    def row(self) -> bool:
        """A table row read with its header ("Year: 2024; Freshwater Ducks: 180."), or a field."""
        return _ROW.match(self.text) is not None or _FIELD.match(self.text) is not None

    @property
    def field(self) -> bool:
        """A form's field: one value of a few words named by its label ("Server: Quack Quackling."),
        not a sentence a label leads into ("WordStar (1978): Developed for the CP/M ...")."""
        return _FIELD.match(self.text) is not None and _words(self.text.partition(": ")[2]) <= _FIELD_WORDS

    def cells(self) -> list[tuple[str, str]]:
        """A row's cells as (header, value) ("col-1: 4; col-3: 12." -> (col-1, 4), (col-3, 12)); a
        cell without a header has ""."""
        pairs = [cell.partition(": ") for cell in self.text.removesuffix(".").split("; ")]
        return [(h.strip().lower(), v.strip()) if sep else ("", h.strip()) for h, sep, v in pairs]

    def label_rank(self, terms: list[str]) -> int | None:
        """The place among the question's content words of the first one a field's label holds
        (its value is not read), None if it holds none."""
        label = TextStems.of(self.text.partition(": ")[0])
        return next((i for i, term in enumerate(terms) if label.holds(term)), None)


def table_rows(lines: list[str]) -> list[str]:
    """Markdown table rows as sentences: each cell named by its header ("Year: 2024; Freshwater Ducks: 180.")."""
    cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]
    cells = [row for row in cells if not all(set(c) <= set("-: ") for c in row)]
    if len(cells) < 2:
        return []
    header, rows = cells[0], cells[1:]
    named = ["; ".join(f"{h}: {v}" if h else v for h, v in zip(header, row, strict=False) if v) for row in rows]
    return [f"{text}." for text in named if text]


def units(passage: int, text: str) -> list[Unit]:
    """The whole sentences and table rows of a passage, in order, without citation markers and
    without the chunk's heading path line. A piece
    cut by the chunk's edges (no capital at its start, no full stop at its end) is left out; a whole
    line of at least PARAGRAPH_WORDS words that starts well is a sentence even without a full stop
    (a document's casual paragraph), unless it leads into a list (a colon) or ends a passage that a
    chunk boundary may have cut. A field ("Seating: 13.") is a unit however short, and a table row's
    sentence ("first: 5; second: 1; third: -3.") is one whole line however it starts."""
    found: list[str] = []
    block: list[str] = []
    lines = body(text).splitlines()
    for n, line in enumerate([*lines, ""]):
        if line.lstrip().startswith("|"):
            block.append(line)
            continue
        found += table_rows(block)
        block = []
        whole = " ".join(_MARKER.sub("", _BULLET.sub("", line)).split())
        if _ROW.match(whole):
            found.append(whole)  # a row sentence is a whole line, whatever case its first header has
            continue
        pieces = _SENTENCE_END.split(whole)
        for k, sentence in enumerate(pieces):
            clean = _STRAY_START.sub("", sentence).strip()
            if not _STARTS_WELL.match(clean):
                continue
            if _ENDS_WELL.search(clean):
                found.append(clean)
            elif k == len(pieces) - 1 and (n < len(lines) - 1 or len(text) < WHOLE_CHARS) and _paragraph(clean):
                found.append(f"{clean}.")
    return [
        Unit(passage, i, t)
        for i, t in enumerate(found)
        if (_words(t) >= _MIN_WORDS or _FIELD.match(t)) and not t.endswith(("?", "？"))
    ]


def _words(text: str) -> int:
    """Words, counting two characters of a script written without spaces (Chinese, Japanese) as one."""
    return sum(max(len(w) // 2, 1) if is_cjk(w) else 1 for w in _WORD.findall(text))


def _paragraph(line: str) -> bool:
    return _words(line) >= PARAGRAPH_WORDS and not line.endswith((":", ",", ";", "-"))


def _bag(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


def _duplicate(text: str, kept: list[Unit]) -> bool:
    bag = _bag(text)
    return any(len(bag & _bag(u.text)) / max(len(bag | _bag(u.text)), 1) >= _DUPLICATE for u in kept)


def _place(passages: list[Passage], unit: Unit) -> tuple[int, int]:
    """Where a unit stands in its document: the chunk's number (`<doc_id>#<n>`), then its position."""
    number = passages[unit.passage].passage_id.rpartition("#")[2]
    return (int(number) if number.isdigit() else unit.passage, unit.position)


def _document(passages: list[Passage], unit: Unit) -> str:
    return passages[unit.passage].passage_id.rpartition("#")[0] or passages[unit.passage].passage_id


class ExtractiveGenerator:
    """Answers with the evidence's sentences closest in meaning to the question (and holding its
    content words, from passages the search ranked near the first): whole sentences
    (a table row only if it holds as many of the question's words as the best sentence does),
    without the documents' own reference markers, no two saying the same, grouped by document
    (the best document first) and in document order within it, each followed by its citation [n]
    (n: the passage's place in the evidence, as the other generators cite)."""

    model_id = "extractive"

    def __init__(self, embedder: Embedder):
        self.embedder = embedder

    def generate(self, question: str, passages: list[Passage], style: str | None, history: list[str]) -> Draft:
        candidates = [unit for i, p in enumerate(passages) for unit in units(i, p.text)]
        if not candidates:
            return Draft(text="", used=[], model=self.model_id)
        vectors = self.embedder.embed([question, *(u.text for u in candidates)])
        similarity = vectors[1:] @ vectors[0]
        terms = content_words(question)
        overlap = np.array([sum(map(TextStems.of(u.text).holds, terms)) for u in candidates])
        top = max(p.relevance for p in passages)
        lead = np.array([passages[u.passage].relevance / top if top > 0 else 1.0 for u in candidates])
        place = np.array([u.passage for u in candidates])
        weight = vector_share(question, self.embedder.multilingual)  # as in the search's fusion
        score = weight * similarity + _OVERLAP * np.minimum(overlap, 4) + _LEAD * (lead - 1) - 0.01 * place
        _name_the_field(score, candidates, terms)
        _name_the_row(score, candidates, question)
        chosen: list[Unit] = []
        rank: dict[str, int] = {}
        best = int(np.argmax(score))
        for j in np.argsort(-score):
            unit = candidates[int(j)]
            if score[j] < score.max() - _FOCUS or len(chosen) == sentence_count(style):
                break
            if unit.row and overlap[j] < overlap[best]:
                continue  # another row of the table, without what singles out the one asked about
            if not _duplicate(unit.text, chosen):
                chosen.append(unit)
                rank.setdefault(_document(passages, unit), len(rank))
        chosen.sort(key=lambda u: (rank[_document(passages, u)], _place(passages, u)))
        text = " ".join(f"{u.text} [{u.passage + 1}]" for u in chosen)
        return Draft(text=text, used=[u.passage for u in chosen], model=self.model_id)


def _name_the_field(score: np.ndarray, candidates: list[Unit], terms: list[str]) -> None:
    """The fields whose label holds the question's head word (the first content word a label
    holds: 'server' in "Who was the server on the restaurant receipt?") are what is asked: they take
    the best score of the fields whose labels hold a question word, and the other fields (labels
    holding only later words, what the question is about: the restaurant, the receipt; or none,
    whatever their values hold) are not quoted."""
    ranks = {j: u.label_rank(terms) for j, u in enumerate(candidates) if u.field}
    named = [rank for rank in ranks.values() if rank is not None]
    if not named:
        return
    head = min(named)
    best = max(score[j] for j, rank in ranks.items() if rank is not None)
    for j, rank in ranks.items():
        score[j] = best if rank == head else -np.inf


def _name_the_row(score: np.ndarray, candidates: list[Unit], question: str) -> None:
    """A question naming a cell's value ("what is col-3 when col-1 is 4?") singles out the rows
    holding it: first those whose cell under the column named just before the value holds it
    ("col-1 is 4"), then those holding more of the question's numbers as cell values; the other
    rows are not quoted."""
    named = [(m.group(), question[: m.start()].lower().split()[-_NAMED_BY:]) for m in _NUMBER.finditer(question)]
    if not named:
        return
    numbers = {number for number, _ in named}

    def key(unit: Unit) -> tuple[int, int]:
        cells = unit.cells()
        near = sum(1 for number, before in named for h, v in cells if v == number and h and h in before)
        return near, len({v for _, v in cells} & numbers)

    held = {j: key(u) for j, u in enumerate(candidates) if u.row}
    best = max(held.values(), default=(0, 0))
    for j, k in held.items():
        if k < best:
            score[j] = -np.inf


SYSTEM_PROMPT = (
    "Answer only from the numbered passages. Cite each claim as [n]. "
    "If the passages do not answer the question, say so."
)


def grounded_prompt(question: str, passages: list[Passage], style: str | None, history: list[str]) -> str:
    """The user turn of a generator asked to answer from numbered passages only."""
    context = "\n\n".join(f"[{i + 1}] {p.title}\n{p.text}" for i, p in enumerate(passages))
    length = {"short": "in one or two sentences", "detailed": "thoroughly"}.get(style or "", "concisely")
    earlier = "Earlier questions in this conversation:\n" + "\n".join(history) + "\n\n" if history else ""
    return f"{earlier}Passages:\n{context}\n\nQuestion: {question}\nAnswer {length}."


def cited(text: str, passages: int) -> list[int]:
    """The passages (indexes) an answer cites as [n]."""
    return sorted({int(n) - 1 for n in re.findall(r"\[(\d+)\]", text) if 0 < int(n) <= passages})

"""`ragmcp eval-parse`: how faithfully the parsers read each file of a folder with reference renderings.

The folder holds `source/` (the files), `groundtruth/` (a reference rendering of each, Markdown)
and `MANIFEST.md`, whose table names each file's reference. A file is parsed exactly as
ingestion parses it (`ragmcp.ingest.parsers.parse`, OCR included) and its text is scored against
the reference by token-level F1 on lower-cased words: the words of each side as multisets, their
overlap over the extracted words (precision) and over the reference words (recall). A table row is
read as a sentence that names each cell by its column; the column names count once per table, as
the reference's header line has them. Markdown
markup in the reference (HTML comments such as `<!-- image -->`, link targets, table rules,
escapes, emphasis) is not text and is dropped before counting.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from ragmcp.domain.errors import ParseFailure
from ragmcp.ingest.ocr import PageOcr, page_ocr
from ragmcp.ingest.parsed import ParsedDocument

MEAN_TARGET = 0.90
TEXT_LAYER_TARGET = 0.80
OCR_TARGET = 0.85
START = "<!-- eval-parse:start -->"
END = "<!-- eval-parse:end -->"

_WORD = re.compile(r"\w+")
_CELL = re.compile(r"`([^`]+)`")
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)  # docling placeholders: <!-- image -->, <!-- missing-text -->
_LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\((?:[^()\s]|\([^()\s]*\))*(?:\s+\"[^\"]*\")?\)")
_TABLE_DELIMITER = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$", re.MULTILINE)
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
_EMPHASIS_UNDERSCORE = re.compile(r"(?<!\w)_+|_+(?!\w)")
_MARKUP = re.compile(r"[|#*`>]")


@dataclass(frozen=True, slots=True)
class FileScore:
    file: str
    reference: str
    words: int
    reference_words: int
    precision: float
    recall: float
    f1: float
    ocr_pages: int
    error: str | None = None

    @property
    def target(self) -> float:
        return OCR_TARGET if self.ocr_pages else TEXT_LAYER_TARGET


@dataclass(frozen=True, slots=True)
class ParseReport:
    docs: str
    files: list[FileScore]
    mean_f1: float
    seconds: float

    @property
    def met(self) -> bool:
        return self.mean_f1 >= MEAN_TARGET and all(f.f1 >= f.target for f in self.files)


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def parsed_words(parsed: Sequence[ParsedDocument]) -> list[str]:
    """The words of the parsed text, a table as the reference renders it: its column names once (at
    the first row of a table: a block whose `header` differs from the one before), each row's cells
    without the names its sentence gives them ("Year: 2024; Ducks: 180." reads "2024 180")."""
    found: list[str] = []
    for doc in parsed:
        previous: tuple[str, ...] = ()
        for block in doc.blocks:
            text = block.text
            if block.header and block.header != previous:
                found += words(" ".join(block.header))
            for name in filter(None, block.header):
                text = text.replace(f"{name}: ", " ")
            previous = block.header
            found += words(text)
    return found


def reference_text(markdown: str) -> str:
    """A Markdown rendering stripped down to its words: placeholders, link URLs and syntax go."""
    text = _COMMENT.sub(" ", markdown)
    text = _LINK.sub(r"\1", text)
    text = _TABLE_DELIMITER.sub(" ", text)
    text = _ESCAPE.sub(r"\1", text)
    text = _EMPHASIS_UNDERSCORE.sub(" ", text)
    return _MARKUP.sub(" ", text)


def f1(extracted: Sequence[str], reference: Sequence[str]) -> tuple[float, float, float]:
    """(precision, recall, F1) of two word multisets."""
    overlap = sum((Counter(extracted) & Counter(reference)).values())
    if not overlap:
        return 0.0, 0.0, 0.0
    precision, recall = overlap / len(extracted), overlap / len(reference)
    return precision, recall, 2 * precision * recall / (precision + recall)


def manifest_pairs(manifest: str) -> list[tuple[str, str]]:
    """(file, reference) from each row of MANIFEST.md's table: the first `quoted` name of the
    "file" column and of the "ground truth" column."""
    pairs: list[tuple[str, str]] = []
    columns: dict[str, int] = {}
    for line in manifest.splitlines():
        if not line.startswith("|"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not columns:
            lowered = [cell.lower() for cell in cells]
            file_col = next((i for i, c in enumerate(lowered) if c.startswith("file")), None)
            truth_col = next((i for i, c in enumerate(lowered) if c.startswith("ground truth")), None)
            if file_col is not None and truth_col is not None:
                columns = {"file": file_col, "truth": truth_col}
            continue
        if len(cells) <= max(columns.values()):
            continue
        file_name = _CELL.search(cells[columns["file"]])
        reference = _CELL.search(cells[columns["truth"]])
        if file_name and reference:
            pairs.append((file_name.group(1), reference.group(1)))
    return pairs


def score_file(path: Path, reference: Path, ocr: PageOcr | None) -> FileScore:
    from ragmcp.ingest.parsers import parse

    expected = words(reference_text(reference.read_text(encoding="utf-8")))
    try:
        parsed = parse(path.read_bytes(), path.name, ocr=ocr)
    except ParseFailure as failure:
        return FileScore(path.name, reference.name, 0, len(expected), 0.0, 0.0, 0.0, 0, failure.message)
    got = parsed_words(parsed)
    precision, recall, score = f1(got, expected)
    ocr_pages = sum(len(doc.ocr_pages) for doc in parsed)
    return FileScore(
        path.name, reference.name, len(got), len(expected), round(precision, 4), round(recall, 4), round(score, 4),
        ocr_pages,
    )


def evaluate(docs: Path, *, ocr: bool = True) -> ParseReport:
    """Every file the manifest pairs with a reference, parsed as ingestion would (OCR when `ocr`)."""
    pairs = manifest_pairs((docs / "MANIFEST.md").read_text(encoding="utf-8"))
    if not pairs:
        raise ValueError(f"{docs / 'MANIFEST.md'} names no file with a reference rendering")
    started = time.perf_counter()
    reader = page_ocr() if ocr else None
    files = [score_file(docs / "source" / name, docs / "groundtruth" / ref, reader) for name, ref in pairs]
    mean = sum(f.f1 for f in files) / len(files)
    return ParseReport(str(docs), files, round(mean, 4), round(time.perf_counter() - started, 2))


def markdown(report: ParseReport) -> str:
    lines = [
        "| file | read from | words | reference words | precision | recall | F1 | target |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for f in report.files:
        source = f"OCR ({f.ocr_pages} page{'s' if f.ocr_pages > 1 else ''})" if f.ocr_pages else "text"
        if f.error:
            source = f"failed: {f.error}"
        mark = "" if f.f1 >= f.target else " **below**"
        lines.append(
            f"| {f.file} | {source} | {f.words} | {f.reference_words} | {f.precision:.3f} | {f.recall:.3f}"
            f" | {f.f1:.3f} | {f.target:.2f}{mark} |"
        )
    lines.append(f"| **mean** | | | | | | **{report.mean_f1:.3f}** | {MEAN_TARGET:.2f} |")
    return "\n".join(lines) + "\n"


def write(report: ParseReport, benchmarks: Path, results: Path) -> tuple[Path, Path]:
    """The table into BENCHMARKS.md between the eval-parse markers (appended the first time),
    and the report as JSON."""
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    block = f"{START}\n{markdown(report)}{END}"
    text = benchmarks.read_text(encoding="utf-8") if benchmarks.is_file() else ""
    if START in text and END in text:
        head, rest = text.split(START, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + f"\n\n## Parsing: `ragmcp eval-parse`\n\n{block}\n"
    benchmarks.write_text(text, encoding="utf-8")
    results.parent.mkdir(parents=True, exist_ok=True)
    payload = {"kind": "eval-parse", "at": at, **asdict(report), "met": report.met}
    results.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return benchmarks, results

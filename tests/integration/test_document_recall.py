"""Token recall of the parsers against reference renderings of the shared test documents.

For every file in <shared>/documents/source the reference rendering named in
<shared>/documents/MANIFEST.md (docling's Markdown export, in groundtruth/) is reduced to
plain text and tokenised; recall is the share of its tokens (a multiset, lower-cased,
unicode word tokens) that the parsed text also contains. <shared> is the repository's
sibling directory "shared", or the directory named by RAGMCP_SHARED_DIR.

Run with `pytest -s` to see the recall table printed at the end of the module.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragmcp.domain.errors import ParseFailure
from ragmcp.ingest.parsers import NO_TEXT, parse

SHARED = Path(os.environ.get("RAGMCP_SHARED_DIR") or Path(__file__).resolve().parents[2].parent / "shared")
DOCUMENTS = SHARED / "documents"
MIN_RECALL = 0.90
EXPECTED_FAILURES = {"ocr_test.pdf": NO_TEXT}

if not (DOCUMENTS / "MANIFEST.md").is_file() or not (DOCUMENTS / "source").is_dir():
    pytest.skip(
        f"shared test documents not found at {DOCUMENTS} (set RAGMCP_SHARED_DIR to the directory holding documents/)",
        allow_module_level=True,
    )

_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)  # docling placeholders: <!-- image -->, <!-- missing-text -->
_LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\((?:[^()\s]|\([^()\s]*\))*(?:\s+\"[^\"]*\")?\)")
_TABLE_DELIMITER = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$", re.MULTILINE)
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
_EMPHASIS_UNDERSCORE = re.compile(r"(?<!\w)_+|_+(?!\w)")
_MARKUP = re.compile(r"[|#*`>]")
_WORD = re.compile(r"\w+")

RECALLS: dict[str, float | str] = {}


def markdown_to_text(markdown: str) -> str:
    """Strip the Markdown rendering down to its words: placeholders, link URLs and syntax go."""
    text = _COMMENT.sub(" ", markdown)
    text = _LINK.sub(r"\1", text)
    text = _TABLE_DELIMITER.sub(" ", text)
    text = _ESCAPE.sub(r"\1", text)
    text = _EMPHASIS_UNDERSCORE.sub(" ", text)
    return _MARKUP.sub(" ", text)


def tokens(text: str) -> Counter[str]:
    return Counter(_WORD.findall(text.lower()))


def token_recall(reference: str, extracted: str) -> float:
    expected = tokens(markdown_to_text(reference))
    return sum((expected & tokens(extracted)).values()) / sum(expected.values())


def manifest() -> dict[str, str]:
    """Source file name -> ground-truth file name, from the MANIFEST table."""
    mapping = {}
    for line in (DOCUMENTS / "MANIFEST.md").read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 7 and cells[0].isdigit():
            source = cells[1].strip("`")
            mapping[source] = re.match(r"`([^`]+)`", cells[6]).group(1)  # type: ignore[union-attr]
    return mapping


GROUND_TRUTH = manifest()
SOURCES = sorted(path.name for path in (DOCUMENTS / "source").iterdir() if path.is_file())


@pytest.fixture(scope="module", autouse=True)
def recall_report() -> Iterator[None]:
    yield
    print(f"\n\ntoken recall against {DOCUMENTS / 'groundtruth'} (minimum {MIN_RECALL:.2f})")
    for name in SOURCES:
        value = RECALLS.get(name, "not run")
        print(f"  {name:<36} {value:.4f}" if isinstance(value, float) else f"  {name:<36} {value}")


def test_every_source_has_a_ground_truth() -> None:
    assert set(SOURCES) <= set(GROUND_TRUTH), f"not in MANIFEST.md: {sorted(set(SOURCES) - set(GROUND_TRUTH))}"


@pytest.mark.parametrize("name", SOURCES)
def test_document_recall(name: str) -> None:
    data = (DOCUMENTS / "source" / name).read_bytes()
    if name in EXPECTED_FAILURES:
        with pytest.raises(ParseFailure) as caught:
            parse(data, name)
        RECALLS[name] = f"ParseFailure: {caught.value.message}"
        assert caught.value.message == EXPECTED_FAILURES[name]
        return
    extracted = "\n".join(document.text for document in parse(data, name))
    reference = (DOCUMENTS / "groundtruth" / GROUND_TRUTH[name]).read_text(encoding="utf-8")
    recall = token_recall(reference, extracted)
    RECALLS[name] = recall
    assert recall >= MIN_RECALL, f"{name}: token recall {recall:.4f} < {MIN_RECALL} against {GROUND_TRUTH[name]}"

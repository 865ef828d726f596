"""Each shared test document against its reference rendering, scored as `ragmcp eval-parse` scores it.

For every file in <shared>/documents/source the reference rendering named in
<shared>/documents/MANIFEST.md (docling's Markdown export, in groundtruth/) is reduced to its
words; the parsed text (OCR on, as ingestion runs it) must reach the token F1 target of its kind
(text layer 0.80, OCR 0.85) and recall 0.90. <shared> is the repository's sibling directory
"shared", or the directory named by RAGMCP_SHARED_DIR.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ragmcp.ingest.ocr import page_ocr
from ragmcp_bench import parse_eval

SHARED = Path(os.environ.get("RAGMCP_SHARED_DIR") or Path(__file__).resolve().parents[2].parent / "shared")
DOCUMENTS = SHARED / "documents"
MIN_RECALL = 0.90
SCANNED = {"ocr_test.pdf"}

if not (DOCUMENTS / "MANIFEST.md").is_file() or not (DOCUMENTS / "source").is_dir():
    pytest.skip(
        f"shared test documents not found at {DOCUMENTS} (set RAGMCP_SHARED_DIR to the directory holding documents/)",
        allow_module_level=True,
    )

GROUND_TRUTH = dict(parse_eval.manifest_pairs((DOCUMENTS / "MANIFEST.md").read_text(encoding="utf-8")))
SOURCES = sorted(path.name for path in (DOCUMENTS / "source").iterdir() if path.is_file())


def test_every_source_has_a_ground_truth() -> None:
    assert set(SOURCES) <= set(GROUND_TRUTH), f"not in MANIFEST.md: {sorted(set(SOURCES) - set(GROUND_TRUTH))}"


@pytest.mark.parametrize("name", SOURCES)
def test_document_matches_its_reference(name: str) -> None:
    score = parse_eval.score_file(
        DOCUMENTS / "source" / name, DOCUMENTS / "groundtruth" / GROUND_TRUTH[name], page_ocr()
    )
    assert score.error is None
    assert (score.ocr_pages > 0) == (name in SCANNED)
    assert score.f1 >= score.target, f"{name}: token F1 {score.f1:.4f} < {score.target}"
    assert score.recall >= MIN_RECALL, f"{name}: token recall {score.recall:.4f} < {MIN_RECALL}"

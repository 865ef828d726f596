"""PDF text through the whole pipeline: scanned pages read by OCR and searchable by their words,
the OCR setting, re-reading files a newer parser reads differently, and `ragmcp eval-parse`."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from ragmcp.bootstrap import build_services
from ragmcp.cli import main
from ragmcp.domain.models import Principal
from ragmcp.ingest import ocr
from ragmcp.ingest.filetypes import parser_version
from ragmcp.ingest.parsers import NO_TEXT_NO_OCR
from ragmcp.retrieval.service import SearchRequest
from ragmcp.settings import Settings
from ragmcp_bench import parse_eval

ME = Principal(tenant="default")


@pytest.fixture
def folder(tmp_path: Path, shared_documents: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("ocr_test.pdf", "multi_page.pdf"):
        shutil.copy(shared_documents / "source" / name, docs / name)
    (docs / "notes.txt").write_text("Geese graze on land.\n")
    return docs


def search(services, phrase: str, mode: str = "fts") -> list[tuple[str, int | None]]:
    result = services.search.search(ME, SearchRequest(phrases=[phrase], mode=mode, top_k=5))
    return [(hit.document.path, hit.chunk.page_start) for hit in result.hits]


def test_a_scanned_pdf_is_searchable_by_its_words(tmp_path: Path, folder: Path) -> None:
    services = build_services(Settings(data_dir=tmp_path / "data"))
    source = services.register_folder("default", "docs", str(folder))
    report = services.ingest.sync(source)
    assert (report.ingested, report.failed) == (3, 0)
    assert search(services, "docling bundles conversion self contained package")[0] == ("ocr_test.pdf", 1)
    assert search(services, "convert PDF documents to Markdown", mode="hybrid")[0][0] == "ocr_test.pdf"


def test_with_ocr_off_a_scanned_pdf_fails_with_a_reason(tmp_path: Path, folder: Path) -> None:
    services = build_services(Settings(data_dir=tmp_path / "data", ocr=False))
    source = services.register_folder("default", "docs", str(folder))
    report = services.ingest.sync(source)
    assert (report.ingested, report.failed) == (2, 1)
    [failed] = [job for job in report.jobs if job.status == "failed"]
    assert failed.target == "ocr_test.pdf" and failed.error == NO_TEXT_NO_OCR
    assert search(services, "docling bundles conversion") == []


def test_where_ocr_is_not_installed_scanned_pages_are_skipped(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As on Lambda, whose layer leaves rapidocr-onnxruntime out (and which parses in its own process)."""
    found = importlib.util.find_spec
    monkeypatch.setattr(
        ocr.importlib.util, "find_spec", lambda name, *a: None if name == "rapidocr_onnxruntime" else found(name, *a)
    )
    ocr.page_ocr.cache_clear()
    try:
        assert ocr.page_ocr() is None
        services = build_services(Settings(data_dir=tmp_path / "data", parse_sandbox=False))
        report = services.ingest.sync(services.register_folder("default", "docs", str(folder)))
        assert [(job.target, job.error) for job in report.jobs if job.status == "failed"] == [
            ("ocr_test.pdf", NO_TEXT_NO_OCR)
        ]
        assert search(services, "evolution of the word processor")[0][0] == "multi_page.pdf"
    finally:
        ocr.page_ocr.cache_clear()


def test_files_read_by_an_older_parser_are_read_again(tmp_path: Path, folder: Path) -> None:
    services = build_services(Settings(data_dir=tmp_path / "data"))
    source = services.register_folder("default", "docs", str(folder))
    services.ingest.sync(source)
    [pdf] = services.documents.by_path("default", "docs", "multi_page.pdf")
    assert pdf.parser_version == parser_version("pdf") > 1
    services.documents.put(pdf.model_copy(update={"parser_version": 1}))
    report = services.ingest.sync(source)
    assert [job.target for job in report.jobs] == ["multi_page.pdf"]
    assert report.unchanged == 2
    [again] = services.documents.by_path("default", "docs", "multi_page.pdf")
    assert again.parser_version == parser_version("pdf") and again.doc_id == pdf.doc_id


def test_manifest_rows_name_each_file_and_its_reference() -> None:
    manifest = (
        "| # | file (source/) | type | ground truth (groundtruth/) |\n|---|---|---|---|\n"
        "| 1 | `a.pdf` | pdf | `a.md` (`pdf/groundtruth/a.md`) |\n"
        "| 2 | `b.docx` | docx | `b.docx.md` |\n"
        "| 3 | no file here | x | `c.md` |\n"
    )
    assert parse_eval.manifest_pairs(manifest) == [("a.pdf", "a.md"), ("b.docx", "b.docx.md")]


def test_token_f1_counts_words_as_multisets() -> None:
    markdown = "## The duck\n\n<!-- image -->\n[duck](https://x.org/y) eats"
    reference = parse_eval.words(parse_eval.reference_text(markdown))
    assert reference == ["the", "duck", "duck", "eats"]
    assert parse_eval.f1(["the", "duck", "duck", "eats"], reference) == (1.0, 1.0, 1.0)
    precision, recall, score = parse_eval.f1(["the", "duck", "swims"], reference)
    assert (precision, recall) == (2 / 3, 2 / 4) and score == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))
    assert parse_eval.f1(["geese"], reference) == (0.0, 0.0, 0.0)


def test_a_tables_column_names_count_once_as_its_reference_renders_them(tmp_path: Path) -> None:
    """Each row of a table reads as a sentence naming its cells ("Year: 2023; Ducks: 160."), so the
    column names are in every row; the reference renders them once, in the header line. Reading the
    table right scores F1 1.0, not less for every row."""
    table = "| Year | Freshwater Ducks |\n|---|---|\n| 2022 | 140 |\n| 2023 | 160 |\n| 2024 | 180 |\n"
    source, reference = tmp_path / "ducks.md", tmp_path / "ducks.ref.md"
    source.write_text(f"# Counts\n\n{table}")
    reference.write_text(f"## Counts\n\n{table}")
    score = parse_eval.score_file(source, reference, None)
    assert (score.words, score.reference_words, score.f1) == (10, 10, 1.0)


def test_eval_parse_scores_the_shared_documents_and_writes_the_table(
    tmp_path: Path, shared_documents: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    benchmarks = tmp_path / "BENCHMARKS.md"
    benchmarks.write_text("# Benchmarks\n\nkept\n")
    out = tmp_path / "parse.json"
    args = ["eval-parse", "--docs", str(shared_documents), "--benchmarks", str(benchmarks), "--out", str(out)]
    assert main(args) == 0
    report = json.loads(out.read_text())
    scores = {f["file"]: f for f in report["files"]}
    assert report["met"] and report["mean_f1"] >= parse_eval.MEAN_TARGET
    assert scores["ocr_test.pdf"]["ocr_pages"] == 1 and scores["ocr_test.pdf"]["f1"] >= parse_eval.OCR_TARGET
    assert all(f["f1"] >= parse_eval.TEXT_LAYER_TARGET for f in report["files"] if not f["ocr_pages"])
    assert scores["redp5110_sampled.pdf"]["f1"] >= 0.9
    written = benchmarks.read_text()
    assert written.startswith("# Benchmarks\n\nkept\n") and written.count(parse_eval.START) == 1
    assert main(args) == 0  # a second run replaces the table instead of adding another
    assert benchmarks.read_text().count(parse_eval.START) == 1
    assert "| redp5110_sampled.pdf | text |" in capsys.readouterr().out

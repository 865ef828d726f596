"""`ragmcp serve --docs` over a folder of hostile files among ordinary ones (issue 29), as
`ragmcp bench hostile` measures it: each hostile file fails alone with its reason, the ordinary
files are indexed and found, and the server's process tree stays far under 1.5 GB."""

from __future__ import annotations

from ragmcp_bench import bench_hostile, hostile


def test_a_hostile_folder_is_served_within_the_memory_budget_with_the_rest_indexed() -> None:
    files = [
        hostile.Hostile("sparse.xlsx", hostile.sparse_xlsx, ""),
        hostile.Hostile("inflating.docx", lambda: hostile.inflating_docx(140 * 1024 * 1024), ""),
        hostile.Hostile("one-line.html", lambda: hostile.one_line_html(10 * 1024 * 1024), ""),
        hostile.Hostile("columns.csv", lambda: hostile.columns_csv(1_000_000), ""),
        hostile.Hostile("scanned.pdf", lambda: hostile.scanned_pdf(51), ""),
        hostile.Hostile("many-pages.pdf", lambda: hostile.many_pages_pdf(2_001), ""),
        hostile.Hostile("blob.txt", lambda: hostile.no_space_text(12_000_000), ""),
        hostile.Hostile("random.md", lambda: hostile.random_bytes(1024 * 1024), ""),
    ]
    result = bench_hostile.run(files=files, timeout=600)
    reasons = {name: outcome for name, outcome in result.files.items() if not outcome.startswith("indexed")}
    assert sorted(reasons) == sorted(f.name for f in files if f.name != "sparse.xlsx")
    assert reasons["scanned.pdf"].endswith("(over the limit RAGMCP_PARSE_MAX_OCR_PAGES=50)")
    assert reasons["random.md"] == "binary content (NUL bytes), not text"
    assert result.ordinary_indexed and result.files["sparse.xlsx"] == "indexed (1 chunks)"
    assert result.sync_line == "4 ingested, 7 failed"
    assert result.peak_tree_mb < 1536, result

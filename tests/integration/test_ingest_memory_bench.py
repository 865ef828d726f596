"""`ragmcp bench ingest-memory`: the ingest handler's peak memory on a document, on the AWS emulator,
with the deployed embedder (Bedrock, moto answering) held to the budget and the embedded one beside it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_ingest_memory_reports_the_handlers_peak_on_the_largest_file(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "short.md").write_text("# Short\n\nA line.\n")
    largest = docs / "tides.md"
    largest.write_text("# Tides\n\n" + "Spring tides follow the new and full moon. " * 40 + "\n")
    out = tmp_path / "memory.json"
    result = subprocess.run(
        [sys.executable, "-m", "ragmcp.cli", "bench", "ingest-memory", "--path", str(docs), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["kind"] == "ingest-memory"
    rows = {row["embedder"]: row for row in report["results"]}
    assert set(rows) == {"bedrock", "onnx"}
    for row in rows.values():
        assert row["file"] == str(largest)
        assert row["chunks"] >= 1
        assert 0 < row["peak_rss_mb"] < 4096
        assert row["seconds"] > 0
    assert rows["bedrock"]["budget_mb"] == 1024 and rows["bedrock"]["within_budget"] is True
    assert rows["onnx"]["budget_mb"] is None
    assert rows["onnx"]["peak_rss_mb"] > rows["bedrock"]["peak_rss_mb"]

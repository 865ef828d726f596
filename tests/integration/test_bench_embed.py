"""`ragmcp bench embed` on a few SciFact abstracts with the real model: two thread layouts measured
side by side, each figure with the machine's load and CPU flags beside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragmcp import cli

TEXTS = 8


def test_bench_embed_measures_each_layout(scifact: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "embed.json"
    argv = ["--data-dir", str(tmp_path / "data"), "bench", "embed", "--dataset", str(scifact), "--texts", str(TEXTS)]
    argv += ["--layouts", "2x1,1x1", "--batch-sizes", "4", "--rounds", "2", "--max-other-share", "1", "--out", str(out)]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "| today | 4 | 2x1 | " in printed and "| today | 4 | 1x1 | " in printed
    result = json.loads(out.read_text())
    assert result["kind"] == "embed" and result["texts"] == TEXTS and result["quiet"] is True
    assert 50 < result["tokens_mean"] <= 256
    assert result["cpu"]["cpus"] >= 1 and "flags" in result["cpu"]
    rows = result["rows"]
    assert [(r["variant"], r["batch"], r["layout"]) for r in rows] == [("today", 4, "2x1"), ("today", 4, "1x1")]
    assert rows[0]["ratio_to_first"] == 1.0
    for row in rows:
        assert row["texts_per_s"] > 0 and row["cpu_ms_per_text"] > 1
        assert 0 <= row["padding"] < 1
        assert len(row["measures"]) == 2
        for taken in row["measures"]:
            window = taken["window"]
            assert len(window["load_average"]["start"]) == 3 and window["max_other_share"] == 1
            assert window["measured_cpu_s"] > 0 and 0 <= window["other_share"] <= 1


def test_bench_embed_refuses_bad_arguments(scifact: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    base = ["--data-dir", str(tmp_path), "bench", "embed", "--dataset", str(scifact)]
    assert cli.main([*base, "--layouts", "2by1"]) == 2
    assert "RUNSxINTRA" in capsys.readouterr().err
    assert cli.main([*base, "--variants", "fp8"]) == 2
    assert "unknown variant fp8" in capsys.readouterr().err
    assert cli.main(["--data-dir", str(tmp_path), "bench", "embed", "--dataset", str(tmp_path)]) == 2


def test_bench_embed_ingest_measures_the_pipeline_against_the_floor_on_the_same_chunks(
    scifact: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "ingest.json"
    argv = ["--data-dir", str(tmp_path / "data"), "bench", "embed", "--ingest", "--dataset", str(scifact)]
    argv += ["--texts", str(TEXTS), "--rounds", "1", "--max-other-share", "1", "--out", str(out)]
    assert cli.main(argv) == 0
    assert "median floor/ingest (chunks/s)" in capsys.readouterr().out
    result = json.loads(out.read_text())
    [taken] = result["rounds"]
    assert result["kind"] == "embed-ingest" and "flags" in result["cpu"]
    assert taken["chunks"] >= TEXTS  # every abstract stored, at least one chunk each
    assert taken["ingest_chunks_per_s"] > 0 and taken["floor_chunks_per_s"] > 0
    assert taken["ingest_cpu_ms_per_chunk"] > 1 and taken["floor_cpu_ms_per_chunk"] > 1
    assert taken["ingest_window"]["measured_cpu_s"] > 0 and taken["floor_window"]["quiet"] is True
    assert list((tmp_path / "data").iterdir()) == []  # each round's data directory is removed after it

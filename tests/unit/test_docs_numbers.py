"""README and BENCHMARKS.md state no figure that drifts unseen: no test count (a command prints it), and
the machine section names every CPU flag the benchmark sections say their runs had."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FLAGS = ("avx512f", "avx512_vnni")


def test_readme_states_no_test_count() -> None:
    counts = re.findall(r"\b\d[\d,]* (?:of the \d[\d,]* )?tests\b", (ROOT / "README.md").read_text())
    assert counts == [], "say which command prints the count (pytest --collect-only -q | tail -1) instead"


def machine_section(text: str) -> str:
    return text.split("## The machine", 1)[1].split("\n## ", 1)[0]


def flags_missing_from_the_machine_section(text: str) -> list[str]:
    machine = machine_section(text)
    return [flag for flag in FLAGS if flag in text.replace(machine, "") and flag not in machine]


def test_the_benchmarks_machine_section_names_the_flags_its_runs_report() -> None:
    assert flags_missing_from_the_machine_section((ROOT / "BENCHMARKS.md").read_text()) == []


def test_the_flag_check_finds_a_machine_line_that_denies_what_a_table_lists() -> None:
    text = "## The machine\n\nEPYC, AVX2, no AVX-512/VNNI\n\n## Scale\n\navx2, avx512f, avx512_vnni\n"
    assert flags_missing_from_the_machine_section(text) == ["avx512f", "avx512_vnni"]

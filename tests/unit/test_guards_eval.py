"""The ingest guards measured on the labelled sets of tests/data, by the code `ragmcp eval-guards`
runs: the targets hold on the rows the detectors were tuned on and on the held-out rows."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from ragmcp.cli import main
from ragmcp_bench import guard_eval

DATA = Path(__file__).resolve().parents[1] / "data"
INJECTION = DATA / "injection_labelled.jsonl"
PII = DATA / "pii_labelled.jsonl"


@pytest.fixture(scope="module")
def report() -> guard_eval.GuardReport:
    return guard_eval.evaluate(INJECTION, PII)


def test_the_labelled_sets_are_large_varied_and_hold_rows_out() -> None:
    rows = [json.loads(line) for line in INJECTION.read_text().splitlines()]
    labels = Counter(r["label"] for r in rows)
    assert len(rows) >= 100 and labels["attack"] >= 50 and labels["benign"] >= 50
    assert len({r["lang"] for r in rows if r["label"] == "attack"}) >= 8
    assert len({r["lang"] for r in rows if r["label"] == "benign"}) >= 5
    assert Counter(r["split"] for r in rows)["held_out"] >= len(rows) // 4
    pii = [json.loads(line) for line in PII.read_text().splitlines()]
    items = Counter(item["kind"] for row in pii for item in row["pii"])
    assert sum(items.values()) >= 150 and sum(not row["pii"] for row in pii) >= 100
    assert set(items) == {"EMAIL", "PHONE", "SSN", "CARD", "IBAN"} and min(items.values()) >= 20
    assert Counter(r["split"] for r in pii)["held_out"] >= len(pii) // 4
    assert len({r["text"] for r in rows}) == len(rows) and len({r["text"] for r in pii}) == len(pii)


@pytest.mark.parametrize("split", guard_eval.SPLITS)
def test_injection_recall_and_false_alarms_meet_the_targets(report: guard_eval.GuardReport, split: str) -> None:
    score = report.injection[split]
    assert score.recall >= guard_eval.INJECTION_RECALL, score.missed
    assert score.false_alarm_rate <= guard_eval.INJECTION_FALSE_ALARMS, score.flagged


@pytest.mark.parametrize("split", guard_eval.SPLITS)
def test_pii_precision_and_recall_meet_the_targets(report: guard_eval.GuardReport, split: str) -> None:
    score = report.pii[split]
    assert score.recall >= guard_eval.PII_RECALL, score.missed
    assert score.precision >= guard_eval.PII_PRECISION, score.wrong


def test_eval_guards_prints_the_table_and_rewrites_its_section(tmp_path: Path, capsys) -> None:
    benchmarks = tmp_path / "BENCHMARKS.md"
    before = "# Benchmarks\n\n## Before\n\nkept\n\n"
    benchmarks.write_text(f"{before}{guard_eval.SECTION}\n\nold\n\n## After\n\nkept too\n")
    args = ["eval-guards", "--injection", str(INJECTION), "--pii", str(PII), "--benchmarks", str(benchmarks)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "| prompt injection | held_out |" in printed and "| PII | tune |" in printed
    assert main(args) == 0
    text = benchmarks.read_text()
    assert text.count(guard_eval.SECTION) == 1 and "old" not in text
    assert text.index("## Before") < text.index(guard_eval.SECTION) < text.index("## After")
    assert printed.strip() in text and "kept too" in text


def test_eval_guards_fails_when_a_target_is_missed(tmp_path: Path) -> None:
    attacks = tmp_path / "injection.jsonl"
    quiet = {"label": "attack", "lang": "en", "split": "tune"}
    attacks.write_text("\n".join(json.dumps({**quiet, "text": f"Please water plant number {n}."}) for n in range(5)))
    assert main(["eval-guards", "--injection", str(attacks), "--pii", str(PII), "--no-write"]) == 1
    assert main(["eval-guards", "--injection", str(tmp_path / "none.jsonl"), "--no-write"]) == 2

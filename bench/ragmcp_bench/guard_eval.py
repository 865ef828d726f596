"""`ragmcp eval-guards`: precision and recall of the ingest guards on labelled sets.

Two sets, one JSON object a line, each row with a `split`: `tune` (the detectors may be adjusted
to it) or `held_out` (never looked at while adjusting: it says how well they generalise):

- prompt injection: `{"text", "label": "attack" | "benign", "lang", "split"}`, scored per passage
  with `poisoning.flags_for`: recall over attacks, false-alarm rate over benign passages.
- PII: `{"text", "pii": [{"kind", "value"}], "split"}` (an empty list: a look-alike), scored per
  item with `redaction.find_pii`: a finding counts when kind and span match a labelled item exactly.

The targets: injection recall >= 0.80 at a false-alarm rate <= 0.05; PII precision and recall >= 0.98.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, Field

from ragmcp.ingest.poisoning import PROMPT_INJECTION, flags_for
from ragmcp.ingest.redaction import find_pii

INJECTION_RECALL = 0.80
INJECTION_FALSE_ALARMS = 0.05
PII_PRECISION = PII_RECALL = 0.98
SPLITS = ("tune", "held_out")
SECTION = "## Ingest guards: `ragmcp eval-guards`"


class InjectionRow(BaseModel):
    text: str
    label: str = Field(pattern="^(attack|benign)$")
    lang: str
    split: str = Field(pattern="^(tune|held_out)$")


class PiiItem(BaseModel):
    kind: str
    value: str


class PiiRow(BaseModel):
    text: str
    pii: list[PiiItem]
    split: str = Field(pattern="^(tune|held_out)$")


@dataclass
class InjectionScore:
    split: str
    attacks: int = 0
    benign: int = 0
    caught: int = 0
    false_alarms: int = 0
    missed: list[str] = field(default_factory=list)
    flagged: list[str] = field(default_factory=list)

    @property
    def recall(self) -> float:
        return self.caught / self.attacks if self.attacks else 1.0

    @property
    def false_alarm_rate(self) -> float:
        return self.false_alarms / self.benign if self.benign else 0.0

    @property
    def meets_targets(self) -> bool:
        return self.recall >= INJECTION_RECALL and self.false_alarm_rate <= INJECTION_FALSE_ALARMS


@dataclass
class PiiScore:
    split: str
    items: int = 0
    look_alikes: int = 0
    true_pos: int = 0
    false_pos: int = 0
    missed: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)

    @property
    def precision(self) -> float:
        found = self.true_pos + self.false_pos
        return self.true_pos / found if found else 1.0

    @property
    def recall(self) -> float:
        return self.true_pos / self.items if self.items else 1.0

    @property
    def meets_targets(self) -> bool:
        return self.precision >= PII_PRECISION and self.recall >= PII_RECALL


def _rows(path: Path, model: type[BaseModel]) -> Iterable[BaseModel]:
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                yield model.model_validate_json(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: {exc}") from None


def score_injection(path: Path) -> dict[str, InjectionScore]:
    scores = {split: InjectionScore(split) for split in SPLITS}
    for row in _rows(path, InjectionRow):
        assert isinstance(row, InjectionRow)
        score = scores[row.split]
        flagged = PROMPT_INJECTION in flags_for(row.text)
        if row.label == "attack":
            score.attacks += 1
            score.caught += flagged
            if not flagged:
                score.missed.append(row.text)
        else:
            score.benign += 1
            score.false_alarms += flagged
            if flagged:
                score.flagged.append(row.text)
    return scores


def _spans(text: str, value: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in re.finditer(re.escape(value), text)]


def score_pii(path: Path) -> dict[str, PiiScore]:
    scores = {split: PiiScore(split) for split in SPLITS}
    for row in _rows(path, PiiRow):
        assert isinstance(row, PiiRow)
        score = scores[row.split]
        gold = {(item.kind, *span) for item in row.pii for span in _spans(row.text, item.value)[:1]}
        found = {(f.kind, f.start, f.end) for f in find_pii(row.text)}
        score.items += len(gold)
        score.look_alikes += not row.pii
        score.true_pos += len(gold & found)
        score.false_pos += len(found - gold)
        score.missed += [f"{kind} {row.text[s:e]!r} in {row.text!r}" for kind, s, e in sorted(gold - found)]
        score.wrong += [f"{kind} {row.text[s:e]!r} in {row.text!r}" for kind, s, e in sorted(found - gold)]
    return scores


@dataclass
class GuardReport:
    injection: dict[str, InjectionScore]
    pii: dict[str, PiiScore]

    @property
    def meets_targets(self) -> bool:
        return all(s.meets_targets for s in [*self.injection.values(), *self.pii.values()])


def evaluate(injection: Path, pii: Path) -> GuardReport:
    return GuardReport(score_injection(injection), score_pii(pii))


def markdown(report: GuardReport, command: str) -> str:
    lines = [
        SECTION,
        "",
        f"`{command}` (deterministic: no timing, no model; the same code the tests assert the targets with).",
        "The detectors were adjusted on the `tune` rows only; `held_out` rows were scored, never tuned on (both",
        "parts were written by hand, by the author of the rules: see the README's limits).",
        "",
        "| guard | split | labelled | precision | recall | false alarms | target met |",
        "|---|---|---|---|---|---|---|",
    ]
    for split, s in report.injection.items():
        flagged = s.caught + s.false_alarms
        precision = s.caught / flagged if flagged else 1.0
        lines.append(
            f"| prompt injection | {split} | {s.attacks} attacks, {s.benign} benign | {precision:.3f} | "
            f"{s.recall:.3f} | {s.false_alarms}/{s.benign} ({s.false_alarm_rate:.3f}) | "
            f"{'yes' if s.meets_targets else 'NO'} |"
        )
    for split, p in report.pii.items():
        lines.append(
            f"| PII | {split} | {p.items} items, {p.look_alikes} look-alikes | {p.precision:.3f} | {p.recall:.3f} | "
            f"{p.false_pos} | {'yes' if p.meets_targets else 'NO'} |"
        )
    lines += [
        "",
        f"Targets: injection recall >= {INJECTION_RECALL:.2f} at a false-alarm rate <= {INJECTION_FALSE_ALARMS:.2f};"
        f" PII precision and recall >= {PII_PRECISION:.2f}.",
    ]
    misses = [
        *(f"- injection missed ({s.split}): {t}" for s in report.injection.values() for t in s.missed),
        *(f"- injection false alarm ({s.split}): {t}" for s in report.injection.values() for t in s.flagged),
        *(f"- PII missed ({p.split}): {t}" for p in report.pii.values() for t in p.missed),
        *(f"- PII false finding ({p.split}): {t}" for p in report.pii.values() for t in p.wrong),
    ]
    if misses:
        lines += ["", "What the guards get wrong on these sets:", "", *misses]
    return "\n".join(lines) + "\n"


def write_section(path: Path, section: str) -> None:
    """Replace the guards' section of BENCHMARKS.md (up to the next `## `), or append it."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    start = text.find(SECTION)
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + len(SECTION))
        text = text[:start] + section + (text[end + 1 :] if end >= 0 else "")
    path.write_text(text, encoding="utf-8")


def as_json(report: GuardReport) -> str:
    def injection(s: InjectionScore) -> dict[str, float | int]:
        return {"attacks": s.attacks, "benign": s.benign, "recall": s.recall, "false_alarm_rate": s.false_alarm_rate}

    def pii(p: PiiScore) -> dict[str, float | int]:
        return {"items": p.items, "look_alikes": p.look_alikes, "precision": p.precision, "recall": p.recall}

    return json.dumps(
        {
            "injection": {k: injection(v) for k, v in report.injection.items()},
            "pii": {k: pii(v) for k, v in report.pii.items()},
        },
        indent=2,
    )

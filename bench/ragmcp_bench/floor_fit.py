"""`ragmcp eval-floor`: fit the relevance floor on some collections, report it on others.

Reads the reports `ragmcp eval --off-topic` writes (each holds, per query, the cosine and word
coverage of its top hits and, for a judged query, its nDCG@10 without a floor; the off-topic
queries were searched over the same collection). The floor silences a query when none of its top
hits has a floor score (cosine + weight x coverage) at the floor, else keeps every hit, so each
(weight, floor) pair's outcome follows from these figures without searching again.

Fitting: the reports of the `train` split, the even-numbered questions of a set without splits
(`ragmcp eval-qa`'s), and the even-numbered off-topic queries. Among the pairs that cost no fitted
collection more than `budget` nDCG@10 nor silence more than MAX_SILENCED of its judged queries, the
one that silences the most off-topic queries (ties: the lower floor). Reporting: the `test` split, the odd-numbered
questions and the odd-numbered off-topic queries, never seen by the fit.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from ragmcp_bench.evaluation import FloorQuery, best_floor_score

WEIGHTS = tuple(round(0.1 * i, 1) for i in range(6))
FLOORS = tuple(round(0.2 + 0.01 * i, 2) for i in range(41))
BUDGET = 0.002
"""The most nDCG@10 the floor may cost a fitted collection (the rule is 0.005 on every collection)."""
MAX_SILENCED = 0.005
"""The largest share of a fitted collection's judged queries the floor may silence: without it, a
floor that silenced one on-topic query at a small cost could rise until it had spent the budget."""


@dataclass(frozen=True, slots=True)
class Part:
    """One collection's queries as the floor sees them: judged ones and off-topic ones, and the
    collection's best nDCG@10 of a mode without a floor (from the same report)."""

    name: str
    judged: list[FloorQuery]
    off_topic: list[FloorQuery]
    best_mode: tuple[str, float] | None = None


@dataclass(slots=True)
class Outcome:
    part: str
    ndcg_without: float
    ndcg_with: float
    judged_silenced: float
    off_topic_silenced: float
    best_mode: str | None = None
    best_ndcg: float | None = None
    """The collection's best mode without a floor: the default must stay within 0.005 of it."""


@dataclass(slots=True)
class Fit:
    weight: float
    floor: float
    budget: float
    fitted_on: list[Outcome]
    reported_on: list[Outcome]


def load(paths: Sequence[Path]) -> tuple[list[Part], list[Part]]:
    """(parts to fit on, parts to report on) from eval reports: train splits and even off-topic
    queries are fitted on; test splits and odd off-topic queries are reported on."""
    fit, report = [], []
    for path in paths:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not data.get("floor"):
            raise ValueError(f"{path} has no floor calibration: run `ragmcp eval --off-topic`")
        queries = [FloorQuery(q["query"], q["ndcg"], [tuple(h) for h in q["hits"]]) for q in data["floor"]["queries"]]
        judged = [q for q in queries if q.ndcg is not None]
        off = [q for q in queries if q.ndcg is None]
        if data["split"] == "all":  # one set of questions: fit on the even-numbered, report on the odd
            fit.append(Part(f"{data['dataset']} (even questions)", judged[0::2], _half(off, fitted=True)))
            report.append(Part(f"{data['dataset']} (odd questions)", judged[1::2], _half(off, fitted=False)))
            continue
        fitted = data["split"] == "train"
        name = f"{data['dataset']} {data['split']}"
        (fit if fitted else report).append(Part(name, judged, _half(off, fitted), _best_mode(data)))
    return fit, report


def _best_mode(data: dict) -> tuple[str, float] | None:
    """The best nDCG@10 of the report's modes that have no floor (not `default`)."""
    scored = [(r["mode"], r["metrics"]["ndcg@10"]) for r in data.get("results", []) if r["mode"] != "default"]
    return max(scored, key=lambda pair: pair[1], default=None)


def _half(off_topic: list[FloorQuery], fitted: bool) -> list[FloorQuery]:
    """The even-numbered off-topic queries to fit on, the odd-numbered to report on."""
    return [q for q in off_topic if int(q.query.rsplit(":", 1)[1]) % 2 == (0 if fitted else 1)]


def outcome(part: Part, weight: float, floor: float) -> Outcome:
    def heard(query: FloorQuery) -> bool:
        return best_floor_score(query.hits, weight) >= floor

    n = max(len(part.judged), 1)
    return Outcome(
        part=part.name,
        ndcg_without=round(sum(q.ndcg or 0.0 for q in part.judged) / n, 4),
        ndcg_with=round(sum(q.ndcg or 0.0 for q in part.judged if heard(q)) / n, 4),
        judged_silenced=round(sum(not heard(q) for q in part.judged) / n, 4),
        off_topic_silenced=round(sum(not heard(q) for q in part.off_topic) / max(len(part.off_topic), 1), 4),
        best_mode=part.best_mode[0] if part.best_mode else None,
        best_ndcg=part.best_mode[1] if part.best_mode else None,
    )


def fit(fit_on: Sequence[Part], report_on: Sequence[Part], budget: float = BUDGET) -> Fit:
    best: tuple[float, float, float] | None = None
    for weight in WEIGHTS:
        for floor in FLOORS:
            outcomes = [outcome(part, weight, floor) for part in fit_on]
            if any(o.ndcg_without - o.ndcg_with > budget or o.judged_silenced > MAX_SILENCED for o in outcomes):
                continue
            silenced = sum(o.off_topic_silenced for o in outcomes) / len(outcomes)
            if best is None or silenced > best[0] + 1e-9:
                best = (silenced, weight, floor)
    if best is None:
        raise ValueError("no floor keeps every fitted collection within the budget")
    _, weight, floor = best
    return Fit(
        weight=weight,
        floor=floor,
        budget=budget,
        fitted_on=[outcome(part, weight, floor) for part in fit_on],
        reported_on=[outcome(part, weight, floor) for part in report_on],
    )


def markdown(result: Fit) -> str:
    lines = [
        f"Fitted: coverage weight {result.weight}, floor {result.floor} (the most off-topic queries silenced"
        f" at no more than {result.budget} nDCG@10 and {MAX_SILENCED:.1%} of the judged queries silenced on any"
        " fitted collection).",
        "",
        "| data | role | nDCG@10 without floor | with floor | judged queries silenced | off-topic silenced"
        " | best mode without a floor |",
        "|---|---|---|---|---|---|---|",
    ]
    for role, outcomes in (("fitted on", result.fitted_on), ("reported on", result.reported_on)):
        for o in outcomes:
            best = f"{o.best_mode} {o.best_ndcg:.4f}" if o.best_mode and o.best_ndcg is not None else ""
            lines.append(
                f"| {o.part} | {role} | {o.ndcg_without:.4f} | {o.ndcg_with:.4f} | {o.judged_silenced:.4f}"
                f" | {o.off_topic_silenced:.4f} | {best} |"
            )
    return "\n".join(lines) + "\n"


def run(paths: Sequence[Path], out: Path | None) -> Fit:
    fit_on, report_on = load(paths)
    if not fit_on:
        raise ValueError("no train-split report to fit on")
    result = fit(fit_on, report_on)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(asdict(result), indent=2) + "\n")
    return result

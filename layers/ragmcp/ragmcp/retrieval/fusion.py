"""Fusion of ranked lists: reciprocal rank fusion (Cormack et al. 2009) and a convex combination
of normalised scores (Bruch et al. 2023), both weighted, over any number of lists."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class RankedList:
    ids: Sequence[str]
    weight: float = 1.0


@dataclass(slots=True, frozen=True)
class ScoredList:
    """(id, score) pairs, best first, in the scale of the index that produced them."""

    scores: Sequence[tuple[str, float]]
    weight: float = 1.0


def rrf(lists: Sequence[RankedList], k0: int = 60) -> list[tuple[str, float]]:
    """Fused (id, score) pairs, best first; score normalised to 0..1 (1: first in every list).

    Ties keep the order in which ids were first seen, so results are deterministic.
    """
    scores: dict[str, float] = {}
    for ranked in lists:
        for rank, item in enumerate(ranked.ids, start=1):
            scores[item] = scores.get(item, 0.0) + ranked.weight / (k0 + rank)
    return _normalised(scores, sum(r.weight for r in lists) / (k0 + 1))


def convex(lists: Sequence[ScoredList]) -> list[tuple[str, float]]:
    """Fused (id, score) pairs, best first: the weighted sum of each list's min-max normalised
    scores (an id a list lacks gets 0 from it), divided by the total weight so that 1 means
    best in every list. Ties keep first-seen order."""
    scores: dict[str, float] = {}
    for scored in lists:
        for item, value in _min_max(scored.scores):
            scores[item] = scores.get(item, 0.0) + scored.weight * value
    return _normalised(scores, sum(s.weight for s in lists if s.scores))


def _min_max(scores: Sequence[tuple[str, float]]) -> list[tuple[str, float]]:
    """Scores mapped to 0..1 (best 1, worst 0); a list of equal scores maps to 1."""
    if not scores:
        return []
    values = [value for _, value in scores]
    low, high = min(values), max(values)
    span = high - low
    return [(item, (value - low) / span if span > 0 else 1.0) for item, value in scores]


def _normalised(scores: dict[str, float], best: float) -> list[tuple[str, float]]:
    if best <= 0:
        return []
    order = sorted(scores.items(), key=lambda kv: kv[1], reverse=True)
    return [(item, score / best) for item, score in order]

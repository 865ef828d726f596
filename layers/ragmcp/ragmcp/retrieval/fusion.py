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
    """(id, score) pairs, best first, in the scale of the index that produced them. `unfetched`: the
    true scores, in the same scale, of ids the index did not return (below its lowest, or equal)."""

    scores: Sequence[tuple[str, float]]
    weight: float = 1.0
    unfetched: Sequence[tuple[str, float]] = ()


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
    scores, divided by the total weight so that 1 means best in every list. An id a list lacks gets
    0 from it, unless the list has its true score (`unfetched`): that is mapped on the list's own
    scale, so one below the list's lowest gets less than 0 (an id the other list found that this
    index scores far below its own candidates falls behind one it scores just under them). Ties
    keep first-seen order. Each list is mapped and added in one pass: a search fuses ten lists of
    up to a hundred candidates, and this runs on every request."""
    scores: dict[str, float] = {}
    seen = scores.get
    for scored in lists:
        pairs, weight = scored.scores, scored.weight
        if not pairs:
            continue
        values = [value for _, value in pairs]
        low, high = min(values), max(values)
        span = high - low
        if span > 0:
            for item, value in pairs:
                scores[item] = seen(item, 0.0) + weight * ((value - low) / span)
            for item, value in scored.unfetched:
                scores[item] = seen(item, 0.0) + weight * ((value - low) / span)
        else:
            for item, _ in pairs:
                scores[item] = seen(item, 0.0) + weight * 1.0
            for item, value in scored.unfetched:
                scores[item] = seen(item, 0.0) + weight * (1.0 if value >= high else 0.0)
    return _normalised(scores, sum(s.weight for s in lists if s.scores))


def _normalised(scores: dict[str, float], best: float) -> list[tuple[str, float]]:
    if best <= 0:
        return []
    order = sorted(scores, key=scores.__getitem__, reverse=True)  # the ids alone: no pair made twice
    return [(item, scores[item] / best) for item in order]

"""Reciprocal rank fusion (Cormack et al. 2009), weighted, over any number of ranked lists."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class RankedList:
    ids: Sequence[str]
    weight: float = 1.0


def rrf(lists: Sequence[RankedList], k0: int = 60) -> list[tuple[str, float]]:
    """Fused (id, score) pairs, best first; score normalised to 0..1 (1: first in every list).

    Ties keep the order in which ids were first seen, so results are deterministic.
    """
    scores: dict[str, float] = {}
    for ranked in lists:
        for rank, item in enumerate(ranked.ids, start=1):
            scores[item] = scores.get(item, 0.0) + ranked.weight / (k0 + rank)
    best = sum(r.weight for r in lists) / (k0 + 1)
    if best <= 0:
        return []
    order = sorted(scores.items(), key=lambda kv: kv[1], reverse=True)
    return [(item, score / best) for item, score in order]

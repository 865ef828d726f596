"""The parts of tests/measure/scaling_measure.py its figures rest on: in-flight stretches are merged as the
round-trip count needs, and the stand-in Titan vectors are unit vectors that rank texts by shared words."""

from __future__ import annotations

import numpy as np
import pytest

from tests.measure import scaling_measure as measure


def test_calls_in_flight_together_are_one_stretch_and_calls_in_turn_are_several() -> None:
    counts = measure.Counts()
    # Five embeddings at once, then two searches one after the other, and a DynamoDB call between them.
    counts.intervals += [("bedrock-runtime", 0.00 + i / 1000, 0.20 + i / 1000) for i in range(5)]
    counts.intervals += [("opensearch", 0.30, 0.50), ("opensearch", 0.60, 0.80), ("dynamodb", 0.52, 0.55)]
    assert len(counts.spans("bedrock-runtime")) == 1
    assert sum(b - a for a, b in counts.spans("bedrock-runtime")) == pytest.approx(0.204)
    assert counts.spans("opensearch") == [(0.30, 0.50), (0.60, 0.80)]
    assert sum(b - a for a, b in counts.spans()) == pytest.approx(0.204 + 0.2 + 0.03 + 0.2)


def test_stand_in_titan_vectors_are_unit_length_and_rank_by_shared_words() -> None:
    query = np.array(measure.titan_vector("ducks are aquatic birds", 1024))
    near = np.array(measure.titan_vector("Ducks are mostly aquatic birds", 1024))
    far = np.array(measure.titan_vector("the word processor replaced the typewriter", 1024))
    assert np.linalg.norm(query) == pytest.approx(1.0)
    assert query @ near > 0.8 > 0.2 > query @ far
    same = measure.titan_vector("Ducks are aquatic birds", 1024)
    assert measure.titan_vector("ducks are aquatic birds", 1024) == same

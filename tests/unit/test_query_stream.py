"""`bench scale`'s query stream with a phrase repeat rate (bench_scale.phrase_groups): the share of
phrases repeated is the rate asked for, the stream is the same for a seed, and with no repeats it is
the cold runs' consecutive groups; the summary labels the cache-on rows with the rate."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from ragmcp import cli
from ragmcp_bench.bench import SearchBench
from ragmcp_bench.bench_scale import CachedRun, ScaleResult, phrase_groups, repeat_share, summary

TEXTS = [f"query number {i}" for i in range(30_000)]


@pytest.mark.parametrize("rate", [0.1, 0.2, 0.5])
def test_the_share_of_repeated_phrases_over_a_long_stream_is_the_rate(rate: float) -> None:
    groups = list(phrase_groups(TEXTS, 5, rate, seed=3))[:4000]
    assert len(groups) == 4000
    assert repeat_share(groups) == pytest.approx(rate, abs=0.015)
    assert all(len(set(group)) == 5 for group in groups)
    # Whatever is not a repeat is the next text in order: the first sendings are TEXTS' prefix.
    first_seen = list(dict.fromkeys(phrase for group in groups for phrase in group))
    assert first_seen == TEXTS[: len(first_seen)]


def test_the_stream_is_the_same_for_a_seed_and_differs_between_seeds() -> None:
    one = list(phrase_groups(TEXTS[:5000], 5, 0.3, seed=7))
    assert one == list(phrase_groups(TEXTS[:5000], 5, 0.3, seed=7))
    assert one != list(phrase_groups(TEXTS[:5000], 5, 0.3, seed=8))


def test_repeats_favour_the_phrases_sent_most() -> None:
    counts = sorted(Counter(p for group in phrase_groups(TEXTS, 5, 0.5, seed=0) for p in group).values())
    # A repeat copies an earlier sending, so a phrase is repeated in proportion to how often it was
    # sent: the 1% of phrases sent most take more than a tenth of all sendings (13.8% with this seed;
    # a uniform choice among the distinct phrases seen gives 4.4%), while most are sent once.
    top = counts[-len(counts) // 100 :]
    assert sum(top) / sum(counts) > 0.10
    assert counts[len(counts) // 2] == 1


def test_with_no_repeats_the_groups_are_the_texts_in_consecutive_runs() -> None:
    texts = TEXTS[:23]
    assert list(phrase_groups(texts, 5)) == [texts[i : i + 5] for i in range(0, 20, 5)]


def test_the_stream_ends_when_the_texts_run_out() -> None:
    groups = list(phrase_groups(TEXTS[:1000], 5, 0.5, seed=1))
    sent = {phrase for group in groups for phrase in group}
    assert len(sent) > 1000 - 5  # every text but those of a last, partial group
    assert len(groups) > 1000 / 5  # repeats stretch the stream beyond the texts alone


@pytest.mark.parametrize("rate", [-0.1, 1.0])
def test_a_rate_outside_0_to_1_is_refused(rate: float) -> None:
    with pytest.raises(ValueError, match="repeat rate"):
        next(phrase_groups(TEXTS, 5, rate))


def test_repeat_share_counts_phrases_an_earlier_group_held() -> None:
    assert repeat_share([["a", "b"], ["b", "c"], ["a", "b"]]) == pytest.approx(3 / 6)
    assert repeat_share([["a", "a"]]) == 0.0  # within one request, not repeated before it
    assert repeat_share([]) == 0.0


def _bench(concurrency: int, p50: float) -> SearchBench:
    return SearchBench("http://127.0.0.1:1/mcp", concurrency, 10, 0, p50, p50, p50, p50, 20.0, 0.5, 2.0, 0.5)


def test_the_summary_has_a_cache_on_row_labelled_with_the_rate() -> None:
    cached = CachedRun(0.2, 0.19, 0.18, 4096, _bench(1, 30.0), server_cpu_ms=25.0, cpu_bound_rps=74.1)
    result = ScaleResult(corpus={"dataset": "scifact", "chunks": 200, "documents": 80}, machine={})
    result.http, result.server_cpu_ms, result.cpu_bound_rps = [_bench(1, 40.0)], {"1": 40.0}, {"1": 47.6}
    result.cached = [cached]
    rows = [line for line in summary(result).splitlines() if line.startswith("| 1")]
    assert rows[0].endswith("| 40.0 | 2.0 | 0.5 | 47.6 | off |")
    assert rows[1].startswith("| 1, cache on, R=0.2 | 10 | 0 | 30.0 |")
    assert rows[1].endswith("| 25.0 | 2.0 | 0.5 | 74.1 | 0.18 |")
    assert "c=1 0.19" in summary(result)


def test_bench_scale_refuses_a_repeat_rate_outside_0_to_1(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "corpus.jsonl").write_text(json.dumps({"_id": "1", "text": "a"}) + "\n")
    argv = ["--data-dir", str(tmp_path / "data"), "bench", "scale", "--dataset", str(tmp_path)]
    assert cli.main([*argv, "--cache-repeat", "1.5"]) == 2
    assert "--cache-repeat is a fraction in [0, 1)" in capsys.readouterr().err

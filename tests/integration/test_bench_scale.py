"""`ragmcp bench scale` smoke: a few hundred SciFact documents trimmed and grown, a real server on
127.0.0.1, rag_search at two concurrency levels, with the query-phrase cache off and then, on a
fresh server a level, on with a stream whose phrases repeat at a stated rate. The HNSW graph and
the term postings serve every search here (the exact-below threshold is lowered to 100 chunks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragmcp import cli
from ragmcp.settings import EmbeddingSettings
from ragmcp_bench import machine

MAX_DOCS = 150
REPEAT = 0.5


@pytest.mark.e2e
def test_bench_scale_smoke(
    scifact: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("RAGMCP_VECTOR_EXACT_BELOW", "100")
    out = tmp_path / "results"
    argv = ["--data-dir", str(tmp_path / "data"), "bench", "scale", "--dataset", str(scifact)]
    argv += ["--max-docs", str(MAX_DOCS), "--sizes", "200,450", "--requests", "12", "--concurrency", "1,4"]
    argv += ["--cache-repeat", str(REPEAT), "--max-other-share", "1"]  # the machine may be shared
    assert cli.main([*argv, "--no-peer", "--results-dir", str(out), "--time-limit", "60"]) == 0
    printed = capsys.readouterr().out
    for level in (1, 4):  # a cache-on row a size in the summary
        assert printed.count(f"| {level}, cache on, R={REPEAT} | 12 | 0 |") == 2
    small = json.loads((out / "scale-scifact-200.json").read_text())
    large = json.loads((out / "scale-scifact-450.json").read_text())
    assert small["corpus"]["chunks"] <= 200
    assert small["corpus"]["removed_documents"] > 0 and small["corpus"]["grown_documents"] == 0
    assert large["corpus"]["chunks"] >= 450 and large["corpus"]["grown_documents"] > 0
    for result in (small, large):
        assert result["first_pass"]["errors"] == 0 and result["first_pass"]["requests"] > 100
        assert [row["concurrency"] for row in result["http"]] == [1, 4]
        assert all(row["errors"] == 0 and row["requests"] == 12 for row in result["http"])
        assert all(0 < row["p50_ms"] <= row["p99_ms"] for row in result["http"])
        assert set(result["server_cpu_ms"]) == {"first pass", "1", "4"}
        assert all(ms > 0 for ms in result["server_cpu_ms"].values())
        assert all(row["client_cpu_ms"] > 0 and 0 < row["machine_busy"] <= 1 for row in result["http"])
        assert set(result["cpu_bound_rps"]) == {"first pass", "1", "4"}
        # What the machine and each server process did meanwhile: one process here, its CPU split by
        # thread role adding up (with its threads that ended) to its CPU a request.
        assert result["quiet"] is True and result["machine"]["load_average"] and "flags" in result["machine"]
        assert set(result["observed"]) == {"first pass", "1", "4"}
        for label, seen in result["observed"].items():
            assert 0 <= seen["window"]["other_share"] <= 1 and seen["window"]["max_other_share"] == 1
            assert list(seen["processes"]) == ["server"]
            server = seen["processes"]["server"]
            assert abs(server["cpu_ms"] - result["server_cpu_ms"][label]) <= 0.1 + 0.02 * server["cpu_ms"]
            parts = sum(server["roles"].values()) + server["ended_threads_ms"]
            # The process's and its threads' CPU are read from /proc a moment apart, in clock ticks: each
            # busy thread may be a tick off at either end, spread over the run's requests.
            tick_ms = 1000 / machine.CLOCK_TICKS
            requests = result["first_pass"]["requests"] if label == "first pass" else 12
            assert abs(parts - server["cpu_ms"]) <= 0.05 * server["cpu_ms"] + 4 * tick_ms / requests
            assert server["roles"]["embedding"] > 0 and server["roles"]["request handling"] > 0
            assert any(name.startswith("embed") for name in server["threads"])
        # No run can serve more than its CPU per request lets every core serve (5% for the edges
        # of the server's CPU window, which is read just outside the client's).
        runs = [("first pass", result["first_pass"]), *((str(r["concurrency"]), r) for r in result["http"])]
        for label, run in runs:
            assert run["throughput_rps"] <= result["cpu_bound_rps"][label] * 1.05
        assert set(result["request_cpu_ms"]) == {"embed", "search"}
        assert all(ms > 0 for ms in result["request_cpu_ms"].values())
        assert result["graph_recall_at_10"] >= 0.9
        assert result["workers"] == 1 and result["server_ready_s"] > 0
        assert set(result["build_s"]) == {"corpus", "graph", "peer"} and result["build_s"]["corpus"] > 0
        for moment in ("ready", "after the runs"):
            memory = result["server_rss_mb"][moment]
            assert 50 < memory["now"] <= memory["peak"]
        assert 0.3 < result["ndcg_at_10"]["ours"] <= 1.0
        assert result["ndcg_at_10"]["lancedb"] is None and result["peer"] is None
        # With the cache on: each level once more, every phrase looked up once, so a hit is a phrase
        # an earlier request sent (the pass before the run, in upper case, put none of the stream's
        # phrases in the cache); at c=4 a repeat of a phrase still being embedded misses too.
        cached = result["cached"]
        assert [(row["repeat"], row["run"]["concurrency"]) for row in cached] == [(REPEAT, 1), (REPEAT, 4)]
        default_size = EmbeddingSettings.model_fields["query_cache_size"].default
        for row in cached:
            assert row["run"]["errors"] == 0 and row["run"]["requests"] == 12
            assert row["cache_capacity"] == default_size
            assert 0.2 < row["repeated"] < 0.8
            assert 0 < row["hit_rate"] <= row["repeated"]
            assert row["server_cpu_ms"] > 0 and row["cpu_bound_rps"] > 0
            assert row["observed"]["processes"]["server"]["roles"]["embedding"] > 0
        assert cached[0]["hit_rate"] == cached[0]["repeated"]
    assert large["ndcg_at_10"]["ours"] <= small["ndcg_at_10"]["ours"] + 0.05

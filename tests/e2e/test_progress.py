"""Progress you can see: counts, current item and time left of a run; a line every few seconds
when output is not a terminal; /healthz during the first sync, and searches that say the index is
still filling while it runs."""

from __future__ import annotations

import io
import time

from ragmcp.progress import Progress, filling_warning, shown


def test_progress_counts_and_estimates_the_time_left():
    progress = Progress("files")
    assert progress.snapshot()["state"] == "waiting" and progress.seconds_left() is None
    progress.begin(4)
    progress.working_on("a.md")
    assert progress.snapshot()["current"] == "a.md" and progress.seconds_left() is None
    time.sleep(0.05)
    progress.advance()
    progress.working_on("b.md")
    progress.advance(failed=True)
    snap = progress.snapshot()
    assert (snap["state"], snap["total"], snap["done"], snap["failed"], snap["queued"]) == ("running", 4, 2, 1, 2)
    assert snap["current"] is None and snap["seconds_left"] is not None and snap["seconds_left"] > 0
    warning = filling_warning(progress)
    assert warning is not None and "2 of 4 files" in warning
    progress.end()
    assert progress.snapshot()["state"] == "done" and filling_warning(progress) is None
    assert filling_warning(None) is None


def test_without_a_terminal_a_line_is_printed_every_few_seconds_even_while_one_item_takes_long():
    out = io.StringIO()
    progress = Progress("files")
    with shown(progress, out, every=0.1):
        progress.begin(3)
        progress.working_on("slow.pdf")
        time.sleep(0.45)  # one slow item: the lines keep coming
        progress.advance()
    lines = out.getvalue().splitlines()
    assert len(lines) >= 4, lines
    assert lines[0].startswith("files: 0/3") and "now slow.pdf" in lines[0]
    assert lines[-1].startswith("files: 1/3")


def write_reports(folder, count: int) -> None:
    import random

    words = "otter river harbour ledger invoice pension audit engine turbine rainfall orchard copper".split()
    folder.mkdir(parents=True)
    for i in range(count):
        rng = random.Random(i)
        body = " ".join(rng.choice(words) + str(rng.randint(0, 999)) for _ in range(350))
        (folder / f"report-{i:02}.md").write_text(f"# Report {i}\n\n{body}\n")


def test_healthz_shows_the_first_syncs_progress_and_searches_warn_until_it_ends(tmp_path):
    import os
    import subprocess
    import sys

    import httpx

    from ragmcp_bench.bench_scale import free_port

    docs = tmp_path / "docs"
    write_reports(docs, 40)
    port = free_port()
    env = {**os.environ, "RAGMCP_DATA_DIR": str(tmp_path / "data"), "RAGMCP_PORT": str(port)}
    log = (tmp_path / "server.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "ragmcp.cli", "serve", "--open", "--docs", str(docs), "--no-watch"],
        env=env,
        stdout=log,
        stderr=log,
    )
    base = f"http://127.0.0.1:{port}"
    search = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "kb_search", "arguments": {"query": "otter ledger"}},
    }
    try:
        running, warned, deadline = None, None, time.monotonic() + 300
        while time.monotonic() < deadline:
            assert server.poll() is None, (tmp_path / "server.log").read_text()
            try:
                ingest = httpx.get(f"{base}/healthz", timeout=5).json()["ingest"]
            except httpx.HTTPError:
                time.sleep(0.2)
                continue
            sync = ingest["sync"]
            if sync["state"] == "running" and 0 < sync["done"] < sync["total"] and running is None:
                running = sync
                payload = httpx.post(f"{base}/mcp", json=search, timeout=60).json()["result"]["structuredContent"]
                warned = payload
            if ingest["state"] == "idle":
                break
            time.sleep(0.2)
        assert running is not None, "the sync was never seen half-way"
        assert running["total"] == 40 and running["queued"] == 40 - running["done"]
        assert running["seconds_left"] is not None and running["seconds_left"] > 0
        assert warned is not None and "still filling" in warned["warning"] and "of 40 files" in warned["warning"]
        assert ingest["sync"]["state"] == "done" and ingest["sync"]["done"] == 40 and ingest["sync"]["failed"] == 0
        after = httpx.post(f"{base}/mcp", json=search, timeout=60).json()["result"]["structuredContent"]
        assert "warning" not in after and after["results"]
    finally:
        server.terminate()
        server.wait(timeout=20)

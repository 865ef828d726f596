"""Parsing in worker processes under limits (issue 29): a file over the memory, CPU or wall-clock
limit fails alone with its reason, the worker is replaced and the next file parses; a folder of
hostile files ingests its ordinary files, refuses the hostile ones with their reasons, and keeps
every passage and tool answer bounded."""

from __future__ import annotations

import io
import json
import os
import pickle
import time
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from ragmcp.bootstrap import build_registry, build_services
from ragmcp.domain.errors import ParseFailure
from ragmcp.domain.models import Source
from ragmcp.http import create_app
from ragmcp.ingest import parsers
from ragmcp.ingest.limits import ParseLimits
from ragmcp.ingest.parsed import Block, ParsedDocument
from ragmcp.ingest.sandbox import ParseSandbox, ProcessLimits, _SafeUnpickler
from ragmcp.mcp import kb as kb_tools
from ragmcp.settings import Settings
from ragmcp_bench import hostile

SOURCE = Source(source_id="docs", name="docs", location="/nowhere")
TAGS = ParseLimits(max_tags=10**9)
"""The HTML tag budget off, so a page reaches the process limits."""


def parse_or_reason(sandbox: ParseSandbox, data: bytes, name: str) -> str:
    try:
        return " ".join(b.text for d in sandbox(data, name, SOURCE, ocr=False) for b in d.blocks)
    except ParseFailure as failure:
        return failure.message


@pytest.fixture
def sandbox_with():
    made: list[ParseSandbox] = []

    def make(limits: ParseLimits = TAGS, **process) -> ParseSandbox:
        made.append(ParseSandbox(limits, ProcessLimits(**process)))
        return made[-1]

    yield make
    for sandbox in made:
        sandbox.close()


def test_a_parse_over_the_memory_limit_fails_alone_and_the_next_file_parses(sandbox_with) -> None:
    sandbox = sandbox_with(memory_mb=400)
    reason = parse_or_reason(sandbox, hostile.one_line_html(8 * 1024 * 1024), "big.html")
    assert reason == "parsing needed more than 400 MB of memory (over the limit RAGMCP_PARSE_MEMORY_MB=400)"
    assert parse_or_reason(sandbox, b"# Still here\n\nThe next file parses.", "next.md") == (
        "Still here The next file parses."
    )


def test_a_parse_over_the_cpu_limit_is_stopped_by_the_kernel(sandbox_with) -> None:
    sandbox = sandbox_with(cpu_seconds=1)
    reason = parse_or_reason(sandbox, hostile.one_line_html(8 * 1024 * 1024), "big.html")
    assert reason == "parsing took more than 1 s of CPU (over the limit RAGMCP_PARSE_CPU_SECONDS=1)"
    assert parse_or_reason(sandbox, b"plain words", "next.txt") == "plain words"


def test_a_parse_over_the_wall_clock_limit_is_killed(sandbox_with) -> None:
    sandbox = sandbox_with(timeout_seconds=0.5)
    reason = parse_or_reason(sandbox, hostile.one_line_html(8 * 1024 * 1024), "big.html")
    assert reason == "parsing took longer than 0.5 s (over the limit RAGMCP_PARSE_TIMEOUT_SECONDS=0.5)"
    assert parse_or_reason(sandbox, b"plain words", "next.txt") == "plain words"
    assert len(sandbox._idle) == 1


def test_the_format_budgets_apply_inside_the_worker_and_it_is_reused(sandbox_with) -> None:
    sandbox = sandbox_with(ParseLimits(max_pages=10))
    assert parse_or_reason(sandbox, hostile.many_pages_pdf(11), "many.pdf") == (
        "11 pages (over the limit RAGMCP_PARSE_MAX_PAGES=10)"
    )
    [worker] = sandbox._idle
    assert parse_or_reason(sandbox, hostile.many_pages_pdf(3), "few.pdf").count("A page among") == 3
    assert sandbox._idle == [worker]


def test_a_hostile_folder_fails_file_by_file_and_the_rest_is_indexed(tmp_path, monkeypatch) -> None:
    folder = tmp_path / "docs"
    small = [
        hostile.Hostile("sparse.xlsx", hostile.sparse_xlsx, ""),
        hostile.Hostile("inflating.docx", lambda: hostile.inflating_docx(12 * 1024 * 1024), ""),
        hostile.Hostile("one-line.html", lambda: hostile.one_line_html(2 * 1024 * 1024), ""),
        hostile.Hostile("rows.xlsx", lambda: hostile.rows_xlsx(3_000), ""),
        hostile.Hostile("columns.csv", lambda: hostile.columns_csv(20_000), ""),
        hostile.Hostile("scanned.pdf", lambda: hostile.scanned_pdf(6), ""),
        hostile.Hostile("many-pages.pdf", lambda: hostile.many_pages_pdf(30), ""),
        hostile.Hostile("blob.txt", lambda: hostile.no_space_text(300_000), ""),
        hostile.Hostile("random.md", lambda: hostile.random_bytes(256 * 1024), ""),
    ]
    hostile.write_folder(folder, small)
    settings = Settings(
        data_dir=tmp_path / "data",
        host="testserver",
        open=True,
        parse_max_inflated_bytes=8 * 1024 * 1024,
        parse_max_tags=100_000,
        parse_max_cells=5_000,
        parse_max_pages=20,
        parse_max_ocr_pages=5,
    )
    services = build_services(settings)
    report = services.ingest.sync(services.register_folder("default", "docs", str(folder)))
    outcome = {job.target: job.error or "ok" for job in report.jobs}
    assert outcome == {
        "sparse.xlsx": "ok",
        "inflating.docx": outcome["inflating.docx"],
        "one-line.html": "233020 tags (over the limit RAGMCP_PARSE_MAX_TAGS=100000)",
        "rows.xlsx": "more than 5000 cells (over the limit RAGMCP_PARSE_MAX_CELLS=5000)",
        "columns.csv": "a record of 20000 fields (over the limit RAGMCP_PARSE_MAX_COLUMNS=16384)",
        "scanned.pdf": "6 pages without a text layer to read by OCR (over the limit RAGMCP_PARSE_MAX_OCR_PAGES=5)",
        "many-pages.pdf": "30 pages (over the limit RAGMCP_PARSE_MAX_PAGES=20)",
        "blob.txt": "ok",
        "random.md": "binary content (NUL bytes), not text",
        **{name: "ok" for name in hostile.ORDINARY},
    }
    assert outcome["inflating.docx"].startswith("parts inflating to ")
    assert report.line() == "5 ingested, 0 updated, 0 unchanged, 0 deleted, 0 held, 7 failed"

    client = TestClient(create_app(services, build_registry(services)), base_url="http://testserver")

    def kb(tool: str, arguments: dict) -> tuple[dict, int]:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
        response = client.post("/mcp/kb", json=body)
        return json.loads(response.json()["result"]["content"][0]["text"]), len(response.content)

    found, _ = kb("kb_search", {"query": "wind turbine kinetic energy"})
    assert any(r["file_name"] == "turbines.md" for r in found["results"])
    blob = services.documents.by_path("default", "docs", "blob.txt")[0]
    assert blob.chunk_count >= 300_000 // 2048
    document, size = kb("kb_get", {"document_id": blob.number, "max_chunks": 2000})
    assert max(len(c["text"]) for c in document["chunks"]) <= 2048
    assert size < 5_000_000
    monkeypatch.setattr(kb_tools, "GET_TEXT_BYTES_MAX", 10_000)
    document, _ = kb("kb_get", {"document_id": blob.number, "max_chunks": 2000})
    assert 0 < len(document["chunks"]) <= 10_000 // 2048 and document["truncated"] is True
    _, size = kb("kb_search", {"query": "abcdefghijklmnopqrstuvwxyz"})
    assert size < 1_000_000
    jobs, _ = kb("kb_jobs", {"status": "failed"})
    assert {j["target"] for j in jobs["jobs"]} == {k for k, v in outcome.items() if v != "ok"}
    assert isinstance(services.ingest.parser, ParseSandbox) and len(services.ingest.parser._idle) == 1
    services.ingest.parser.close()


def test_fetch_from_source_reads_a_hostile_original_in_the_sandbox(tmp_path, monkeypatch) -> None:
    """rag.fetch_from_source re-reads the original in the parse sandbox, as ingestion does: a row file
    replaced by the hostile generator's CSV of many columns gets LIMIT_EXCEEDED with the reason, in
    the contract's error shape; the server's own process never parses it; the next fetch works."""
    folder = tmp_path / "parts"
    folder.mkdir()
    (folder / "parts.csv").write_text("id,name\np1,Gearbox\n")
    (folder / ".source.json").write_text(json.dumps({"name": "parts", "fetch_columns": ["id", "name"]}))
    services = build_services(Settings(data_dir=tmp_path / "data", host="testserver", open=True))
    assert isinstance(services.ingest.parser, ParseSandbox)
    source = services.register_folder("default", "parts", str(folder))
    assert services.ingest.sync(source).failed == 0
    client = TestClient(create_app(services, build_registry(services)), base_url="http://testserver")
    parsed_here: list[str] = []
    monkeypatch.setattr(parsers, "parse", lambda data, name, **kw: parsed_here.append(name) or [])

    def fetch() -> dict:
        call = {"name": "rag.fetch_from_source", "arguments": {"doc_ids": ["parts:p1"]}}
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}
        return client.post("/mcp/proxysql", json=body).json()

    (folder / "parts.csv").write_bytes(hostile.columns_csv(20_000))
    refused = fetch()["error"]
    assert refused["code"] == -32602 and refused["data"]["code"] == "LIMIT_EXCEEDED", refused
    assert refused["message"] == (
        "the original of parts:p1 cannot be read:"
        " a record of 20000 fields (over the limit RAGMCP_PARSE_MAX_COLUMNS=16384)"
    )
    (folder / "parts.csv").write_text("id,name\np1,Gearbox II\n")
    answer = json.loads(fetch()["result"]["content"][0]["text"])
    assert answer["rows"] == [{"doc_id": "parts:p1", "source_name": "parts", "row": {"id": "p1", "name": "Gearbox II"}}]
    assert parsed_here == []
    services.ingest.parser.close()


def test_the_worker_gets_none_of_the_servers_secrets(sandbox_with, monkeypatch) -> None:
    monkeypatch.setenv("RAGMCP_API_KEY", "rbx_live_secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
    sandbox = sandbox_with()
    assert parse_or_reason(sandbox, b"plain words", "a.txt") == "plain words"
    [worker] = sandbox._idle
    environment = Path(f"/proc/{worker.process.pid}/environ").read_bytes()
    assert b"secret" not in environment and b"RAGMCP_" not in environment


def test_a_workers_answer_can_build_documents_and_nothing_else() -> None:
    document = ParsedDocument([Block("text", page=1)], title="t", row={"id": "1", "n": [1, 2.5, None]})
    answer = pickle.dumps(("ok", [document], 1024))
    assert _SafeUnpickler(io.BytesIO(answer)).load() == ("ok", [document], 1024)
    with pytest.raises(pickle.UnpicklingError, match=r"posix\.system"):
        _SafeUnpickler(io.BytesIO(pickle.dumps(("ok", [os.system], 0)))).load()


def test_a_worker_of_a_big_server_is_still_reused(sandbox_with) -> None:
    """A worker's peak is its own: Linux carries the parent's resident size into a child's ru_maxrss
    across exec, so with ru_maxrss a server holding more than half a worker's memory limit replaced
    its worker after every file (seen in the suite, whose process grows past 1 GB)."""
    ballast = bytearray(900 * 1024 * 1024)  # this process resident at about 0.9 GB, as a server with its index
    ballast[:: 4096] = b"x" * len(ballast[:: 4096])
    sandbox = sandbox_with(ParseLimits(), memory_mb=1024)
    assert parse_or_reason(sandbox, b"plain words", "a.txt") == "plain words"
    [worker] = sandbox._idle
    assert parse_or_reason(sandbox, b"more words", "b.txt") == "more words"
    assert sandbox._idle == [worker]
    del ballast


def _gone(pid: int, seconds: float) -> bool:
    """Whether process `pid` has ended (or is a zombie) within `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_an_idle_worker_is_not_reused_and_leaves_by_itself(sandbox_with) -> None:
    sandbox = sandbox_with(idle_seconds=0.5)
    assert parse_or_reason(sandbox, b"plain words", "a.txt") == "plain words"
    first = sandbox._idle[0].process.pid
    assert _gone(first, 20)  # twice the idle time, however busy the machine
    assert parse_or_reason(sandbox, b"more words", "b.txt") == "more words"
    assert sandbox._idle[0].process.pid != first

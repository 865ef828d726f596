"""Long tools report MCP progress while they run: the official SDK client's progress callback
hears rag.admin.sync count the files of a real folder sync, and kb_upload_finish step through its
ingest job, before each call's result; the same calls without a progressToken answer at once."""

from __future__ import annotations

import base64
import os
import time

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import start_server, stop_server
from tests.e2e.test_progress import write_reports

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("notifications")
    write_reports(root / "docs", 3)
    os.environ["RAGMCP_WATCH"] = "false"  # the sync under test, not the watcher, picks up new files
    try:
        server = start_server(root / "docs", root / "data", ingest_timeout=300)
    finally:
        del os.environ["RAGMCP_WATCH"]
    yield server
    stop_server(server)


async def call(url: str, tool: str, arguments: dict, heard: list | None) -> tuple[dict, list[float]]:
    """The tool's payload, and when (seconds after the call) each progress notification arrived."""
    started = time.monotonic()
    arrivals: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        arrivals.append(time.monotonic() - started)
        heard.append((progress, total, message))

    http = httpx2.AsyncClient(timeout=120)
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        callback = on_progress if heard is not None else None
        result = await client.call_tool(tool, arguments, progress_callback=callback)
        assert not result.is_error, result
        return result.structured_content, [*arrivals, time.monotonic() - started]


def test_admin_sync_reports_files_as_they_are_synced(served):
    for i in range(3, 15):  # new files for the sync to find
        write_reports_one(served.docs, i)
    heard: list = []
    payload, times = anyio.run(call, served.url, "rag.admin.sync", {}, heard)
    assert payload["accepted"] is True and payload["job_id"].startswith("sync-")
    values = [p for p, _, _ in heard]
    assert len(heard) >= 3 and values == sorted(set(values)), heard
    assert heard[-1][0] == heard[-1][1] == 15 and "files synced" in heard[-1][2]
    assert times[0] < times[-1] - 0.5, "the first notification came well before the result"


def test_upload_finish_reports_its_ingest_steps(served):
    data = b"# Uploaded\n\nHerons stand still in shallow water.\n"

    async def upload() -> tuple[dict, list]:
        heard: list = []
        http = httpx2.AsyncClient(timeout=120)
        async with http, Client(streamable_http_client(served.url, http_client=http)) as client:
            start = await client.call_tool(
                "kb_upload_start", {"filename": "herons.md", "total_size": len(data), "tags": []}
            )
            upload_id = start.structured_content["upload_id"]
            part = base64.b64encode(data).decode()
            await client.call_tool("kb_upload_chunk", {"upload_id": upload_id, "chunk_index": 0, "data": part})

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                heard.append((progress, total, message))

            done = await client.call_tool("kb_upload_finish", {"upload_id": upload_id}, progress_callback=on_progress)
            return done.structured_content, heard

    payload, heard = anyio.run(upload)
    assert payload["status"] == "succeeded", payload
    assert heard and heard[-1][:2] == (2.0, 2.0) and heard[-1][2] == "succeeded"
    assert [p for p, _, _ in heard] == sorted({p for p, _, _ in heard})


def test_without_a_progress_token_the_sync_answers_at_once(served):
    payload, times = anyio.run(call, served.url, "rag.admin.sync", {}, None)
    assert payload["accepted"] is True and times == times[-1:]


def write_reports_one(folder, i: int) -> None:
    (folder / f"extra-{i:02}.md").write_text(f"# Extra {i}\n\n" + " ".join(f"kestrel{i}{n}" for n in range(600)))

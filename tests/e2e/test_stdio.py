"""`ragmcp stdio` driven by the official MCP client over a real subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


def test_stdio_serves_rag_search(tmp_path):
    data = tmp_path / "data"
    ingest = subprocess.run(
        [sys.executable, "-m", "ragmcp.cli", "--data-dir", str(data), "ingest", str(REPO / "samples" / "docs")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ingest.returncode == 0, ingest.stderr
    assert "4 ingested" in ingest.stdout
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "ragmcp.cli", "--data-dir", str(data), "stdio", "--profile", "mindset"]
    )

    async def run():
        with anyio.fail_after(120):
            await session(params)

    anyio.run(run)


async def session(params: StdioServerParameters) -> None:
    async with Client(params) as client:
        tools = await client.list_tools()
        assert [t.name for t in tools.tools] == ["rag_search", "verify_document_access"]
        result = await client.call_tool("rag_search", {"search_phrases": ["what is reciprocal rank fusion"]})
        segments = result.structured_content["segments"]
        assert segments[0]["source_file_name"] == "glossary.csv"
        assert "rank" in segments[0]["raw_text"].lower()

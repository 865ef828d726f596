"""`ragmcp bench cold-start`: every handler's import time, and for the MCP function also the first
rag_search answered through Mangum in a fresh process on the AWS emulator."""

from __future__ import annotations

from ragmcp_bench.bench import _tree_mb, bench_cold_start

from .aws_harness import REPO


def test_cold_start_reports_the_mcp_functions_first_call_beside_its_import() -> None:
    rows = {row.function: row for row in bench_cold_start(runs=1, package=False)}
    assert set(rows) == {"mcp_api", "ingest", "synthesis", "janitor", "index_setup"}
    mcp = rows["mcp_api"]
    assert mcp.import_budget_ms == 1000.0
    # The MCP function's init builds its services (what SnapStart snapshots), so its import is most of
    # the first call: both are measured, in separate processes, and neither bounds the other on a busy machine.
    assert mcp.import_ms > 0 and mcp.first_call_ms > 0
    assert all(row.first_call_ms is None and row.import_ms > 0 for name, row in rows.items() if name != "mcp_api")
    # Each function's code is its handler plus the library it ships (functions/*/ragmcp links to it).
    library_mb = _tree_mb(REPO / "layers" / "ragmcp" / "ragmcp")
    assert all(library_mb - 0.001 < row.code_mb < library_mb + 0.05 for row in rows.values()), rows
    assert all(row.package_mb is None for row in rows.values())

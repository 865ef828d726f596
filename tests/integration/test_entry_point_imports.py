"""Each entry point builds only what it uses (bootstrap.py has one factory per Lambda function), so it
imports only what it uses: `python -X importtime` of the janitor function lists no MCP SDK and no
FastAPI (on main it imported both, through the services every function built)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def imported_modules(function: str) -> list[str]:
    """The modules `import app` of functions/<function> imports, in the order -X importtime lists them."""
    environment = {k: v for k, v in os.environ.items() if not k.upper().startswith("RAGMCP_")}
    environment.update(
        PYTHONPATH=os.pathsep.join([str(REPO / "layers" / "ragmcp"), str(REPO / "bench")]),
        RAGMCP_BACKEND="aws",
        AWS_DEFAULT_REGION="us-east-1",
        POWERTOOLS_SERVICE_NAME="import-test",
    )
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import app"],
        cwd=REPO / "functions" / function,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    lines = [line for line in run.stderr.splitlines() if line.startswith("import time:")][1:]  # [0]: the header
    return [line.rsplit("|", 1)[1].strip() for line in lines]


def test_the_janitor_imports_neither_the_mcp_sdk_nor_fastapi() -> None:
    modules = imported_modules("janitor")
    assert "ragmcp.bootstrap" in modules and "ragmcp.ingest.uploads" in modules  # it did import its own parts
    tops = {name.split(".")[0] for name in modules}
    assert "mcp" not in tops and "fastapi" not in tops and "starlette" not in tops, sorted(tops)
    assert not [name for name in modules if name.startswith("ragmcp.mcp")]

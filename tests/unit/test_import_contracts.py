"""The package structure holds: no import cycle between packages, ports.py on the domain only, a
core that imports no adapter or server, the composition root imported by entry points only, the runtime
reaching the development tools (ragmcp_bench) only through its CLI's doorway, ragmcp_bench never
importing the runtime CLI back, and neither importing the tests (one direction: tests -> ragmcp_bench -> ragmcp;
the measurements that run on the tests' doubles live in tests/measure).

The contracts are `[tool.importlinter]` in pyproject.toml; import-linter reads the imports of the
ragmcp, ragmcp_bench and tests packages this test imports (type-checking imports included) without running its code.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from importlinter.cli import lint_imports

REPO = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # lint_imports puts the working directory first
    status = lint_imports(config_filename=str(REPO / "pyproject.toml"), no_cache=True, no_logo=True)
    report = capsys.readouterr().out
    assert "Contracts: 7 kept, 0 broken." in report, report
    assert status == 0, report

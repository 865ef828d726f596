"""The library every Lambda function ships (layers/ragmcp/ragmcp, linked as functions/*/ragmcp) holds no
development tool: no bench, eval or peer module, no test double, nothing that imports what only the
test and bench extras install. Those live in bench/ragmcp_bench, which `ragmcp` reaches through one
lazy import in cli.py; without it the dev commands say how to install them."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

from ragmcp.cli import DEV_COMMANDS, parser

from .aws_harness import REPO

LIBRARY = REPO / "layers" / "ragmcp" / "ragmcp"
DEV_ONLY = {"ragmcp_bench", "moto", "lancedb", "ir_measures", "matplotlib", "pytest", "hypothesis", "playwright"}
"""Top-level packages only the development tools and the tests use (the test and bench extras)."""
DEV_NAME = re.compile(r"^(bench|eval)|_eval$|^peer_|fake|stub|emulat|mock", re.IGNORECASE)
DOORWAY = ("cli.py", "ragmcp_bench.cli")
"""The one import of the development tools: inside a function of cli.py, when a dev command is parsed."""


def dev_named_modules(library: Path) -> list[str]:
    """Modules and packages of `library` named like a benchmark, an evaluation or a test double."""
    return sorted(
        str(path.relative_to(library))
        for path in library.rglob("*")
        if "__pycache__" not in path.parts
        and (path.is_dir() or path.suffix == ".py")
        and DEV_NAME.search(path.stem)
    )


def dev_imports(library: Path) -> list[str]:
    """`file: module` for every import of a development-only package in `library`, wherever it is."""
    found = []
    for path in sorted(library.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        in_function = {
            id(node)
            for fn in ast.walk(tree)
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
            for node in ast.walk(fn)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            relative = str(path.relative_to(library))
            for name in names:
                if name.split(".")[0] not in DEV_ONLY:
                    continue
                if (relative, name) == DOORWAY and id(node) in in_function:
                    continue
                found.append(f"{relative}: {name}")
    return found


def test_the_library_has_no_bench_eval_or_test_double_module() -> None:
    assert dev_named_modules(LIBRARY) == []


def test_the_library_imports_no_development_package() -> None:
    assert dev_imports(LIBRARY) == []


def test_the_checks_see_what_the_library_held_before_the_move(tmp_path: Path) -> None:
    """The library as it was (bench.py with the moto emulator, evaluation.py, the LanceDB peer): both
    checks name it."""
    old = tmp_path / "ragmcp"
    old.mkdir()
    (old / "bench.py").write_text("def emulated():\n    from moto.server import ThreadedMotoServer\n")
    (old / "peer_lancedb.py").write_text("import lancedb\n")
    (old / "cli.py").write_text("from ragmcp_bench import cli\n")
    assert dev_named_modules(old) == ["bench.py", "peer_lancedb.py"]
    assert dev_imports(old) == ["bench.py: moto.server", "cli.py: ragmcp_bench", "peer_lancedb.py: lancedb"]


def test_the_dev_commands_are_the_ones_ragmcp_bench_defines() -> None:
    """Installed here (the test extra): `ragmcp` has every dev command, each with its own arguments."""
    commands = parser()._subparsers._group_actions[0].choices
    assert set(DEV_COMMANDS) <= set(commands)
    assert all(commands[name].get_default("func").__module__ == "ragmcp_bench.cli" for name in DEV_COMMANDS)


BLOCKED = """
import contextlib, importlib, io, json, pkgutil, sys

# As if not installed: importing them raises ModuleNotFoundError, importlib.util.find_spec finds nothing.
sys.modules.update(dict.fromkeys({dev_only}))
import ragmcp
imported = [m.name for m in pkgutil.walk_packages(ragmcp.__path__, "ragmcp.") if importlib.import_module(m.name)]
from ragmcp.cli import main
outcomes = []
for argv in json.loads(sys.argv[1]):
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        try:
            code = main(argv)
        except SystemExit as exit:
            code = exit.code
    outcomes.append([code, stderr.getvalue()])
print(json.dumps({{"imported": imported, "outcomes": outcomes}}))
"""


def _blocked(blocked: set[str], commands: list[list[str]], *pythonpath: Path) -> dict:
    """Import every ragmcp module and run `ragmcp` with each of `commands`, in a process where importing
    any of `blocked` fails: what was imported, and each command's exit status and stderr."""
    result = subprocess.run(
        [sys.executable, "-c", BLOCKED.format(dev_only=sorted(blocked)), json.dumps(commands)],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(str(p) for p in pythonpath)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_every_module_imports_and_the_dev_commands_say_what_to_install_without_them() -> None:
    commands = [
        ["eval", "--dataset", "../shared/eval/scifact", "--max-docs", "10"],
        ["bench", "cold-start"],
        ["eval-guards", "--help"],
        ["eval-parse"],
        ["eval-qa"],
        ["doctor", "--bogus"],
    ]
    report = _blocked(DEV_ONLY, commands, LIBRARY.parent)
    assert {"ragmcp.cli", "ragmcp.bootstrap", "ragmcp.adapters.aws.dynamodb"} <= set(report["imported"])
    *dev, other = report["outcomes"]
    for argv, (code, stderr) in zip(commands, dev, strict=False):
        assert code == 2, (argv, stderr)
        assert f"ragmcp {argv[0]}: a development tool" in stderr and "install the test or bench extra" in stderr
    # The other commands still reject what they do not know.
    assert other[0] == 2 and "unrecognized arguments: --bogus" in other[1], other


def test_the_lambda_benchmarks_say_what_to_install_without_moto() -> None:
    """ragmcp_bench installed without the extras: the benchmarks that run the functions on moto say so."""
    commands = [["bench", "cold-start", "--no-package"], ["bench", "ingest-memory", "--path", "samples/docs"]]
    report = _blocked({"moto"}, commands, LIBRARY.parent, REPO / "bench")
    for argv, (code, stderr) in zip(commands, report["outcomes"], strict=True):
        assert code == 2, (argv, stderr)
        assert f"ragmcp bench {argv[1]}: runs the functions on moto" in stderr
        assert "install the test or bench extra" in stderr

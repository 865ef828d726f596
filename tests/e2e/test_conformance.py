"""The MCP conformance suite's server mode against `ragmcp serve` over the shared documents.

Runs `node conformance server --url URL --requirements 2025-11-25 --output-dir DIR` and reads the
per-scenario `checks.json` files it writes (DIR/server-<scenario>-<timestamp>/checks.json) plus its
`=== SUMMARY ===` lines. A scenario fails when one of its checks has status FAILURE, as in the
suite's own summary and exit code. The test fails on any failing check that
tests/e2e/conformance-baseline.yml does not excuse; a baseline entry that now passes is only
reported (a warning), never a failure.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

HERE = Path(__file__).resolve().parent
NODE_MODULES = HERE / "node" / "node_modules"
NODE = NODE_MODULES / ".bin" / "node"
CONFORMANCE = NODE_MODULES / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
BASELINE = HERE / "conformance-baseline.yml"
REQUIREMENTS = "2025-11-25"
TIMEOUT = 900

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not (NODE.exists() and CONFORMANCE.exists()),
        reason=f"MCP conformance suite not installed under {NODE_MODULES} (run `make node-tools`)",
    ),
]

# What ragmcp answers when a scenario reaches for a fixture it does not have: -32602 "Unknown tool"
# for a tool, -32002 "Resource not found" for a fixture resource (ragmcp's resources are its
# documents), -32601 "Method not found" for a method of an undeclared capability; the suite's own
# wording when the fixture tool is missing from tools/list.
FIXTURE_ABSENT = re.compile(r"Unknown tool: '[^']+'|not found\. Available tools:|Resource not found: unknown resource")
METHOD_NOT_FOUND = "Method not found"
# The capability whose absence makes "Method not found" the right answer, by scenario name prefix
# (the first prefix that matches; a dotted name is a flag inside a capability).
CAPABILITY_BY_PREFIX = {
    "tools-call-with-logging": "logging",
    "logging-": "logging",
    "completion-": "completions",
    "resources-subscribe": "resources.subscribe",
    "resources-unsubscribe": "resources.subscribe",
    "resources-": "resources",
    "prompts-": "prompts",
}


def declares(capabilities: dict, name: str) -> bool:
    """Whether the server's capabilities declare `name` (`resources`, or a flag like `resources.subscribe`)."""
    value: object = capabilities
    for part in name.split("."):
        if not isinstance(value, dict) or value.get(part) in (None, False):
            return False
        value = value[part]
    return True
RESULT_DIR = re.compile(r"^server-(?P<scenario>.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z$")
SUMMARY_LINE = re.compile(r"^[✓✗] (?P<scenario>\S+): (?P<passed>\d+) passed, (?P<failed>\d+) failed$", re.M)


@dataclass(frozen=True)
class Baseline:
    scenarios: frozenset[str]
    checks: frozenset[tuple[str, str]]


def load_baseline(path: Path) -> Baseline:
    """The `server:` list of the suite's expected-failures YAML (only the subset that format uses)."""
    scenarios: set[str] = set()
    checks: set[tuple[str, str]] = set()
    section = None
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if not line.strip():
            continue
        if re.fullmatch(r"(server|client):", line):
            section = line[:-1]
            continue
        item = re.fullmatch(r"\s+-\s+(['\"]?)([^\s'\"]+)\1", line)
        if item is None or section is None:
            raise ValueError(f"{path.name}:{number}: not a `server:` list entry: {raw!r}")
        if section != "server":
            continue
        name = item.group(2)
        scenario, _, check = name.partition(":")
        if check:
            checks.add((scenario, check))
        else:
            scenarios.add(scenario)
    return Baseline(frozenset(scenarios), frozenset(checks))


def server_capabilities(url: str) -> dict:
    response = httpx.post(
        url,
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": REQUIREMENTS,
                "capabilities": {},
                "clientInfo": {"name": "ragmcp-conformance-test", "version": "1"},
            },
        },
        headers={"Accept": "application/json, text/event-stream"},
        timeout=30,
    )
    return response.json()["result"]["capabilities"]


def read_results(out_dir: Path, stdout: str) -> dict[str, list[dict]]:
    """Scenario name -> its checks; a scenario the suite lists without a checks.json gets one failure."""
    checks: dict[str, list[dict]] = {}
    for path in out_dir.glob("*/checks.json"):
        match = RESULT_DIR.match(path.parent.name)
        assert match, f"unexpected result folder {path.parent.name}"
        checks[match["scenario"]] = json.loads(path.read_text(encoding="utf-8"))
    summary = {m["scenario"]: int(m["failed"]) for m in SUMMARY_LINE.finditer(stdout.split("=== SUMMARY ===")[-1])}
    for scenario, failed in summary.items():
        if scenario not in checks:
            message = f"no checks.json written ({failed} failed in the summary)"
            checks[scenario] = [{"id": scenario, "status": "FAILURE", "errorMessage": message}]
    return checks


def why_not_excused(scenario: str, check: dict, baseline: Baseline, capabilities: dict) -> str | None:
    """None if the baseline excuses this failing check, else the reason it does not."""
    if (scenario, check["id"]) in baseline.checks:
        return None
    if scenario not in baseline.scenarios:
        return "not in the baseline"
    message = check.get("errorMessage") or ""
    if FIXTURE_ABSENT.search(message):
        return None
    if METHOD_NOT_FOUND in message:
        capability = next((c for p, c in CAPABILITY_BY_PREFIX.items() if scenario.startswith(p)), None)
        if capability is None:
            return "baselined, but 'Method not found' is not explained by a missing capability"
        if declares(capabilities, capability):
            return f"baselined, but the server declares `{capability}` and still answers 'Method not found'"
        return None
    return "baselined for a missing fixture, but failed for another reason"


def test_conformance_suite_server_mode(served_documents, tmp_path):
    baseline = load_baseline(BASELINE)
    out_dir = tmp_path / "conformance"
    command = [
        str(NODE),
        str(CONFORMANCE),
        "server",
        "--url",
        served_documents.url,
        "--requirements",
        REQUIREMENTS,
        "--output-dir",
        str(out_dir),
    ]
    env = {
        **os.environ,
        "PATH": f"{NODE.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(tmp_path),
        "NO_COLOR": "1",
    }
    completed = subprocess.run(
        command, capture_output=True, text=True, timeout=TIMEOUT, env=env, cwd=tmp_path, check=False
    )
    log = f"$ {' '.join(command)}\nexit {completed.returncode}\n{completed.stdout}\n{completed.stderr}"
    # The suite exits 1 whenever a required scenario fails, which the fixture scenarios always do;
    # the verdict below is ours. Anything else (2+, a crash before the summary) is a broken run.
    assert completed.returncode in (0, 1), log
    assert "=== SUMMARY ===" in completed.stdout, log
    planned = re.search(rf"Running requirements {REQUIREMENTS} \((\d+) scenarios\)", completed.stdout)
    assert planned, log

    results = read_results(out_dir, completed.stdout)
    assert len(results) == int(planned[1]), f"expected {planned[1]} scenarios, read {sorted(results)}\n{log}"
    unknown = sorted(baseline.scenarios - set(results)) + sorted(s for s, _ in baseline.checks if s not in results)
    assert not unknown, f"{BASELINE.name} names scenarios the suite did not run: {unknown}"

    capabilities = server_capabilities(served_documents.url)
    unexpected, stale, warned = [], [], []
    for scenario, checks in sorted(results.items()):
        failing = [c for c in checks if c["status"] == "FAILURE"]
        for check in failing:
            reason = why_not_excused(scenario, check, baseline, capabilities)
            if reason:
                unexpected.append(f"{scenario}:{check['id']}: {reason}: {check.get('errorMessage')}")
        for check in checks:
            if check["status"] == "WARNING":
                warned.append(f"{scenario}:{check['id']}: {check.get('errorMessage') or check.get('details')}")
        if scenario in baseline.scenarios and not failing:
            stale.append(scenario)
    for scenario, check_id in sorted(baseline.checks):
        if not any(c["id"] == check_id and c["status"] == "FAILURE" for c in results[scenario]):
            stale.append(f"{scenario}:{check_id}")

    report = "\n".join(
        [f"unexpected failures ({len(unexpected)}):", *unexpected]
        + [f"baseline entries now passing ({len(stale)}; remove them):", *stale]
        + [f"warnings ({len(warned)}; not failures):", *warned]
    )
    print(report)
    if stale:
        warnings.warn(f"{BASELINE.name}: entries now passing, remove them: {', '.join(stale)}", stacklevel=1)
    assert not unexpected, f"{report}\n\nresults in {out_dir}"

"""The SAM application as the AWS tools see it, without an AWS account or Docker:
`sam validate --lint`, cfn-lint on the template SAM translates it into, npm `asl-validator` on the
state machine, and every handler the template names exists and imports.

The tools come from `make install` (aws-sam-cli in its own virtualenv under .tools/aws, since it
pins boto3 and pydantic; asl-validator from infra/tools); a test whose tool is missing is skipped
and says which.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .aws_harness import REPO, load_handler_module

TEMPLATE = REPO / "template.yaml"
TOOLS_VENV = REPO / ".tools" / "aws" / "bin"
ASL_VALIDATOR = REPO / "infra" / "tools" / "node_modules" / ".bin" / "asl-validator"
OFFLINE = {**os.environ, "SAM_CLI_TELEMETRY": "0", "AWS_DEFAULT_REGION": "us-east-1"}


def tool(name: str, *places: Path) -> str:
    for place in places:
        if (place / name).is_file():
            return str(place / name)
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (make install puts it in .tools/aws or infra/tools)")
    return found


def run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, env=OFFLINE, cwd=REPO, timeout=300)


class CloudFormationLoader(yaml.SafeLoader):
    """YAML with CloudFormation's short tags (!Ref, !Sub, ...) read as plain values."""


CloudFormationLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def functions() -> dict[str, dict]:
    template = yaml.load(TEMPLATE.read_text(), Loader=CloudFormationLoader)
    return {
        name: resource["Properties"]
        for name, resource in template["Resources"].items()
        if resource["Type"] == "AWS::Serverless::Function"
    }


def test_sam_validate_lint() -> None:
    result = run(tool("sam", TOOLS_VENV), "validate", "--lint", "--template", str(TEMPLATE))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_translated_template_passes_cfn_lint(tmp_path: Path) -> None:
    python = TOOLS_VENV / "python"
    if not python.is_file():
        pytest.skip("aws-sam-cli's virtualenv .tools/aws is not installed (make install makes it)")
    translated = tmp_path / "translated.json"
    result = run(str(python), str(REPO / "infra" / "tools" / "sam_translate.py"), str(TEMPLATE), str(translated))
    assert result.returncode == 0, result.stderr
    lint = run(tool("cfn-lint", Path(sys.executable).parent, TOOLS_VENV), str(translated))
    assert lint.returncode == 0, lint.stdout + lint.stderr


def translate(root: Path, out: Path) -> dict:
    python = TOOLS_VENV / "python"
    if not python.is_file():
        pytest.skip("aws-sam-cli's virtualenv .tools/aws is not installed (make install makes it)")
    result = run(str(python), str(REPO / "infra" / "tools" / "sam_translate.py"), str(root / "template.yaml"), str(out))
    assert result.returncode == 0, result.stderr
    return json.loads(out.read_text())


def code_and_versions(translated: dict) -> tuple[dict[str, str], set[str]]:
    resources = translated["Resources"]
    code = {n: r["Properties"]["Code"]["S3Key"] for n, r in resources.items() if r["Type"] == "AWS::Lambda::Function"}
    versions = {n for n, r in resources.items() if r["Type"] == "AWS::Lambda::Version"}
    return code, versions


def application_copy(tmp_path: Path) -> Path:
    app = tmp_path / "app"
    shutil.copytree(REPO / "functions", app / "functions", symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "layers", app / "layers", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "infra" / "statemachines", app / "infra" / "statemachines")
    shutil.copy(TEMPLATE, app / "template.yaml")
    return app


def test_a_dependency_change_publishes_a_new_version(tmp_path: Path) -> None:
    """R1 for dependencies: a new layer (a dependency bump; the function code unchanged), or another
    property such as the timeout, must reach the `live` alias: the MCP function's published version
    must change with it."""
    app = application_copy(tmp_path)
    first_code, first_versions = code_and_versions(translate(app, tmp_path / "1.json"))
    requirements = app / "layers" / "ragmcp" / "requirements-lambda.txt"
    requirements.write_text(requirements.read_text() + "\n# a dependency bump\n")
    changed_code, changed_versions = code_and_versions(translate(app, tmp_path / "2.json"))
    assert changed_code == first_code, "the functions' own code did not change"
    assert len(first_versions) == 1 and changed_versions.isdisjoint(first_versions)
    template = app / "template.yaml"
    template.write_text(template.read_text().replace("    Timeout: 29 #", "    Timeout: 28 #", 1))
    _, retimed_versions = code_and_versions(translate(app, tmp_path / "3.json"))
    assert retimed_versions.isdisjoint(changed_versions), "a timeout change publishes a version too"


def test_a_library_change_publishes_new_function_code_and_versions(tmp_path: Path) -> None:
    """Two builds of the library, one file apart: every function's code (named by its contents, as
    `sam package` names it) and the MCP function's published version (which the `live` alias, API
    Gateway and SnapStart use) must change; the same build must translate to the same names."""
    app = application_copy(tmp_path)
    first_code, first_versions = code_and_versions(translate(app, tmp_path / "1.json"))
    again_code, again_versions = code_and_versions(translate(app, tmp_path / "2.json"))
    assert (first_code, first_versions) == (again_code, again_versions)
    library = app / "layers" / "ragmcp" / "ragmcp" / "__init__.py"
    library.write_text(library.read_text() + "\n# a new build of the library\n")
    changed_code, changed_versions = code_and_versions(translate(app, tmp_path / "3.json"))
    assert len(first_code) == 6
    assert all(changed_code[name] != first_code[name] for name in first_code), (first_code, changed_code)
    assert len(first_versions) == 1 and changed_versions.isdisjoint(first_versions)


def test_the_state_machine_passes_asl_validator() -> None:
    validator = tool("asl-validator", ASL_VALIDATOR.parent)
    definition = REPO / "infra" / "statemachines" / "synthesis.asl.json"
    result = run(validator, "--json-path", str(definition))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", sorted(functions()))
def test_every_handler_named_in_the_template_exists_and_imports(name: str, monkeypatch) -> None:
    properties = functions()[name]
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    module_file, _, attribute = properties["Handler"].rpartition(".")
    code = REPO / properties["CodeUri"] / f"{module_file}.py"
    assert code.is_file(), code
    module = load_handler_module(Path(properties["CodeUri"]).name)
    assert callable(getattr(module, attribute))

"""The SAM application as the AWS tools see it, without an AWS account or Docker:
`sam validate --lint`, cfn-lint on the template SAM translates it into, npm `asl-validator` on the
state machine, and every handler the template names exists and imports.

The tools come from `make install` (aws-sam-cli in its own virtualenv under .tools/aws, since it
pins boto3 and pydantic; asl-validator from infra/tools); a test whose tool is missing is skipped
and says which.
"""

from __future__ import annotations

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

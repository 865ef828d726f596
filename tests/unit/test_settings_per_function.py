"""Each Lambda function reads the settings groups it uses, not all of them: the janitor its uploads'
(ingest) and the stack's (aws); the synthesis steps everything but the keys (security) and ingest.
A group not theirs is neither read from the environment nor made (made under this test, it fails), and
an unknown RAGMCP_ variable is still refused, naming the closest setting."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ragmcp.settings import GROUPS, NOT_SETTINGS, SettingsError
from ragmcp.synthesis.service import SynthesisSteps

REPO = Path(__file__).resolve().parents[2]
JANITOR = {"ingest", "aws"}
SYNTHESIS = {"server", "embedding", "search", "index", "synthesis", "aws"}


def load_handler_module(name: str) -> ModuleType:
    """functions/<name>/app.py, loaded afresh (its cached parts made again)."""
    spec = importlib.util.spec_from_file_location(f"functions_{name}_app", REPO / "functions" / name / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> set[str]:
    """The groups made from now on (recorded); no RAGMCP_ variable but the stack's few, as on Lambda."""
    for name in [n for n in os.environ if n.upper().startswith("RAGMCP_")]:
        monkeypatch.delenv(name)
    for name, value in {
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "RAGMCP_BACKEND": "aws",
        "RAGMCP_DATA_DIR": str(tmp_path),
        "RAGMCP_SEARCH_BACKEND": "sqlite",  # no OpenSearch to reach: the embedded index under the stack's stores
        "RAGMCP_GENERATOR": "extractive",
        "RAGMCP_UPLOADS_TABLE": "ragmcp-uploads",
        "RAGMCP_MAX_UPLOAD_BYTES": "1000000",
    }.items():
        monkeypatch.setenv(name, value)
    seen: set[str] = set()
    for group, model in GROUPS.items():
        init, validate = model.__init__, model.model_validate

        def made_init(self: Any, *args: Any, __group: str = group, __init: Any = init, **kwargs: Any) -> None:
            seen.add(__group)
            __init(self, *args, **kwargs)

        def made_validate(cls: Any, *args: Any, __group: str = group, __validate: Any = validate, **kw: Any) -> Any:
            seen.add(__group)
            return __validate(*args, **kw)

        monkeypatch.setattr(model, "__init__", made_init)
        monkeypatch.setattr(model, "model_validate", classmethod(made_validate))
    return seen


@pytest.mark.slow  # about a second: boto3 makes the janitor's clients (no request is sent)
def test_the_janitor_reads_its_two_groups_only(made: set[str]) -> None:
    janitor = load_handler_module("janitor")
    settings = janitor.settings()
    uploads = janitor.uploads()
    assert made == JANITOR, f"the janitor made the settings groups {sorted(made)}"
    assert uploads.max_upload_bytes == 1_000_000 and settings.aws.uploads_table == "ragmcp-uploads"
    with pytest.raises(AttributeError, match="settings group 'security' was not read"):
        _ = settings.security.key_env


@pytest.mark.slow  # about a second: boto3 makes the function's clients, SQLite the embedded index
def test_the_synthesis_steps_read_their_groups_only(made: set[str]) -> None:
    steps = load_handler_module("synthesis").steps()
    assert isinstance(steps, SynthesisSteps)
    assert made == SYNTHESIS, f"the synthesis function made the settings groups {sorted(made)}"


@pytest.mark.parametrize("function", ["janitor", "synthesis"])
def test_an_unknown_variable_is_still_refused(made: set[str], monkeypatch: pytest.MonkeyPatch, function: str) -> None:
    module = load_handler_module(function)
    monkeypatch.setenv("RAGMCP_SEARCHMODE", "fts")
    with pytest.raises(SettingsError, match=r"unknown setting RAGMCP_SEARCHMODE \(did you mean RAGMCP_SEARCH_MODE\?\)"):
        module.settings() if function == "janitor" else module.steps()
    assert made <= {"ingest", "aws"}, "refused before any group but the first read was made"


def test_the_project_s_own_variables_pass(made: set[str], monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [*NOT_SETTINGS, "RAGMCP_TEST_FUZZ_REQUESTS"]:
        monkeypatch.setenv(name, "x")
    assert load_handler_module("janitor").settings().aws.uploads_table == "ragmcp-uploads"


def test_the_operator_s_commands_read_their_groups_only(
    made: set[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ragmcp keys | users | audit` read where the keys, users and audit trail live (server, aws) and the
    keys' and audit's own settings (security); no embedder, index, search or synthesis setting."""
    from ragmcp import cli

    monkeypatch.setenv("RAGMCP_BACKEND", "local")
    data = str(tmp_path / "data")
    assert cli.main(["--data-dir", data, "keys", "create", "--tenant", "t", "--name", "ops"]) == 0
    assert cli.main(["--data-dir", data, "users", "ana", "--tenant", "t", "--groups", "finance"]) == 0
    assert cli.main(["--data-dir", data, "keys", "list"]) == 0
    assert "ops" in capsys.readouterr().out
    assert made == {"server", "security", "aws"}, f"the operator's commands made the groups {sorted(made)}"

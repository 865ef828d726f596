"""What an operator sees on the command line: no library noise, one line per file, settings
errors that name the environment variable, a taken port said before indexing, profiles listed."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
import sqlean

from ragmcp.mcp.server import PROFILES

REPO = Path(__file__).resolve().parents[2]
NOISE = ("faiss.loader", "ModuleNotFoundError", "pre-processing before quantization", "Traceback")


def ragmcp(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ragmcp.cli", *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def test_ingest_logs_one_line_per_file_and_no_library_noise(tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(REPO / "samples" / "docs", docs)
    (docs / "empty.md").write_bytes(b"")
    # A fresh model cache derives the int8 query model: onnxruntime's advice must not show.
    env = {"RAGMCP_DATA_DIR": str(tmp_path / "data"), "RAGMCP_MODEL_CACHE": str(tmp_path / "models")}
    first = ragmcp("ingest", str(docs), env=env)
    assert first.returncode == 0, first.stderr
    for noise in NOISE:
        assert noise not in first.stderr, first.stderr
    lines = first.stderr.splitlines()
    names = sorted(p.name for p in (REPO / "samples" / "docs").iterdir())
    for name in names:
        assert sum(f"ingested docs:{name!r}" in line for line in lines) == 1, first.stderr
    assert sum("failed docs:'empty.md': empty file" in line for line in lines) == 1, first.stderr
    # Without a terminal, progress comes as lines (here the last one): files done of all, failed.
    assert any(line.startswith(f"files: {len(names) + 1}/{len(names) + 1}, 1 failed in ") for line in lines)

    (docs / names[0]).write_text((docs / names[0]).read_text() + "\nA new closing line about otters.\n")
    (docs / names[1]).unlink()
    second = ragmcp("ingest", str(docs), env=env).stderr.splitlines()
    assert sum(f"updated docs:{names[0]!r}" in line for line in second) == 1, second
    assert sum(f"deleted docs:{names[1]!r}" in line for line in second) == 1, second
    assert not any(f"docs:{names[2]!r}" in line for line in second), "an unchanged file is not logged"


@pytest.mark.parametrize(
    ("variable", "value", "allowed"),
    [
        ("RAGMCP_MINDSET_SEGMENTS", "abc", "an integer >= 1 and <= 20"),
        ("RAGMCP_MINDSET_SEGMENTS", "99", "an integer >= 1 and <= 20"),
        ("RAGMCP_SEARCH_MODE", "bogus", "one of fts, vector, hybrid, hybrid_scores, fts_then_vec"),
        ("RAGMCP_ALLOWED_HOSTS", "a,b", "a JSON array of strings"),
        ("RAGMCP_WATCH", "perhaps", "true or false"),
    ],
)
def test_a_bad_setting_is_one_line_naming_the_variable_and_its_allowed_values(tmp_path, variable, value, allowed):
    done = ragmcp("ingest", str(tmp_path), env={variable: value, "RAGMCP_GENERATOR_API_KEY": "sk-secret-value"})
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert variable in lines[0] and allowed in lines[0], lines[0]
    field = variable.removeprefix("RAGMCP_").lower()
    assert f" {field}" not in lines[0] and "Traceback" not in done.stderr
    assert "sk-secret-value" not in done.stderr


def test_a_taken_port_is_refused_before_anything_is_indexed(tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        data = tmp_path / "data"
        done = ragmcp(
            "serve", "--docs", str(REPO / "samples" / "docs"), "--port", str(port), env={"RAGMCP_DATA_DIR": str(data)}
        )
    finally:
        taken.close()
    assert done.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr, done.stderr
    assert "ingested" not in done.stderr and "folder synced" not in done.stderr
    with closing(sqlean.connect(str(data / "ragmcp.db"))) as db:
        assert db.execute("SELECT count(*) FROM documents").fetchone() == (0,), "nothing was indexed"


def test_stdio_with_an_unknown_profile_exits_nonzero_listing_the_profiles(tmp_path):
    done = ragmcp("stdio", "--profile", "bogus", env={"RAGMCP_DATA_DIR": str(tmp_path)}, timeout=60)
    assert done.returncode == 2
    assert f"unknown profile 'bogus'; profiles: {', '.join(PROFILES)}" in done.stderr
    assert set(PROFILES) == {"chat", "kb", "mindset", "proxysql", "ragbox"}


def test_lambda_logs_are_powertools_json_with_ragmcp_records(capsys):
    from aws_lambda_powertools import Logger

    from ragmcp.logs import configure_lambda

    logger = Logger(service="ragmcp-test")
    configure_lambda(logger)
    try:
        logging.getLogger("ragmcp.ingest.pipeline").info("ingested %s: %d chunks", "docs:'a.md'", 3)
        logging.getLogger("faiss.loader").info("Loading faiss with AVX512 support.")
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    finally:
        parent = logging.getLogger("ragmcp")
        parent.handlers, parent.propagate = [], True
        parent.setLevel(logging.NOTSET)
    assert len(lines) == 1, lines
    assert lines[0]["message"] == "ingested docs:'a.md': 3 chunks"
    assert lines[0]["level"] == "INFO" and lines[0]["service"] == "ragmcp-test"
    assert lines[0]["name"] == "ragmcp.ingest.pipeline"

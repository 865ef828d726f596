"""The Lambda layer leaves out packages the functions never import: the layer Makefile removes them,
and every function starts (the MCP function builds its services, with the OpenSearch adapter) and the
chunker's tokenizer loads in a process where importing any of them fails."""

from __future__ import annotations

import re
import subprocess
import sys

from .aws_harness import REPO

LEFT_OUT = {"grpc", "opensearch_protobufs", "google", "hf_xet"}
BLOCKED = """
import importlib.abc, importlib.util, sys

class LeftOut(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {left_out}:
            raise ImportError(f"{{name}} is not in the layer")
        return None

sys.meta_path.insert(0, LeftOut())
for name in ("ingest", "janitor", "synthesis", "index_setup", "mcp_api"):
    spec = importlib.util.spec_from_file_location(f"app_{{name}}", f"functions/{{name}}/app.py")
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
import huggingface_hub, opensearchpy
from ragmcp.ingest.tokenizer import load_tokenizer
assert load_tokenizer().encode("lamp wick").ids
print("started without", sorted({left_out}))
"""


def test_the_makefile_leaves_the_unused_packages_out() -> None:
    makefile = (REPO / "layers" / "ragmcp" / "Makefile").read_text()
    unused = re.search(r"^UNUSED = (.*)$", makefile, re.M)
    assert unused, "the layer Makefile names what it leaves out"
    assert set(unused.group(1).split()) >= LEFT_OUT
    assert "rm -rf $(UNUSED)" in makefile


def test_every_function_starts_without_them(tmp_path) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(REPO / "layers" / "ragmcp"),
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "x",
        "RAGMCP_BACKEND": "aws",
        "RAGMCP_OPENSEARCH_ENDPOINT": "http://127.0.0.1:9",
        "RAGMCP_OPENSEARCH_SIGV4": "false",
        "RAGMCP_DATA_DIR": str(tmp_path),
        "RAGMCP_DNS_REBINDING_PROTECTION": "false",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_NAMESPACE": "ragmcp-test",
    }
    result = subprocess.run(
        [sys.executable, "-c", BLOCKED.format(left_out=sorted(LEFT_OUT))],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "started without" in result.stdout


def test_the_layer_pins_its_own_boto3() -> None:
    """The Lambda runtime's boto3 differs by region and date; the layer's (first on the path) is one
    exact version, recent enough for the Bedrock operations the functions call (Converse; Rerank came
    with botocore 1.35.7x, December 2024)."""
    import botocore.session

    requirements = (REPO / "layers" / "ragmcp" / "requirements-lambda.txt").read_text()
    pinned = re.search(r"^boto3==([0-9.]+)$", requirements, re.M)
    assert pinned, "boto3 is pinned to one version"
    assert tuple(int(n) for n in pinned.group(1).split(".")) >= (1, 36, 0)
    makefile = (REPO / "layers" / "ragmcp" / "Makefile").read_text()
    assert "$(PIP_TARGET)/boto3" not in makefile and "$(PIP_TARGET)/botocore" not in makefile
    session = botocore.session.get_session()
    assert "Converse" in session.get_service_model("bedrock-runtime").operation_names
    assert "Rerank" in session.get_service_model("bedrock-agent-runtime").operation_names

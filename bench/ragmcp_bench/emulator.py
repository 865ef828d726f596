"""AWS on 127.0.0.1 for the Lambda benchmarks: moto's server with DynamoDB, S3 and SQS provisioned by
the LocalStack init script, and Bedrock's InvokeModel answering as Titan Text Embeddings v2 with a
constant vector (a stand-in embedder: the benchmarks measure the functions, not the model)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx


def titan_embedding(self: object, payload: dict, model_id: str) -> dict:
    """moto's Bedrock InvokeModel, answering as Titan Text Embeddings v2 does (one vector per text)."""
    return {"embedding": [1.0] * payload["dimensions"]}


@contextmanager
def emulated_aws(root: Path) -> Iterator[dict[str, str]]:
    """moto on 127.0.0.1 (DynamoDB, S3, SQS provisioned by the LocalStack init script; Bedrock's
    InvokeModel answering a constant Titan vector), for as long as the block runs: the environment that
    points a function's process at it, with the embedded SQLite index standing in for OpenSearch."""
    import logging
    import os
    import socket
    import subprocess
    import sys
    from unittest import mock

    import boto3
    from moto.bedrockruntime.models import BedrockRuntimeBackend
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "RAGMCP_BACKEND": "aws",
        "RAGMCP_SEARCH_BACKEND": "sqlite",
        "POWERTOOLS_METRICS_NAMESPACE": "ragmcp-bench",
        "PYTHONPATH": str(root / "layers" / "ragmcp"),
    }
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    with mock.patch.object(BedrockRuntimeBackend, "invoke_model", titan_embedding):
        server.start()
        try:
            httpx.post(f"{endpoint}/moto-api/reset").raise_for_status()
            provision = root / "localstack" / "init" / "ready.d" / "provision.py"
            subprocess.run([sys.executable, str(provision)], env=env, check=True, capture_output=True, timeout=120)
            # moto builds its Bedrock backend on the first request (about 0.4 s), which is not the functions' time.
            session = boto3.session.Session(aws_access_key_id="bench", aws_secret_access_key="bench")
            bedrock = session.client("bedrock-runtime", endpoint_url=endpoint, region_name="us-east-1")
            bedrock.invoke_model(modelId="warm", body=json.dumps({"inputText": "warm", "dimensions": 1}))
            yield env
        finally:
            server.stop()

"""An in-process ragmcp app over the shared documents, for replaying the contracts' examples.

The app is the real one (FastAPI + the MCP SDK's Streamable HTTP transport), called through
Starlette's TestClient, so every request crosses the same HTTP layer as in production.
"""

from __future__ import annotations

import itertools
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from starlette.testclient import TestClient

from ragmcp.bootstrap import Services, build_registry, build_services
from ragmcp.http import create_app
from ragmcp.settings import Settings

REPO = Path(__file__).resolve().parents[2]
_ids = itertools.count(1)


@dataclass
class ContractClient:
    http: TestClient
    services: Services

    def rpc(
        self, method: str, params: dict | None = None, *, path: str = "/mcp", headers: dict | None = None
    ) -> Any:
        """The raw HTTP response to one JSON-RPC request."""
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": next(_ids), "method": method}
        if params is not None:
            body["params"] = params
        return self.http.post(path, json=body, headers=headers or {})

    def call(self, tool: str, arguments: dict, *, path: str = "/mcp", headers: dict | None = None) -> dict:
        """The JSON-RPC response body of a tools/call."""
        return self.rpc("tools/call", {"name": tool, "arguments": arguments}, path=path, headers=headers).json()

    def payload(self, tool: str, arguments: dict, **kw) -> Any:
        """The tool's result payload (its JSON text content), asserting the call succeeded and that
        the structured copy is the same payload and valid against the tool's outputSchema."""
        body = self.call(tool, arguments, **kw)
        assert "result" in body, body
        assert body["result"].get("isError") is not True, body
        payload = json.loads(body["result"]["content"][0]["text"])
        schema = self.output_schemas.get(tool)
        if schema is not None:
            assert body["result"]["structuredContent"] == payload
            jsonschema.validate(payload, schema)
        return payload

    @cached_property
    def output_schemas(self) -> dict[str, dict]:
        tools = self.rpc("tools/list", {}).json()["result"]["tools"]
        return {t["name"]: t["outputSchema"] for t in tools if "outputSchema" in t}


@pytest.fixture(scope="session")
def shared_index(shared_documents: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built once per test run: the shared documents plus the repository's samples (a CSV row source
    among them) under docs/, ingested into the index under index/. Modules use copies (contract_data)."""
    root = tmp_path_factory.mktemp("shared-index")
    docs = root / "docs"
    shutil.copytree(shared_documents / "source", docs)
    for sample in (REPO / "samples" / "docs").iterdir():
        shutil.copy(sample, docs / sample.name)
    services = build_services(Settings(data_dir=root / "index", host="testserver", open=True))
    services.ingest.sync(services.register_folder("default", "docs", str(docs)))
    assert services.database is not None
    services.database.conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return root


@pytest.fixture(scope="module")
def contract_data(shared_index: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This module's own copy of the shared index and its documents: what one module writes (notes,
    sources, keys, files) no other module sees."""
    root = tmp_path_factory.mktemp("contracts")
    shutil.copytree(shared_index, root, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*-shm"))
    return root


@pytest.fixture(scope="module")
def contract_services(contract_data: Path) -> Services:
    services = build_services(Settings(data_dir=contract_data / "index", host="testserver", open=True))
    services.register_folder("default", "docs", str(contract_data / "docs"))
    return services


@pytest.fixture(scope="module")
def contract(contract_services: Services) -> Iterator[ContractClient]:
    app = create_app(contract_services, build_registry(contract_services))
    with TestClient(app, base_url="http://testserver") as http:
        yield ContractClient(http, contract_services)


@pytest.fixture(scope="module")
def unfloored(contract_data: Path, contract_services: Services) -> Iterator[ContractClient]:
    """A second server over the contract index with the relevance floor off: for the tests of a tool's
    mechanics (caps, offsets, filters, artifacts) whose example queries no shared document answers."""
    services = build_services(
        Settings(data_dir=contract_data / "index", host="testserver", open=True, relevance_floor=0)
    )
    with TestClient(create_app(services, build_registry(services)), base_url="http://testserver") as http:
        yield ContractClient(http, services)

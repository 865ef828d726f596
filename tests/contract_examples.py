"""The contracts' request examples (../shared/contracts/*.md, read for their examples only) and the
small corpus they are replayed on, shared by the tests that replay them on the in-memory fakes
(tests/unit/test_contract_examples_on_fakes.py, tests/unit/test_event_loop.py)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ragmcp.bootstrap import Adapters
from ragmcp.domain.models import UserRecord
from ragmcp.services import Services
from tests.conftest import shared_dir

CONTRACTS = shared_dir() / "contracts"
FILES = {
    "chat": "chat-app-rag-mcp.md",
    "kb": "kb-mcp-server.md",
    "mindset": "mindset-rag-mcp.md",
    "proxysql": "proxysql-rag-mcp.md",
    "ragbox": "ragbox-mcp.md",
}
USER = "user@example.com"
TENANT = "default"
LEAVE = "# Leave policy\n\nThe PTO policy gives every employee 25 days of paid time off a year.\n"
HANDBOOK = {"leave-policy.md": LEAVE}
OFFICE = {
    "cancellation.md": (
        "# Office Policies\n\nA 24-hour cancellation policy applies to all appointments. "
        "The cancellation fee is 40 euros for an appointment cancelled later than that.\n"
    ),
    "product-x.md": (
        "# Product X\n\nProduct X key features: multi-core processing and GPU acceleration. "
        "Its capabilities and specifications beat the competitors on speed.\n"
    ),
}
POSTS = (
    "Id,Title,Body,Tags,Score\n"
    "12345,How to parse JSON in MySQL 8?,I tried JSON_EXTRACT on a mysql column,mysql json,12\n"
    "9876,Query JSON columns efficiently,Index a generated column over the JSON field,json,8\n"
)


@dataclass(frozen=True)
class Example:
    profile: str
    tool: str
    arguments: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


def contract_text(profile: str) -> str:
    """One profile's contract document, as ../shared/contracts holds it."""
    return (CONTRACTS / FILES[profile]).read_text()


def json_blocks(profile: str) -> list[Any]:
    """The fenced JSON blocks that parse (one proxysql request carries a // comment)."""
    blocks = []
    for block in re.findall(r"```json(.*?)```", contract_text(profile), re.S):
        try:
            blocks.append(json.loads(block, strict=False))
        except json.JSONDecodeError:
            assert "values_b64" in block, block
    return blocks


def contract_requests(profile: str) -> list[Example]:
    """The request examples of one profile's contract, in the order the document gives them."""
    decoder = json.JSONDecoder()
    text = contract_text(profile)
    if profile == "chat":
        chat = [b for b in json_blocks("chat") if "username" in b]
        names = ["rag_discover_resources", "rag_get_raw_results", "rag_get_synthesized_results"]
        return [Example("chat", name, block) for name, block in zip(names, chat, strict=True)]
    if profile == "ragbox":
        calls = [b["params"] for b in json_blocks("ragbox") if b.get("method") == "tools/call"]
        return [Example("ragbox", c["name"], c["arguments"]) for c in calls]
    if profile == "mindset":
        found = [decoder.raw_decode(text, m.start())[0] for m in re.finditer(r"^\{\n", text, re.M)]
        curl = re.search(r"curl -X POST.*?-d '(\{.*?\})'", text, re.S)
        assert curl is not None
        headers = dict(re.findall(r'-H "(x-[a-z-]+): (.*?)"\s', curl.group(0).replace('\\"', '"')))
        calls = [b["params"] for b in [*found, json.loads(curl.group(1))] if b.get("method") == "tools/call"]
        return [Example("mindset", c["name"], c["arguments"], headers) for c in calls]
    if profile == "proxysql":
        answers = {"results", "chunks", "docs", "rows", "sources", "accepted"}
        # Requests only: not the responses, nor the shared filter object (source_ids) of section 2.
        requests = [b for b in json_blocks("proxysql") if not (answers | {"source_ids"}) & set(b)]
        names = ["rag.search_fts", "rag.search_vector", "rag.search_hybrid", "rag.search_hybrid", "rag.get_chunks"]
        names += ["rag.get_docs", "rag.fetch_from_source", "rag.admin.stats", "rag.admin.sync"]
        return [Example("proxysql", name, block) for name, block in zip(names, requests, strict=True)]
    found = []
    for m in re.finditer(r"calls (\w+) with (?:(?=\{)|no parameters)", text):
        arguments = decoder.raw_decode(text, m.end())[0] if m.group(0).endswith("with ") else {}
        found.append(Example("kb", m.group(1), arguments))
    return found




def contracts_present() -> bool:
    return all((CONTRACTS / name).is_file() for name in FILES.values())


def write_corpus(adapters: Adapters, services: Services) -> None:
    """The user, the three sources and their files, ingested."""
    services.users.put(UserRecord(tenant=TENANT, user_id=USER, groups=("users",)))
    handbook = adapters.location_for(TENANT, "handbook")
    for name, text in HANDBOOK.items():
        adapters.blobs.write(handbook, name, text.encode())
    adapters.blobs.write(handbook, ".source.json", b'{"name": "Employee Handbook", "groups": ["users"]}')
    office = adapters.location_for(TENANT, "office")
    for name, text in OFFICE.items():
        adapters.blobs.write(office, name, text.encode())
    posts = adapters.location_for(TENANT, "posts")
    adapters.blobs.write(posts, "posts.csv", POSTS.encode())
    columns = '["Id", "Title", "Body", "Tags", "Score"]'
    declared = f'{{"name": "stack_posts", "pk_column": "Id", "fetch_columns": {columns}}}'
    adapters.blobs.write(posts, ".source.json", declared.encode())
    for source_id, location, files in (("handbook", handbook, 1), ("office", office, 2), ("posts", posts, 1)):
        report = services.ingest.sync(services.register_folder(TENANT, source_id, location))
        assert report.failed == 0 and report.ingested == files, report

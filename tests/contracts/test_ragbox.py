"""The ragbox profile against contracts/ragbox-mcp.md.

Every JSON example of the contract document is read from the document itself and replayed verbatim
(with the document's headers): each response is compared field for field (the same keys, each with
the example's JSON type) and on the values the contract fixes. The contract's table of error codes
is checked against live answers. The confidence gate is calibrated on the shared documents:
off-topic questions get the Silence Protocol, answerable ones an answer citing the right document.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from ragmcp.bootstrap import build_registry, build_services
from ragmcp.domain.errors import RagError
from ragmcp.domain.models import Principal, Tier
from ragmcp.http import create_app
from ragmcp.mcp.errors import ERROR_HTTP_STATUS
from ragmcp.security.models import RateLimits
from ragmcp.settings import Settings
from tests.conftest import shared_dir
from tests.contracts.conftest import ContractClient
from tests.contracts.response_schemas import assert_valid, response_schemas

CONTRACT = shared_dir() / "contracts" / "ragbox-mcp.md"
PATH = "/mcp/ragbox"
TOOLS = ("search_documents", "get_document", "query_knowledge", "list_documents")
HEADERS = {"Content-Type": "application/json", "X-API-Key": "rbx_live_" + "0123456789abcdef" * 4}
DOCUMENT_FIELDS = {
    "id",
    "title",
    "filename",
    "size_bytes",
    "pages",
    "chunks",
    "security_tier",
    "indexed",
    "uploaded_at",
}
"""Fields that are null for formats without pages (Word, HTML, Markdown, text)."""
TIERS = {"standard", "confidential", "privileged"}
ISO_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")

TIER_SOURCE = "ragbox-tiers"
REPO = Path(__file__).resolve().parents[2]
KESTREL = "Kestrel Avionics acquisition"
TIER_DOCS = {
    "kestrel-board-minutes.md": (
        "# Board minutes: Project Kestrel\n\n"
        "The board approved the acquisition of Kestrel Avionics for 42 million euros. The purchase of Kestrel "
        "Avionics closes in the third quarter, and the Kestrel negotiation team reports to the chief counsel.\n",
        "privileged",
    ),
    "kestrel-integration-plan.md": (
        "# Integration plan for Kestrel Avionics\n\n"
        "After the acquisition, the Kestrel Avionics engineering teams move to the Lyon site. The Kestrel "
        "integration plan keeps the avionics product names for two years.\n",
        "confidential",
    ),
}

OFF_TOPIC = [
    "What is the capital city of Peru?",
    "How long should I let bread dough rise before baking it?",
    "What was the final score of the 2014 World Cup final?",
    "How do I renew my passport before an international trip?",
    "What are the common symptoms of vitamin D deficiency?",
    "What torque should I use on the lug nuts of my car's wheels?",
    "How do I set up two-factor authentication for my email account?",
    "Which fertilizer is best for growing tomatoes in containers?",
    "Who directed the movie Jaws?",
    "How many moons does Jupiter have?",
]
ANSWERABLE = [
    ("Who patented the typewriter and in what year?", "multi_page.pdf"),
    ("How does a Boots self-locking nut stay tight under vibration?", "amt_handbook_sample.pdf"),
    ("What does the QIBM_DB_SECADM function usage ID allow a user to do?", "redp5110_sampled.pdf"),
    ("Which company did IBM sell its personal computer business to?", "wiki.md"),
    ("Why should ducks not be fed bread?", "wiki_duck.html"),
    ("What foods would a duck eat after swimming in the lake?", "word_sample.docx"),
    ("How many freshwater ducks were observed in 2024?", "xlsx_05_table_with_title.xlsx"),
    ("How much faster is inference with OTSL compared to HTML?", "2305.03393v1-pg9.pdf"),
    ("How long are links to original documents valid?", "security-faq.md"),
    ("Who was the server on the restaurant receipt?", "kvp_data_example.html"),
]


# -- the contract document ----------------------------------------------------------------------------


class Examples:
    """The document's JSON examples: tool definitions, requests, responses, client configurations."""

    def __init__(self, text: str):
        blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", text, re.S)]
        self.definitions = {b["name"]: b for b in blocks if "inputSchema" in b}
        self.requests = [b for b in blocks if "method" in b]
        self.responses = [b for b in blocks if "result" in b]
        self.configs = [b for b in blocks if not {"inputSchema", "method", "result"} & set(b)]
        self.errors = {int(c): int(s) for c, s in re.findall(r"^\| (-32\d{3}) \| (\d{3}) \|", text, re.M)}
        (python,) = re.findall(r"```python\n(.*?)```", text, re.S)
        self.client_arguments = json.loads(re.search(r'"arguments": (\{.*?\})', python).group(1))
        self.client_header = re.search(r'"(X-API-Key)": "rbx_live_', python).group(1)

    def request(self, method: str, tool: str | None = None) -> dict[str, Any]:
        """A copy of the request example, for a test to adapt."""
        (found,) = [r for r in self.requests if r["method"] == method and (tool is None or r["params"]["name"] == tool)]
        return copy.deepcopy(found)

    def tool_responses(self, request_id: int) -> list[dict[str, Any]]:
        return [r for r in self.responses if r["id"] == request_id]


@pytest.fixture(scope="module")
def examples() -> Examples:
    if not CONTRACT.is_file():
        pytest.skip(f"contract document not found at {CONTRACT}")
    found = Examples(CONTRACT.read_text())
    assert sorted(found.definitions) == sorted(TOOLS)
    assert sorted((r["method"], r.get("params", {}).get("name")) for r in found.requests) == [
        ("initialize", None),
        ("tools/call", "get_document"),
        ("tools/call", "list_documents"),
        ("tools/call", "query_knowledge"),
        ("tools/call", "search_documents"),
        ("tools/list", None),
    ]
    assert sorted(r["id"] for r in found.responses) == [1, 2, 3, 3]
    assert len(found.configs) == 2
    assert found.errors == {
        -32700: 400,
        -32600: 400,
        -32601: 404,
        -32602: 400,
        -32000: 401,
        -32001: 429,
        -32002: 500,
    }
    return found


def text_payload(response: dict[str, Any]) -> Any:
    return json.loads(response["result"]["content"][0]["text"])


# -- calling the server ---------------------------------------------------------------------------------


def post(contract, body: Any, path: str = PATH) -> Any:
    return contract.http.post(path, json=body, headers=HEADERS)


def replay(contract, request: dict[str, Any], example: dict[str, Any]) -> Any:
    """The payload answering a request, whose envelope is the example response's: the same id, a result
    holding one text content item and nothing else (isError false aside)."""
    response = post(contract, request)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["id"] == example["id"] == request["id"]
    result = body["result"]
    assert set(result) - {"isError"} == set(example["result"]) == {"content"}
    assert result.get("isError", False) is False
    assert [set(c) for c in result["content"]] == [{"type", "text"}]
    assert result["content"][0]["type"] == "text"
    payload = json.loads(result["content"][0]["text"])
    tool = request["params"]["name"]
    if ("ragbox", tool) in response_schemas():
        assert_valid(payload, "ragbox", tool)
    return payload


def tools_call(tool: str, arguments: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}


def call(contract, tool: str, arguments: dict[str, Any], path: str = PATH, headers: dict = HEADERS) -> Any:
    response = contract.http.post(path, json=tools_call(tool, arguments), headers=headers)
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert result.get("isError", False) is False and "structuredContent" not in result
    payload = json.loads(result["content"][0]["text"])
    if ("ragbox", tool) in response_schemas():
        assert_valid(payload, "ragbox", tool)
    return payload


def failure(contract, body: Any, status: int, code: int, path: str = PATH, headers: dict = HEADERS) -> dict[str, Any]:
    """The JSON-RPC error answering `body`, with the contract's HTTP status for its code."""
    response = contract.http.post(
        path, content=body if isinstance(body, bytes) else json.dumps(body).encode(), headers=headers
    )
    error = response.json()["error"]
    assert (response.status_code, error["code"]) == (status, code), response.text
    assert isinstance(error["message"], str) and "Traceback" not in error["message"]
    return error


def tool_failure(
    contract, tool: str, arguments: Any, status: int, code: int, path: str = PATH, headers: dict = HEADERS
) -> dict[str, Any]:
    return failure(contract, tools_call(tool, arguments), status, code, path, headers)


def invalid(contract, tool: str, arguments: Any, mention: str) -> None:
    error = tool_failure(contract, tool, arguments, 400, -32602)
    assert mention in error["message"], error


def title_of(contract, file_name: str) -> str:
    return contract.services.catalog.document(Principal(), f"docs:{file_name}").title


# -- protocol methods -------------------------------------------------------------------------------------


def test_initialize_example_negotiates_2024_11_05(contract, examples) -> None:
    request = examples.request("initialize")
    response = post(contract, request)
    assert response.status_code == 200
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["id"] == request["id"] == 0
    result = body["result"]
    assert result["protocolVersion"] == request["params"]["protocolVersion"] == "2024-11-05"
    assert isinstance(result["capabilities"]["tools"], dict)
    assert result["serverInfo"]["name"] == "ragmcp-ragbox" and isinstance(result["serverInfo"]["version"], str)


def test_tools_list_example_shows_the_contract_definitions(contract, examples) -> None:
    request = examples.request("tools/list")
    body = post(contract, request).json()
    assert body["id"] == request["id"]
    tools = {t["name"]: t for t in body["result"]["tools"]}
    assert sorted(tools) == sorted(TOOLS)
    for name, definition in examples.definitions.items():
        expected, schema = definition["inputSchema"], tools[name]["inputSchema"]
        assert tools[name]["description"].startswith(definition["description"])
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert schema.get("required", []) == expected.get("required", [])
        # The contract's arguments, in its order; an optional argument beyond them only where the access
        # policy needs one (get_document's privilege_mode, like search_documents').
        extra = list(schema["properties"])[len(expected["properties"]) :]
        assert list(schema["properties"])[: len(expected["properties"])] == list(expected["properties"])
        assert extra == (["privilege_mode"] if name == "get_document" else []), (name, extra)
        for arg, spec in expected["properties"].items():
            ours = schema["properties"][arg]
            assert ours["type"] == spec["type"], (name, arg)
            assert ours.get("default") == spec.get("default"), (name, arg)
            assert ours.get("enum") == spec.get("enum"), (name, arg)
            assert ours["description"], (name, arg)
    for name, most in (("search_documents", 20), ("list_documents", 100)):
        limit = tools[name]["inputSchema"]["properties"]["limit"]
        assert (limit["minimum"], limit["maximum"]) == (1, most)


def test_the_combined_endpoint_serves_the_ragbox_tools_too(contract) -> None:
    tools = {t["name"] for t in contract.rpc("tools/list", {}, path="/mcp").json()["result"]["tools"]}
    assert set(TOOLS) <= tools
    args = {"query": "history of the word processor", "limit": 2}
    assert call(contract, "search_documents", args, path="/mcp") == call(contract, "search_documents", args)


# -- the tool examples ------------------------------------------------------------------------------------


def test_search_documents_example(unfloored, examples) -> None:
    # The example asks about policies no shared document holds: the relevance floor would (rightly)
    # leave nothing to compare, so it is replayed with the floor off.
    contract = unfloored
    request = examples.request("tools/call", "search_documents")
    (example,) = examples.tool_responses(request["id"])
    results = replay(contract, request, example)
    assert len(results) == request["params"]["arguments"]["limit"] == 3
    assert len({r["id"] for r in results}) == 3
    relevance = [r["relevance"] for r in results]
    assert relevance == sorted(relevance, reverse=True) and all(0 <= x <= 1 for x in relevance)
    assert all(r["security_tier"] in TIERS and r["snippet"] for r in results)


def test_get_document_example(contract, examples) -> None:
    request = examples.request("tools/call", "get_document")
    (example,) = examples.tool_responses(request["id"])
    error = failure(contract, request, 400, -32602)
    assert request["params"]["arguments"]["document_id"] in error["message"]

    doc_id = call(contract, "search_documents", {"query": "evolution of the word processor", "limit": 1})[0]["id"]
    request["params"]["arguments"]["document_id"] = doc_id
    document = replay(contract, request, example)
    stored = contract.services.documents.get("default", doc_id)
    assert document == {
        "id": "docs:multi_page.pdf",
        "title": "The Evolution of the Word Processor",
        "filename": "multi_page.pdf",
        "size_bytes": (shared_dir() / "documents" / "source" / "multi_page.pdf").stat().st_size,
        "pages": 5,
        "chunks": stored.chunk_count,
        "security_tier": "standard",
        "indexed": True,
        "uploaded_at": document["uploaded_at"],
    }
    assert ISO_Z.match(document["uploaded_at"])
    assert document["uploaded_at"] == stored.created_at.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_query_knowledge_example_is_refused_by_the_silence_protocol(contract, examples) -> None:
    request = examples.request("tools/call", "query_knowledge")
    silent = next(r for r in examples.tool_responses(request["id"]) if text_payload(r)["silence"])
    answer = replay(contract, request, silent)
    assert (answer["answer"], answer["sources"], answer["silence"]) == ("", [], True)
    assert answer["silence_reason"]
    assert answer["confidence"] < contract.services.settings.synthesis.silence_threshold


def test_query_knowledge_confident_answer_example(contract, examples) -> None:
    request = examples.request("tools/call", "query_knowledge")
    confident = next(r for r in examples.tool_responses(request["id"]) if not text_payload(r)["silence"])
    request["params"]["arguments"]["query"] = "When did Microsoft launch Word for MS-DOS?"
    answer = replay(contract, request, confident)
    assert answer["silence"] is False and "1983" in answer["answer"]
    assert answer["confidence"] >= contract.services.settings.synthesis.silence_threshold
    assert answer["confidence"] == round(answer["confidence"], 2)
    essay = [s for s in answer["sources"] if s["document"] == "The Evolution of the Word Processor"]
    assert essay and essay[0] == answer["sources"][0]
    assert all(isinstance(s["page"], int) and 1 <= s["page"] <= 5 for s in essay)


def test_list_documents_example(contract, examples) -> None:
    request = examples.request("tools/call", "list_documents")
    listing = replay(contract, request, {"id": request["id"], "result": {"content": []}})
    assert set(listing) == {"documents", "total", "limit", "offset"}
    assert (listing["limit"], listing["offset"]) == (10, 0)
    readable, total = contract.services.catalog.list_documents(
        Principal(max_tier=Tier.confidential), sort="uploaded_at", limit=10
    )
    assert listing["total"] == total > 10
    assert [d["id"] for d in listing["documents"]] == [d.doc_id for d in readable]
    for document in listing["documents"]:
        assert set(document) == DOCUMENT_FIELDS
        assert ISO_Z.match(document["uploaded_at"]) and document["security_tier"] in TIERS
    uploaded = [d["uploaded_at"] for d in listing["documents"]]
    assert uploaded == sorted(uploaded, reverse=True)


def test_the_python_client_example(contract, examples) -> None:
    """The document's httpx example: its header, and a question the vault cannot answer."""
    assert examples.client_header in HEADERS
    answer = call(contract, "query_knowledge", examples.client_arguments)
    assert set(answer) == {"answer", "confidence", "sources", "silence", "silence_reason"}
    assert answer["silence"] is True and answer["sources"] == []


# -- the tools' behaviour ---------------------------------------------------------------------------------


def test_search_returns_distinct_documents_up_to_the_limit(unfloored) -> None:
    contract = unfloored
    default = call(contract, "search_documents", {"query": "ducks"})
    assert len(default) == 5 and len({r["id"] for r in default}) == 5
    widest = call(contract, "search_documents", {"query": "ducks", "limit": 20})
    assert len(widest) == len({r["id"] for r in widest}) > 5
    assert [r["id"] for r in widest[:5]] == [r["id"] for r in default]
    top = call(contract, "search_documents", {"query": "row permissions and column masks in DB2", "limit": 1})
    assert [r["id"] for r in top] == ["docs:redp5110_sampled.pdf"]


def test_search_results_open_with_get_document(contract) -> None:
    for result in call(contract, "search_documents", {"query": "self-locking nuts", "limit": 3}):
        document = call(contract, "get_document", {"document_id": result["id"]})
        assert (document["id"], document["title"]) == (result["id"], result["title"])
        assert document["security_tier"] == result["security_tier"] and "content" not in document


def test_get_document_with_content(contract) -> None:
    document = call(contract, "get_document", {"document_id": "docs:multi_page.pdf", "include_content": True})
    assert set(document) == DOCUMENT_FIELDS | {"content"}
    assert "Christopher Latham Sholes" in document["content"] and "Google Docs" in document["content"]
    plain = call(contract, "get_document", {"document_id": "docs:wiki.md"})
    assert plain["pages"] is None and plain["filename"] == "wiki.md" and plain["chunks"] >= 1


def test_list_documents_sorts_and_pages(contract) -> None:
    everything = call(contract, "list_documents", {"limit": 100})
    assert everything["total"] == len(everything["documents"])
    by_title = call(contract, "list_documents", {"sort": "title", "limit": 100})["documents"]
    assert [d["title"].lower() for d in by_title] == sorted(d["title"].lower() for d in by_title)
    by_size = call(contract, "list_documents", {"sort": "size", "limit": 100})["documents"]
    assert [d["size_bytes"] for d in by_size] == sorted((d["size_bytes"] for d in by_size), reverse=True)
    pages = [call(contract, "list_documents", {"sort": "title", "limit": 4, "offset": o}) for o in range(0, 100, 4)]
    assert [d for p in pages for d in p["documents"]] == by_title
    assert {p["total"] for p in pages} == {everything["total"]}
    assert call(contract, "list_documents", {"offset": everything["total"]})["documents"] == []
    assert call(contract, "list_documents", {})["limit"] == 50


def test_the_model_argument_is_accepted_and_does_not_change_the_answer(contract) -> None:
    question = {"query": "Who patented the typewriter and in what year?"}
    plain = call(contract, "query_knowledge", question)
    for model in ("gemini-1.5-flash", "claude-3.5-sonnet", "gpt-4o"):
        assert call(contract, "query_knowledge", {**question, "model": model}) == plain
    assert "1868" in plain["answer"] and "Sholes" in plain["answer"]


def test_a_conversation_keeps_its_context(contract) -> None:
    conversation = {"conversation_id": "ragbox-test-mallards"}
    first = call(contract, "query_knowledge", {"query": "Tell me about mallard ducks", **conversation})
    assert first["silence"] is False and "mallard" in first["answer"].lower()
    follow = call(contract, "query_knowledge", {"query": "and what do they eat?", **conversation})
    assert follow["silence"] is False and "Duck - Wikipedia" in {s["document"] for s in follow["sources"]}
    assert re.search(r"\b(eat|food|feed)", follow["answer"]), follow["answer"]

    nests = "Do they make a nest before breeding?"
    within = call(contract, "query_knowledge", {"query": nests, **conversation})
    assert within["silence"] is False and "Duck - Wikipedia" in {s["document"] for s in within["sources"]}
    # The article says that ducks make a nest, not where: the gate names the word no passage holds.
    where = call(contract, "query_knowledge", {"query": "Where do they build their nests?", **conversation})
    assert where["silence"] is True and where["silence_reason"].endswith("do not mention build."), where


# -- calibration of the confidence gate -------------------------------------------------------------------


@pytest.mark.parametrize("question", OFF_TOPIC)
def test_off_topic_questions_are_refused(contract, question: str) -> None:
    answer = call(contract, "query_knowledge", {"query": question})
    print(f"confidence {answer['confidence']:.2f} silence={answer['silence']} | {question}")
    assert answer["silence"] is True, answer
    assert (answer["answer"], answer["sources"]) == ("", [])
    assert isinstance(answer["silence_reason"], str) and answer["silence_reason"]
    assert answer["confidence"] < contract.services.settings.synthesis.silence_threshold


@pytest.mark.parametrize(("question", "file_name"), ANSWERABLE)
def test_answerable_questions_cite_their_document(contract, question: str, file_name: str) -> None:
    answer = call(contract, "query_knowledge", {"query": question})
    cited = [s["document"] for s in answer["sources"]]
    print(f"confidence {answer['confidence']:.2f} silence={answer['silence']} cited={cited} | {question}")
    assert answer["silence"] is False and "silence_reason" not in answer, answer
    assert answer["answer"] and answer["confidence"] >= contract.services.settings.synthesis.silence_threshold
    assert title_of(contract, file_name) in cited
    assert all(0 <= s["relevance"] <= 1 and s["section"] for s in answer["sources"])


# -- privilege tiers --------------------------------------------------------------------------------------

TIER_IDS = {tier: f"{TIER_SOURCE}:{name}" for name, (_, tier) in TIER_DOCS.items()}


@pytest.fixture(scope="module")
def tiers(contract, tmp_path_factory) -> Iterator[dict[str, str]]:
    """A source holding one privileged and one confidential document (sidecar tiers), removed afterwards."""
    services = contract.services
    folder = tmp_path_factory.mktemp("ragbox") / TIER_SOURCE
    folder.mkdir()
    for name, (text, tier) in TIER_DOCS.items():
        (folder / name).write_text(text)
        (folder / f"{name}.metadata.json").write_text(json.dumps({"tier": tier}))
    source = services.register_folder("default", TIER_SOURCE, str(folder))
    assert services.ingest.sync(source).ingested == len(TIER_DOCS)
    yield TIER_IDS
    for path in list(folder.iterdir()):
        path.unlink()
    assert services.ingest.sync(source, allow_mass_delete=True).deleted == len(TIER_DOCS)


@pytest.fixture(scope="module")
def keyed(tmp_path_factory) -> Iterator[ContractClient]:
    """An app of its own for the tests with API keys (not started --open: every request needs one).
    It holds the tiered documents and the repository's samples (standard tier)."""
    root = tmp_path_factory.mktemp("ragbox-keyed")
    folder = root / TIER_SOURCE
    shutil.copytree(REPO / "samples" / "docs", folder)
    for name, (text, tier) in TIER_DOCS.items():
        (folder / name).write_text(text)
        (folder / f"{name}.metadata.json").write_text(json.dumps({"tier": tier}))
    services = build_services(Settings(data_dir=root / "index", host="testserver"))
    services.ingest.sync(services.register_folder("default", TIER_SOURCE, str(folder)))
    with TestClient(create_app(services, build_registry(services)), base_url="http://testserver") as http:
        yield ContractClient(http, services)


@pytest.fixture
def api_key(keyed) -> Callable[..., dict[str, str]]:
    """Makes API keys of the keyed app (the request headers presenting each)."""

    def make(**fields: Any) -> dict[str, str]:
        created = keyed.services.keys.create("default", scopes=("read",), **fields)
        return {**HEADERS, "X-API-Key": created.secret}

    return make


def test_privileged_documents_appear_only_in_privilege_mode(contract, tiers) -> None:
    standard = call(contract, "search_documents", {"query": KESTREL})
    assert tiers["confidential"] in {r["id"] for r in standard}
    assert tiers["privileged"] not in {r["id"] for r in standard}
    elevated = {r["id"]: r for r in call(contract, "search_documents", {"query": KESTREL, "privilege_mode": True})}
    assert elevated[tiers["privileged"]]["security_tier"] == "privileged"
    assert elevated[tiers["confidential"]]["security_tier"] == "confidential"


def test_listing_and_answers_stay_below_privileged(contract, tiers) -> None:
    listed = {d["id"]: d for d in call(contract, "list_documents", {"limit": 100})["documents"]}
    assert listed[tiers["confidential"]]["security_tier"] == "confidential"
    assert tiers["privileged"] not in listed
    answer = call(contract, "query_knowledge", {"query": "How much did the board pay for Kestrel Avionics?"})
    assert "Board minutes: Project Kestrel" not in {s["document"] for s in answer["sources"]}
    assert "42 million" not in answer["answer"]


def test_get_document_opens_privileged_documents_only_in_privilege_mode(contract, tiers) -> None:
    hidden = {"document_id": tiers["privileged"], "include_content": True}
    tool_failure(contract, "get_document", hidden, 400, -32602)
    document = call(contract, "get_document", {**hidden, "privilege_mode": True})
    assert document["security_tier"] == "privileged" and "42 million euros" in document["content"]


def test_a_key_without_privileged_access(keyed, api_key) -> None:
    contract, tiers = keyed, TIER_IDS
    key = api_key(max_tier=Tier.confidential)
    elevated = {"query": KESTREL, "privilege_mode": True}
    error = tool_failure(contract, "search_documents", elevated, 401, -32000, headers=key)
    assert "privilege_mode" in error["message"]
    found = call(contract, "search_documents", {"query": KESTREL}, headers=key)
    assert tiers["confidential"] in {r["id"] for r in found}
    assert {r["security_tier"] for r in found} <= {"standard", "confidential"}
    tool_failure(contract, "get_document", {"document_id": tiers["privileged"]}, 400, -32602, headers=key)
    refused = {"document_id": tiers["privileged"], "privilege_mode": True}
    assert "privilege_mode" in tool_failure(contract, "get_document", refused, 401, -32000, headers=key)["message"]
    assert call(contract, "get_document", {"document_id": tiers["confidential"]}, headers=key)["id"]


def test_a_standard_key_sees_standard_documents_only(keyed, api_key) -> None:
    contract, tiers = keyed, TIER_IDS
    key = api_key()
    found = call(contract, "search_documents", {"query": KESTREL, "limit": 20}, headers=key)
    assert not {r["id"] for r in found} & set(tiers.values())
    assert {r["security_tier"] for r in found} <= {"standard"}
    sample = call(contract, "search_documents", {"query": "How long are links valid?", "limit": 20}, headers=key)
    assert sample and {r["security_tier"] for r in sample} == {"standard"}
    listed = call(contract, "list_documents", {"limit": 100}, headers=key)["documents"]
    assert {d["security_tier"] for d in listed} == {"standard"}
    tool_failure(contract, "get_document", {"document_id": tiers["confidential"]}, 400, -32602, headers=key)


def test_a_privileged_key_uses_privilege_mode(keyed, api_key) -> None:
    contract, tiers = keyed, TIER_IDS
    key = api_key(max_tier=Tier.privileged)
    found = call(contract, "search_documents", {"query": KESTREL, "privilege_mode": True}, headers=key)
    assert tiers["privileged"] in {r["id"] for r in found}
    assert tiers["privileged"] not in {
        r["id"] for r in call(contract, "search_documents", {"query": KESTREL}, headers=key)
    }


# -- errors -------------------------------------------------------------------------------------------------


def test_the_error_table_is_the_http_layers(examples) -> None:
    assert {code: ERROR_HTTP_STATUS[code] for code in examples.errors} == examples.errors


def test_unauthorized_without_a_valid_api_key(keyed, api_key) -> None:
    contract = keyed
    key = api_key()
    request = tools_call("list_documents", {})
    failure(contract, request, 401, -32000, headers={"Content-Type": "application/json"})
    failure(contract, request, 401, -32000, headers={**HEADERS, "X-API-Key": "rbx_live_" + "f" * 64})
    response = contract.http.post(PATH, json=request, headers=key)
    assert response.status_code == 200 and "result" in response.json()


def test_rate_limit_headers_and_the_contracts_limits(keyed, api_key) -> None:
    contract = keyed
    assert RateLimits().model_dump() == {"per_minute": 60, "synthesis_per_minute": 10, "concurrent": 5}
    response = contract.http.post(PATH, json=tools_call("list_documents", {"limit": 1}), headers=api_key())
    assert response.status_code == 200
    assert response.headers["X-RateLimit-Limit"] == "60"
    assert response.headers["X-RateLimit-Remaining"] == "59"
    assert int(response.headers["X-RateLimit-Reset"]) > 0


def test_query_knowledge_has_its_own_rate_limit(keyed, api_key) -> None:
    contract = keyed
    key = api_key(limits=RateLimits(synthesis_per_minute=2))
    for _ in range(2):
        call(contract, "query_knowledge", {"query": "What do ducks eat?"}, headers=key)
    error = tool_failure(contract, "query_knowledge", {"query": "What do ducks eat?"}, 429, -32001, headers=key)
    assert "synthesis" in error["message"]
    assert call(contract, "search_documents", {"query": "How long are links valid?", "limit": 1}, headers=key)


def test_parse_error(contract) -> None:
    failure(contract, b'{"jsonrpc": "2.0", "id": 1, "method": ', 400, -32700)


def test_invalid_request(contract) -> None:
    failure(contract, {"jsonrpc": "2.0", "id": 1}, 400, -32600)
    failure(contract, {"jsonrpc": "1.0", "id": 1, "method": "tools/list"}, 400, -32600)


def test_method_not_found(contract) -> None:
    error = failure(contract, {"jsonrpc": "2.0", "id": 1, "method": "documents/delete"}, 404, -32601)
    assert "not found" in error["message"].lower()


@pytest.mark.parametrize(
    ("tool", "arguments", "mention"),
    [
        ("search_documents", {}, "query"),
        ("search_documents", {"query": "   "}, "query"),
        ("search_documents", {"query": 42}, "query"),
        ("search_documents", {"query": "ducks", "limit": 0}, "limit"),
        ("search_documents", {"query": "ducks", "limit": 21}, "limit"),
        ("search_documents", {"query": "ducks", "limit": "3"}, "limit"),
        ("search_documents", {"query": "ducks", "privilege_mode": "yes"}, "privilege_mode"),
        ("search_documents", {"query": "ducks", "top_k": 3}, "top_k"),
        ("search_documents", {"query": "d" * 9000}, "query"),
        ("get_document", {}, "document_id"),
        ("get_document", {"document_id": 12}, "document_id"),
        ("get_document", {"document_id": "docs:wiki.md", "include_content": "true"}, "include_content"),
        ("get_document", {"document_id": "docs:no-such-file.pdf"}, "not found"),
        ("query_knowledge", {"query": ""}, "query"),
        ("query_knowledge", {"query": "ducks", "model": "gpt-5"}, "model"),
        ("query_knowledge", {"query": "ducks", "conversation_id": ""}, "conversation_id"),
        ("query_knowledge", {"query": "ducks", "conversation_id": 5}, "conversation_id"),
        ("list_documents", {"limit": 0}, "limit"),
        ("list_documents", {"limit": 101}, "limit"),
        ("list_documents", {"offset": -1}, "offset"),
        ("list_documents", {"sort": "name"}, "sort"),
        ("list_documents", {"limit": 10.5}, "limit"),
    ],
)
def test_invalid_params(contract, tool: str, arguments: dict[str, Any], mention: str) -> None:
    invalid(contract, tool, arguments, mention)


def test_invalid_params_on_the_combined_endpoint_keep_the_ragbox_status(contract) -> None:
    tool_failure(contract, "list_documents", {"limit": 0}, 400, -32602, path="/mcp")


def test_an_unknown_tool_on_the_ragbox_endpoint(contract) -> None:
    tool_failure(contract, "rag_search", {"search_phrases": ["ducks"]}, 400, -32602)


def test_internal_errors_are_32002(contract, monkeypatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("disk on fire at /var/secret")

    monkeypatch.setattr(contract.services.catalog, "list_documents", broken)
    error = tool_failure(contract, "list_documents", {}, 500, -32002)
    assert error["message"] == "Internal error" and "secret" not in json.dumps(error)


def test_a_failing_generator_is_32002_with_its_reason(contract, monkeypatch) -> None:
    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise RagError("generator unavailable: ConnectError")

    monkeypatch.setattr(contract.services.synthesis, "answer", unavailable)
    error = tool_failure(contract, "query_knowledge", {"query": "ducks"}, 500, -32002)
    assert error["message"] == "generator unavailable: ConnectError"


def test_a_bad_request_changes_nothing(contract) -> None:
    before = call(contract, "list_documents", {"limit": 100})
    tool_failure(contract, "get_document", {"document_id": "docs:wiki.md", "extra": True}, 400, -32602)
    assert call(contract, "list_documents", {"limit": 100}) == before

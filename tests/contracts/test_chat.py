"""The chat profile against contracts/chat-app-rag-mcp.md.

Every JSON example of the contract document is read from the document itself and replayed: each
request verbatim, each response as a shape (every field the example shows, with its JSON type) plus
the values the contract fixes. The example's resource `handbook` ("Employee Handbook", groups
["users"]) and its user `user@example.com` are created here, so the requests run unchanged.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from ragmcp.domain.models import UserRecord
from ragmcp.mcp.chat import RESULT_BUDGET_BYTES, SNIPPET_CHARS
from ragmcp.mcp.outputs import OUTPUTS
from tests.conftest import shared_dir
from tests.contracts.response_schemas import assert_valid

CONTRACT = shared_dir() / "contracts" / "chat-app-rag-mcp.md"
PATH = "/mcp/chat"
TOOLS = ("rag_discover_resources", "rag_get_raw_results", "rag_get_synthesized_results")
EXAMPLE_USER = "user@example.com"
ANALYST = "chat-analyst@example.com"
STRANGER = "chat-stranger@example.com"
FINANCE = "chat-finance-only"
HANDBOOK_URL = "https://handbook.example/leave-policy"
EXPENSES_URL = "https://handbook.example/expenses"

HANDBOOK = {
    "leave-policy.md": (
        "# Leave policy\n\n"
        "This is our PTO policy. Every full-time employee accrues 25 days of paid time off (PTO) per year. "
        "PTO requests go to your manager at least two weeks ahead. Unused PTO carries over for up to five days "
        "into the next year. Sick leave is separate from PTO and needs a doctor's note after three days.\n",
        {"title": "Leave policy", "source_url": HANDBOOK_URL, "tags": ["hr", "leave"]},
    ),
    "expenses.md": (
        "# Expense policy\n\n"
        "Travel expenses are reimbursed within 30 days when the receipts are attached to the claim. "
        "Meals on business trips are covered up to 60 euros per day. Economy class is the rule for flights.\n",
        {"title": "Expense policy", "source_url": EXPENSES_URL, "tags": ["hr", "money"]},
    ),
}
FINANCE_DOCS = {
    "budget.md": (
        "# Quarterly budget\n\n"
        "The confidential quarterly budget allocates 4.2 million euros to the Zephyrine expansion project. "
        "Budget owners review the Zephyrine spending every month with the controller.\n",
        {"title": "Quarterly budget", "tags": ["finance"]},
    ),
}


# -- the contract document ----------------------------------------------------------------------------


def contract_examples() -> dict[str, list[dict[str, Any]]]:
    """The document's JSON examples by role: requests and responses of each tool, and the app config."""
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", CONTRACT.read_text(), re.S)]
    roles: dict[str, list[dict[str, Any]]] = {}
    for block in blocks:
        if "results" in block:
            kind = next(k for k in ("resources", "hits", "answer") if k in block["results"])
            role = {"resources": "discover", "hits": "raw", "answer": "synth"}[kind] + "_response"
        elif "username" in block:
            role = "raw_request" if "ranking" in block else "synth_request" if "query" in block else "discover_request"
        else:
            role = "config"
        roles.setdefault(role, []).append(block)
    return roles


@pytest.fixture(scope="module")
def examples() -> dict[str, list[dict[str, Any]]]:
    if not CONTRACT.is_file():
        pytest.skip(f"contract document not found at {CONTRACT}")
    found = contract_examples()
    counts = {role: len(blocks) for role, blocks in found.items()}
    assert counts == {
        "discover_request": 1,
        "discover_response": 2,
        "raw_request": 1,
        "raw_response": 2,
        "synth_request": 1,
        "synth_response": 2,
        "config": 1,
    }
    return found


# -- the data and users of these tests ------------------------------------------------------------------


def add_source(services, root: Path, source_id: str, docs: dict, **fields: Any) -> None:
    folder = root / source_id
    folder.mkdir()
    for name, (text, sidecar) in docs.items():
        (folder / name).write_text(text)
        (folder / f"{name}.metadata.json").write_text(json.dumps(sidecar))
    source = services.register_folder("default", source_id, str(folder))
    services.sources.put(source.model_copy(update=fields))
    report = services.ingest.sync(services.sources.get("default", source_id))
    assert report.failed == 0 and report.ingested == len(docs)


def set_user(services, user_id: str, groups: tuple[str, ...]) -> None:
    services.users.put(UserRecord(tenant="default", user_id=user_id, groups=groups))


@pytest.fixture(scope="module")
def chat(contract, unfloored, tmp_path_factory) -> Iterator[Any]:
    """The contract index with the example's `handbook` resource, a finance-only one, and their users,
    served with the relevance floor off: these tests check the tools' mechanics (access, caps,
    artifacts) with queries no document needs to answer.

    `user@example.com` also appears in other profiles' examples: its directory entry is put back
    as it was (no entry reads like one without groups) when these tests are done.
    """
    services = contract.services
    root = tmp_path_factory.mktemp("chat")
    add_source(
        services,
        root,
        "handbook",
        HANDBOOK,
        name="Employee Handbook",
        description="HR policies: leave, expenses.",
        groups=("users",),
        default_selected=True,
    )
    add_source(services, root, FINANCE, FINANCE_DOCS, name="Finance", groups=("chat-finance",), default_selected=False)
    before = services.users.get("default", EXAMPLE_USER)
    set_user(services, EXAMPLE_USER, ("users",))
    set_user(services, ANALYST, ("users", "chat-finance"))
    yield unfloored
    services.users.put(before or UserRecord(tenant="default", user_id=EXAMPLE_USER))


def call(chat, tool: str, args: dict) -> dict[str, Any]:
    """The JSON-RPC result of a successful call; its payload is the envelope, sent as text and as
    structuredContent (valid against the tool's outputSchema), and not copied a third time to the top of
    the result (the contract reads the tool's payload, not the JSON-RPC result)."""
    body = chat.call(tool, args, path=PATH)
    assert "result" in body, body
    result = body["result"]
    assert result.get("isError") is not True, body
    payload = json.loads(result["content"][0]["text"])
    assert result["structuredContent"] == payload
    assert not set(payload) & set(result), result.keys()
    assert set(payload) <= {"results", "meta_data", "artifacts"}
    jsonschema.validate(payload, OUTPUTS[tool])
    assert_valid(payload, "chat", tool)
    return payload


def invalid(chat, tool: str, args: dict, *mentions: str) -> dict[str, Any]:
    """The JSON-RPC error of a call that must be refused as invalid params, mentioning each text."""
    body = chat.call(tool, args, path=PATH)
    assert "result" not in body, body
    err = body["error"]
    assert err["code"] == -32602, err
    for text in mentions:
        assert text in err["message"], err
    return err


def assert_meta(payload: dict[str, Any]) -> None:
    meta = payload["meta_data"]
    assert meta["provider"] == "ragmcp"
    assert isinstance(meta["elapsed_ms"], int) and meta["elapsed_ms"] >= 0


def sentences(text: str) -> int:
    return len(re.findall(r"[.!?](?:\s|$)", text))


# -- tools/list -----------------------------------------------------------------------------------------


def test_the_chat_path_lists_the_three_tools_with_the_contract_arguments(chat) -> None:
    tools = {t["name"]: t for t in chat.rpc("tools/list", {}, path=PATH).json()["result"]["tools"]}
    assert sorted(tools) == sorted(TOOLS)
    schemas = {name: tools[name]["inputSchema"] for name in TOOLS}
    discover, raw, synth = (schemas[name] for name in TOOLS)
    assert list(discover["properties"]) == ["username"] and discover["required"] == ["username"]
    assert list(raw["properties"]) == ["username", "query", "sources", "top_k", "filters", "ranking"]
    assert list(synth["properties"]) == [
        "username",
        "query",
        "sources",
        "top_k",
        "synthesis_params",
        "provided_context",
    ]
    for schema in (raw, synth):
        assert schema["required"] == ["username", "query"]
        assert schema["properties"]["top_k"]["type"] == "integer"
    assert raw["properties"]["top_k"]["default"] == 8
    assert all(s["additionalProperties"] is False for s in schemas.values())
    assert all(tools[name]["description"] for name in TOOLS)


# -- the contract's examples ----------------------------------------------------------------------------


def test_discovery_example(chat, examples) -> None:
    (request,) = examples["discover_request"]
    payload = call(chat, "rag_discover_resources", request)
    assert_meta(payload)
    resources = {r["id"]: r for r in payload["results"]["resources"]}
    assert resources["handbook"] == {
        **examples["discover_response"][0]["results"]["resources"][0],
        "description": "HR policies: leave, expenses.",
    }
    assert resources["docs"]["groups"] == [] and resources["docs"]["authRequired"] is True
    assert FINANCE not in resources
    assert all(r["authRequired"] is True for r in resources.values())


def test_raw_results_example(chat, examples) -> None:
    (request,) = examples["raw_request"]
    payload = call(chat, "rag_get_raw_results", request)
    assert_meta(payload)
    results = payload["results"]
    hits = results["hits"]
    assert results["stats"]["top_k"] == request["top_k"] == 8
    assert 1 <= len(hits) <= results["stats"]["total_found"]
    assert {h["resourceId"] for h in hits} == {"handbook"}
    assert (hits[0]["title"], hits[0]["uri"]) == ("Leave policy", HANDBOOK_URL)
    assert "PTO" in hits[0]["snippet"] and len(hits[0]["snippet"]) <= SNIPPET_CHARS
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True) and all(0 <= s <= 1 for s in scores)
    assert "artifacts" not in payload


def test_synthesized_results_example(chat, examples) -> None:
    (request,) = examples["synth_request"]
    payload = call(chat, "rag_get_synthesized_results", request)
    assert_meta(payload)
    results = payload["results"]
    assert "PTO" in results["answer"]
    assert results["citations"] and all(c["resourceId"] == "handbook" for c in results["citations"])
    assert HANDBOOK_URL in {c["uri"] for c in results["citations"]}
    assert all(c["snippet"] and c["snippet"] in HANDBOOK["leave-policy.md"][0] for c in results["citations"])
    assert results["limits"] == {"truncated": False}
    assert payload["meta_data"]["model"] == chat.services.synthesis.model_id
    assert "artifacts" not in payload


def test_synthesis_with_only_the_required_arguments(chat, examples) -> None:
    payload = call(chat, "rag_get_synthesized_results", {"username": EXAMPLE_USER, "query": "How many PTO days?"})
    assert "25 days" in payload["results"]["answer"]


# -- access control ---------------------------------------------------------------------------------


def test_discovery_lists_only_what_each_user_may_see(chat) -> None:
    def ids(user: str) -> dict[str, dict]:
        payload = call(chat, "rag_discover_resources", {"username": user})
        return {r["id"]: r for r in payload["results"]["resources"]}

    stranger, analyst = ids(STRANGER), ids(ANALYST)
    assert "docs" in stranger and "handbook" not in stranger and FINANCE not in stranger
    assert {"docs", "handbook", FINANCE} <= set(analyst)
    assert analyst[FINANCE]["groups"] == ["chat-finance"]
    assert analyst[FINANCE]["defaultSelected"] is False and analyst[FINANCE]["name"] == "Finance"


def test_a_source_the_user_may_not_see_is_an_error_like_an_unknown_one(chat) -> None:
    query = {"username": EXAMPLE_USER, "query": "Zephyrine budget"}
    hidden = invalid(chat, "rag_get_raw_results", {**query, "sources": [FINANCE]}, repr(FINANCE))
    unknown = invalid(chat, "rag_get_raw_results", {**query, "sources": ["chat-no-such"]}, "'chat-no-such'")
    assert hidden["data"] == unknown["data"] == {"code": "INVALID_ARGUMENT"}
    assert hidden["message"].replace(FINANCE, "X") == unknown["message"].replace("chat-no-such", "X")
    invalid(chat, "rag_get_raw_results", {**query, "sources": ["handbook", FINANCE]}, repr(FINANCE))
    invalid(chat, "rag_get_synthesized_results", {**query, "sources": [FINANCE]}, repr(FINANCE))


def test_search_without_sources_covers_exactly_what_the_user_may_see(chat) -> None:
    query = {"query": "Zephyrine expansion quarterly budget", "top_k": 50}
    seen = call(chat, "rag_get_raw_results", {**query, "username": ANALYST})["results"]["hits"]
    assert seen[0]["resourceId"] == FINANCE and seen[0]["title"] == "Quarterly budget"
    for user in (EXAMPLE_USER, STRANGER):
        hits = call(chat, "rag_get_raw_results", {**query, "username": user})["results"]["hits"]
        assert hits and FINANCE not in {h["resourceId"] for h in hits}
    stranger = call(chat, "rag_get_raw_results", {**query, "username": STRANGER})["results"]["hits"]
    assert "docs" in {h["resourceId"] for h in stranger}
    assert not {"handbook", FINANCE} & {h["resourceId"] for h in stranger}


def test_access_is_checked_again_on_every_call(chat) -> None:
    user = "chat-mover@example.com"
    args = {"username": user, "query": "Zephyrine budget", "sources": [FINANCE]}
    set_user(chat.services, user, ("chat-finance",))
    assert call(chat, "rag_get_raw_results", args)["results"]["hits"]
    set_user(chat.services, user, ())
    invalid(chat, "rag_get_raw_results", args, repr(FINANCE))
    assert FINANCE not in {
        r["id"] for r in call(chat, "rag_discover_resources", {"username": user})["results"]["resources"]
    }


def test_provided_hits_must_come_from_the_sources_of_the_call(chat) -> None:
    hit = {"resourceId": FINANCE, "title": "t", "snippet": "Zephyrine gets 4.2 million euros.", "uri": HANDBOOK_URL}
    args = {"username": EXAMPLE_USER, "query": "Zephyrine budget", "provided_context": {"hits": [hit]}}
    invalid(chat, "rag_get_synthesized_results", args, repr(FINANCE))
    inside = {**hit, "resourceId": "docs"}
    narrowed = {**args, "sources": ["handbook"], "provided_context": {"hits": [inside]}}
    invalid(chat, "rag_get_synthesized_results", narrowed, "'docs'")


# -- raw results: filters, ranking, caps ------------------------------------------------------------


def raw_hits(chat, **args: Any) -> list[dict[str, Any]]:
    return call(chat, "rag_get_raw_results", {"username": EXAMPLE_USER, **args})["results"]["hits"]


def test_filters_restrict_the_search(chat) -> None:
    query = {"query": "policy days euros", "sources": ["handbook"]}
    assert {h["title"] for h in raw_hits(chat, **query)} == {"Leave policy", "Expense policy"}
    assert {h["title"] for h in raw_hits(chat, **query, filters={"tags_any": ["leave"]})} == {"Leave policy"}
    assert {h["title"] for h in raw_hits(chat, **query, filters={"tags_all": ["hr", "money"]})} == {"Expense policy"}
    only = {"doc_ids": ["handbook:expenses.md"]}
    assert {h["uri"] for h in raw_hits(chat, **query, filters=only)} == {EXPENSES_URL}
    assert raw_hits(chat, **query, filters={"tags_all": ["leave", "money"]}) == []
    assert raw_hits(chat, **query, filters={"created_before": "2000-01-01T00:00:00"}) == []
    assert raw_hits(chat, **query, filters={"created_after": "2000-01-01T00:00:00+02:00"})
    future = call(
        chat,
        "rag_get_raw_results",
        {"username": EXAMPLE_USER, **query, "filters": {"created_after": "2999-01-01T00:00:00Z"}},
    )
    assert future["results"] == {"hits": [], "stats": {"total_found": 0, "top_k": 8}}


def test_ranking_modes(chat) -> None:
    query = {"query": "qqzxvy", "sources": ["handbook"]}
    assert raw_hits(chat, **query, ranking={"mode": "fts"}) == []
    assert raw_hits(chat, **query, ranking={"mode": "vector"})
    words = {"query": "reimbursed receipts", "sources": ["handbook"]}
    assert raw_hits(chat, **words, ranking={"mode": "fts"})[0]["title"] == "Expense policy"
    weighted = raw_hits(chat, **words, ranking={"mode": "hybrid", "fts_weight": 2.0, "vec_weight": 0.5})
    assert weighted[0]["title"] == "Expense policy"


def test_top_k_caps_the_hits(chat) -> None:
    payload = call(chat, "rag_get_raw_results", {"username": STRANGER, "query": "ducks", "top_k": 3})
    assert len(payload["results"]["hits"]) == 3
    assert payload["results"]["stats"] == {"total_found": payload["results"]["stats"]["total_found"], "top_k": 3}
    assert payload["results"]["stats"]["total_found"] > 3


def decoded_artifact(payload: dict[str, Any]) -> dict[str, Any]:
    (artifact,) = payload["artifacts"]
    assert set(artifact) == {"mime", "b64"} and artifact["mime"] == "application/json"
    return json.loads(base64.b64decode(artifact["b64"], validate=True))


def size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def test_many_hits_go_to_an_artifact_and_results_stay_small(chat) -> None:
    payload = call(chat, "rag_get_raw_results", {"username": STRANGER, "query": "history", "top_k": 50})
    full = decoded_artifact(payload)
    results = payload["results"]
    assert len(full["hits"]) == 50 and size(full) > RESULT_BUDGET_BYTES
    assert size(results) <= RESULT_BUDGET_BYTES
    assert results["hits"] and results["hits"] == full["hits"][: len(results["hits"])]
    assert results["stats"] == full["stats"] == {"total_found": results["stats"]["total_found"], "top_k": 50}


# -- synthesis --------------------------------------------------------------------------------------

CAFETERIA = (
    "The office cafeteria on the third floor serves a warm lunch every weekday from noon until two o'clock. "
    "The cafeteria lunch menu changes every Monday and always includes a vegetarian dish. "
    "Employees pay for the cafeteria lunch with their badge at the till. "
    "Guests may eat lunch in the cafeteria when an employee accompanies them. "
    "The cafeteria also sells coffee and fruit in the morning from eight o'clock. "
    "On public holidays the cafeteria is closed and no lunch is served."
)


def provided(*snippets: str, resource: str = "handbook") -> dict[str, Any]:
    hits = [
        {"resourceId": resource, "title": f"Note {n}", "snippet": s, "uri": f"https://notes.example/{n}", "score": 0.5}
        for n, s in enumerate(snippets)
    ]
    return {"hits": hits}


def test_synthesis_answers_from_provided_hits_without_searching(chat, monkeypatch) -> None:
    def no_search(*_args: Any) -> None:
        raise AssertionError("searched although hits were provided")

    monkeypatch.setattr(chat.services.search, "search", no_search)
    args = {
        "username": EXAMPLE_USER,
        "query": "When does the cafeteria serve lunch?",
        "provided_context": provided(CAFETERIA),
    }
    results = call(chat, "rag_get_synthesized_results", args)["results"]
    assert "cafeteria" in results["answer"] and "noon" in results["answer"]
    assert results["citations"] == [
        {"resourceId": "handbook", "uri": "https://notes.example/0", "snippet": results["citations"][0]["snippet"]}
    ]
    assert results["citations"][0]["snippet"] in CAFETERIA
    assert results["limits"] == {"truncated": False}


def test_provided_hits_beyond_top_k_are_not_used_and_mark_the_result_truncated(chat) -> None:
    args = {
        "username": EXAMPLE_USER,
        "query": "When does the cafeteria serve lunch?",
        "top_k": 1,
        "provided_context": provided(CAFETERIA, CAFETERIA.replace("cafeteria", "canteen")),
    }
    results = call(chat, "rag_get_synthesized_results", args)["results"]
    assert {c["uri"] for c in results["citations"]} == {"https://notes.example/0"}
    assert results["limits"] == {"truncated": True}


def test_synthesis_style_sets_the_answer_length(chat) -> None:
    args = {
        "username": EXAMPLE_USER,
        "query": "What about lunch in the cafeteria?",
        "provided_context": provided(CAFETERIA),
    }
    answers = {
        style: call(chat, "rag_get_synthesized_results", {**args, "synthesis_params": {"style": style}})["results"][
            "answer"
        ]
        for style in ("short", "default", "detailed")
    }
    assert sentences(answers["short"]) < sentences(answers["default"]) < sentences(answers["detailed"])


def test_a_question_the_documents_do_not_answer_is_refused_in_the_answer_text(chat) -> None:
    args = {
        "username": EXAMPLE_USER,
        "query": "What is the orbital period of the moons of Neptune?",
        "sources": ["handbook"],
    }
    payload = call(chat, "rag_get_synthesized_results", args)
    results = payload["results"]
    assert results["answer"].startswith(("No passage", "Too little coverage")) and results["citations"] == []
    assert results["limits"] == {"truncated": False}
    assert isinstance(payload["meta_data"]["model"], str)


def test_a_large_answer_goes_to_an_artifact_and_results_stay_small(chat) -> None:
    def long_sentence(n: int) -> str:
        # Words of their own in every sentence: the answer leaves out sentences that repeat one another.
        dishes = ", and ".join(f"dish d{n}x{i} cooked in kitchen k{n}x{i}" for i in range(100))
        return f"The cafeteria on floor {n} serves lunch at noon: {dishes}."

    snippets = [long_sentence(n) for n in range(6)]
    args = {
        "username": EXAMPLE_USER,
        "query": "When does the cafeteria serve lunch?",
        "top_k": 6,
        "synthesis_params": {"style": "detailed"},
        "provided_context": provided(*snippets),
    }
    payload = call(chat, "rag_get_synthesized_results", args)
    full = decoded_artifact(payload)
    results = payload["results"]
    assert size(full) > RESULT_BUDGET_BYTES >= size(results)
    assert results["limits"] == {"truncated": True}
    assert len(results["answer"]) < len(full["answer"])
    assert results["answer"].endswith("…") and full["answer"].startswith(results["answer"][:-1])
    assert results["citations"] == full["citations"][: len(results["citations"])]
    assert set(full) == {"answer", "citations", "limits"}


# -- invalid arguments ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "args", "mention"),
    [
        ("rag_discover_resources", {}, "username"),
        ("rag_discover_resources", {"username": "  "}, "username"),
        ("rag_discover_resources", {"username": 7}, "username"),
        ("rag_discover_resources", {"username": EXAMPLE_USER, "tenant": "other"}, "tenant"),
        ("rag_get_raw_results", {"username": EXAMPLE_USER}, "query"),
        ("rag_get_raw_results", {"username": EXAMPLE_USER, "query": " "}, "query"),
        ("rag_get_raw_results", {"username": EXAMPLE_USER, "query": "x", "top_k": 0}, "top_k"),
        ("rag_get_raw_results", {"username": EXAMPLE_USER, "query": "x", "top_k": 51}, "top_k"),
        ("rag_get_raw_results", {"username": EXAMPLE_USER, "query": "x", "top_k": True}, "top_k"),
        ("rag_get_raw_results", {"username": EXAMPLE_USER, "query": "x", "top_k": "8"}, "top_k"),
        ("rag_get_raw_results", {"username": EXAMPLE_USER, "query": "x", "sources": "handbook"}, "sources"),
        ("rag_get_raw_results", {"username": EXAMPLE_USER, "query": "x", "sources": [""]}, "sources.0"),
        ("rag_get_raw_results", {"username": EXAMPLE_USER, "query": "x", "filters": {"colour": "red"}}, "colour"),
        ("rag_get_raw_results", {"username": EXAMPLE_USER, "query": "x", "filters": []}, "filters"),
        (
            "rag_get_raw_results",
            {"username": EXAMPLE_USER, "query": "x", "filters": {"created_after": "yesterday"}},
            "filters.created_after",
        ),
        (
            "rag_get_raw_results",
            {
                "username": EXAMPLE_USER,
                "query": "x",
                "filters": {"created_after": "2024-02-01T00:00:00Z", "created_before": "2024-01-01T00:00:00Z"},
            },
            "created_after must be earlier",
        ),
        ("rag_get_raw_results", {"username": EXAMPLE_USER, "query": "x", "ranking": {"mode": "bm25"}}, "ranking.mode"),
        ("rag_get_raw_results", {"username": EXAMPLE_USER, "query": "x", "ranking": {"boost": 2}}, "ranking.boost"),
        (
            "rag_get_raw_results",
            {"username": EXAMPLE_USER, "query": "x", "ranking": {"fts_weight": 0, "vec_weight": 0}},
            "must not both be 0",
        ),
        ("rag_get_raw_results", {"username": EXAMPLE_USER, "query": "x", "ranking": {"fts_weight": 11}}, "fts_weight"),
        ("rag_get_synthesized_results", {"username": EXAMPLE_USER, "query": "x", "top_k": 21}, "top_k"),
        (
            "rag_get_synthesized_results",
            {"username": EXAMPLE_USER, "query": "x", "synthesis_params": {"style": "long"}},
            "synthesis_params.style",
        ),
        (
            "rag_get_synthesized_results",
            {"username": EXAMPLE_USER, "query": "x", "synthesis_params": {"temperature": 0}},
            "synthesis_params.temperature",
        ),
        (
            "rag_get_synthesized_results",
            {"username": EXAMPLE_USER, "query": "x", "provided_context": {"passages": []}},
            "provided_context.passages",
        ),
        (
            "rag_get_synthesized_results",
            {
                "username": EXAMPLE_USER,
                "query": "x",
                "provided_context": {
                    "hits": [{"resourceId": "handbook", "snippet": "s", "uri": "javascript:alert(1)"}]
                },
            },
            "provided_context.hits.0.uri",
        ),
        (
            "rag_get_synthesized_results",
            {"username": EXAMPLE_USER, "query": "x", "provided_context": {"hits": [{"resourceId": "handbook"}]}},
            "provided_context.hits.0.snippet",
        ),
    ],
)
def test_invalid_arguments_are_invalid_params(chat, tool: str, args: dict, mention: str) -> None:
    invalid(chat, tool, args, mention)


def test_a_query_longer_than_the_limit_is_refused(chat) -> None:
    limit = chat.services.settings.search.max_phrase_bytes
    for tool in TOOLS[1:]:
        err = invalid(chat, tool, {"username": EXAMPLE_USER, "query": "é" * limit}, f"{limit} bytes")
        assert err["data"] == {"code": "INVALID_ARGUMENT"}

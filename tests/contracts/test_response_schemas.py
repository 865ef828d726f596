"""Each response schema under schemas/ against its contract's own examples: every example is accepted,
and every altered copy (a field of another JSON type anywhere, a field the contract always shows left
out) is rejected. Needs no index: part of `make test-fast`."""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from tests.conftest import shared_dir
from tests.contracts.response_schemas import CONTRACTS, _registry, contract_examples, problems, response_schemas

if not all((shared_dir() / "contracts" / name).is_file() for name in CONTRACTS.values()):
    pytest.skip(f"contract documents not found under {shared_dir() / 'contracts'}", allow_module_level=True)

EXAMPLES = contract_examples()

# Fields some examples of a tool show and others do not (or that depend on the request's `return`
# options): leaving one out is allowed. Paths: keys joined by ".", "[]" for the items of an array.
OPTIONAL = {
    ("chat", "rag_discover_resources"): {"results.resources[].defaultSelected"},
    ("chat", "rag_get_raw_results"): {"meta_data.provider"},
    ("chat", "rag_get_synthesized_results"): {"results.citations[].snippet", "results.limits", "meta_data.model"},
    ("mindset", "rag_search"): {"segments[].headline", "segments[].segment_summary", "segments[].source_url"},
    ("mindset", "verify_document_access"): {"refreshed_url", "access_level", "error"},
    ("proxysql", "rag.search_fts"): {"results[].title", "results[].metadata"},
    ("proxysql", "rag.search_vector"): {"results[].title", "results[].metadata"},
    ("proxysql", "rag.search_hybrid"): {
        "results[].title",
        "results[].metadata",
        "results[].score_fts",
        "results[].score_vec",
        "results[].debug",
        "results[].debug.rank_fts",
        "results[].debug.rank_vec",
    },
    ("proxysql", "rag.get_chunks"): {"chunks[].title", "chunks[].doc_metadata", "chunks[].chunk_metadata"},
    ("proxysql", "rag.get_docs"): {"docs[].body", "docs[].metadata"},
}
# Objects whose content is the data's own (document metadata, a source row's columns): not altered inside.
FREE_FORM = {"metadata", "doc_metadata", "pk_json", "row"}


def other_type(value: Any) -> Any:
    """A value of another JSON type than `value`."""
    if isinstance(value, str) or value is None:
        return 12345
    if isinstance(value, bool | int | float):
        return "12345"
    if isinstance(value, list):
        return {"0": value}
    return [value]


def alterations(value: Any, path: str = "") -> Iterator[tuple[str, Any, bool]]:
    """(where, how to alter the value there, whether it is a removal) for every field of `value`."""
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            yield where, other_type(item), False
            yield where, None, True
            if key not in FREE_FORM:
                yield from alterations(item, where)
    elif isinstance(value, list):
        for item in value:
            yield from alterations(item, f"{path}[]")


def altered(example: Any, where: str, new: Any, remove: bool) -> Any:
    """A copy of the example with the field at `where` (in every item of the arrays on the way) replaced or removed."""
    copied = copy.deepcopy(example)

    def visit(node: Any, parts: list[str]) -> None:
        if isinstance(node, list):
            for item in node:
                visit(item, parts)
        elif len(parts) > 1:
            visit(node[parts[0]], parts[1:])
        elif remove:
            del node[parts[0]]
        else:
            node[parts[0]] = new

    visit(copied, [part for part in where.replace("[]", "").split(".") if part])
    return copied


def test_every_schema_is_valid_draft_2020_12_and_has_contract_examples() -> None:
    for profile, tool in response_schemas():
        Draft202012Validator.check_schema(_registry().contents(f"{profile}/{tool}.response.json"))
    counts = Counter((profile, tool) for profile, tool, _ in EXAMPLES)
    assert counts == {
        **{("chat", t): 2 for p, t in response_schemas() if p == "chat"},
        ("mindset", "rag_search"): 3,
        ("mindset", "verify_document_access"): 2,
        ("ragbox", "search_documents"): 1,
        ("ragbox", "get_document"): 1,
        ("ragbox", "query_knowledge"): 2,
        **{("proxysql", t): 1 for p, t in response_schemas() if p == "proxysql"},
    }
    # The kb contract is prose only: its schemas are checked on the real responses in test_kb.py.
    assert set(counts) == {(profile, tool) for profile, tool in response_schemas() if profile != "kb"}


@pytest.mark.parametrize(("profile", "tool", "example"), EXAMPLES, ids=[f"{p}/{t}" for p, t, _ in EXAMPLES])
def test_the_contract_example_is_accepted(profile: str, tool: str, example: Any) -> None:
    assert problems(example, profile, tool) == []


@pytest.mark.parametrize(("profile", "tool", "example"), EXAMPLES, ids=[f"{p}/{t}" for p, t, _ in EXAMPLES])
def test_an_altered_example_is_rejected(profile: str, tool: str, example: Any) -> None:
    optional = OPTIONAL.get((profile, tool), set())
    checked = 0
    for where, new, remove in alterations(example):
        if remove and where in optional:
            assert problems(altered(example, where, new, remove), profile, tool) == [], where
            continue
        assert problems(altered(example, where, new, remove), profile, tool), (where, "removed" if remove else new)
        checked += 1
    assert checked >= 4

"""The role-checked tier finds what a role lacks: statements removed from (or pointed at the wrong
table in) the SAM-translated template, each run on a fresh emulator (iam_tier.py, test_aws_roles.py).
Its own module: moto keeps one account per process, and test_aws_roles.py's emulator lives for its module.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from .aws_harness import REPO, call, running_emulator, tool_payload
from .iam_tier import translate_template


@pytest.fixture(scope="module")
def translated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return translate_template(REPO / "template.yaml", tmp_path_factory.mktemp("sam") / "translated.json")


def without_statements(translated: dict[str, Any], role: str, sids: set[str]) -> dict[str, Any]:
    mutated = copy.deepcopy(translated)
    for policy in mutated["Resources"][role]["Properties"]["Policies"]:
        document = policy["PolicyDocument"]
        document["Statement"] = [s for s in document["Statement"] if s.get("Sid") not in sids]
    return mutated


def test_the_tier_finds_a_statement_taken_out_of_the_template(tmp_path_factory, translated) -> None:
    """KeyByHash gone: moto still allows the GetItem (its DynamoDB check ignores resources and the
    role's CRUD statements name other tables), the hook finds it. AuditKey gone: moto refuses."""
    mutated = without_statements(translated, "McpApiFunctionRole", {"KeyByHash", "AuditKey"})
    for aws in running_emulator(tmp_path_factory, mutated):
        aws.mcp(call("kb_status", {}), "/mcp/kb")
        findings = aws.iam.findings
        assert any(
            f.function == "mcp_api" and f.action == "dynamodb:GetItem" and f.resource.endswith("table/ragmcp-keys")
            for f in findings
        ), aws.iam.report()
        assert any(
            f.function == "mcp_api" and "moto refused" in f.reason and "secretsmanager" in f.call for f in findings
        ), aws.iam.report()


def test_a_call_on_the_wrong_table_is_found_even_when_moto_allows_it(tmp_path_factory, translated) -> None:
    """The rate-limits table's CRUD statement pointed at the conversations table instead."""
    mutated = copy.deepcopy(translated)
    for policy in mutated["Resources"]["McpApiFunctionRole"]["Properties"]["Policies"]:
        text = json.dumps(policy)
        if '"Ref": "RateLimitsTable"' in text:
            policy.update(json.loads(text.replace('"Ref": "RateLimitsTable"', '"Ref": "ConversationsTable"')))
    for aws in running_emulator(tmp_path_factory, mutated):
        tool_payload(aws.mcp(call("kb_status", {}), "/mcp/kb"))
        assert any(f.resource.endswith("table/ragmcp-rate-limits") for f in aws.iam.findings), aws.iam.report()


def console_search_findings(template: dict[str, Any], spec) -> list[Any]:
    """One search by the console function through the tier's checking client; what it found."""
    from ragmcp.adapters.aws.opensearch import OpenSearchIndex, index_body
    from ragmcp.domain.models import Principal, SearchFilter

    from .iam_tier import (
        CheckedOpenSearch,
        IamLedger,
        Identity,
        Resolver,
        data_access_rules,
        emulator_resources,
        role_statements,
    )
    from .opensearch_double import Clock, OpenSearchDouble

    resources = emulator_resources("arn:aws:secretsmanager:::x", "arn:aws:states:::x")
    ledger = IamLedger()
    statements = role_statements(template, "ConsoleFunctionRole", Resolver(template, resources))
    ledger.identities["console"] = Identity("console", "ConsoleFunctionRole", statements, {})
    double = OpenSearchDouble(spec, Clock(), serverless=False)
    double.indices.create(index="ragmcp-chunks", body=index_body("m", 8))
    rules = data_access_rules(template, resources)
    client = CheckedOpenSearch(double, "console", ledger, rules, resources["SearchDomain"]["Arn"], "ragmcp-vectors")
    index = OpenSearchIndex(client, "ragmcp-chunks", ledger=None)  # type: ignore[arg-type]
    index.ensure_model("m", 8)
    index.search_fts(Principal(tenant="t"), "alpha", SearchFilter(), 5)
    assert ledger.checked, "the search was checked"
    return ledger.findings


def test_a_role_left_out_of_the_data_access_policy_is_found(translated, spec) -> None:
    """The console's role taken out of the Serverless collection's data access policy: its searches
    are found (OpenSearch requests are checked by the tier's client, not the botocore hook)."""
    assert console_search_findings(translated, spec) == []
    mutated = copy.deepcopy(translated)
    policy = mutated["Resources"]["VectorCollectionAccess"]["Properties"]["Policy"]["Fn::Sub"]
    policy[0] = policy[0].replace('"${Console}",', "")
    findings = console_search_findings(mutated, spec)
    assert {f.action for f in findings} == {"aoss:DescribeIndex", "aoss:ReadDocument"}, findings

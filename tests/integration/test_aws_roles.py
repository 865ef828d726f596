"""The role-checked tier: each function's handler paths on the AWS emulator, every call signed with
credentials of that function's own role as the SAM-translated template.yaml defines it, moto
enforcing IAM and a botocore hook checking each call's action and resource ARN against the role's
statements (tests/integration/iam_tier.py). A call its role does not allow is a finding; there must
be none. test_aws_roles_mutated.py removes statements from the translated template and sees the tier
find them.

Not covered here (no botocore call to check): OpenSearch requests (the emulator's index is the
embedded one; the roles' es:/aoss: statements are checked by tests/integration/test_deploy_guards.py)
and Bedrock (the emulator's embedder and generator are local). `ragmcp jobs redrive` is the
operator's command and runs with the operator's credentials, not a function role.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import boto3
import numpy as np
import pytest

from .aws_harness import PROFILE_CALLS, REPO, AwsEmulator, LambdaContext, call, running_emulator, tool_payload
from .iam_tier import published_function, translate_template

DOCS = {
    "sources/default/handbook/security-faq.md": (
        b"# Security FAQ\n\nShared links to originals are valid for twenty-four hours. After that the link "
        b"expires and a new one must be requested from the search results.\n"
    ),
    "sources/default/handbook/travel.md": (
        b"# Travel policy\n\nEconomy class is booked for flights shorter than six hours.\n"
    ),
}


@pytest.fixture(scope="module")
def translated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return translate_template(REPO / "template.yaml", tmp_path_factory.mktemp("sam") / "translated.json")


@pytest.fixture(scope="module")
def aws(tmp_path_factory: pytest.TempPathFactory, translated: dict[str, Any]):
    for emulator in running_emulator(tmp_path_factory, translated):
        for key, body in DOCS.items():
            emulator.s3.put_object(Bucket=emulator.bucket, Key=key, Body=body)
        assert emulator.drain().failed == 0, emulator.iam.report()
        yield emulator


@pytest.fixture
def ledger(aws: AwsEmulator):
    """The findings of one test (the module's setup is checked by the first)."""
    yield aws.iam
    findings = aws.iam.report()
    aws.iam.findings.clear()
    assert not findings, "calls the function's role does not allow:\n" + findings


def console(aws: AwsEmulator, method: str, path: str, form: dict[str, Any] | None = None) -> dict[str, Any]:
    """A console page through the console function (API Gateway v2 event, the admin key as bearer)."""
    from urllib.parse import urlencode

    from .aws_harness import http_api_event

    headers = {"authorization": f"Bearer {aws.secret}"}
    event = http_api_event(None, path, headers)
    event["requestContext"]["http"]["method"] = method
    event["routeKey"] = f"ANY {path}"
    if form is not None:
        event["headers"]["content-type"] = "application/x-www-form-urlencoded"
        event["body"] = urlencode(form, doseq=True)
    else:
        event["body"] = ""
    response = aws.handler("console")(event, LambdaContext("ragmcp-console"))
    return {"status": response["statusCode"], "body": response.get("body", ""), "headers": response["headers"]}


def test_the_setup_ingest_ran_within_the_ingest_role(aws: AwsEmulator, ledger) -> None:
    assert any(f == "ingest" and a == "s3:GetObject" for f, a, _ in ledger.checked)


def test_reingest_delete_and_redelivery_stay_within_the_ingest_role(aws: AwsEmulator, ledger) -> None:
    key = "sources/default/handbook/travel.md"
    aws.s3.put_object(Bucket=aws.bucket, Key=key, Body=b"# Travel policy\n\nTrains are booked in second class.\n")
    assert aws.drain().failed == 0
    for version in aws.s3.list_object_versions(Bucket=aws.bucket, Prefix=key)["Versions"]:
        aws.s3.delete_object(Bucket=aws.bucket, Key=key, VersionId=version["VersionId"])
    assert aws.drain().failed == 0
    assert any(f == "ingest" and a.startswith("dynamodb:") for f, a, _ in ledger.checked)


def test_every_profile_within_the_mcp_role(aws: AwsEmulator, ledger) -> None:
    for profile, (tool, arguments) in PROFILE_CALLS.items():
        listed = aws.mcp({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, f"/mcp/{profile}")
        assert tool in {t["name"] for t in listed["body"]["result"]["tools"]}
        found = str(tool_payload(aws.mcp(call(tool, arguments), f"/mcp/{profile}")))
        assert "security-faq.md" in found or "'Security FAQ'" in found, profile


def test_synthesis_within_the_mcp_state_machine_and_synthesis_roles(aws: AwsEmulator, ledger) -> None:
    answered = tool_payload(
        aws.mcp(call("query_knowledge", {"query": "How long are shared links valid?"}), "/mcp/ragbox")
    )
    assert "twenty-four hours" in answered["answer"]
    arguments = {"username": "ana", "query": "How long are shared links to originals valid?", "top_k": 3}
    payload = tool_payload(aws.mcp(call("rag_get_synthesized_results", arguments), "/mcp/chat"))
    assert payload["results"]["citations"]
    checked = {(f, a) for f, a, _ in ledger.checked}
    assert ("mcp_api", "states:StartSyncExecution") in checked
    assert ("state_machine", "lambda:InvokeFunction") in checked


def test_notes_uploads_and_links_within_their_roles(aws: AwsEmulator, ledger) -> None:
    note = {"text": "The harbour master keeps the spare keys.", "collection": "ops"}
    added = tool_payload(aws.mcp(call("kb_addnote", note), "/mcp/kb"))
    assert aws.drain().failed == 0
    data = b"# Rota\n\nThe night watch changes at four bells in the morning.\n"
    started = tool_payload(
        aws.mcp(call("kb_upload_start", {"filename": "rota.md", "total_size": len(data)}), "/mcp/kb")
    )
    for index, part in enumerate((data[:20], data[20:])):
        chunk = {"upload_id": started["upload_id"], "chunk_index": index, "data": base64.b64encode(part).decode()}
        tool_payload(aws.mcp(call("kb_upload_chunk", chunk), "/mcp/kb"))
    finished = tool_payload(aws.mcp(call("kb_upload_finish", {"upload_id": started["upload_id"]}), "/mcp/kb"))
    assert aws.drain().failed == 0
    for job in (added["job_id"], finished["job_id"]):
        jobs = tool_payload(aws.mcp(call("kb_jobs", {"job_id": job}), "/mcp/kb"))
        assert jobs["jobs"][0]["status"] == "succeeded"
    fetched = tool_payload(aws.mcp(call("kb_get", {"document_id": added["document_id"]}), "/mcp/kb"))
    assert "spare keys" in json.dumps(fetched)
    tool_payload(aws.mcp(call("kb_status", {}), "/mcp/kb"))


def test_the_console_within_its_role(aws: AwsEmulator, ledger) -> None:
    for page in ("/console", "/console/documents", "/console/jobs", "/console/access"):
        assert console(aws, "GET", page)["status"] == 200, page
    revocable = re.compile(r"/console/keys/([^/\"]+)/revoke")
    before = set(revocable.findall(console(aws, "GET", "/console/access")["body"]))
    made = console(aws, "POST", "/console/keys", {"name": "agent", "scopes": ["read"], "max_tier": "standard"})
    assert made["status"] == 200, made
    (key_id,) = set(revocable.findall(made["body"])) - before
    assert console(aws, "POST", f"/console/keys/{key_id}/revoke", {})["status"] == 303
    assert console(aws, "POST", "/console/audit/verify", {})["status"] == 303


def test_audit_checkpoints_within_the_mcp_role(aws: AwsEmulator, ledger) -> None:
    services = aws.functions["mcp_api"].services
    with ledger.acting_as("mcp_api"):
        services.audit.close()
    assert any(f == "mcp_api" and a == "s3:PutObject" and ":::ragmcp-audit-archive/" in r for f, a, r in ledger.checked)


def test_the_janitor_within_its_role(aws: AwsEmulator, ledger, monkeypatch) -> None:
    # The janitor's schedule also prunes the MCP function's unused versions (the template names it).
    published_function(aws.session, "ragmcp-mcp", 4)
    monkeypatch.setenv("RAGMCP_PRUNE_VERSIONS_OF", "ragmcp-mcp")  # read when the janitor first builds
    started = tool_payload(aws.mcp(call("kb_upload_start", {"filename": "late.md", "total_size": 10}), "/mcp/kb"))
    chunk = {"upload_id": started["upload_id"], "chunk_index": 0, "data": base64.b64encode(b"0123456789").decode()}
    tool_payload(aws.mcp(call("kb_upload_chunk", chunk), "/mcp/kb"))
    janitor = aws.handler("janitor")
    assert janitor({"source": "aws.events", "detail-type": "Scheduled Event"}, LambdaContext("ragmcp-janitor"))
    item = aws.session.client("dynamodb").scan(TableName="ragmcp-uploads")["Items"][0]
    record = {
        "eventName": "REMOVE",
        "eventSource": "aws:dynamodb",
        "userIdentity": {"type": "Service", "principalId": "dynamodb.amazonaws.com"},
        "dynamodb": {"OldImage": item, "Keys": {"pk": item["pk"], "sk": item["sk"]}},
    }
    assert janitor({"Records": [record]}, LambdaContext("ragmcp-janitor"))["removed"] == 1
    assert any(f == "janitor" and a == "s3:DeleteObject" for f, a, _ in ledger.checked)
    assert ("janitor", "lambda:DeleteFunction", "arn:aws:lambda:us-east-1:123456789012:function:ragmcp-mcp:2") in (
        ledger.checked
    )
    versions = aws.session.client("lambda").list_versions_by_function(FunctionName="ragmcp-mcp")["Versions"]
    assert sorted(v["Version"] for v in versions) == ["$LATEST", "3", "4"]


def test_the_search_index_within_each_role(aws: AwsEmulator, ledger, translated, spec) -> None:
    """OpenSearch is reached over HTTP (opensearch-py, SigV4), not botocore: each function's index
    calls go through a client that checks them against its role's es: statements and the Serverless
    collection's data access policy. The setup creates the index; ingest writes and deletes; the
    MCP, console and synthesis functions read."""
    from ragmcp.adapters.aws.index_setup import CustomResourceEvent, apply
    from ragmcp.adapters.aws.ledger import DynamoChunkLedger
    from ragmcp.adapters.aws.opensearch import OpenSearchIndex
    from ragmcp.domain.models import Principal, SearchFilter

    from .iam_tier import CheckedOpenSearch, data_access_rules, emulator_resources
    from .opensearch_double import Clock, OpenSearchDouble
    from .test_opensearch_adapter import DIM, chunks_for, make_doc, unit

    resources = emulator_resources("arn:aws:secretsmanager:::x", "arn:aws:states:::x")
    rules = data_access_rules(translated, resources)
    double = OpenSearchDouble(spec, Clock(), serverless=False)

    def index_as(function: str) -> OpenSearchIndex:
        client = CheckedOpenSearch(double, function, ledger, rules, resources["SearchDomain"]["Arn"], "ragmcp-vectors")
        with ledger.acting_as(function):
            table = boto3.session.Session().resource("dynamodb").Table("ragmcp-documents")
        index = OpenSearchIndex(client, "ragmcp-chunks", DynamoChunkLedger(table))
        index.ensure_model("m", DIM)
        return index

    event = CustomResourceEvent(
        RequestType="Create",
        ResponseURL="https://x",
        StackId="s",
        RequestId="r",
        LogicalResourceId="SearchIndex",
        ResourceProperties={"EmbeddingModelId": "m", "EmbeddingDimension": DIM},
    )
    assert apply(event, index_as("index_setup"), 5).created
    ingest = index_as("ingest")
    doc = make_doc("default", "checked")
    ingest.replace_document(doc, chunks_for(doc, ["alpha", "beta"]), np.stack([unit(1), unit(2)]))
    for function in ("mcp_api", "console", "synthesis"):
        reader = index_as(function)
        principal = Principal(tenant="default")
        assert reader.search_fts(principal, "alpha", SearchFilter(), 5)
        assert reader.search_vector(principal, unit(1), SearchFilter(), 5)
        assert reader.count_chunks("default") == 2
    assert ingest.delete_document("default", "checked")
    checked = {(f, a) for f, a, _ in ledger.checked}
    assert {
        ("index_setup", "es:ESHttpPut"),
        ("index_setup", "aoss:CreateIndex"),
        ("ingest", "aoss:WriteDocument"),
        ("synthesis", "aoss:ReadDocument"),
    } <= checked

"""The audit trail through the MCP function on the AWS emulator: the Lambda handler (Mangum) audits
a tool call and a refused key into the tenants' chains in DynamoDB, keyed by the Secrets Manager
secret the stack provisions; the checkpoint lands in the Object Lock bucket; verify passes, and
fails once the table is rewritten."""

from __future__ import annotations

import pytest

from ragmcp.adapters.aws.audit import CHECKPOINTS
from ragmcp.security.audit import UNAUTHENTICATED

from .aws_harness import AwsEmulator, call, running_emulator, tool_payload


@pytest.fixture(scope="module")
def aws(tmp_path_factory: pytest.TempPathFactory):
    yield from running_emulator(tmp_path_factory)


def test_the_lambda_audits_calls_and_refusals_and_checkpoints_to_the_locked_bucket(aws: AwsEmulator) -> None:
    services = aws.functions["mcp_api"].services
    created = services.keys.create("acme", name="agent")
    bearer = {"authorization": f"Bearer {created.secret}"}
    tool_payload(aws.mcp(call("kb_status", {}), "/mcp/kb", bearer))
    refused = aws.mcp(call("kb_status", {}), "/mcp/kb", {"authorization": "Bearer rmcp_live_" + "2" * 64})
    assert refused["status"] == 401
    store = services.audit.store
    (record,) = store.records("acme")
    assert (record.tool, record.key_id, record.outcome) == ("kb_status", created.key.key_id, "ok")
    assert [r.outcome for r in store.records(UNAUTHENTICATED)] == ["refused 401"]
    services.audit.close()  # what the interval thread does on its own; here at once
    bucket = services.settings.aws.audit_archive_bucket
    (listed,) = aws.s3.list_objects_v2(Bucket=bucket, Prefix=CHECKPOINTS)["Contents"]
    assert aws.s3.head_object(Bucket=bucket, Key=listed["Key"])["ObjectLockMode"] == "GOVERNANCE"
    check = services.audit.verify()
    assert check.ok and (check.records, check.chains, check.checkpoints, check.unvouched) == (2, 2, 1, 0)
    table = aws.session.resource("dynamodb").Table(services.settings.aws.audit_table)
    table.delete_item(Key={"pk": "record#acme", "sk": f"{1:012d}"})
    table.delete_item(Key={"pk": "head", "sk": "acme"})
    problem = "tenant 'acme': the chain ends at record 0, but checkpoint 1 vouches for 1"
    assert services.audit.verify().problem == problem

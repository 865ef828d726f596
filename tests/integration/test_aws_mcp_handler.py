"""The MCP function on the AWS emulator: API Gateway v2 events through Mangum, every profile, warm
invocation after warm invocation; query_knowledge and rag_get_synthesized_results run the real
state machine definition (moto executes it; its Lambda tasks call functions/synthesis in process;
StartSyncExecution is the harness's wait on a started execution).

Stores, blobs and queues are moto's DynamoDB, S3 and SQS; the search index is the embedded SQLite
index and the embedder the local ONNX model (no OpenSearch or Bedrock here), the generator the
extractive one.
"""

from __future__ import annotations

import pytest

from .aws_harness import PROFILE_CALLS, AwsEmulator, call, running_emulator, tool_payload

DOCS = {
    "sources/default/handbook/security-faq.md": (
        b"# Security FAQ\n\nShared links to originals are valid for twenty-four hours. After that the link "
        b"expires and a new one must be requested from the search results.\n"
    ),
    "sources/default/handbook/travel.md": (
        b"# Travel policy\n\nEconomy class is booked for flights shorter than six hours. Receipts are "
        b"submitted within thirty days of the trip.\n"
    ),
}


@pytest.fixture(scope="module")
def aws(tmp_path_factory: pytest.TempPathFactory):
    for emulator in running_emulator(tmp_path_factory):
        for key, body in DOCS.items():
            emulator.s3.put_object(Bucket=emulator.bucket, Key=key, Body=body)
        assert emulator.drain().failed == 0
        yield emulator


def executions(aws: AwsEmulator) -> int:
    sfn = aws.session.client("stepfunctions")
    machine = sfn.list_state_machines()["stateMachines"][0]["stateMachineArn"]
    return len(sfn.list_executions(stateMachineArn=machine)["executions"])


def test_every_profile_answers_warm_invocation_after_warm_invocation(aws: AwsEmulator) -> None:
    for round_number in range(3):
        for profile, (tool, arguments) in PROFILE_CALLS.items():
            listed = aws.mcp({"jsonrpc": "2.0", "id": round_number, "method": "tools/list"}, f"/mcp/{profile}")
            assert tool in {t["name"] for t in listed["body"]["result"]["tools"]}
            answered = aws.mcp(call(tool, arguments, request_id=round_number), f"/mcp/{profile}")
            assert answered["status"] == 200 and answered["body"]["id"] == round_number
            found = str(tool_payload(answered))  # chat names a hit by its title; its link is the rendition's
            assert "security-faq.md" in found or "'Security FAQ'" in found, profile


def test_errors_stay_json_rpc_through_mangum(aws: AwsEmulator) -> None:
    answered = aws.mcp(call("rag_search", {}), "/mcp/mindset")
    assert answered["body"]["error"]["code"] == -32602


def test_query_knowledge_runs_the_state_machine(aws: AwsEmulator) -> None:
    before = executions(aws)
    answered = aws.mcp(call("query_knowledge", {"query": "How long are shared links valid?"}), "/mcp/ragbox")
    payload = tool_payload(answered)
    assert payload["silence"] is False and "twenty-four hours" in payload["answer"]
    assert payload["sources"][0]["document"] == "Security FAQ"
    refused = tool_payload(aws.mcp(call("query_knowledge", {"query": "Who won the 1954 World Cup?"}), "/mcp/ragbox"))
    assert refused["silence"] is True and refused["silence_reason"]
    assert executions(aws) == before + 2


def test_rag_get_synthesized_results_runs_the_state_machine(aws: AwsEmulator) -> None:
    before = executions(aws)
    arguments = {"username": "ana", "query": "How long are shared links to originals valid?", "top_k": 3}
    payload = tool_payload(aws.mcp(call("rag_get_synthesized_results", arguments), "/mcp/chat"))
    assert "twenty-four hours" in payload["results"]["answer"]
    assert payload["results"]["citations"]
    assert executions(aws) == before + 1


def test_synthesis_of_twenty_long_provided_hits_stays_inside_the_state_data_limit(aws: AwsEmulator) -> None:
    """R9: 20 passages of 15,000 characters (300 KB) pass through the state machine, whose every
    state's input and output is limited to 256 KB: the evidence and the answer go by reference."""
    # One sentence to answer from, then one long run of words (a sentence the extractive generator
    # embeds once: the task stays inside its 20 s on a loaded machine).
    answer = "Shared links are valid for twenty-four hours, which is how long a link lasts. "
    snippet = (answer + "Archive " + "records " * 2_000)[:15_000]
    hits = [
        {"resourceId": "handbook", "title": f"Part {n}", "snippet": snippet, "uri": f"https://example.com/{n}"}
        for n in range(20)
    ]
    arguments = {
        "username": "ana",
        "query": "How long are shared links valid?",
        "top_k": 20,
        "provided_context": {"hits": hits},
    }
    payload = tool_payload(aws.mcp(call("rag_get_synthesized_results", arguments), "/mcp/chat"))
    assert "twenty-four hours" in payload["results"]["answer"]
    assert payload["results"]["citations"]

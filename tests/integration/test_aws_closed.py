"""The AWS deployment is closed by default and finds a caller's key with one GetItem by its hash.

On the emulator (moto on 127.0.0.1): an empty keys table refuses everyone (no open mode on AWS);
every DynamoDB call the MCP function makes is recorded by a botocore `before-call` hook, and no
request (anonymous, a wrong key, the right key) scans or queries the keys table; the first admin
key is made with `ragmcp keys create --backend aws` and opens the door.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ragmcp.cli import main

from .aws_harness import AwsEmulator, call, running_emulator, tool_payload

SEARCH = call("rag_search", {"search_phrases": ["anything"]})
KEYS_TABLE = "ragmcp-keys"


@pytest.fixture(scope="module")
def aws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AwsEmulator]:
    yield from running_emulator(tmp_path_factory)


@pytest.fixture
def keys_calls(aws: AwsEmulator) -> Iterator[list[str]]:
    """The operations the MCP function sends to the keys table."""
    calls: list[str] = []

    def record(model: Any, params: dict[str, Any], **_: Any) -> None:
        body = params.get("body") or b""
        if KEYS_TABLE.encode() in (body if isinstance(body, bytes) else body.encode()):
            calls.append(model.name)

    events = aws.functions["mcp_api"].services.keys.store.table.meta.client.meta.events
    events.register("before-call.dynamodb", record, unique_id="keys-calls")
    yield calls
    events.unregister("before-call.dynamodb", unique_id="keys-calls")


def empty_keys_table(aws: AwsEmulator) -> None:
    table = aws.session.resource("dynamodb").Table(KEYS_TABLE)
    for item in table.scan(ProjectionExpression="pk, sk")["Items"]:
        table.delete_item(Key={"pk": item["pk"], "sk": item["sk"]})
    assert table.scan()["Count"] == 0


def test_an_empty_keys_table_refuses_everyone(aws: AwsEmulator, keys_calls: list[str]) -> None:
    empty_keys_table(aws)
    for headers in ({"authorization": ""}, {"authorization": "Bearer rmcp_live_" + "0" * 64}, {"x-api-key": "x"}):
        answered = aws.mcp(SEARCH, "/mcp/mindset", headers)
        assert answered["status"] == 401, headers
        assert answered["body"]["error"]["message"].startswith("Unauthorized")
    assert "Scan" not in keys_calls


def test_the_first_admin_key_comes_from_the_cli(aws: AwsEmulator, capsys) -> None:
    empty_keys_table(aws)
    assert main(["keys", "create", "--backend", "aws", "--tenant", "default", "--scopes", "read,write,admin"]) == 0
    secret = next(line.split()[1] for line in capsys.readouterr().out.splitlines() if line.startswith("secret:"))
    assert aws.mcp(SEARCH, "/mcp/mindset", {"authorization": ""})["status"] == 401
    answered = aws.mcp(SEARCH, "/mcp/mindset", {"authorization": f"Bearer {secret}"})
    assert tool_payload(answered)["status"] == "success"
    aws.secret = secret


def test_every_request_finds_its_key_by_hash_never_by_a_scan(aws: AwsEmulator, keys_calls: list[str]) -> None:
    main(["keys", "create", "--backend", "aws", "--tenant", "default", "--name", "again"])
    keys_calls.clear()
    for headers in ({"authorization": ""}, {"authorization": "Bearer rmcp_live_" + "1" * 64}):
        assert aws.mcp(SEARCH, "/mcp/mindset", headers)["status"] == 401
    assert keys_calls == ["GetItem"], "an anonymous request reads nothing; a wrong key one item by its hash"
    keys_calls.clear()
    assert tool_payload(aws.mcp(SEARCH, "/mcp/mindset"))["status"] == "success"
    assert keys_calls and set(keys_calls) == {"GetItem"}, keys_calls
    assert len(keys_calls) <= 2, "the key by its hash, its limits by its id"


def test_a_revoked_key_is_refused_by_its_hash_item(aws: AwsEmulator) -> None:
    keys = aws.functions["mcp_api"].services.keys
    created = keys.create("default", name="short-lived")
    headers = {"authorization": f"Bearer {created.secret}"}
    assert aws.mcp(SEARCH, "/mcp/mindset", headers)["status"] == 200
    keys.revoke(created.key.key_id)
    assert aws.mcp(SEARCH, "/mcp/mindset", headers)["status"] == 401
    assert created.key.key_id in {k.key_id for k in keys.store.list()}

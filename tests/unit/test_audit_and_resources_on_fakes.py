"""On the in-memory fakes (tests/fakes.py), through the MCP SDK's in-memory client: the documents as
resources (each profile's access, ragbox's vault narrower), and the audit trail those calls write,
verified, then found broken where a stored record or checkpoint is altered."""

from __future__ import annotations

import errno
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError

from ragmcp.bootstrap import build_registry, build_services
from ragmcp.domain.errors import StoreDamaged
from ragmcp.domain.models import Principal
from ragmcp.mcp.errors import DISK_FULL, INTERNAL_ERROR
from ragmcp.mcp.offloop import THREAD_NAME
from ragmcp.mcp.registry import Caller, current_caller
from ragmcp.mcp.resources import DocumentResources
from ragmcp.mcp.server import build_server
from ragmcp.security.identity import open_credential
from ragmcp.services import Services
from tests import fakes
from tests.contract_examples import TENANT, USER, write_corpus


@pytest.fixture
def services(tmp_path: Path) -> tuple[Services, fakes.MemoryAuditStore, fakes.MemoryCheckpointStore]:
    adapters = fakes.adapters()
    built = build_services(fakes.settings(tmp_path / "data"), adapters)
    write_corpus(adapters, built)
    assert isinstance(adapters.audit, fakes.MemoryAuditStore)
    assert isinstance(adapters.checkpoints, fakes.MemoryCheckpointStore)
    return built, adapters.audit, adapters.checkpoints


HANDBOOK_URI = "ragmcp://documents/handbook%3Aleave-policy.md"


async def _resources(services: Services, profile: str, user: str | None) -> tuple[list[str], str, MCPError | None]:
    """The resource names the profile lists, the text of the first, and the error reading the handbook's
    document (None: it was read)."""
    current_caller.set(Caller(credential=open_credential(TENANT), identities=services.identities, user=user))
    resources = DocumentResources(services.catalog, services.audit, services.settings.server.resource_page_size)
    async with Client(build_server(build_registry(services), profile, resources)) as client:
        listed = (await client.list_resources()).resources
        first = await client.read_resource(str(listed[0].uri))
        try:
            await client.read_resource(HANDBOOK_URI)
        except MCPError as exc:
            return [r.name for r in listed], first.contents[0].text, exc
        return [r.name for r in listed], first.contents[0].text, None


def test_resources_follow_each_profiles_access(services) -> None:
    built, _store, _checkpoints = services
    names, text, hidden = anyio.run(_resources, built, "kb", None)
    assert sorted(names) == ["office:cancellation.md", "office:product-x.md", "posts:12345", "posts:9876"]
    assert text.strip()
    assert hidden is not None and hidden.error.code == -32002  # the handbook is the group `users`'s only
    assert hidden.error.message == "Resource not found: document handbook:leave-policy.md not found"

    names, _text, hidden = anyio.run(_resources, built, "mindset", USER)
    assert "handbook:leave-policy.md" in names and "office:cancellation.md" in names
    assert hidden is None  # the user of x-user-id is in `users`


def test_the_audit_trail_of_those_calls_verifies_and_an_altered_one_does_not(services) -> None:
    built, store, checkpoints = services
    anyio.run(_resources, built, "kb", None)
    built.audit.refused(Principal(tenant=TENANT), "tools/call", {"name": "kb_search"}, "refused 401")
    built.audit.flush_refusals(everything=True)
    assert built.audit.checkpoints.flush() is not None
    check = built.audit.verify()
    assert check.ok and check.records >= 3 and check.checkpoints == 1 and check.unvouched == 0, check
    tools = [r.tool for r in store.records(TENANT)]
    assert "resources/read" in tools and "tools/call" in tools

    chain = store._chains[TENANT]
    original = chain[0]
    chain[0] = original.model_copy(update={"tool": "kb_search"})
    edited = f"tenant {TENANT!r}, record 1: its MAC does not match (edited, re-chained or forged)"
    assert built.audit.verify().problem == edited
    del chain[0]
    assert "expected record 1 (deleted or reordered)" in (built.audit.verify().problem or "")
    chain.insert(0, original)
    assert built.audit.verify().ok

    signed = checkpoints._checkpoints[0]
    checkpoints._checkpoints[0] = signed.model_copy(update={"heads": {TENANT: (1, "0" * 64)}})
    assert "checkpoint 1" in (built.audit.verify().problem or "")


def test_a_call_is_audited_on_its_body_s_thread_and_a_refused_one_still_is(services) -> None:
    """Issue 31: the record of a call that answered is appended on the thread its body ran on (a tool
    thread, mcp/offloop.py), for the principal the body resolved, with no hand-off to another thread
    for it; a call refused before its body runs is audited too, in order after it."""
    built, store, _checkpoints = services
    threads: list[str] = []
    append = built.audit.append

    def append_and_tell(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return append(*args, **kwargs)

    built.audit.append = append_and_tell  # type: ignore[method-assign]

    async def calls() -> MCPError:
        current_caller.set(Caller(credential=open_credential(TENANT), identities=built.identities, user=USER))
        async with Client(build_server(build_registry(built), "mindset")) as client:
            answered = await client.call_tool("rag_search", {"search_phrases": ["leave policy"]})
            assert not answered.is_error and answered.structured_content["segments"]
            with pytest.raises(MCPError) as refused:
                await client.call_tool("rag_search", {"search_phrases": []})
            return refused.value

    refused = anyio.run(calls)
    assert refused.error.code == -32602
    assert threads[0] == THREAD_NAME and threads[1] != THREAD_NAME, threads
    records = list(store.records(TENANT))[-2:]
    assert [(r.tool, r.outcome, r.user) for r in records] == [
        ("rag_search", "ok", USER),
        ("rag_search", "error -32602", USER),
    ]
    assert records[0].returned_ids and records[1].seq == records[0].seq + 1
    assert built.audit.verify().ok


class _AppendFails:
    """The audit store's append raising `error` for the next `times` appends (a full disk under the
    chain, a damaged store), then appending again; every attempt counted."""

    def __init__(self, store: fakes.MemoryAuditStore, error: Exception, times: int):
        self.store, self.error, self.times = store, error, times
        self.attempts = 0
        self.append = store.append

    def __call__(self, tenant: str, build: Any) -> Any:
        self.attempts += 1
        if self.attempts <= self.times:
            raise self.error
        return self.append(tenant, build)


def _call_with_failing_audit(
    built: Services, store: fakes.MemoryAuditStore, error: Exception, arguments: dict
) -> tuple[MCPError, int]:
    """The error a rag_search call gets when its audit append raises `error` (once: a second
    attempt would append), and how many appends it tried."""
    failing = _AppendFails(store, error, times=1)
    store.append = failing  # type: ignore[method-assign]

    async def call() -> MCPError:
        current_caller.set(Caller(credential=open_credential(TENANT), identities=built.identities, user=USER))
        async with Client(build_server(build_registry(built), "mindset")) as client:
            with pytest.raises(MCPError) as failed:
                await client.call_tool("rag_search", arguments)
            return failed.value

    try:
        return anyio.run(call), failing.attempts
    finally:
        del store.append  # the store's own append again


ANSWERED = {"search_phrases": ["leave policy"]}


def test_an_answered_call_whose_audit_append_fails_fails_and_is_not_recorded_as_failed(services) -> None:
    """Review of stop 36: a call whose body answered is recorded once, on its body's thread. When that
    append raises, the call fails in the contract's error format (its answer is never given
    unaudited) and the append is not tried a second time: that second record said the call failed
    although its body ran."""
    built, store, _checkpoints = services
    damaged = StoreDamaged("the audit chain cannot be read")
    error, attempts = _call_with_failing_audit(built, store, damaged, ANSWERED)
    assert attempts == 1
    assert (error.error.code, error.error.message, error.error.data) == (
        INTERNAL_ERROR,
        "the audit chain cannot be read",
        {"code": "STORE_DAMAGED"},
    )
    assert not list(store.records(TENANT))  # no record saying this call failed: its body ran

    full = OSError(errno.ENOSPC, "No space left on device")
    error, attempts = _call_with_failing_audit(built, store, full, ANSWERED)
    assert attempts == 1 and not list(store.records(TENANT))
    assert (error.error.code, error.error.data) == (INTERNAL_ERROR, {"code": "INTERNAL"})
    assert "audit record could not be written" in error.error.message and "disk is full" in error.error.message


def test_a_refused_call_whose_audit_append_fails_gets_the_contract_s_error(services) -> None:
    """A refused call is recorded after it failed; when that append raises, the caller gets the
    contract's error for it, not the raw exception, and it is tried once."""
    built, store, _checkpoints = services
    full = OSError(errno.ENOSPC, "No space left on device")
    error, attempts = _call_with_failing_audit(built, store, full, {"search_phrases": []})
    assert attempts == 1 and not list(store.records(TENANT))
    assert (error.error.code, error.error.message, error.error.data) == (
        INTERNAL_ERROR,
        DISK_FULL,
        {"code": "INTERNAL"},
    )


def test_a_resource_read_whose_audit_append_fails_gets_the_contract_s_error(services) -> None:
    """Review of stop 37: a tool call has one audit record or no answer, and a resource read is audited
    too. When its append raised (a full disk), the raw OSError reached the client as the SDK's
    "Internal server error" without data.code; it now fails as a tool call does, tried once."""
    built, store, _checkpoints = services
    failing = _AppendFails(store, OSError(errno.ENOSPC, "No space left on device"), times=1)
    store.append = failing  # type: ignore[method-assign]

    async def read() -> MCPError:
        current_caller.set(Caller(credential=open_credential(TENANT), identities=built.identities, user=USER))
        resources = DocumentResources(built.catalog, built.audit, built.settings.server.resource_page_size)
        async with Client(build_server(build_registry(built), "mindset", resources)) as client:
            with pytest.raises(MCPError) as failed:
                await client.read_resource(HANDBOOK_URI)
            return failed.value

    try:
        error = anyio.run(read)
    finally:
        del store.append
    assert failing.attempts == 1 and not list(store.records(TENANT))
    assert (error.error.code, error.error.data) == (INTERNAL_ERROR, {"code": "INTERNAL"})
    assert "audit record could not be written" in error.error.message and "disk is full" in error.error.message

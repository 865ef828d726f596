"""Nothing blocks the event loop: the contracts' request examples of every profile, sent at once
through the whole HTTP app (authentication with a key, rate limiting, the MCP transport, every
tool), under asyncio's debug mode with `slow_callback_duration` at 50 ms. Every port is wrapped
so that a call made on the server's event loop is recorded and takes 100 ms, as a remote store's
would (calls from worker threads go straight through): any such call fails the test, and so does
any callback that holds the loop over 50 ms, by blocking (sleeping, waiting on I/O or a lock) or by
computing. The time a callback spends waiting for a CPU on a loaded machine is not counted: it is
read from the kernel's scheduler statistics of the loop's thread (/proc/thread-self/schedstat), so a
busy machine cannot fail the test and an idle one cannot hide a blocking call. The CPU time the kernel
charges a thread can itself be wrong, rarely: on these VMs (a kernel without IRQ time accounting) a
fixed 0.5 ms step of pure Python was once charged 31 ms, in 150,000 (measured at stop 39), and a
callback of this run was once charged 56 ms in a full suite where its heaviest steps are 2-6 ms. So a
run with a held callback is followed by a second run of the same batch: what blocks or computes for
that long does it again, and only a callback held in both runs fails the test.

The full garbage collection of the test process's heap (all of pytest's modules) takes 0.1-0.4 s on
whatever callback triggers it; the measured run starts with that heap collected and frozen
(gc.freeze), as a long-running server's would be after its start."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from ragmcp.bootstrap import Adapters, build_registry, build_services
from ragmcp.http import create_app
from ragmcp.mcp.offloop import off_loop
from ragmcp.mcp.registry import current_reporter
from ragmcp.security.models import RateLimits
from ragmcp.services import Services
from ragmcp.settings import Settings
from tests import fakes
from tests.contract_examples import TENANT, USER, contract_requests, contracts_present, write_corpus

LATENCY = 0.1
SLOW = 0.05


def on_event_loop() -> bool:
    """Whether this is the server's event loop: the test runs it on the main thread; the loops that
    tool bodies run in (mcp/offloop.py) are on worker threads, where blocking holds no one else."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return threading.current_thread() is threading.main_thread()


def caller_in_ragmcp() -> str:
    """Where in the library the current call comes from (its innermost frame under ragmcp/)."""
    for frame in reversed(traceback.extract_stack()):
        if "/ragmcp/ragmcp/" in frame.filename:
            return f"{frame.filename.rpartition('/ragmcp/ragmcp/')[2]}:{frame.lineno}"
    return "?"


class OnLoopLatency:
    """A port whose every method, called on a thread running an event loop, is recorded in `calls`
    and then takes LATENCY seconds: the latency of a remote store, where it would block the loop."""

    def __init__(self, name: str, port: Any, calls: list[str]) -> None:
        self._name, self._port, self._calls = name, port, calls

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._port, attr)
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            if on_event_loop():
                self._calls.append(f"{self._name}.{attr} from {caller_in_ragmcp()}")
                time.sleep(LATENCY)
            return value(*args, **kwargs)

        return call


def wrapped(adapters: Adapters, calls: list[str]) -> Adapters:
    """Every port of `adapters` behind OnLoopLatency (the callables that name locations are not ports)."""
    plain = (str, bytes, type(None))
    ports = {
        f.name: OnLoopLatency(f.name, getattr(adapters, f.name), calls)
        for f in fields(adapters)
        if not isinstance(getattr(adapters, f.name), plain)
        and f.name not in ("location_for", "renditions_for", "audit_key", "transaction")
    }
    return replace(adapters, **ports)


class SlowCallbacks(logging.Handler):
    """asyncio's debug mode logs each callback that held the loop over its slow_callback_duration."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("Executing"):
            self.seen.append(message[:120] + " ... " + message[-40:])


SCHEDSTAT = Path("/proc/thread-self/schedstat")


def _on_cpu_and_queued() -> tuple[float, float]:
    """Seconds this thread has run on a CPU, and waited runnable for one (the kernel's schedstat)."""
    running, waiting, _slices = SCHEDSTAT.read_text().split()
    return int(running) / 1e9, int(waiting) / 1e9


@dataclass
class Held:
    callback: str
    wall: float
    on_cpu: float
    blocked: float


class LoopMeter:
    """Measures each callback the main thread's event loop runs (asyncio.events.Handle._run, which
    also runs each step of a task): its wall time, its CPU time, and the time it was blocked, that
    is neither on a CPU nor waiting for one."""

    def __init__(self) -> None:
        self.held: list[Held] = []
        self.measuring = False
        self._run = asyncio.events.Handle._run

    def __call__(self, handle: asyncio.events.Handle) -> None:
        if not (self.measuring and threading.current_thread() is threading.main_thread()):
            self._run(handle)
            return
        cpu, queued = _on_cpu_and_queued()
        started = time.perf_counter()
        self._run(handle)
        wall = time.perf_counter() - started
        if wall > SLOW:
            cpu_after, queued_after = _on_cpu_and_queued()
            on_cpu = cpu_after - cpu
            blocked = wall - on_cpu - (queued_after - queued)
            if on_cpu > SLOW or blocked > SLOW:
                self.held.append(Held(repr(handle)[:200], round(wall, 3), round(on_cpu, 3), round(blocked, 3)))


@pytest.fixture
def loop_meter(monkeypatch: pytest.MonkeyPatch) -> LoopMeter:
    if not SCHEDSTAT.is_file():
        pytest.skip("no /proc/thread-self/schedstat: the time a callback waited for a CPU cannot be told apart")
    meter = LoopMeter()
    monkeypatch.setattr(asyncio.events.Handle, "_run", lambda handle: meter(handle))
    return meter


@pytest.fixture
def slow_callbacks() -> Iterator[SlowCallbacks]:
    handler = SlowCallbacks()
    logger = logging.getLogger("asyncio")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def requests() -> list[tuple[str, str, dict[str, Any], dict[str, str]]]:
    """(profile, tool, arguments, headers) of every request example whose arguments stand on their own."""
    found = []
    for profile in ("chat", "kb", "mindset", "proxysql", "ragbox"):
        for example in contract_requests(profile):
            if not any(str(v).startswith("<") for v in example.arguments.values()):
                found.append((profile, example.tool, example.arguments, example.headers))
    return found


def serve(calls: list[str], tmp_path: Any) -> tuple[Any, str, Services]:
    """The HTTP app on the wrapped fakes over the contract tests' corpus, a platform key's secret, and
    the services."""
    settings = Settings(data_dir=tmp_path / "data", host="testserver", parse_sandbox=False)
    adapters = wrapped(fakes.adapters(), calls)
    services = build_services(settings, adapters)
    write_corpus(adapters, services)
    limits = RateLimits(per_minute=10_000, synthesis_per_minute=10_000, concurrent=1_000)
    key = services.keys.create(TENANT, scopes=("read", "write", "admin"), platform=True, limits=limits)
    assert not calls, calls  # building and ingesting ran off any event loop
    return create_app(services, build_registry(services)), key.secret, services


async def _send_all(app: Any, secret: str, slow: SlowCallbacks, meter: LoopMeter, calls: list[str]) -> list[int]:
    loop = asyncio.get_running_loop()
    headers = {"authorization": f"Bearer {secret}", "accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver") as http:

        async def send(n: int, profile: str, tool: str, arguments: dict[str, Any], extra: dict[str, str]) -> int:
            body = {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
            response = await http.post(f"/mcp/{profile}", json=body, headers={**headers, **extra})
            assert "jsonrpc" in response.json(), response.text
            return response.status_code

        batch = requests()
        await send(0, *batch[0])  # imports and first-use set-up happen once, before the measured run
        gc.collect()
        gc.freeze()
        try:
            slow.seen.clear()
            calls.clear()
            loop.slow_callback_duration = SLOW
            meter.measuring = True
            return await asyncio.gather(*(send(n, *request) for n, request in enumerate(batch, 1)))
        finally:
            meter.measuring = False
            gc.unfreeze()


@pytest.mark.slow  # 2-5 s: asyncio's debug mode records where every callback was scheduled
@pytest.mark.skipif(not contracts_present(), reason="the contract documents (their request examples) are not there")
def test_concurrent_requests_never_hold_the_loop(
    tmp_path: Any, slow_callbacks: SlowCallbacks, loop_meter: LoopMeter
) -> None:
    calls: list[str] = []
    app, secret, _services = serve(calls, tmp_path)
    statuses = asyncio.run(_send_all(app, secret, slow_callbacks, loop_meter, calls), debug=True)
    assert len(statuses) == len(requests()) >= 25
    assert not calls, f"port calls made on the event loop: {sorted(set(calls))}"
    first = list(loop_meter.held)
    if first:  # the kernel's CPU charge can be wrong once: the batch again, where a cause would hold it again
        loop_meter.held.clear()
        statuses = asyncio.run(_send_all(app, secret, slow_callbacks, loop_meter, calls), debug=True)
        assert len(statuses) == len(requests()) and not calls, sorted(set(calls))
    held = loop_meter.held
    assert not held, f"callbacks that held the loop over 50 ms, in two runs: {first}, {held}; {slow_callbacks.seen}"


def test_the_check_sees_a_blocking_call(slow_callbacks: SlowCallbacks, loop_meter: LoopMeter) -> None:
    """The same measures catch a port called on the loop, and a callback that computes for long."""
    calls: list[str] = []
    blocking = OnLoopLatency("users", fakes.MemoryUserDirectory(), calls)

    async def block_once() -> None:
        asyncio.get_running_loop().slow_callback_duration = SLOW
        loop_meter.measuring = True
        await asyncio.sleep(0)
        blocking.get(TENANT, USER)
        await asyncio.sleep(0)
        deadline = time.thread_time() + 2 * SLOW
        while time.thread_time() < deadline:  # computing, not waiting: CPU time, not the wall clock
            pass

    asyncio.run(block_once(), debug=True)
    assert calls == ["users.get from ?"]
    assert len(loop_meter.held) == 2, loop_meter.held
    waited, computed = loop_meter.held
    assert waited.blocked > SLOW and waited.on_cpu < SLOW  # the sleep: blocked, not computing
    assert computed.on_cpu > SLOW  # the loop: computing, not blocked
    assert len(slow_callbacks.seen) == 2 and "block_once" in slow_callbacks.seen[0], slow_callbacks.seen


class CountedReads:
    """The key store, counting the reads (a key by hash or by id) made through it."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.reads = 0

    def by_hash(self, key_hash: str) -> Any:
        self.reads += 1
        return self._store.by_hash(key_hash)

    def get(self, key_id: str) -> Any:
        self.reads += 1
        return self._store.get(key_id)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._store, attr)


def test_a_request_reads_its_key_once(tmp_path: Any) -> None:
    """Authentication reads the key; the rate limiter takes its limits from what was read."""
    app, secret, services = serve([], tmp_path)
    counted = services.keys.store = CountedReads(services.keys.store)
    assert services.identities.keys is services.keys

    async def one_search() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
            body["params"] = {"name": "kb_search", "arguments": {"query": "cancellation fee"}}
            headers = {"authorization": f"Bearer {secret}", "accept": "application/json, text/event-stream"}
            return await http.post("/mcp/kb", json=body, headers=headers)

    response = asyncio.run(one_search())
    assert response.status_code == 200 and "40 euros" in response.text
    assert response.headers["x-ratelimit-limit"] == "10000"  # the key's own limits, as read with it
    assert counted.reads == 1


def test_a_tool_body_runs_off_the_loop_and_reports_progress_on_it() -> None:
    """mcp/offloop.py: the body on a worker thread; its progress reports sent on the server's loop
    (the client's session lives there), in order, before the result."""
    seen: list[tuple[float, str | None, bool]] = []

    async def report(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, message, threading.current_thread() is threading.main_thread()))

    async def body() -> str:
        reporter = current_reporter.get()
        assert reporter is not None
        for step in (1.0, 2.0):
            await reporter(step, 2.0, f"step {step:.0f}")
        return "done on the main thread" if threading.current_thread() is threading.main_thread() else "done off it"

    async def call() -> str:
        token = current_reporter.set(report)
        try:
            return await off_loop(body, current_reporter)
        finally:
            current_reporter.reset(token)

    assert asyncio.run(call()) == "done off it"
    assert seen == [(1.0, "step 1", True), (2.0, "step 2", True)]


def test_a_tool_body_s_worker_threads_outlive_the_call() -> None:
    """Issue 31: a body's `to_thread` calls (a search's fusion and chunk reads) run on threads kept
    for the next call, not on a thread started and ended with each request."""

    async def body() -> threading.Thread:
        return await anyio.to_thread.run_sync(threading.current_thread)

    async def calls() -> list[threading.Thread]:
        return [await off_loop(body, current_reporter) for _ in range(3)]

    first, *later = asyncio.run(calls())
    assert first is not threading.main_thread()
    assert all(thread is first for thread in later), (first, later)
    assert first.is_alive()

"""The Acceptor of `ragmcp serve` (issue 29), on a real loop, real loopback sockets and uvicorn's
real protocol over a small ASGI app: slow clients are held as bare sockets (no protocol is made for
a connection until its request's head is complete), so a complete request is answered while they
wait; past the cap the oldest one is closed with a 408; past its deadline a slow client gets a 408,
a silent one is closed without a word; one summary line counts them. The cap is tested with a
deadline far off and the deadlines with a short one, so that the machine's load cannot mix them up."""

from __future__ import annotations

import asyncio
import logging
import re
import socket
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from ragmcp.web.connections import Acceptor, ConnectionLimits, GuardedH11Protocol, guarded_protocol

CAP = 50
SHORT = 0.2
PARTIAL = b"GET /slow HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "


async def ok(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


async def _flood(caplog: pytest.LogCaptureFixture) -> None:
    protocol = guarded_protocol(ConnectionLimits(60.0, 60.0, CAP))
    config = uvicorn.Config(ok, http=protocol, lifespan="off", log_config=None)
    config.load()
    state = ServerState()
    protocol.guard.served = state.connections
    made: list[GuardedH11Protocol] = []

    def make() -> GuardedH11Protocol:
        made.append(protocol(config=config, server_state=state, app_state={}))
        return made[-1]

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    acceptor = Acceptor(listener, make, protocol.guard, batch=16)
    acceptor.start()
    try:

        async def connect(first: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            if first:
                writer.write(first)
                await writer.drain()
            return reader, writer

        partial = [await connect(PARTIAL) for _ in range(20)]
        silent = [await connect(b"") for _ in range(20)]
        reader, writer = await connect(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        answer = await asyncio.wait_for(reader.readuntil(b"ok"), 5)
        assert answer.startswith(b"HTTP/1.1 200 ")
        assert len(made) == 1 and len(protocol.guard.pending) == 40  # the slow ones cost no protocol

        later = [await connect(PARTIAL) for _ in range(20)]  # 61 open: the 11 waiting longest make room
        evicted = [await asyncio.wait_for(r.read(), 5) for r, _ in partial[:11]]
        assert all(a.startswith(b"HTTP/1.1 408 ") for a in evicted), evicted
        assert protocol.guard.open() == CAP and protocol.guard.evicted == 11 and len(made) == 1

        for _, w in (*partial, *silent, *later):
            w.close()  # the held ones see their client leave
        for _ in range(500):
            if not protocol.guard.pending:
                break
            await asyncio.sleep(0.01)
        assert not protocol.guard.pending
        protocol.guard.limits = ConnectionLimits(SHORT, 60.0, CAP)
        partial = [await connect(PARTIAL) for _ in range(10)]
        silent = [await connect(b"") for _ in range(10)]
        late = [await asyncio.wait_for(r.read(), 5) for r, _ in partial]
        assert all(a.startswith(b"HTTP/1.1 408 ") for a in late), late
        assert [await asyncio.wait_for(r.read(), 5) for r, _ in silent] == [b""] * 10
        assert protocol.guard.timed_out == 20 and not protocol.guard.pending and len(made) == 1
        for _, w in (*partial, *silent, (reader, writer)):
            w.close()
        protocol.guard.report()
        # One summary line a second: a slow run of this test may have written more than one.
        lines = [r.getMessage() for r in caplog.records if r.name == "ragmcp.web.connections"]
        counts = [re.search(r"(\d+) closed late sending their request, (\d+) closed to make room", x) for x in lines]
        assert all(counts) and 1 <= len(lines) <= 60, lines
        assert [sum(int(m.group(i)) for m in counts if m) for i in (1, 2)] == [20, 11]
    finally:
        acceptor.close()
        listener.close()


def test_slow_clients_are_held_cheaply_evicted_at_the_cap_and_timed_out(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="ragmcp.web.connections"):
        asyncio.run(_flood(caplog))


async def _shared_listener(turns: list[Any], connections: int) -> list[int]:
    """`connections` clients connecting at once to one listening socket that an Acceptor a turn
    number (`turns`: AcceptTurns, or None) accepts on, each through its own descriptor as the
    processes of `serve --workers N` do; the requests each acceptor's protocols answered."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    made: list[list[GuardedH11Protocol]] = []
    acceptors = []
    for turn in turns:
        protocol = guarded_protocol(ConnectionLimits(60.0, 60.0, CAP))
        config = uvicorn.Config(ok, http=protocol, lifespan="off", log_config=None)
        config.load()
        state = ServerState()
        protocol.guard.served = state.connections
        mine: list[GuardedH11Protocol] = []
        made.append(mine)

        def make(p=protocol, c=config, s=state, m=mine) -> GuardedH11Protocol:
            m.append(p(config=c, server_state=s, app_state={}))
            return m[-1]

        acceptor = Acceptor(
            socket.fromfd(listener.fileno(), socket.AF_INET, socket.SOCK_STREAM), make, protocol.guard, 16, turn
        )
        acceptor.start()
        acceptors.append(acceptor)
    try:
        clients = await asyncio.gather(*(asyncio.open_connection("127.0.0.1", port) for _ in range(connections)))
        for _, writer in clients:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        answers = [await asyncio.wait_for(reader.readuntil(b"ok"), 5) for reader, _ in clients]
        assert all(a.startswith(b"HTTP/1.1 200 ") for a in answers)
        for _, writer in clients:
            writer.close()
        return [len(m) for m in made]
    finally:
        for acceptor in acceptors:
            acceptor.close()
            acceptor.sock.close()
        listener.close()


def test_processes_sharing_a_socket_take_its_connections_in_turn() -> None:
    """Eight connections at once to two processes' acceptors: four each (the first one woken used
    to take all it found), whether the writer or the reader took the first turn."""
    import multiprocessing

    from ragmcp.web.connections import AcceptTurns

    shared = multiprocessing.get_context("spawn").Array("q", 3, lock=False)
    for first in (0, 1):
        shared[0] = first
        assert asyncio.run(_shared_listener([AcceptTurns(shared, 0), AcceptTurns(shared, 1)], 8)) == [4, 4]
        assert shared[1:] == [0, 0]  # each left the turns when it closed


def test_a_turn_held_by_a_process_that_accepts_nothing_passes_on() -> None:
    """A reader whose flag is set but which takes no connection (dead, its loop stuck): after
    TURN_STALE_SECONDS its turns are taken by the others, so no connection waits for it forever."""
    import multiprocessing

    from ragmcp.web.connections import AcceptTurns

    shared = multiprocessing.get_context("spawn").Array("q", 3, lock=False)
    shared[2] = 1  # reader 1 is said to accept, and never does
    assert asyncio.run(_shared_listener([AcceptTurns(shared, 0)], 3)) == [3]

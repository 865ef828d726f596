"""The connections of `ragmcp serve`: uvicorn's h11 protocol with the bounds a server facing slow or
hostile clients needs and uvicorn lacks (its keep-alive timeout stops at the first byte, and it has
no header or body read timeout and no cap on open connections).

- A request's headers must arrive within `header_timeout` seconds of the connection becoming idle
  (opened, or its last answer sent), however slowly they trickle in: else 408 and the connection
  is closed (closed without a word when it sent nothing, as a kept-alive connection is).
- Its body must arrive within `body_timeout` seconds of the headers: else 408 (when nothing was
  answered yet; the app sees the client leave) and the connection is closed.
- At most `max_connections` are open: a new one past the cap takes the place of the one waiting
  longest for its request (lingering ones first, then those waiting for headers, then those
  reading a body), which is answered 408 and closed; when every connection is answering, the
  new one is answered 503 with Retry-After and closed at once. The cap and the accept backlog
  stay below the process's file limit (`connection_budget`), raised to its hard limit at start
  (`raise_open_files_limit`), so accepting never runs out of file descriptors.
- An answer given before the request's body was read (413 for a body over the limit, 408) closes
  gracefully: the write side is shut and what the client still sends is read and dropped for a
  few seconds, so the client reads the answer instead of a connection reset.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import resource
import socket
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)

RESERVED_FILES = 256
"""File descriptors kept for everything but connections (database, index, vector graph, pipes)."""
LINGER_SECONDS = 10.0
LINGER_BYTES = 64 * 1024 * 1024
RETRY_AFTER_SECONDS = 1
MAX_BACKLOG = 128
"""The most connections asyncio accepts in one go (uvicorn's `backlog`)."""
LISTEN_QUEUE = 2048
"""Connections the kernel holds for accepting (the listen queue): a burst past it drops SYNs, which
the clients (a health check among them) retry a second later."""


def _answer(status: int, reason: str, message: str, extra: str = "") -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": message}}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        f"{extra}connection: close\r\n\r\n"
    )
    return head.encode() + body


TIMED_OUT = _answer(408, "Request Timeout", "Request Timeout: the request was not received in time")
BUSY = _answer(
    503,
    "Service Unavailable",
    "Service Unavailable: too many open connections; retry shortly",
    f"retry-after: {RETRY_AFTER_SECONDS}\r\n",
)


def raise_open_files_limit() -> int:
    """Raise this process's soft limit of open files to its hard limit; the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:  # e.g. above the kernel's nr_open: keep the soft limit
            log.warning("could not raise the open files limit from %d to %d: %s", soft, target, exc)
    return soft


def connection_budget(max_connections: int, open_files: int) -> tuple[int, int]:
    """The open connections allowed and the accept backlog, within the open files limit. asyncio
    accepts up to `backlog` connections at once before any is handed to its protocol, and a closed
    one frees its file an event-loop turn later: so the files needed are RESERVED_FILES, the cap,
    and twice the backlog (accepted, and closing to make room). The listen queue is kept at
    LISTEN_QUEUE whatever the backlog (`GuardedServer`)."""
    room = max(open_files - RESERVED_FILES, open_files // 2)
    backlog = max(8, min(MAX_BACKLOG, room // 4))
    return max(1, min(max_connections, room - 2 * backlog)), backlog


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout: float
    body_timeout: float
    max_connections: int


@dataclass
class Connections:
    """One process's connections that wait on their client, each group oldest first (a dict keeps
    the order it was filled in), and what was refused."""

    limits: ConnectionLimits
    lingering: dict[GuardedH11Protocol, None] = field(default_factory=dict)
    idle: dict[GuardedH11Protocol, None] = field(default_factory=dict)
    reading: dict[GuardedH11Protocol, None] = field(default_factory=dict)
    timed_out: int = 0
    evicted: int = 0
    refused: int = 0

    def forget(self, connection: GuardedH11Protocol) -> None:
        for group in (self.lingering, self.idle, self.reading):
            group.pop(connection, None)

    def evict_one(self) -> bool:
        """Close the connection waiting longest on its client, lingering ones first; whether one was."""
        for group in (self.lingering, self.idle, self.reading):
            if group:
                next(iter(group)).evict()
                return True
        return False


class _Transport:
    """The transport uvicorn is given: closing it while the client still sends its request's body
    (uvicorn does after an answer with `connection: close`) lingers instead (see the module)."""

    def __init__(self, transport: asyncio.Transport, connection: GuardedH11Protocol):
        self._transport = transport
        # Weak, so a closed connection leaves no reference cycle: the collector's full passes over
        # thousands of such cycles, in a flood, were pauses of a second.
        self._connection = weakref.ref(connection)

    def close(self) -> None:
        connection = self._connection()
        if connection is not None and not self._transport.is_closing() and connection.conn.their_state is h11.SEND_BODY:
            connection.linger()
        else:
            self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol bounded as the module says; `guarded_protocol` makes the class."""

    guard: ClassVar[Connections]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timer: asyncio.TimerHandle | None = None
        self._phase = "new"
        self._sent_bytes = False
        self._refused = False
        self._lingering = False
        self._lingered = 0
        self._real: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        guard = self.guard
        if len(self.connections) >= guard.limits.max_connections and not guard.evict_one():
            self._refused = True
            guard.refused += 1
            log.warning(
                "refused a connection with 503: %d connections open, all answering (RAGMCP_MAX_CONNECTIONS)",
                len(self.connections),
            )
            transport.write(BUSY)
            transport.close()
            return
        self._real = transport
        super().connection_made(_Transport(transport, self))  # type: ignore[arg-type]
        self._track()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.guard.forget(self)
        if not self._refused:
            super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._lingering:
            self._lingered += len(data)
            if self._lingered > LINGER_BYTES:
                self._close()
            return
        if self._phase == "headers" and data:
            self._sent_bytes = True
        super().data_received(data)

    def handle_events(self) -> None:
        super().handle_events()
        self._track()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._track()

    def _track(self) -> None:
        """Follow the request through its phases (h11's states), arming each one's deadline."""
        if self._lingering or self._real is None or self._real.is_closing():
            self._disarm()
            self.guard.forget(self)
            return
        theirs, ours = self.conn.their_state, self.conn.our_state
        if theirs is h11.IDLE and ours is h11.IDLE:
            if self._phase != "headers":
                self._enter("headers", self.guard.idle, self.guard.limits.header_timeout, self._headers_late)
                self._sent_bytes = False
        elif theirs is h11.SEND_BODY:
            if self._phase != "body":
                self._enter("body", self.guard.reading, self.guard.limits.body_timeout, self._body_late)
        elif self._phase in ("headers", "body"):
            self._phase = "answering"
            self._disarm()
            self.guard.forget(self)

    def _enter(
        self, phase: str, group: dict[GuardedH11Protocol, None], seconds: float, late: Callable[[], None]
    ) -> None:
        self.guard.forget(self)
        group[self] = None
        self._phase = phase
        self._disarm()
        self._timer = self.loop.call_later(seconds, late)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _headers_late(self) -> None:
        self._timer = None
        if self._sent_bytes:
            self.guard.timed_out += 1
            log.warning("closed a connection whose request headers took over %g s", self.guard.limits.header_timeout)
            self._write(TIMED_OUT)
        self._close()

    def _body_late(self) -> None:
        self._timer = None
        self.guard.timed_out += 1
        log.warning("closed a connection whose request body took over %g s", self.guard.limits.body_timeout)
        self._stop_request()
        self._close()

    def evict(self) -> None:
        """Make room for a new connection: this one is answered 408 (if it asked for anything) and closed."""
        self.guard.evicted += 1
        log.warning("closed the connection waiting longest on its client: the open connections are at their cap")
        if self._phase == "body":
            self._stop_request()
        elif self._phase == "headers" and self._sent_bytes:
            self._write(TIMED_OUT)
        self._close()

    def _stop_request(self) -> None:
        """The request will not be read: the app sees the client leave; 408 when nothing was answered."""
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            answered = cycle.response_started
            cycle.disconnected = True
            cycle.message_event.set()
            if not answered:
                self._write(TIMED_OUT)

    def linger(self) -> None:
        """Close after an answer given before the request was read: shut the write side, then read
        and drop what the client still sends, for LINGER_SECONDS (or LINGER_BYTES) at most."""
        transport = self._real
        if transport is None or transport.is_closing():
            return
        self._lingering = True
        self._phase = "lingering"
        self._disarm()
        self.guard.forget(self)
        self.guard.lingering[self] = None
        if not transport.can_write_eof():
            self._close()
            return
        transport.write_eof()
        transport.resume_reading()
        self._timer = self.loop.call_later(LINGER_SECONDS, self._close)

    def _write(self, data: bytes) -> None:
        if self._real is not None and not self._real.is_closing():
            self._real.write(data)

    def _close(self) -> None:
        self._disarm()
        self.guard.forget(self)
        if self._real is not None:
            self._real.close()


class GuardedServer(uvicorn.Server):
    """uvicorn's server; its sockets keep a listen queue of LISTEN_QUEUE connections (asyncio sets
    it to the accept backlog when it starts serving). The objects made before serving (the app,
    the libraries, the model) are frozen out of the garbage collector's view (`gc.freeze`): else a
    burst of connections, allocating fast, sets off full collections that walk them all, each a
    pause of up to 0.8 s on this server in which nothing is answered."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        for sock in sockets or ():
            sock.listen(LISTEN_QUEUE)
        gc.collect()
        gc.freeze()


def guarded_protocol(limits: ConnectionLimits) -> type[GuardedH11Protocol]:
    """The protocol class uvicorn makes each connection with (`uvicorn.Config(http=...)`), over
    one process-wide set of `Connections`."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"guard": Connections(limits)})

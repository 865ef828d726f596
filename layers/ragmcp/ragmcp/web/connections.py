"""The connections of `ragmcp serve`: uvicorn's h11 protocol with the bounds a server facing slow or
hostile clients needs and uvicorn lacks (its keep-alive timeout stops at the first byte, and it has
no header or body read timeout and no cap on open connections).

- A request's headers must arrive within `header_timeout` seconds of the connection becoming idle
  (opened, or its last answer sent), however slowly they trickle in: else 408 and the connection
  is closed (closed without a word when it sent nothing, as a kept-alive connection is).
- Its body must arrive within `body_timeout` seconds of the headers: else 408 (when nothing was
  answered yet; the app sees the client leave) and the connection is closed.
- A new connection costs next to nothing until its request's head is complete (`Acceptor`): it is
  accepted at once, whatever else waits, and held as a bare socket (no transport, protocol or timer
  of its own; one sweep a tenth of a second closes those past their deadline), and only a complete
  head is given to uvicorn's protocol. So thousands of slow clients neither fill the kernel's accept
  queue nor make a health check wait behind them, on a server short of CPU too.
- At most `max_connections` are open: a new one past the cap takes the place of the one waiting
  longest for its request (lingering ones first, then those sending their request's head, then
  kept-alive ones, then those reading a body), which is answered 408 and closed; when every
  connection is answering, the new one is answered 503 with Retry-After and closed at once. The
  cap and the accept batch stay below the process's file limit (`connection_budget`), raised to
  its hard limit at start (`raise_open_files_limit`), so accepting never runs out of file descriptors.
- The connections closed or refused are logged as one line a second with their counts, never one a
  connection.
- An answer given before the request's body was read (413 for a body over the limit, 408) closes
  gracefully: the write side is shut and what the client still sends is read and dropped for a
  few seconds, so the client reads the answer instead of a connection reset.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import json
import logging
import resource
import socket
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, cast

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import STARTUP_FAILURE

log = logging.getLogger(__name__)

RESERVED_FILES = 256
"""File descriptors kept for everything but connections (database, index, vector graph, pipes)."""
LINGER_SECONDS = 10.0
LINGER_BYTES = 64 * 1024 * 1024
RETRY_AFTER_SECONDS = 1
MAX_BACKLOG = 128
"""The most connections accepted in one go (uvicorn's `backlog`)."""
SWEEP_SECONDS = 0.1
"""How often the connections still sending their request's head are checked against their deadline."""
ACCEPT_RETRY_SECONDS = 0.5
"""Accepting pauses this long when the process or the system is out of files or memory."""
TURN_WAIT_SECONDS = 0.002
"""A process of `serve --workers N` that is not next to accept looks again after this long."""
TURN_STALE_SECONDS = 0.25
"""A turn held this long without the process taking a waiting connection (its loop blocked, the
process dead) passes to the next process that sees the connection."""
HEAD_END = b"\r\n\r\n"
MAX_HEAD_BYTES = 64 * 1024
"""A head longer than this goes to uvicorn's protocol unfinished, to be refused there (h11: 16 KB)."""
SUMMARY_SECONDS = 1.0
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
    """The open connections allowed and the accept backlog (the most accepted in one turn of the
    loop: `Acceptor`), within the open files limit. The files needed are RESERVED_FILES, the cap,
    and twice the backlog (with room to spare: each one accepted past the cap closes another at
    once). The listen queue is kept at LISTEN_QUEUE whatever the backlog (`GuardedServer`)."""
    room = max(open_files - RESERVED_FILES, open_files // 2)
    backlog = max(8, min(MAX_BACKLOG, room // 4))
    return max(1, min(max_connections, room - 2 * backlog)), backlog


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout: float
    body_timeout: float
    max_connections: int


class _Evictable(Protocol):
    def evict(self) -> None: ...


@dataclass
class Connections:
    """One process's connections that wait on their client, each group oldest first (a dict keeps
    the order it was filled in), how many uvicorn serves (`served`, its set), and the counts of
    those closed or refused, logged once a second (`report`)."""

    limits: ConnectionLimits
    lingering: dict[GuardedH11Protocol, None] = field(default_factory=dict)
    pending: dict[_Pending, None] = field(default_factory=dict)
    idle: dict[GuardedH11Protocol, None] = field(default_factory=dict)
    reading: dict[GuardedH11Protocol, None] = field(default_factory=dict)
    served: set[Any] = field(default_factory=set)
    timed_out: int = 0
    evicted: int = 0
    refused: int = 0
    reported: tuple[int, int, int] = (0, 0, 0)

    def forget(self, connection: GuardedH11Protocol) -> None:
        for group in (self.lingering, self.idle, self.reading):
            group.pop(connection, None)

    def open(self) -> int:
        return len(self.pending) + len(self.served)

    def evict_one(self) -> bool:
        """Close the connection waiting longest on its client, lingering ones first; whether one was."""
        groups: tuple[dict[Any, None], ...] = (self.lingering, self.pending, self.idle, self.reading)
        for group in groups:
            if group:
                cast(_Evictable, next(iter(group))).evict()
                return True
        return False

    def report(self) -> None:
        """One line with the connections closed or refused since the last one, if any were."""
        now = (self.timed_out, self.evicted, self.refused)
        timed_out, evicted, refused = (a - b for a, b in zip(now, self.reported, strict=True))
        self.reported = now
        if timed_out or evicted or refused:
            log.warning(
                "connections in the last %g s: %d closed late sending their request, %d closed to make room"
                " (open connections at their cap, RAGMCP_MAX_CONNECTIONS=%d), %d refused with 503 (all answering)",
                SUMMARY_SECONDS,
                timed_out,
                evicted,
                self.limits.max_connections,
                refused,
            )


class _Pending:
    """A connection accepted and still sending its request's head: a bare socket and what it sent."""

    __slots__ = ("acceptor", "deadline", "head", "sock", "watched")

    def __init__(self, acceptor: Acceptor, sock: socket.socket, deadline: float):
        self.acceptor = acceptor
        self.sock = sock
        self.deadline = deadline
        self.head = b""
        self.watched = False

    def evict(self) -> None:
        self.acceptor.guard.evicted += 1
        self.close(TIMED_OUT if self.head else b"")

    def close(self, answer: bytes = b"") -> None:
        """Stop holding it; send `answer` first, if any."""
        self.acceptor.release(self)
        if answer:
            try:
                self.sock.send(answer)
                self.sock.recv(65536)  # what came since the last read: unread, it would turn the close into a reset
            except OSError:
                pass
        self.sock.close()


class AcceptTurns:
    """Whose turn it is to accept a connection on the listening socket the processes of `ragmcp
    serve --workers N` share, so that connections are spread evenly over them: the kernel wakes
    every process waiting on the socket, and the first took every connection it found (the eight a
    client opens at once landed mostly on one process, the other core idle).

    Shared memory (a multiprocessing Array of int64 without a lock, made by ReaderPool): the
    connections accepted in all, then a flag per process (the writer 0, readers 1..N-1) set while
    its acceptor runs. Turns go round the processes whose flag is set; one that holds a turn over
    TURN_STALE_SECONDS while a connection waits loses it. No lock, because a process killed while
    holding one would stop every other from accepting: each slot is one aligned int64, read and
    written whole, and only the process whose turn it is advances the count (two at once only when
    a stale turn is taken, which costs one uneven turn)."""

    def __init__(self, shared: Any, number: int):
        self.shared = shared
        self.number = number

    def join(self) -> None:
        self.shared[1 + self.number] = 1

    def leave(self) -> None:
        self.shared[1 + self.number] = 0

    def turn(self) -> tuple[int, bool]:
        """The connections accepted so far, and whether this process is next."""
        values = self.shared[:]
        accepted, flags = values[0], values[1:]
        active = [n for n, flag in enumerate(flags) if flag]
        return accepted, not active or self.number not in active or active[accepted % len(active)] == self.number

    def advance(self) -> None:
        self.shared[0] += 1


class Acceptor:
    """Accepts a listening socket's connections as they come, `batch` at most a turn of the loop,
    and holds each as a `_Pending` socket until its request's head is complete, or its time is up
    (`header_timeout`: 408 when it sent anything, else closed without a word), or it is evicted at
    the cap. A complete head (or one too long) goes to a new protocol of uvicorn's, which reads it
    first. Stands in for the asyncio server uvicorn would make (`close`, `wait_closed`)."""

    def __init__(
        self,
        sock: socket.socket,
        make_protocol: Callable[[], GuardedH11Protocol],
        guard: Connections,
        batch: int,
        turns: AcceptTurns | None = None,
    ):
        self.loop = asyncio.get_running_loop()
        self.sock = sock
        self.make_protocol = make_protocol
        self.guard = guard
        self.batch = batch
        self.turns = turns
        """With other processes accepting on the same socket: one connection a turn."""
        self.waited: tuple[int, float] | None = None
        """The turn this process waits on (connections accepted in all) and since when."""
        self.connecting: set[asyncio.Task[None]] = set()
        self.sweeper: asyncio.TimerHandle | None = None
        self.reported_at = self.loop.time()

    def start(self) -> None:
        self.sock.setblocking(False)
        self.loop.add_reader(self.sock.fileno(), self.accept)
        self.sweeper = self.loop.call_later(SWEEP_SECONDS, self.sweep)
        if self.turns is not None:
            self.turns.join()

    def close(self) -> None:
        if self.sweeper is None:
            return
        self.sweeper.cancel()
        self.sweeper = None
        self.loop.remove_reader(self.sock.fileno())
        if self.turns is not None:
            self.turns.leave()
        for pending in [p for p in self.guard.pending if p.acceptor is self]:
            pending.close()

    async def wait_closed(self) -> None:
        return None

    def resume(self) -> None:
        if self.sweeper is not None:
            self.loop.add_reader(self.sock.fileno(), self.accept)

    def my_turn(self) -> bool:
        """Whether this process may accept the next connection now; when not, it looks again in
        TURN_WAIT_SECONDS (not woken by the socket meanwhile)."""
        if self.turns is None:
            return True
        accepted, mine = self.turns.turn()
        now = self.loop.time()
        if self.waited is None or self.waited[0] != accepted:
            self.waited = (accepted, now)
        if mine or now - self.waited[1] >= TURN_STALE_SECONDS:
            return True
        self.loop.remove_reader(self.sock.fileno())
        self.loop.call_later(TURN_WAIT_SECONDS, self.resume)
        return False

    def accept(self) -> None:
        for _ in range(1 if self.turns is not None else self.batch):
            if not self.my_turn():
                return
            try:
                sock, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                if exc.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.warning("could not accept a connection: %s", exc)
                    return
                log.warning("accepting paused for %g s: %s", ACCEPT_RETRY_SECONDS, exc.strerror)
                self.loop.remove_reader(self.sock.fileno())
                self.loop.call_later(ACCEPT_RETRY_SECONDS, self.resume)
                return
            if self.turns is not None:
                self.turns.advance()
            self.admit(sock)

    def admit(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        guard = self.guard
        pending = _Pending(self, sock, self.loop.time() + guard.limits.header_timeout)
        if guard.open() >= guard.limits.max_connections and not guard.evict_one():
            guard.refused += 1
            pending.close(BUSY)
            return
        guard.pending[pending] = None
        self.read(pending)  # a client's request is often there already
        if pending in guard.pending:
            self.loop.add_reader(sock.fileno(), self.read, pending)
            pending.watched = True

    def read(self, pending: _Pending) -> None:
        try:
            data = pending.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            pending.close()
            return
        seen = pending.head[-len(HEAD_END) + 1 :] + data
        pending.head += data
        if HEAD_END in seen or len(pending.head) > MAX_HEAD_BYTES:
            self.release(pending)
            protocol = self.make_protocol()
            protocol.preamble = pending.head
            task = self.loop.create_task(self.connect(pending.sock, protocol))
            self.connecting.add(task)
            task.add_done_callback(self.connecting.discard)

    async def connect(self, sock: socket.socket, protocol: GuardedH11Protocol) -> None:
        try:
            await self.loop.connect_accepted_socket(lambda: protocol, sock)
        except OSError:
            sock.close()

    def release(self, pending: _Pending) -> None:
        """No longer held here: not counted, not read."""
        self.guard.pending.pop(pending, None)
        if pending.watched:
            pending.watched = False
            self.loop.remove_reader(pending.sock.fileno())

    def sweep(self) -> None:
        """Close the connections past their deadline (the oldest come first), and say once a second
        how many were closed or refused."""
        now = self.loop.time()
        pending = self.guard.pending
        while pending:
            oldest = next(iter(pending))
            if oldest.deadline > now:
                break
            self.guard.timed_out += 1
            oldest.close(TIMED_OUT if oldest.head else b"")
        if now - self.reported_at >= SUMMARY_SECONDS:
            self.reported_at = now
            self.guard.report()
        self.sweeper = self.loop.call_later(SWEEP_SECONDS, self.sweep)


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
        self._lingering = False
        self._lingered = 0
        self._real: asyncio.Transport | None = None
        self.preamble = b""
        """What the client sent before this protocol was made (its request's head: `Acceptor`)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._real = transport
        super().connection_made(_Transport(transport, self))  # type: ignore[arg-type]
        self._track()
        if self.preamble:
            data, self.preamble = self.preamble, b""
            self.data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.guard.forget(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
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
            self._write(TIMED_OUT)
        self._close()

    def _body_late(self) -> None:
        self._timer = None
        self.guard.timed_out += 1
        self._stop_request()
        self._close()

    def evict(self) -> None:
        """Make room for a new connection: this one is answered 408 (if it asked for anything) and closed."""
        self.guard.evicted += 1
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
    """uvicorn's server, accepting on its sockets with an `Acceptor` each (instead of asyncio's
    server) with a listen queue of LISTEN_QUEUE connections. The objects made before serving (the
    app, the libraries, the model) are frozen out of the garbage collector's view (`gc.freeze`):
    else a burst of connections, allocating fast, sets off full collections that walk them all,
    each a pause of up to 0.8 s on this server in which nothing is answered. `turns`: the accept
    turns of the processes of `serve --workers N` sharing the sockets."""

    def __init__(self, config: uvicorn.Config, turns: AcceptTurns | None = None):
        super().__init__(config)
        self.turns = turns

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        if sockets is None:
            raise ValueError("GuardedServer serves on sockets it is given (ragmcp.serve.listen)")
        await self.lifespan.startup()
        if self.lifespan.should_exit:
            raise SystemExit(STARTUP_FAILURE)
        config = self.config
        protocol = cast(type[GuardedH11Protocol], config.http_protocol_class)
        guard = protocol.guard
        guard.served = self.server_state.connections

        def make_protocol() -> GuardedH11Protocol:
            return protocol(config=config, server_state=self.server_state, app_state=self.lifespan.state)

        acceptors = [Acceptor(sock, make_protocol, guard, config.backlog, self.turns) for sock in sockets]
        for acceptor, sock in zip(acceptors, sockets, strict=True):
            sock.listen(LISTEN_QUEUE)
            acceptor.start()
        self.servers = cast(list[asyncio.base_events.Server], acceptors)  # uvicorn calls close and wait_closed
        gc.collect()
        gc.freeze()
        self.started = True


def guarded_protocol(limits: ConnectionLimits) -> type[GuardedH11Protocol]:
    """The protocol class uvicorn makes each connection with (`uvicorn.Config(http=...)`), over
    one process-wide set of `Connections`."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"guard": Connections(limits)})

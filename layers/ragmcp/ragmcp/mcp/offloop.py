"""Tool bodies off the server's event loop.

A tool is an `async def` whose body mixes awaits (progress notifications, waiting for a job) with
plain calls into the services and their ports (a directory lookup, a source listing, a job's
submission), which block on SQLite, DynamoDB or S3. The registry runs each call's body on a thread
of its own for the call's length, in that thread's event loop, so that whatever the body calls in
line holds only that loop; the server's loop keeps answering other requests. The progress
notifications a body sends go back to the server's loop, which owns the client's session.

The threads and their loops stay for the next call (`Home`): each loop runs under one root task
that never ends, so the worker threads anyio starts for a body's `to_thread` calls are kept and
reused as on the server's own loop. A loop made and closed per call (asyncio.run) ended them with
it: every request started and ended a thread, and its work (a search's fusion and chunk reads)
was spent on a thread that `ragmcp bench scale` could only count as "ended"."""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from anyio.lowlevel import EventLoopToken

from ragmcp.threadnames import name_native_thread

T = TypeVar("T")
Reporter = Callable[[float, float | None, str | None], Awaitable[None]]

THREAD_NAME = "tool"
"""The kernel name of a Home's thread (and of the worker threads anyio starts from it)."""


class Home:
    """A daemon thread running one event loop for good, one tool body at a time."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self._serve, name=THREAD_NAME, daemon=True).start()

    def _serve(self) -> None:
        name_native_thread()
        # run_until_complete makes _forever the root task anyio ties its worker threads to
        self.loop.run_until_complete(_forever())


async def _forever() -> None:
    await asyncio.Event().wait()


class Homes:
    """The idle Homes; one is made when none is idle (anyio's thread limiter bounds how many run)."""

    def __init__(self) -> None:
        self._idle: list[Home] = []
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        """A forked child has none of the parent's threads: its Homes are made anew."""
        self._idle, self._lock = [], threading.Lock()

    def take(self) -> Home:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return Home()

    def give(self, home: Home) -> None:
        with self._lock:
            self._idle.append(home)


HOMES = Homes()


async def off_loop(body: Callable[[], Awaitable[T]], reporter: contextvars.ContextVar[Reporter | None]) -> T:
    """`await body()` on a Home's thread and loop, in a copy of this context. The reporter the
    context holds (`reporter`) is called on this loop when the body reports progress. Like
    anyio.to_thread.run_sync, a cancelled caller waits for the body to end."""
    report = reporter.get()
    context = contextvars.copy_context()
    if report is not None:  # set in the body's copy of the context only
        context.run(reporter.set, partial(_relay, report, anyio.lowlevel.current_token()))
    async with anyio.to_thread.current_default_thread_limiter():
        home = HOMES.take()
        with anyio.CancelScope(shield=True):
            # call_soon_threadsafe, inside context.run, schedules the body's task in that context
            started = context.run(asyncio.run_coroutine_threadsafe, _awaited(body), home.loop)
            try:
                return await asyncio.wrap_future(started)
            finally:
                HOMES.give(home)


async def _awaited(body: Callable[[], Awaitable[T]]) -> T:
    return await body()


async def _relay(
    report: Reporter, token: EventLoopToken, progress: float, total: float | None, message: str | None
) -> None:
    """A progress report of the body, sent on the server's loop (the body's own waits until it is sent)."""
    anyio.from_thread.run(report, progress, total, message, token=token)

"""Tool bodies off the server's event loop.

A tool is an `async def` whose body mixes awaits (progress notifications, waiting for a job) with
plain calls into the services and their ports (a directory lookup, a source listing, a job's
submission), which block on SQLite, DynamoDB or S3. The registry runs each call's body on a worker
thread, in an event loop of that thread's own, so that whatever the body calls in line holds
only that loop; the server's loop keeps answering other requests. The progress notifications a
body sends go back to the server's loop, which owns the client's session.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from anyio.lowlevel import EventLoopToken

T = TypeVar("T")
Reporter = Callable[[float, float | None, str | None], Awaitable[None]]


async def off_loop(body: Callable[[], Awaitable[T]], reporter: contextvars.ContextVar[Reporter | None]) -> T:
    """`await body()` on a worker thread in an event loop of its own. The reporter the context
    holds (`reporter`) is called on this loop when the body reports progress."""
    report = reporter.get()
    token = anyio.lowlevel.current_token()

    def run() -> T:
        if report is not None:  # set in the worker thread's copy of the context only
            reporter.set(partial(_relay, report, token))
        return asyncio.run(_awaited(body))

    return await anyio.to_thread.run_sync(run)


async def _awaited(body: Callable[[], Awaitable[T]]) -> T:
    return await body()


async def _relay(
    report: Reporter, token: EventLoopToken, progress: float, total: float | None, message: str | None
) -> None:
    """A progress report of the body, sent on the server's loop (the body's own waits until it is sent)."""
    anyio.from_thread.run(report, progress, total, message, token=token)

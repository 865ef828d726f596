"""Where ragmcp's log lines go: readable text on a terminal or a local service, JSON on Lambda.

Libraries that log their own workings at INFO (faiss's loader tries three builds and logs each
miss with a ModuleNotFoundError; the MCP SDK logs three lines per stateless request) are held
to warnings unless `--verbose` asks for everything.

A flood cannot grow the log without bound: `RepeatLimit` lets through a few records of one kind a
minute (a failing accept's traceback, a warning about each bad request) and says how many it left
out when the minute ends.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger

NOISY = {
    "faiss.loader": logging.WARNING,
    "httpx": logging.WARNING,
    "mcp.server": logging.WARNING,
    "pypdf": logging.ERROR,
}
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def quiet_libraries(verbose: bool = False) -> None:
    for name, level in NOISY.items():
        logging.getLogger(name).setLevel(logging.NOTSET if verbose else level)


class RepeatLimit(logging.Filter):
    """At most `burst` records of one kind (logger, level and the first line of the message, before
    its arguments) every `window` seconds; the others of the window are dropped and counted, and
    when it ends one record says how many ("N similar lines suppressed in the last 60 s: ...")."""

    MAX_KINDS = 1000

    def __init__(self, burst: int = 5, window: float = 60.0):
        super().__init__()
        self.burst = burst
        self.window = window
        self._kinds: dict[tuple[str, int, str], list[float]] = {}
        """kind -> [window start, records let through, records dropped]"""
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "suppressed_summary", False):
            return True
        first_line = str(record.msg).split("\n", 1)[0][:200]
        kind = (record.name, record.levelno, first_line)
        now = time.monotonic()
        with self._lock:
            state = self._kinds.get(kind)
            if state is None or now - state[0] >= self.window:
                if len(self._kinds) >= self.MAX_KINDS:
                    self._kinds = {k: v for k, v in self._kinds.items() if now - v[0] < self.window or v[2]}
                self._kinds[kind] = [now, 1, 0]
                return True
            if state[1] < self.burst:
                state[1] += 1
                return True
            state[2] += 1
            if state[2] == 1:
                timer = threading.Timer(state[0] + self.window - now, self._report, (kind,))
                timer.daemon = True
                timer.start()
            return False

    def _report(self, kind: tuple[str, int, str]) -> None:
        with self._lock:
            state = self._kinds.pop(kind, None)
        if state and state[2]:
            name, level, first_line = kind
            logging.getLogger(name).log(
                level,
                "%d similar lines suppressed in the last %g s: %s",
                int(state[2]),
                self.window,
                first_line,
                extra={"suppressed_summary": True},
            )


def configure_text(verbose: bool = False) -> None:
    """The command line and `ragmcp serve`: one readable line per record on stderr, repeated ones
    limited (`RepeatLimit`)."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format=TEXT_FORMAT, stream=sys.stderr)
    repeats = RepeatLimit()
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RepeatLimit) for f in handler.filters):
            handler.addFilter(repeats)
    quiet_libraries(verbose)


def configure_lambda(logger: Logger) -> None:
    """A Lambda function: ragmcp's own records go through the function's Powertools logger, as
    JSON lines with the invocation's keys (request id, correlation id, cold start)."""
    from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers

    logging.getLogger("ragmcp")  # registered, so its children's records are formatted too
    copy_config_to_registered_loggers(source_logger=logger, include={"ragmcp"})
    quiet_libraries()

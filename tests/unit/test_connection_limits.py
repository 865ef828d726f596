"""The bounds of `ragmcp serve`'s connections that need no server (issue 29): the connection cap and
accept backlog always fit the open files limit, and repeated log lines are limited with a count."""

from __future__ import annotations

import logging
import time

import pytest

from ragmcp.logs import RepeatLimit
from ragmcp.web.connections import MAX_BACKLOG, RESERVED_FILES, connection_budget


@pytest.mark.parametrize("open_files", [64, 256, 1024, 4096, 20000, 1 << 20])
def test_the_cap_and_two_accept_batches_fit_the_open_files_limit(open_files: int) -> None:
    cap, backlog = connection_budget(1024, open_files)
    assert 1 <= cap <= 1024 and 8 <= backlog <= MAX_BACKLOG
    assert cap + 2 * backlog + min(RESERVED_FILES, open_files // 2) <= open_files


def test_a_large_limit_leaves_the_setting_as_the_cap() -> None:
    assert connection_budget(1024, 20000) == (1024, MAX_BACKLOG)
    assert connection_budget(50, 20000)[0] == 50


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_repeated_log_lines_are_limited_and_counted() -> None:
    # A logger of its own, outside ragmcp's tree and not propagating: what other tests configured
    # (Powertools' handlers on "ragmcp", pytest's capture) cannot hold or drop its lines.
    logger = logging.getLogger("repeat_limit_test")
    logger.propagate = False
    logger.setLevel(logging.WARNING)
    handler = Lines()
    handler.addFilter(RepeatLimit(burst=3, window=1.0))
    logger.addHandler(handler)
    try:
        for number in range(200):
            logger.warning("refused connection %d", number)
        logger.warning("another kind of line")
        deadline = time.monotonic() + 10  # the window ends: its timer says how many were left out
        while len(handler.lines) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        logger.removeHandler(handler)
    lines = handler.lines
    assert lines[:3] == ["refused connection 0", "refused connection 1", "refused connection 2"]
    # The window's summary comes when its timer fires: before or after the other kind's line.
    summary = "197 similar lines suppressed in the last 1 s: refused connection %d"
    assert sorted(lines[3:]) == [summary, "another kind of line"]

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


def test_repeated_log_lines_are_limited_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("ragmcp.test.repeats")
    limit = RepeatLimit(burst=3, window=1.0)
    handler = caplog.handler
    handler.addFilter(limit)
    try:
        with caplog.at_level(logging.WARNING, logger="ragmcp.test.repeats"):
            for number in range(200):
                logger.warning("refused connection %d", number)
            logger.warning("another kind of line")

            def seen() -> int:
                return sum(r.name == "ragmcp.test.repeats" for r in caplog.records)

            deadline = time.monotonic() + 10  # the window ends: its timer says how many were left out
            while seen() < 5 and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        handler.removeFilter(limit)
    lines = [r.getMessage() for r in caplog.records if r.name == "ragmcp.test.repeats"]
    assert lines[:3] == ["refused connection 0", "refused connection 1", "refused connection 2"]
    # The window's summary comes when its timer fires: before or after the other kind's line.
    summary = "197 similar lines suppressed in the last 1 s: refused connection %d"
    assert sorted(lines[3:]) == [summary, "another kind of line"]

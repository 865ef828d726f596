"""Errors the service raises; each profile maps them to its contract's error shape."""

import time
from collections.abc import Callable


class RagError(Exception):
    """Base of every error ragmcp raises on purpose. `message` is safe to show a caller."""

    code = "INTERNAL"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class InvalidArgument(RagError):
    code = "INVALID_ARGUMENT"


class LimitExceeded(RagError):
    code = "LIMIT_EXCEEDED"


class NotFound(RagError):
    code = "NOT_FOUND"


class Unauthorized(RagError):
    code = "UNAUTHORIZED"


class Forbidden(RagError):
    code = "FORBIDDEN"


class ParseFailure(RagError):
    """A file that cannot be turned into text; the message is the job's one-line reason."""

    code = "PARSE_FAILED"


class IndexMismatch(RagError):
    """The index was built with another embedding model or dimension."""

    code = "INDEX_MISMATCH"


class StoreDamaged(RagError):
    """A store the server refuses to start on: empty, unreadable or failing its own check."""

    code = "STORE_DAMAGED"


class IndexOutdated(RagError):
    """The index was built by another version of ragmcp's index schema; `ragmcp reindex` rebuilds it."""

    code = "INDEX_OUTDATED"


class DeadlineExceeded(RagError):
    """A search that reached its deadline: it stopped there, starting no further index call."""


def check_deadline(deadline: float | None, clock: Callable[[], float] = time.monotonic) -> None:
    """DeadlineExceeded once `clock()` (time.monotonic()) has reached `deadline` (None: no deadline)."""
    if deadline is not None and clock() >= deadline:
        raise DeadlineExceeded("the search reached its deadline")

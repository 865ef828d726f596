"""`lazy(factory)`: a part of the services built where it is first used, not when they are assembled.

The composition root wires every part up front, but a deployment may never use some of them: the MCP
function never chunks (the ingest chunker and its tokenizer), and most of its requests never touch
the AWS clients of the job queue's depth, the synthesis state machine or the Bedrock generator. Those
are wrapped: the factory runs the first time an attribute is read, once, whichever thread reads
first, and the part is then used as is.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

T = TypeVar("T")

_building = threading.RLock()
"""One lock for every build: boto3 sessions are not safe to create clients from concurrently."""


class _Lazy:
    __slots__ = ("_factory", "_part")

    def __init__(self, factory: Callable[[], Any]):
        self._factory = factory
        self._part: Any = None

    def _built(self) -> Any:
        if self._factory is not None:
            with _building:
                if self._factory is not None:
                    self._part = self._factory()
                    self._factory = None
        return self._part

    def __getattr__(self, name: str) -> Any:
        return getattr(self._built(), name)

    def __repr__(self) -> str:
        return f"lazy({self._factory!r})" if self._factory is not None else repr(self._part)


def lazy(factory: Callable[[], T]) -> T:
    """Stands in for `factory()` and calls it on first use."""
    return cast(T, _Lazy(factory))


def lazy_value(factory: Callable[[], T]) -> Callable[[], T]:
    """A function that returns `factory()`, called once on first use (a secret read from a file or
    a service only when first needed)."""
    part = _Lazy(factory)
    return cast(Callable[[], T], part._built)

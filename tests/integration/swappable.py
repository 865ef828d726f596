"""A port whose adapter a test replaces while the app built on it runs: Services are frozen (built
once by bootstrap.py), so a test cannot set one of their fields; it builds them with a Swappable."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class Swappable:
    """Every attribute is the current target's."""

    def __init__(self, target: Any):
        self.target = target

    def __getattr__(self, name: str) -> Any:
        return getattr(self.target, name)

    @contextmanager
    def swapped(self, replacement: Any) -> Iterator[Any]:
        real, self.target = self.target, replacement
        try:
            yield replacement
        finally:
            self.target = real

"""Rate limits per API key: requests a minute, synthesis calls a minute, concurrent requests.

A sliding one-minute window of request times per key and kind; a request over any limit is
refused without being counted, so a client that backs off gets its quota back on time.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass

from ragmcp.security.models import RateLimits

WINDOW_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class RateDecision:
    allowed: bool
    limit: int
    remaining: int
    reset_epoch: int
    reason: str | None = None

    def headers(self) -> dict[str, str]:
        return {
            "x-ratelimit-limit": str(self.limit),
            "x-ratelimit-remaining": str(self.remaining),
            "x-ratelimit-reset": str(self.reset_epoch),
        }


class InMemoryRateLimiter:
    """The embedded limiter (one process). The AWS deployment keeps the same windows in DynamoDB."""

    def __init__(self, clock=time.time):
        self._clock = clock
        self._lock = threading.Lock()
        self._windows: dict[tuple[str, str], deque[float]] = {}
        self._active: dict[str, int] = {}

    def acquire(self, key_id: str, limits: RateLimits, synthesis: bool) -> RateDecision:
        """Count one request (and hold one concurrency slot) if every limit allows it."""
        now = self._clock()
        with self._lock:
            requests = self._window(key_id, "all", now)
            synth = self._window(key_id, "synthesis", now)
            reset = int(math.ceil((requests[0] if requests else now) + WINDOW_SECONDS))
            reason = None
            if len(requests) >= limits.per_minute:
                reason = f"more than {limits.per_minute} requests a minute"
            elif synthesis and len(synth) >= limits.synthesis_per_minute:
                reason = f"more than {limits.synthesis_per_minute} synthesis calls a minute"
                reset = int(math.ceil(synth[0] + WINDOW_SECONDS))
            elif self._active.get(key_id, 0) >= limits.concurrent:
                reason = f"more than {limits.concurrent} concurrent requests"
            if reason is None:
                requests.append(now)
                if synthesis:
                    synth.append(now)
                self._active[key_id] = self._active.get(key_id, 0) + 1
            remaining = max(0, limits.per_minute - len(requests))
            return RateDecision(reason is None, limits.per_minute, remaining, reset, reason)

    def release(self, key_id: str) -> None:
        with self._lock:
            self._active[key_id] = max(0, self._active.get(key_id, 0) - 1)

    def _window(self, key_id: str, kind: str, now: float) -> deque[float]:
        window = self._windows.setdefault((key_id, kind), deque())
        while window and window[0] <= now - WINDOW_SECONDS:
            window.popleft()
        return window

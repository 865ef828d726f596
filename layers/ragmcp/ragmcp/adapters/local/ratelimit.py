"""The embedded rate limiter, per API key: requests a minute, synthesis calls a minute, concurrent requests.

A sliding one-minute window of request times per key and kind; a request over any limit is
refused without being counted, so a client that backs off gets its quota back on time.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque

from ragmcp.security.models import WINDOW_SECONDS, RateDecision, RateLimits


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

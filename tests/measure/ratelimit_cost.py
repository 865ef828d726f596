"""What one rate-limited request costs the limiter: CPU (process_time) and wall time per
acquire+release pair, the embedded server's SQLite limiter against the in-memory one it replaced
(now the tests' fake, tests/fakes.py). Rounds alternate the two; one key with the default limits
(60 a minute, 10 synthesis calls, every 10th pair one), on a clock that moves one second a pair:
the steady state of a key at its limit, 59 requests in its window, one pruned each acquire.

    python -m tests.measure.ratelimit_cost [--pairs 2000] [--rounds 5] [--dir DIR]   # from the repo root

DIR (default: a new folder under the system's temporary directory) holds ratelimits.db.
Prints the median and p99 per pair of each limiter over every round, in microseconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from ragmcp.adapters.local.ratelimit import SqliteRateLimiter
from ragmcp.security.models import RateLimits
from ragmcp.security.ports import RateLimiter
from tests.fakes import MemoryRateLimiter

LIMITS = RateLimits()


class Seconds:
    """A clock one second later at each reading."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def pairs(limiter: RateLimiter, count: int) -> tuple[list[float], list[float]]:
    """(CPU us, wall us) of each of `count` acquire+release pairs."""
    cpu, wall = [], []
    for n in range(count):
        c0, w0 = time.process_time_ns(), time.perf_counter_ns()
        assert limiter.acquire("rmcp-key", LIMITS, synthesis=n % 10 == 0).allowed
        limiter.release("rmcp-key")
        cpu.append((time.process_time_ns() - c0) / 1000)
        wall.append((time.perf_counter_ns() - w0) / 1000)
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    folder = args.dir or Path(tempfile.mkdtemp(prefix="ratelimit-cost-"))
    limiters: dict[str, RateLimiter] = {
        "sqlite": SqliteRateLimiter(folder / "ratelimits.db", clock=Seconds()),
        "memory": MemoryRateLimiter(clock=Seconds()),
    }
    measured: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in limiters}
    for _ in range(args.rounds):
        for name, limiter in limiters.items():
            cpu, wall = pairs(limiter, args.pairs)
            measured[name][0].extend(cpu)
            measured[name][1].extend(wall)
    report = {
        name: {
            "pairs": len(cpu),
            "cpu_us_median": round(statistics.median(cpu), 1),
            "cpu_us_p99": round(statistics.quantiles(cpu, n=100)[98], 1),
            "wall_us_median": round(statistics.median(wall), 1),
            "wall_us_p99": round(statistics.quantiles(wall, n=100)[98], 1),
        }
        for name, (cpu, wall) in measured.items()
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

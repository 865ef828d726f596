"""The search half of the mindset rag_search, in process, on a corpus `ragmcp bench scale` built:
process CPU time per 5-phrase search given its vectors (the bench's `request_cpu_ms["search"]`),
over repeated rounds, for profiling with py-spy.

    python bench/profile_search.py INDEX_DIR --dataset ../shared/eval/scifact [--rounds 5]
    python bench/profile_search.py INDEX_DIR ... --pause 3 &   # prints its pid once warm, then
    py-spy record --format raw -o search.txt --pid PID         # samples the timed rounds only
    python bench/profile_search.py --top search.txt            # the functions most samples were in
    python bench/profile_search.py INDEX_DIR ... --embed      # embed each request's phrases just before
                                                              # searching it, as the server and the bench do

INDEX_DIR is a corpus's `index` folder (e.g. .ragmcp/bench/scifact-100000/index); it is opened
as `ragmcp bench scale` opens it. Prints the median CPU ms per search of each round, and the
median, mean and p99 of all.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import Counter
from pathlib import Path


def top(raw: Path, count: int = 15) -> list[tuple[str, float, float]]:
    """(function, share of the search's samples in it (self), share with it on the stack (total))
    from a py-spy raw (collapsed stacks) file, the most self samples first. Only samples of the
    search count: those in SearchService or SqliteSearchIndex code, not waiting."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = [_function(frame) for frame in stack.split(";")]
        if not any(f.startswith(("SearchService.", "SqliteSearchIndex.")) for f in frames):
            continue
        if frames[-1].startswith(("Condition.wait ", "Event.wait ", "Future.result ")):
            continue
        samples += int(n)
        own[frames[-1]] += int(n)
        for frame in set(frames):
            total[frame] += int(n)
    return [(name, round(n / samples, 3), round(total[name] / samples, 3)) for name, n in own.most_common(count)]


def _function(frame: str) -> str:
    """'name (path/file.py:line)' as 'name (file.py)'."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rsplit('/', 1)[-1].split(':')[0]})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("index", type=Path, nargs="?")
    parser.add_argument("--dataset", type=Path, default=Path("../shared/eval/scifact"))
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pause", type=float, default=0.0, help="seconds to wait after the warm round")
    parser.add_argument(
        "--embed",
        action="store_true",
        help="embed each request's phrases right before its search (untimed), as `bench scale` does",
    )
    parser.add_argument("--top", type=Path, help="print the top entries of this py-spy raw profile and stop")
    args = parser.parse_args()
    if args.top:
        for name, own, total in top(args.top):
            print(f"{own:6.1%} {total:6.1%}  {name}")
        return

    from ragmcp_bench.bench_scale import mindset_request, mindset_requests, open_corpus

    services, principal = open_corpus(args.index.parent)
    requests = mindset_requests(services, args.dataset, args.requests)
    everything = []
    for round_ in range(args.rounds + 1):
        spent = []
        for request in requests:
            if args.embed:  # the query model runs through the CPU's caches first, as in the server
                request = mindset_request(services, request.phrases, services.embedder.embed_queries(request.phrases))
            started = time.process_time()
            services.search.search(principal, request)
            spent.append((time.process_time() - started) * 1000)
        if round_:
            everything += spent
            print(f"round {round_}: median {statistics.median(spent):.2f} ms CPU per 5-phrase search", flush=True)
        else:  # the first round reads postings and names: one-off costs, left out
            print(f"warm (pid {os.getpid()}): the timed rounds follow", flush=True)
            time.sleep(args.pause)
    print(
        f"all rounds: median {statistics.median(everything):.2f}, mean {statistics.fmean(everything):.2f},"
        f" p99 {statistics.quantiles(everything, n=100)[98]:.2f} ms CPU per 5-phrase search"
    )


if __name__ == "__main__":
    main()

"""Where the search half of the mindset rag_search spends its CPU, in process, by stage: the 5-phrase
searches given their vectors (as bench/profile_search.py), with the index's and the service's steps
wrapped to sum each one's thread CPU, and the garbage collector's time and collections counted.

    PYTHONPATH=<tree>/layers/ragmcp:<tree>/bench python bench/search_stages.py INDEX_DIR \
        --dataset ../shared/eval/scifact [--requests 60] [--rounds 3] [--embed]

With --embed each request's phrases are embedded (untimed) right before its search, as the server does.

Stages nest (`search_vector` holds `graph.search` and part of `_named`); CPU ms per search each.
"""

from __future__ import annotations

import argparse
import functools
import gc
import statistics
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("index", type=Path)
    parser.add_argument("--dataset", type=Path, default=Path("../shared/eval/scifact"))
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--embed", action="store_true", help="embed each request's phrases right before its search")
    args = parser.parse_args()

    import ragmcp.retrieval.service as service_module
    from ragmcp.adapters.local.postings import TermPostings
    from ragmcp.retrieval.coverage import Questions
    from ragmcp_bench.bench_scale import mindset_request, mindset_requests, open_corpus

    services, principal = open_corpus(args.index.parent)
    requests = mindset_requests(services, args.dataset, args.requests)
    spent: Counter[str] = Counter()

    def wrap(owner: Any, name: str, label: str) -> None:
        inner: Callable[..., Any] = getattr(owner, name)

        @functools.wraps(inner)
        def timed(*a: Any, **kw: Any) -> Any:
            started = time.thread_time()
            try:
                return inner(*a, **kw)
            finally:
                spent[label] += time.thread_time() - started

        setattr(owner, name, timed)

    index = services.search.index
    wrap(index, "search_vector", "search_vector")
    wrap(index, "search_fts", "search_fts")
    wrap(index, "_named", "_named")
    wrap(index, "get_chunks", "get_chunks")
    if index.graph is not None:
        wrap(index.graph, "search", "graph.search")
    wrap(TermPostings, "top", "postings.top")
    wrap(services.search, "_similarities", "_similarities")
    wrap(Questions, "best_coverage", "best_coverage")
    wrap(service_module, "_fuse", "_fuse")
    for request in requests:  # warm: postings and names read once
        services.search.search(principal, request)
    spent.clear()
    collected = {"seconds": 0.0, "started": 0.0}
    collections: Counter[int] = Counter()

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collected["started"] = time.perf_counter()
        else:
            collected["seconds"] += time.perf_counter() - collected["started"]
            collections[info["generation"]] += 1

    gc.callbacks.append(on_gc)
    cpu = []
    for _ in range(args.rounds):
        for request in requests:
            if args.embed:
                request = mindset_request(services, request.phrases, services.embedder.embed_queries(request.phrases))
            started = time.process_time()
            services.search.search(principal, request)
            cpu.append((time.process_time() - started) * 1000)
    n = len(cpu)
    print(f"process CPU per search: median {statistics.median(cpu):.2f} ms, mean {statistics.fmean(cpu):.2f} ms")
    print(f"gc {collected['seconds'] / n * 1000:.2f} ms per search; collections by generation {dict(collections)}")
    for label, seconds in spent.most_common():
        print(f"{label:16s} {seconds / n * 1000:6.2f} ms")


if __name__ == "__main__":
    main()

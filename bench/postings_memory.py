"""One process's term postings over the warm pass and the words of `bench scale`'s queries, as a
process of `ragmcp serve --workers N` holds them (issue 31: each process holds its own, up to the
budget): the postings' bytes (as the budget counts them), resident memory (rss), its anonymous part
(anon: the process's own, not the page cache's), pss and the resident peak (VmHWM), in MB, at the
start, after the warm pass, and after every query phrase was searched once by keyword on `--threads`
threads (the server's search pool: each thread reads through its own SQLite connection).

    python bench/postings_memory.py .ragmcp/bench/scifact-1000000/index --dataset ../shared/eval/scifact

INDEX_DIR holds ragmcp.db (a corpus `ragmcp bench scale` built; nothing is written to it but what
opening it as the server does writes). Linux only.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ragmcp.adapters.local.database import Database
from ragmcp.adapters.local.postings import PAIR_BYTES, TermPostings
from ragmcp.adapters.local.sqlite_index import SqliteSearchIndex
from ragmcp.domain.models import Principal, SearchFilter
from ragmcp.settings import Settings
from ragmcp.text import keyword_text
from ragmcp_bench.bench_scale import query_groups


def memory_mb() -> dict[str, int]:
    def fields(path: str) -> dict[str, int]:
        lines = Path(path).read_text().splitlines()
        return {line.split(":")[0]: int(line.split()[1]) for line in lines if line.endswith("kB")}

    rollup, status = fields("/proc/self/smaps_rollup"), fields("/proc/self/status")
    return {
        "rss": rollup["Rss"] // 1024,
        "anon": status["RssAnon"] // 1024,
        "pss": rollup["Pss"] // 1024,
        "peak": status["VmHWM"] // 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("index", type=Path)
    parser.add_argument("--dataset", type=Path, default=Path("../shared/eval/scifact"))
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--budget", type=int, help="postings budget in pairs (default: the setting's)")
    args = parser.parse_args()
    budget = args.budget or Settings().index.postings_cache_entries
    postings = TermPostings(budget)
    index = SqliteSearchIndex(Database(args.index / "ragmcp.db"), None, postings, exact_below=0)
    tenant = json.loads((args.index.parent / "corpus-info.json").read_text())["tenant"]

    def line(stage: str, seconds: float) -> None:
        held = postings.entries * PAIR_BYTES // 2**20
        print(
            json.dumps({"stage": stage, "seconds": round(seconds, 1), "postings_mb": held, **memory_mb()}), flush=True
        )

    line("start", 0.0)
    started = time.monotonic()
    report = index.warm(threading.Event())
    line(f"warm ({report.terms} words)", time.monotonic() - started)
    phrases = [phrase for group in query_groups(args.dataset) for phrase in group]
    principal, everything = Principal(tenant=tenant), SearchFilter()
    started = time.monotonic()
    with ThreadPoolExecutor(args.threads) as pool:
        list(pool.map(lambda p: index.search_fts(principal, keyword_text(p), everything, 50), phrases))
    line(f"{len(phrases)} phrases searched", time.monotonic() - started)


if __name__ == "__main__":
    main()

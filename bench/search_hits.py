"""Every field of every hit of the mindset rag_search's searches given their vectors, in process, on
a corpus `ragmcp bench scale` built, as JSON: run it with each tree's code and compare the files to
show a change kept the hits (ids, fused and raw scores, ranks, similarities, floor scores).

    PYTHONPATH=<tree>/layers/ragmcp:<tree>/bench python bench/search_hits.py INDEX_DIR OUT.json \
        --dataset ../shared/eval/scifact [--requests 200]
    cmp main.json branch.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("index", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--dataset", type=Path, default=Path("../shared/eval/scifact"))
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()

    from ragmcp_bench.bench_scale import mindset_requests, open_corpus

    services, principal = open_corpus(args.index.parent)
    searches = []
    for request in mindset_requests(services, args.dataset, args.requests):
        result = services.search.search(principal, request)
        hits = [
            [h.chunk.chunk_id, h.score, h.fts_score, h.fts_rank, h.vec_score, h.vec_rank, h.similarity, h.floor_score]
            for h in result.hits
        ]
        searches.append({"hits": hits, "candidates": result.total_candidates, "below_floor": result.below_floor})
    args.out.write_text(json.dumps(searches))
    print(f"{len(searches)} searches, {sum(len(s['hits']) for s in searches)} hits -> {args.out}")


if __name__ == "__main__":
    main()

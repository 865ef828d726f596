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

    from ragmcp.domain.models import Principal
    from ragmcp.retrieval.service import SearchRequest
    from ragmcp_bench.bench_corpus import open_services
    from ragmcp_bench.bench_scale import query_groups

    services = open_services(args.index.parent)
    if services.vector_graph is not None:
        services.vector_graph.catch_up()
    principal = Principal(tenant=json.loads((args.index.parent / "corpus-info.json").read_text())["tenant"])
    defaults = services.settings.search.defaults()
    searches = []
    for phrases in query_groups(args.dataset)[: args.requests]:
        request = SearchRequest(
            phrases=phrases,
            top_k=services.settings.search.mindset_segments,
            query_vectors=services.embedder.embed_queries(phrases).tolist(),
            **defaults,
        )
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

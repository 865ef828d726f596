"""nDCG@10 of the server's own search on a corpus `ragmcp bench scale` built, its vector graph caught
up first, so that every vector search walks the graph: the collection's test queries, one phrase a
search, with the server's defaults and candidate counts (`server`: rag_search's mode, fts_k and vec_k,
its relevance floor) and as `ragmcp bench scale` scores them (`bench scale`: hybrid, the in-process
check). Run once per graph search breadth to see what it costs in ranking:

    RAGMCP_HNSW_EF_SEARCH=64 PYTHONPATH=<tree>/layers/ragmcp:<tree>/bench \
        python bench/graph_ndcg.py WORK --dataset ../shared/eval/scifact --size 100000 --cache EMBEDDINGS_DB

WORK is a bench corpus folder (e.g. .ragmcp/bench/scifact-100000), built first when empty (`--size`
chunks, embedding through `--cache`, as `ragmcp bench scale` builds it). `ragmcp eval` cannot see the
breadth: nothing catches up its index's graph, so its vector searches scan exactly (BENCHMARKS.md, v31).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("work", type=Path)
    parser.add_argument("--dataset", type=Path, default=Path("../shared/eval/scifact"))
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--cache", type=Path, default=Path(".ragmcp/eval-cache/embeddings.db"))
    args = parser.parse_args()

    from ragmcp_bench import bench_corpus
    from ragmcp_bench.bench_scale import in_process, open_corpus
    from ragmcp_bench.evaluation import Mode, load_collection, run_mode, score_run

    bench_corpus.build(args.dataset, args.size, args.work, args.cache)
    services, principal = open_corpus(args.work)
    collection = load_collection(args.dataset, "test")
    present = {doc.pk for doc in services.documents.list(principal.tenant)}
    qrels = {
        qid: {doc: grade for doc, grade in judged.items() if doc in present}
        for qid, judged in collection.qrels.items()
        if any(grade > 0 and doc in present for doc, grade in judged.items())
    }
    server = Mode("server", services.settings.search.defaults(), "rag_search's own search")
    run = run_mode(services.search, server, {qid: collection.queries[qid] for qid in qrels}, principal.tenant)
    _, bench = in_process(services, None, args.dataset, principal.tenant, 1)
    graph = None if services.vector_graph is None else services.vector_graph.status()
    print(
        f"hnsw_ef_search {services.settings.index.hnsw_ef_search}, graph {graph}, {len(qrels)} test queries:"
        f" nDCG@10 server {score_run(run, qrels)['ndcg@10']:.4f}, bench scale {bench.ours:.4f}"
    )


if __name__ == "__main__":
    main()

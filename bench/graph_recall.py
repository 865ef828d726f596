"""Recall@10 of the vector graph's storage kinds (float32, fp16, sq8) and search breadths against the
exact scan, at several graph sizes, without building a ragmcp corpus (issue 31).

The vectors are made as `ragmcp bench scale`'s corpus makes them (bench_corpus): SciFact's stored
chunk vectors (from an embedding cache `ragmcp bench scale` or `ragmcp eval` filled), then
distractors, each the normalised sum of two of them; the queries are the first phrase of the bench's
first 200 query groups, embedded by the query model. Each graph is built as adapters/local/hnsw.py
builds it (m=32, efConstruction=100, the quantizer trained on the first 20,000 rows), one thread.

    python bench/graph_recall.py --cache .ragmcp/eval-cache/embeddings.db --sizes 10000,100000 \\
        --kinds float32,fp16,sq8 --ef 32,64,128,192,256

Prints one JSON line per (size, kind, ef): recall@10 of the graph's own top 10 (`recall10`, what a
search returns), recall@10 once its top 50 are ordered by their exact cosines (`recall10_rescored`),
the median CPU ms of one k=50 search, the build's CPU seconds and the saved index's size.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np

from ragmcp.adapters.local.hnsw import TRAIN_ROWS, HnswParams, _new_index

DOCUMENT_MODEL = "8199be6f"
"""The pinned document model's SHA-256 prefix, as the embedding cache keys its vectors."""


def corpus_vectors(cache: Path, size: int, seed: int = 0) -> np.ndarray:
    rows = sqlite3.connect(cache).execute(
        "SELECT vector FROM embedding_cache WHERE model_sha256 LIKE ? ORDER BY text_sha256", (DOCUMENT_MODEL + "%",)
    )
    base = np.stack([np.frombuffer(row[0], dtype=np.float32) for row in rows])
    rng = np.random.default_rng(seed)
    extra = max(0, size - len(base))
    grown = base[rng.integers(0, len(base), extra)] + base[rng.integers(0, len(base), extra)]
    grown /= np.linalg.norm(grown, axis=1, keepdims=True)
    return np.ascontiguousarray(np.vstack([base, grown])[:size], dtype=np.float32)


def query_vectors(dataset: Path, count: int) -> np.ndarray:
    from ragmcp.bootstrap import _onnx_embedder
    from ragmcp.settings import Settings
    from ragmcp_bench.bench_scale import query_groups

    with tempfile.TemporaryDirectory() as scratch:
        embedder = _onnx_embedder(Settings(data_dir=Path(scratch)))
        return np.asarray(embedder.embed_queries([g[0] for g in query_groups(dataset)[:count]]), dtype=np.float32)


def sweep(vectors: np.ndarray, queries: np.ndarray, kind: str, efs: list[int]) -> list[dict[str, float | str]]:
    n = len(vectors)
    ids = np.arange(1, n + 1, dtype=np.int64)
    truth = [set(ids[row].tolist()) for row in np.argsort(-(queries @ vectors.T), axis=1)[:, :10]]
    index = _new_index(HnswParams(vectors.shape[1], vectors=kind))
    started = time.process_time()
    if not index.is_trained:
        index.train(vectors[:TRAIN_ROWS])
    for at in range(0, n, 2000):
        index.add_with_ids(vectors[at : at + 2000], ids[at : at + 2000])
    build = time.process_time() - started
    size = len(faiss.serialize_index(index))
    found = []
    for ef in efs:
        params = faiss.SearchParametersHNSW(efSearch=ef)  # type: ignore[attr-defined]
        raw = rescored = 0.0
        spent = []
        for query, expected in zip(queries, truth, strict=True):
            started = time.process_time()
            _, labels = index.search(query.reshape(1, -1), 50, params=params)
            spent.append(time.process_time() - started)
            got = labels[0][labels[0] >= 0]
            raw += len(set(got[:10].tolist()) & expected) / 10
            order = np.argsort(-(vectors[got - 1] @ query))[:10]
            rescored += len(set(got[order].tolist()) & expected) / 10
        found.append(
            {
                "n": n,
                "kind": kind,
                "ef": ef,
                "recall10": round(raw / len(queries), 4),
                "recall10_rescored": round(rescored / len(queries), 4),
                "search_cpu_ms_p50": round(float(np.median(spent)) * 1000, 3),
                "build_cpu_s": round(build, 1),
                "index_mb": round(size / 2**20, 1),
            }
        )
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cache", type=Path, required=True, help="an embedding cache holding SciFact's chunk vectors")
    parser.add_argument("--dataset", type=Path, default=Path("../shared/eval/scifact"))
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--kinds", default="float32,fp16,sq8")
    parser.add_argument("--ef", default="32,64,128,192,256")
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    faiss.omp_set_num_threads(1)
    sizes = [int(s) for s in args.sizes.split(",")]
    everything = corpus_vectors(args.cache, max(sizes))
    queries = query_vectors(args.dataset, args.queries)
    for size in sizes:
        for kind in args.kinds.split(","):
            for row in sweep(everything[:size], queries, kind, [int(e) for e in args.ef.split(",")]):
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

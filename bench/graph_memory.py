"""A reader's memory over a load and a reload of the vector graph file, as a follower of `ragmcp serve
--workers N` loads it (issue 31): RSS and PSS (/proc/self/smaps_rollup) and the resident peak (VmHWM),
in MB, at the start, after the load and 200 searches, and after the file is replaced (the writer
saving again), reloaded and searched again.

    python bench/graph_memory.py .ragmcp/bench/scifact-100000/index [--vectors fp16]

INDEX_DIR holds ragmcp.db and vectors.hnsw (a corpus `ragmcp bench scale` built). The file is
replaced by a copy of itself (same content, a new inode). Linux only.
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

import numpy as np

from ragmcp.adapters.local.database import Database
from ragmcp.adapters.local.hnsw import HnswParams, HnswVectors


def memory_mb() -> dict[str, int]:
    def fields(path: str) -> dict[str, int]:
        lines = Path(path).read_text().splitlines()
        return {line.split(":")[0]: int(line.split()[1]) for line in lines if line.endswith("kB")}

    rollup, status = fields("/proc/self/smaps_rollup"), fields("/proc/self/status")
    return {"rss": rollup["Rss"] // 1024, "pss": rollup["Pss"] // 1024, "peak": status["VmHWM"] // 1024}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("index", type=Path)
    parser.add_argument("--vectors", default="fp16", help="hnsw_vectors the graph was saved with")
    parser.add_argument("--dimension", type=int, default=384)
    args = parser.parse_args()
    path = args.index / "vectors.hnsw"
    graph = HnswVectors(
        Database(args.index / "ragmcp.db"), path, HnswParams(args.dimension, vectors=args.vectors), follow=True
    )
    queries = np.random.default_rng(0).normal(size=(200, args.dimension)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    print("start", memory_mb())
    if not graph.reload():
        raise SystemExit(f"{path} was not loaded (absent, another vector kind, or damaged)")
    every = np.full(graph.status()["nodes"] // 4 + 1024, 255, dtype=np.uint8)
    for query in queries:
        graph.search(query, every, 50)
    print("loaded, 200 searches", memory_mb())
    copy = path.with_name(path.name + ".copy")
    shutil.copyfile(path, copy)
    os.replace(copy, path)
    if not graph.reload():
        raise SystemExit(f"{path} was not reloaded")
    for query in queries:
        graph.search(query, every, 50)
    print("reloaded, 200 searches", memory_mb(), f"file {path.stat().st_size // 2**20} MB")


if __name__ == "__main__":
    main()

"""The CPU a search deadline costs the embedded index: the same keyword and vector searches over a data
directory (a copy of `bench scale`'s index), with no deadline and with one far off (the SQLite progress
handler armed every PROGRESS_STEPS instructions, never firing), alternated in rounds after a warm pass;
the median over rounds of the process CPU ms a call. Run on a copy: it reads only, but holds the file open.

    PYTHONPATH=layers/ragmcp python bench/deadline_cost.py /tmp/copy/bench/scifact-100000/index
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from ragmcp.adapters.local.database import Database, fts_tokenizer
from ragmcp.adapters.local.hnsw import HnswParams, HnswVectors
from ragmcp.adapters.local.postings import TermPostings
from ragmcp.adapters.local.sqlite_index import SqliteSearchIndex
from ragmcp.domain.models import Principal, SearchFilter
from ragmcp.settings import load_settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--queries", type=Path, default=Path("/work/shared/eval/scifact/queries.jsonl"))
    parser.add_argument("--count", type=int, default=100, help="queries a pass")
    parser.add_argument("--rounds", type=int, default=5, help="passes of each, alternated")
    args = parser.parse_args()
    s = load_settings(data_dir=args.data_dir)
    db = Database(s.server.db_path)
    dimension = int(db.conn().execute("SELECT value FROM meta WHERE key = 'embedding_dimension'").fetchone()[0])
    i = s.index
    params = HnswParams(dimension, i.hnsw_m, i.hnsw_ef_construction, i.hnsw_ef_search, vectors=i.hnsw_vectors)
    graph = HnswVectors(db, args.data_dir / "vectors.hnsw", params, follow=True)
    graph.reload()
    postings = TermPostings(i.postings_cache_entries) if i.postings_cache_entries else None
    index = SqliteSearchIndex(db, graph, postings, i.vector_exact_below, fts_tokenizer(i.fts_stemming))
    with args.queries.open(encoding="utf-8") as lines:
        texts = [json.loads(line)["text"] for line in lines][: args.count]
    vectors = np.random.default_rng(0).normal(size=(len(texts), dimension)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    me, everything = Principal(tenant=s.server.tenant), SearchFilter()

    def one_pass(deadline: bool) -> tuple[float, float]:
        """CPU ms a call: keyword searches, then vector searches."""
        far = (lambda: time.monotonic() + 3600) if deadline else (lambda: None)
        started = time.process_time()
        for text in texts:
            index.search_fts(me, text, everything, 50, deadline=far())
        keyword = time.process_time()
        for vector in vectors:
            index.search_vector(me, vector, everything, 50, deadline=far())
        ended = time.process_time()
        return (keyword - started) * 1000 / len(texts), (ended - keyword) * 1000 / len(texts)

    one_pass(False)  # warm: postings, bitmaps, chunk names, pages
    runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for r in range(args.rounds):
        for deadline in (False, True) if r % 2 == 0 else (True, False):
            runs[deadline].append(one_pass(deadline))
    for deadline, passes in runs.items():
        fts = statistics.median(p[0] for p in passes)
        vec = statistics.median(p[1] for p in passes)
        print(f"deadline={'far' if deadline else 'none'}: fts {fts:.3f} ms, vector {vec:.3f} ms CPU a call")


if __name__ == "__main__":
    main()

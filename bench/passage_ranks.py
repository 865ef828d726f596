"""Each passage question's rank, with the first hits and both sides' scores for a miss: why a chunk
came first (`ragmcp eval-qa` gives the figures per part and kind, this the question-by-question view).

Ranks come from the server's default search as eval-qa reads them (`qa_eval.passages`, `passage_rank`),
over a fresh index of the documents that embeds through the cache of an earlier eval-qa run.

    python bench/passage_ranks.py --cache D/eval-cache/embeddings.db --kinds code --verbose \
        tests/data/qa_passages.jsonl tests/data/qa_passages_v2.jsonl ...
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from ragmcp.domain.models import ScoredChunk
from ragmcp_bench import qa_eval
from ragmcp_bench.qa_eval import Question, read_jsonl

SHOWN = 4
"""The hits shown for a question whose passage is not first (and the passage's own, when lower)."""


def line(i: int, hit: ScoredChunk, mark: str) -> str:
    return (
        f"   {mark}{i} s={hit.score:.3f} fts={hit.fts_score} r{hit.fts_rank}"
        f" vec={hit.vec_score} r{hit.vec_rank} {hit.chunk.text[:300]!r}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sets", nargs="+", type=Path, help="question sets (JSONL)")
    parser.add_argument("--cache", type=Path, required=True, help="an eval-qa run's eval-cache/embeddings.db")
    parser.add_argument("--docs", type=Path, default=Path("/work/shared/documents"))
    parser.add_argument("--kinds", default="", help="comma-separated kinds (default: every kind)")
    parser.add_argument("--verbose", action="store_true", help="show the first hits of each miss")
    args = parser.parse_args()
    kinds = set(args.kinds.split(",")) if args.kinds else None
    questions = [
        q for path in args.sets for q in read_jsonl(path, Question) if q.passage and (kinds is None or q.kind in kinds)
    ]
    with tempfile.TemporaryDirectory() as scratch:
        services, chunks, _ = qa_eval.build_index(args.docs, Path(scratch), args.cache)
        first = 0
        for q in questions:
            hits = qa_eval.passages(services, q.question)
            rank = qa_eval.passage_rank(q, hits)
            first += rank == 0
            print(f"{q.id:14} {q.part:11} rank={rank} | {q.question}")
            if rank != 0 and args.verbose:
                for i, hit in enumerate(hits[:SHOWN]):
                    print(line(i, hit, "*" if i == rank else " "))
                if rank is not None and rank >= SHOWN:
                    print(line(rank, hits[rank], "*"))
        print(f"first {first} of {len(questions)} ({chunks} chunks)")


if __name__ == "__main__":
    main()

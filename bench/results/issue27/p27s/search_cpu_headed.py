"""CPU per search, given the query vectors, over the shared documents (214 chunks, with heading
paths): every question of tests/data/qa_passages.jsonl, _v2 and _v3, the server's default knobs
with its candidate counts (fts_k = vec_k = 50, top_k 8). The tree measured is the one on PYTHONPATH;
run it alternately for main and the branch, each on its own copy of an eval-qa index folder:

    PYTHONPATH=<tree>/layers/ragmcp:<tree>/bench python search_cpu_headed.py DATA_DIR ROUNDS NAME

One warm pass first (caches, and the heading vectors the branch keeps), then ROUNDS timed passes.
"""

import json
import statistics
import sys
import time
from pathlib import Path

from ragmcp.bootstrap import build_services
from ragmcp.domain.models import Principal
from ragmcp.retrieval.service import SearchRequest
from ragmcp.settings import Settings
from ragmcp_bench import qa_eval
from ragmcp_bench.evaluation import default_mode

SETS = ("qa_passages.jsonl", "qa_passages_v2.jsonl", "qa_passages_v3.jsonl")

work = Path(sys.argv[1])
services = build_services(Settings(data_dir=work, embedding_cache=work / "eval-cache" / "embeddings.db"))
knobs = dict(default_mode(services.settings).knobs) | {"fts_k": 50, "vec_k": 50}
questions = [q.question for name in SETS for q in qa_eval.read_jsonl(Path("tests/data") / name, qa_eval.Question)]
vectors = services.embedder.embed_queries(questions)
requests = [
    SearchRequest(phrases=[q], top_k=8, query_vectors=[v.tolist()], **knobs)
    for q, v in zip(questions, vectors, strict=True)
]
caller = Principal(tenant="eval")
for request in requests:
    services.search.search(caller, request)
rounds = []
for _ in range(int(sys.argv[2])):
    started = time.process_time()
    for request in requests:
        services.search.search(caller, request)
    rounds.append((time.process_time() - started) * 1000 / len(requests))
print(
    json.dumps(
        {
            "tree": sys.argv[3],
            "cpu_ms_per_search": [round(x, 3) for x in rounds],
            "median": round(statistics.median(rounds), 3),
        }
    )
)

"""CPU of the ranking after the fusion on a collection with heading paths: the heading signal, and on this
branch the near ties ordered by the question's words (`sections.passages_first`; on integ
`sections.headed_first`), replayed over the questions `bench/heading_fit.py record` kept (the fused
candidates with their texts, path lines and closeness), 7 passes:

    PYTHONPATH=<tree>/layers/ragmcp python ties_cpu.py NAME RECORDED.json

The tree measured is the one on PYTHONPATH; run it alternately for integ and the branch.
"""

import json
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from ragmcp.retrieval import sections

rank = getattr(sections, "passages_first", sections.headed_first)
rows = json.loads(Path(sys.argv[2]).read_text())
calls = []
for r in rows:
    found = {
        cid: (SimpleNamespace(text=c["body"], doc_id=c["doc"], char_start=c["at"]), SimpleNamespace(title=c["title"]))
        for cid, c in r["chunks"].items()
    }
    window = [(cid, s) for cid, s in r["fused"] if cid in found][: sections.WINDOW]
    calls.append(([r["question"]], window, found, r["closeness"]))
passes = []
for _ in range(7):
    started = time.process_time()
    for call in calls:
        rank(*call)
    passes.append((time.process_time() - started) / len(calls) * 1000)
median = round(statistics.median(passes), 4)
print(sys.argv[1], rank.__name__, "ms a call", [round(p, 4) for p in passes], "median", median)

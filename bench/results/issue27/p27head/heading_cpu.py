"""CPU of the heading signal alone (`sections.headed_first`), replayed over the questions that
`bench/heading_fit.py record` kept (the fused candidates, path lines and closeness of each), 7 passes:

    PYTHONPATH=<tree>/layers/ragmcp python heading_cpu.py NAME RECORDED.json

The tree measured is the one on PYTHONPATH; run it alternately for main and the branch.
"""

import json
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from ragmcp.retrieval import sections

rows = json.loads(Path(sys.argv[2]).read_text())
calls = []
for r in rows:
    found = {
        cid: (SimpleNamespace(text=c["head"], doc_id=c["doc"], char_start=c["at"]), SimpleNamespace(title=c["title"]))
        for cid, c in r["chunks"].items()
    }
    window = [(cid, s) for cid, s in r["fused"] if cid in found][: sections.WINDOW]
    calls.append(([r["question"]], window, found, r["closeness"]))
passes = []
for _ in range(7):
    started = time.process_time()
    for call in calls:
        sections.headed_first(*call)
    passes.append((time.process_time() - started) / len(calls) * 1000)
print(sys.argv[1], "ms per headed_first", [round(p, 4) for p in passes], "median", round(statistics.median(passes), 4))

"""Fit the heading signal's constants (ragmcp.retrieval.sections) with cross-validation across the
passage question sets, one set left out at a time.

`record` searches every question of the sets once, as the server does (SearchSettings.defaults: its
candidate counts; no floor), and keeps for each question the fused candidates (`FUSED_DEPTH` of them,
before the heading signal), each candidate's heading path line, document, place in it and whether it
holds the question's passage, and each path line's cosine to the question: all the heading signal
reads, and each candidate's text. `fit` then ranks every question again through `sections.passages_first` (the
heading signal, then the near ties ordered by the question's words) for each point of the
grid, without the model, and for each set left out picks the point with the best mean passage hit@1
over the other sets (each set counts once whatever its size; ties go to `BASELINE`, else the most cautious)
and reports it on the set left out, by kind.

    python bench/heading_fit.py record --docs ../shared/documents \
        --qa tests/data/qa_passages.jsonl,tests/data/qa_passages_v2.jsonl,... \
        --cache D/eval-cache/embeddings.db --out headings.json
    python bench/heading_fit.py fit headings.json
    python bench/heading_fit.py fit --ties headings.json     # the near-tie shares instead
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

from fusion_fit import recorded

from ragmcp.retrieval import sections, service
from ragmcp_bench import evaluation, qa_eval

FUSED_DEPTH = 50
"""How many fused candidates are kept a question (a larger `sections.WINDOW` can be tried)."""
GRID = {
    "NEAR_SPECIFIC": (0.5, 0.4, 0.3, 0.2, 0.1),
    "NEAR": (0.5, 0.6, 0.4),
    "CLOSE": (0.6,),
    "MARGIN": (0.1,),
    "CLOSE_NEAR": (0.85,),
    "CLOSE_LEAST": (0.0, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55),
}
"""Each constant's values, the most cautious first: of the points tied on the sets fitted on, `BASELINE` wins,
else the first.
Stop 37 also tried CLOSE 0.4-0.8, MARGIN 0.05-0.2, CLOSE_NEAR 0.75-0.9 and NEAR 0.3-0.6 (no held-out gain)."""
TIES_GRID = {
    "SIBLING_NEAR": (1.01, 1.0, 0.99, 0.98, 0.97, 0.96, 0.95, 0.92, 0.9, 0.85),
    "TIE_NEAR": (1.01, 1.0, 0.995, 0.99, 0.985, 0.98, 0.97, 0.95),
}
"""`fit --ties`: the shares of the best score within which near ties are ordered by the question's words
(`sections.near_ties_by_coverage`; 1.01: never), the heading constants as they ship."""
BASELINE = {
    "NEAR_SPECIFIC": 0.5,
    "NEAR": 0.5,
    "CLOSE": 0.6,
    "MARGIN": 0.1,
    "CLOSE_NEAR": 0.85,
    "CLOSE_LEAST": 0.0,
    "SIBLING_NEAR": 1.01,
    "TIE_NEAR": 1.01,
}
"""The constants before the fit (stop 36: one share for every named heading; stop 37: near ties as fused)."""


def record(docs: Path, sets: Sequence[Path], cache: Path) -> list[dict]:
    questions = [(path.stem, q) for path in sets for q in qa_eval.read_jsonl(path, qa_eval.Question) if q.passage]
    rows = []
    with tempfile.TemporaryDirectory(prefix="heading-fit-") as scratch:
        services, _, _ = qa_eval.build_index(docs, Path(scratch), cache)
        searches = recorded(services, [q.question for _, q in questions], qa_eval.PASSAGE_DEPTH)
        search = services.search
        for (name, q), (request, runs) in zip(questions, searches, strict=True):
            fused = service._fuse(request, runs)[:FUSED_DEPTH]
            found = services.index.get_chunks(evaluation.TENANT, [cid for cid, _ in fused])
            vectors = list(search._phrase_vectors(request))
            closeness = search._heading_closeness(vectors, found.values())
            wanted = set(q.documents)
            rows.append(
                {
                    "set": name,
                    "id": q.id,
                    "kind": q.kind,
                    "part": q.part,
                    "question": q.question,
                    "fused": [[cid, score] for cid, score in fused],
                    "chunks": {
                        cid: {
                            "head": chunk.text.split("\n", 1)[0] if chunk.text.startswith(sections.PATH_MARK) else "",
                            "body": chunk.text,
                            "doc": chunk.doc_id,
                            "at": chunk.char_start,
                            "title": doc.title,
                            "file": Path(doc.path or doc.doc_id).name,
                            "right": Path(doc.path or doc.doc_id).name in wanted
                            and qa_eval.contains_all(chunk.text, q.passage),
                        }
                        for cid, (chunk, doc) in found.items()
                    },
                    "closeness": closeness,
                }
            )
    return rows


def ranked(row: dict) -> list[str]:
    """The question's top `PASSAGE_DEPTH` chunk ids through the heading signal as its constants are now."""
    chunks = row["chunks"]
    found = {
        cid: (
            SimpleNamespace(text=c.get("body", c["head"]), doc_id=c["doc"], char_start=c["at"]),
            SimpleNamespace(title=c["title"]),
        )
        for cid, c in chunks.items()
    }
    fused = [(cid, score) for cid, score in row["fused"] if cid in found]
    window = fused[: sections.WINDOW]
    top = sections.passages_first([row["question"]], window, found, row["closeness"])  # type: ignore[arg-type]
    return [cid for cid, _ in top[: qa_eval.PASSAGE_DEPTH]]


def hit1(row: dict) -> int:
    top = ranked(row)
    return int(bool(top) and row["chunks"][top[0]]["right"])


@contextmanager
def constants(point: dict[str, float]) -> Iterator[None]:
    saved = {name: getattr(sections, name) for name in point}
    for name, value in point.items():
        setattr(sections, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(sections, name, value)


def scores(rows: Sequence[dict], grid: dict[str, Sequence[float]]) -> dict[tuple[float, ...], list[int]]:
    out = {}
    for values in itertools.product(*grid.values()):
        with constants(dict(zip(grid, values, strict=True))):
            out[values] = [hit1(row) for row in rows]
    return out


def by_kind(rows: Sequence[dict], hits: Sequence[int]) -> dict[str, str]:
    kinds: dict[str, list[int]] = defaultdict(list)
    for row, hit in zip(rows, hits, strict=True):
        kinds[row["kind"]].append(hit)
    return {kind: f"{sum(h)}/{len(h)}" for kind, h in sorted(kinds.items())}


def fit(rows: list[dict], grid: dict[str, Sequence[float]]) -> list[dict]:
    table = scores(rows, grid)
    now = tuple(BASELINE[name] for name in grid)
    names = sorted({row["set"] for row in rows})
    mean = {
        (name, point): statistics.fmean(h for row, h in zip(rows, hits, strict=True) if row["set"] == name)
        for point, hits in table.items()
        for name in names
    }
    out = []
    for left in names:
        rest = [n for n in names if n != left]
        best = max(table, key=lambda p: (round(statistics.fmean(mean[(n, p)] for n in rest), 6), p == now))
        mine = [i for i, row in enumerate(rows) if row["set"] == left]
        mine_rows = [rows[i] for i in mine]
        out.append(
            {
                "left_out": left,
                "fitted": dict(zip(grid, best, strict=True)),
                "others_baseline": round(statistics.fmean(mean[(n, now)] for n in rest), 4),
                "others_fitted": round(statistics.fmean(mean[(n, best)] for n in rest), 4),
                "left_out_baseline": by_kind(mine_rows, [table[now][i] for i in mine]),
                "left_out_fitted": by_kind(mine_rows, [table[best][i] for i in mine]),
                "left_out_hit1_baseline_fitted": [round(mean[(left, now)], 4), round(mean[(left, best)], 4)],
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--docs", type=Path, required=True)
    rec.add_argument("--qa", required=True, help="comma-separated question sets")
    rec.add_argument("--cache", type=Path, required=True)
    rec.add_argument("--out", type=Path, required=True)
    fitting = sub.add_parser("fit")
    fitting.add_argument("recorded", type=Path)
    fitting.add_argument("--ties", action="store_true", help="fit the near-tie shares, not the heading constants")
    args = parser.parse_args()
    if args.command == "record":
        rows = record(args.docs, [Path(p) for p in args.qa.split(",")], args.cache)
        args.out.write_text(json.dumps(rows))
    else:
        print(json.dumps(fit(json.loads(args.recorded.read_text()), TIES_GRID if args.ties else GRID), indent=2))


if __name__ == "__main__":
    main()

"""Fit hybrid_scores' weak-side constant (ragmcp.retrieval.service.VECTOR_SURE) with cross-validation
across collections.

`record` searches every query of one collection once, as the server does (SearchSettings.defaults: its
candidate counts; no floor), keeps each query's keyword and vector lists, then fuses them again for each
value on the grid through the service's own `_fuse` and heading signal, and writes each
query's score per value: nDCG@10 of the documents for a BEIR split, passage hit@1 for a question set
(`ragmcp eval-qa`'s passage rank). `fit` leaves one collection out at a time: the value with the best mean
gain over the others (each collection's mean gain over sureness off, so a collection counts once
whatever its size) is reported on the one left out.

    python bench/fusion_fit.py record --dataset ../shared/eval/scifact --split train \
        --cache D/eval-cache/embeddings.db --out sf.json
    python bench/fusion_fit.py record --docs ../shared/documents --qa tests/data/qa_passages.jsonl,... \
        --cache D/eval-cache/embeddings.db --out qa.json
    python bench/fusion_fit.py fit sf.json cr.json qa.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ragmcp.domain.models import Principal
from ragmcp.retrieval import sections, service
from ragmcp.retrieval.service import SearchRequest
from ragmcp_bench import evaluation, qa_eval

VECTOR_GRID = (0.0, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6)
Lists = list[tuple[str, list[Any], float]]
Runs = tuple[Lists, Sequence[Sequence[tuple[str, float]]]]
"""A search's index lists and, for each, its index's scores of the candidates only the other side found."""


def recorded(services: Any, texts: Sequence[str], top_k: int) -> list[tuple[SearchRequest, Runs]]:
    """Each text's request and the index lists its search fused, with their other sides' scores (the
    service's `_fuse`, watched)."""
    seen: list[tuple[SearchRequest, Runs]] = []
    fuse = service._fuse

    def watch(
        request: SearchRequest, runs: Lists, unfetched: Sequence[Sequence[tuple[str, float]]] = ()
    ) -> list[tuple[str, float]]:
        seen.append((request, (runs, unfetched)))
        return fuse(request, runs, unfetched)

    knobs = services.settings.search.defaults() | {"floor": 0.0}
    service._fuse = watch
    try:
        for text in texts:
            services.search.search(
                Principal(tenant=evaluation.TENANT), SearchRequest(phrases=[text], top_k=top_k, **knobs)
            )
    finally:
        service._fuse = fuse
    return seen


def ranked(services: Any, request: SearchRequest, runs: Runs, found: dict[str, Any]) -> list[Any]:
    """The hits the service would return for these lists with the constants as they are now."""
    fused = service._fuse(request, *runs)
    window = fused[: max(request.top_k, sections.WINDOW)]
    missing = [cid for cid, _ in window if cid not in found]
    if missing:
        found |= services.index.get_chunks(evaluation.TENANT, missing)
    search = services.search
    vectors = list(search._phrase_vectors(request))  # the query cache holds them from the recorded search
    closeness = search._heading_closeness(vectors, [found[cid] for cid, _ in window if cid in found])
    top = sections.headed_first(request.phrases, window, found, closeness)[: request.top_k]
    return [SimpleNamespace(chunk=found[cid][0], document=found[cid][1]) for cid, _ in top if cid in found]


def per_pair(
    services: Any, searches: list[tuple[SearchRequest, Runs]], score: Callable[[int, list[Any]], float]
) -> dict:
    found: dict[str, Any] = {}
    out = {}
    for vec in VECTOR_GRID:
        service.VECTOR_SURE = vec
        out[f"{vec}"] = [round(score(i, ranked(services, r, runs, found)), 6) for i, (r, runs) in enumerate(searches)]
    return out


def record_beir(dataset: Path, splits: Sequence[str], cache: Path) -> list[dict]:
    """One report a split, the splits searched over one index of the corpus."""
    collections = [evaluation.load_collection(dataset, split) for split in splits]
    reports = []
    with tempfile.TemporaryDirectory(prefix="fusion-fit-") as scratch:
        services, _ = evaluation.build_index(collections[0], Path(scratch), cache)
        for collection in collections:
            ids = list(collection.queries)
            searches = recorded(services, [collection.queries[q] for q in ids], evaluation.DEPTH)
            qrels = collection.qrels

            def score(i: int, hits: list[Any], ids: list[str] = ids, qrels: evaluation.Qrels = qrels) -> float:
                return evaluation.ndcg_at(evaluation.document_ranking(hits), qrels.get(ids[i], {}), 10)

            reports.append(
                {
                    "collection": f"{collection.name}-{collection.split}",
                    "kinds": ["beir"] * len(ids),
                    "scores": per_pair(services, searches, score),
                }
            )
    return reports


def record_qa(docs: Path, sets: Sequence[Path], cache: Path) -> dict:
    questions = [q for path in sets for q in qa_eval.read_jsonl(path, qa_eval.Question) if q.passage]
    with tempfile.TemporaryDirectory(prefix="fusion-fit-") as scratch:
        services, _, _ = qa_eval.build_index(docs, Path(scratch), cache)
        searches = recorded(services, [q.question for q in questions], qa_eval.PASSAGE_DEPTH)

        def score(i: int, hits: list[Any]) -> float:
            return float(qa_eval.passage_rank(questions[i], hits) == 0)

        kinds = [f"{q.id.split('-')[0]}:{q.kind}" for q in questions]
        return {"collection": "qa-passages", "kinds": kinds, "scores": per_pair(services, searches, score)}


def fit(reports: Sequence[dict]) -> list[dict]:
    def gains(report: dict) -> dict[str, float]:
        base = statistics.fmean(report["scores"]["0.0"])
        return {pair: statistics.fmean(s) - base for pair, s in report["scores"].items()}

    rows = []
    for out in reports:
        rest = [gains(r) for r in reports if r is not out]
        best = max(rest[0], key=lambda pair: (round(statistics.fmean(g[pair] for g in rest), 6), pair == "0.0"))
        mine = out["scores"]
        rows.append(
            {
                "left_out": out["collection"],
                "fitted": best,
                "fitted_gain_on_the_others": round(statistics.fmean(g[best] for g in rest), 4),
                "left_out_off": round(statistics.fmean(mine["0.0"]), 4),
                "left_out_fitted": round(statistics.fmean(mine[best]), 4),
            }
        )
    everything = [gains(r) for r in reports]
    rows.append({"all": max(everything[0], key=lambda p: statistics.fmean(g[p] for g in everything))})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--dataset", type=Path)
    rec.add_argument("--split", default="train", help="comma-separated: each written to OUT-<split>.json")
    rec.add_argument("--docs", type=Path)
    rec.add_argument("--qa", help="comma-separated question sets")
    rec.add_argument("--cache", type=Path, required=True)
    rec.add_argument("--out", type=Path, required=True)
    fitting = sub.add_parser("fit")
    fitting.add_argument("reports", type=Path, nargs="+")
    args = parser.parse_args()
    if args.command == "record":
        if args.dataset:
            splits = args.split.split(",")
            for split, report in zip(splits, record_beir(args.dataset, splits, args.cache), strict=True):
                args.out.with_name(f"{args.out.stem}-{split}.json").write_text(json.dumps(report))
        else:
            args.out.write_text(json.dumps(record_qa(args.docs, [Path(p) for p in args.qa.split(",")], args.cache)))
    else:
        print(json.dumps(fit([json.loads(p.read_text()) for p in args.reports]), indent=2))


if __name__ == "__main__":
    main()

"""The development tools' commands of the `ragmcp` command line: bench | eval | eval-qa | eval-floor |
eval-parse | eval-guards. ragmcp.cli adds them with `add_commands` where this package is installed."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

from ragmcp.settings import settings_from_args

CACHE_REPEAT = 0.2
"""`bench scale`'s default phrase repeat rate (BENCHMARKS.md says where it comes from)."""


def add_commands(sub: argparse._SubParsersAction) -> None:
    """The commands ragmcp.cli.DEV_COMMANDS names, on `ragmcp`'s subcommands."""
    bench = sub.add_parser("bench", help="measure search latency over HTTP or ingestion throughput")
    bench.add_argument(
        "what", choices=["search", "verify", "ingest", "cold-start", "ingest-memory", "scale", "hostile", "embed"]
    )
    bench.add_argument("--url", default="http://127.0.0.1:8000/mcp", help="MCP endpoint (search)")
    bench.add_argument("--requests", type=int, default=200, help="requests per concurrency level (search)")
    bench.add_argument("--concurrency", default="1,4,8", help="comma-separated levels (search)")
    bench.add_argument("--time-limit", type=float, default=60.0, help="seconds per level at most (search)")
    bench.add_argument(
        "--path",
        default="samples/docs",
        help="folder to ingest (ingest); a file, or its folder's largest (ingest-memory)",
    )
    bench.add_argument(
        "--folder", type=Path, help="serve this folder instead of generating issue 29's hostile files (hostile)"
    )
    bench.add_argument("--no-package", action="store_true", help="skip building the layer to size it (cold-start)")
    bench.add_argument("--out", type=Path, help="write the JSON results here too")
    bench.add_argument("--dataset", type=Path, help="BEIR collection to grow the corpus from (scale)")
    bench.add_argument("--sizes", default="10000,100000", help="comma-separated corpus sizes in chunks (scale)")
    bench.add_argument("--max-docs", type=int, help="start from a subset of the collection (scale smoke)")
    bench.add_argument("--no-peer", action="store_true", help="skip LanceDB even if installed (scale)")
    bench.add_argument("--workers", type=int, default=1, help="server processes, `ragmcp serve --workers` (scale)")
    bench.add_argument(
        "--recall-queries",
        type=int,
        default=100,
        help="queries of the graph's recall@10 against the exact scan (scale; 0: not measured, as when the graph"
        " file and its search are those of a run already measured: at 1M the exact scans take 6 min or more)",
    )
    bench.add_argument(
        "--cache-repeat",
        type=float,
        default=CACHE_REPEAT,
        metavar="R",
        help=(
            "measure each level again on a fresh server with the query-phrase cache on, each phrase being with"
            " chance R one sent before (scale; 0: not run). Default 0.2, an assumption near the 16-22%% of web"
            " searches that repeat the same user's earlier query (Xie and O'Hallaron, INFOCOM 2002)"
        ),
    )
    bench.add_argument(
        "--results-dir", type=Path, default=Path("bench/results"), help="folder for scale-*.json and scale.png"
    )
    bench.add_argument(
        "--max-other-share",
        type=float,
        default=0.15,
        metavar="S",
        help=(
            "a run during which processes other than the measured ones took more than this share of the cores is"
            " marked busy, and the command exits 3 (scale, embed)"
        ),
    )
    bench.add_argument("--texts", type=int, default=400, help="the first N documents of --dataset (embed)")
    bench.add_argument(
        "--variants", default="today", help="comma-separated model variants: today, int8, fused, fused-int8 (embed)"
    )
    bench.add_argument("--batch-sizes", default="1", help="comma-separated batch sizes (embed)")
    bench.add_argument(
        "--layouts", default="2x1", help="comma-separated RUNSxINTRA: runs at once x intra-op threads each (embed)"
    )
    bench.add_argument("--rounds", type=int, default=2, help="interleaved rounds over the configurations (embed)")
    bench.add_argument(
        "--ingest",
        action="store_true",
        help="embed: instead, ingest the texts cold through the pipeline (the RAGMCP_* settings' embedder) and run"
        " that embedder alone on the chunks stored, each round",
    )
    bench.set_defaults(func=cmd_bench)

    evaluate = sub.add_parser("eval", help="score retrieval on a BEIR-format collection (nDCG@10, Recall@100, MRR@10)")
    evaluate.add_argument("--dataset", type=Path, required=True, help="folder with corpus.jsonl, queries.jsonl, qrels/")
    evaluate.add_argument(
        "--split",
        default="test",
        help="qrels/<split>.tsv to score (tune on train, report test); several, comma-separated, share one index",
    )
    evaluate.add_argument(
        "--mode", action="append", default=[], help="a mode to score, repeatable (default: every mode)"
    )
    evaluate.add_argument("--max-docs", type=int, help="a subset: judged queries' documents plus distractors")
    evaluate.add_argument("--out", type=Path, default=Path("bench/results"), help="folder for the JSON and Markdown")
    evaluate.add_argument(
        "--off-topic", type=Path, help="off-topic queries (JSONL with `query`): calibrate the relevance floor on them"
    )
    evaluate.add_argument(
        "--keyword-ablation",
        action="store_true",
        help="measure our keyword side against bm25s one difference at a time (needs the bench extra)",
    )
    evaluate.set_defaults(func=cmd_eval)

    qa = sub.add_parser("eval-qa", help="score retrieval, answers and silence on a labelled question set over a folder")
    qa.add_argument("--docs", type=Path, required=True, help="the folder to ingest (e.g. ../shared/documents)")
    qa.add_argument("--qa", type=Path, default=Path("tests/data/qa_shared.jsonl"), help="labelled questions (JSONL)")
    qa.add_argument(
        "--off-topic", type=Path, default=Path("tests/data/off_topic.jsonl"), help="off-topic queries (JSONL)"
    )
    qa.add_argument("--out", type=Path, default=Path("bench/results"), help="folder for the JSON and Markdown")
    qa.add_argument("--modes", help="comma-separated search modes to score (default: all)")
    qa.add_argument("--parts", help="comma-separated question parts to ask, e.g. tune (default: all)")
    qa.set_defaults(func=cmd_eval_qa)
    floor = sub.add_parser(
        "eval-floor", help="fit the relevance floor on train splits, report it on test splits (from eval reports)"
    )
    floor.add_argument("reports", type=Path, nargs="+", help="eval-*.json written with --off-topic, eval-qa.json")
    floor.add_argument("--out", type=Path, help="write the fit as JSON here too")
    floor.set_defaults(func=cmd_eval_floor)
    parse_eval = sub.add_parser(
        "eval-parse", help="score each file's extracted text against its reference rendering (token F1)"
    )
    parse_eval.add_argument(
        "--docs", type=Path, required=True, help="folder with source/, groundtruth/ and MANIFEST.md"
    )
    parse_eval.add_argument("--benchmarks", type=Path, default=Path("BENCHMARKS.md"), help="file the table goes into")
    parse_eval.add_argument(
        "--out", type=Path, default=Path("bench/results/parse-shared-documents.json"), help="the scores as JSON"
    )
    parse_eval.set_defaults(func=cmd_eval_parse)

    guards = sub.add_parser("eval-guards", help="precision and recall of the injection and PII guards on labelled sets")
    guards.add_argument("--injection", type=Path, default=Path("tests/data/injection_labelled.jsonl"))
    guards.add_argument("--pii", type=Path, default=Path("tests/data/pii_labelled.jsonl"))
    guards.add_argument(
        "--benchmarks", type=Path, default=Path("BENCHMARKS.md"), help="the file whose guards section is rewritten"
    )
    guards.add_argument("--no-write", dest="benchmarks", action="store_const", const=None, help="print only")
    guards.set_defaults(func=cmd_eval_guards)


def cmd_bench(args: argparse.Namespace) -> int:
    from ragmcp_bench import bench

    if args.what in ("cold-start", "ingest-memory") and importlib.util.find_spec("moto") is None:
        print(
            f"ragmcp bench {args.what}: runs the functions on moto (the AWS emulator), which is not installed: "
            "install the test or bench extra",
            file=sys.stderr,
        )
        return 2
    if args.what == "scale":
        return cmd_bench_scale(args)
    if args.what == "hostile":
        return cmd_bench_hostile(args)
    if args.what == "embed":
        return cmd_bench_embed(args)
    if args.what == "search":
        levels = [int(c) for c in args.concurrency.split(",")]
        rows = bench.bench_search(args.url, requests=args.requests, concurrency=levels, time_limit=args.time_limit)
    elif args.what == "verify":
        rows = bench.bench_verify(args.url, requests=args.requests, time_limit=args.time_limit)
    elif args.what == "cold-start":
        rows = bench.bench_cold_start(package=not args.no_package)
    elif args.what == "ingest-memory":
        rows = bench.bench_ingest_memory(Path(args.path))
    else:
        rows = bench.bench_ingest(Path(args.path), args.data_dir)
    print(bench.write_results(args.out, args.what, rows))
    failed = any(getattr(r, "errors", 0) or not getattr(r, "within_budget", True) for r in rows)
    return 1 if failed else 0


def cmd_bench_hostile(args: argparse.Namespace) -> int:
    """Issue 29's hostile folder served by `ragmcp serve`: the process tree's peak memory and each file's outcome."""
    from ragmcp_bench import bench_hostile

    result = bench_hostile.run(args.folder)
    print(bench_hostile.summary(result))
    if args.out:
        args.out.write_text(bench_hostile.as_json(result) + "\n")
    return 0 if result.within_budget else 1


def cmd_bench_embed(args: argparse.Namespace) -> int:
    from ragmcp_bench import embed_bench

    if args.dataset is None or not (args.dataset / "corpus.jsonl").is_file():
        print(f"ragmcp bench embed: --dataset needs a folder with corpus.jsonl, not {args.dataset}", file=sys.stderr)
        return 2
    try:
        variants = args.variants.split(",")
        unknown = [v for v in variants if v not in embed_bench.VARIANTS]
        if unknown:
            raise ValueError(f"unknown variant {', '.join(unknown)}; known: {', '.join(embed_bench.VARIANTS)}")
        batches = [int(b) for b in args.batch_sizes.split(",")]
        layouts = [embed_bench.Layout.parse(text) for text in args.layouts.split(",")]
        if args.texts < 1 or args.rounds < 1 or min(batches) < 1:
            raise ValueError("--texts, --rounds and every batch size are at least 1")
    except ValueError as exc:
        print(f"ragmcp bench embed: {exc}", file=sys.stderr)
        return 2
    if args.ingest:
        return cmd_bench_embed_ingest(args)
    result = embed_bench.run(
        args.dataset,
        args.texts,
        settings_from_args(args).server.data_dir / "models",
        variants=variants,
        batches=batches,
        layouts=layouts,
        rounds=args.rounds,
        max_other_share=args.max_other_share,
    )
    print(embed_bench.summary(result), end="")
    out = args.out or args.results_dir / f"embed-{result.dataset}-{result.texts}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(embed_bench.as_json(result), indent=2) + "\n")
    print(f"written: {out}", file=sys.stderr)
    return 3 if result.quiet is False else 0


def cmd_bench_embed_ingest(args: argparse.Namespace) -> int:
    """`bench embed --ingest`: cold ingests of the first --texts documents against the floor on their chunks."""
    import tempfile
    import time
    from dataclasses import asdict

    from ragmcp_bench import embed_bench, machine

    data_dir = settings_from_args(args).server.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    taken = []
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory(dir=data_dir) as work:
            taken.append(embed_bench.ingest_against_floor(args.dataset, args.texts, Path(work), args.max_other_share))
    print(embed_bench.ingest_summary(taken), end="")
    out = args.out or args.results_dir / f"embed-ingest-{args.dataset.name}-{args.texts}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {"kind": "embed-ingest", "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    out.write_text(json.dumps({**record, "cpu": machine.cpu(), "rounds": [asdict(m) for m in taken]}, indent=2) + "\n")
    print(f"written: {out}", file=sys.stderr)
    return 3 if any(w.quiet is False for m in taken for w in (m.ingest_window, m.floor_window)) else 0


def cmd_bench_scale(args: argparse.Namespace) -> int:
    from ragmcp_bench import bench_scale

    if not (args.dataset / "corpus.jsonl").is_file():
        print(f"ragmcp bench scale: no corpus.jsonl in {args.dataset}", file=sys.stderr)
        return 2
    if not 0 <= args.cache_repeat < 1:
        print(f"ragmcp bench scale: --cache-repeat is a fraction in [0, 1), not {args.cache_repeat}", file=sys.stderr)
        return 2
    data_dir = settings_from_args(args).server.data_dir
    failed = busy = False
    for size in (int(s) for s in args.sizes.split(",")):
        result = bench_scale.run_size(
            args.dataset,
            size,
            data_dir / "bench",
            data_dir / "eval-cache" / "embeddings.db",
            requests=args.requests,
            concurrency=[int(c) for c in args.concurrency.split(",")],
            time_limit=args.time_limit,
            max_docs=args.max_docs,
            peer=not args.no_peer,
            workers=args.workers,
            cache_repeat=args.cache_repeat,
            max_other_share=args.max_other_share,
            recall_queries=args.recall_queries,
        )
        print(f"written: {bench_scale.write(result, args.results_dir)}", file=sys.stderr)
        print(bench_scale.summary(result))
        runs = [*result.http, *filter(None, [result.first_pass]), *(cached.run for cached in result.cached)]
        failed = failed or any(row.errors for row in runs)
        busy = busy or result.quiet() is False
    chart = bench_scale.chart(args.results_dir)
    if chart is not None:
        print(f"written: {chart}", file=sys.stderr)
    return 1 if failed else 3 if busy else 0


def cmd_eval(args: argparse.Namespace) -> int:
    from ragmcp.progress import Progress, shown
    from ragmcp_bench import evaluation

    unknown = [m for m in args.mode if m not in evaluation.MODES]
    if unknown:
        print(f"ragmcp eval: unknown mode {', '.join(unknown)}; known: {', '.join(evaluation.MODES)}", file=sys.stderr)
        return 2
    splits = [s for s in args.split.split(",") if s]
    missing = [s for s in splits if not (args.dataset / "qrels" / f"{s}.tsv").is_file()]
    if missing or not splits:
        print(f"ragmcp eval: {args.dataset} has no qrels/{(missing or [''])[0]}.tsv", file=sys.stderr)
        return 2
    if args.max_docs is not None and len(splits) > 1:
        print("ragmcp eval: --max-docs cuts a subset per split: give one split", file=sys.stderr)
        return 2
    off_topic = [json.loads(line)["query"] for line in args.off_topic.open() if line.strip()] if args.off_topic else ()
    with shown(Progress()) as progress:
        written = evaluation.run(
            args.dataset,
            splits,
            [evaluation.MODES[m] for m in args.mode or evaluation.DEFAULT_MODES],
            cache=settings_from_args(args).server.data_dir / "eval-cache" / "embeddings.db",
            out_dir=args.out,
            max_docs=args.max_docs,
            progress=progress,
            off_topic=off_topic,
            ablation=args.keyword_ablation,
        )
    for report, paths in written:
        print(evaluation.markdown(report), end="")
        print("written: " + ", ".join(str(p) for p in paths), file=sys.stderr)
    return 1 if any(r.agrees is False for report, _ in written for r in report.results) else 0


def cmd_eval_qa(args: argparse.Namespace) -> int:
    from ragmcp_bench import qa_eval

    for path in (args.docs, args.qa, args.off_topic):
        if not path.exists():
            print(f"ragmcp eval-qa: {path} does not exist", file=sys.stderr)
            return 2
    cache = settings_from_args(args).server.data_dir / "eval-cache" / "embeddings.db"
    modes = args.modes.split(",") if args.modes else None
    parts = args.parts.split(",") if args.parts else None
    report, paths = qa_eval.run(
        args.docs, args.qa, args.off_topic, cache=cache, out_dir=args.out, modes=modes, parts=parts
    )
    print(qa_eval.markdown(report), end="")
    print("written: " + ", ".join(str(p) for p in paths), file=sys.stderr)
    return 0


def cmd_eval_floor(args: argparse.Namespace) -> int:
    from ragmcp_bench import floor_fit

    missing = [str(p) for p in args.reports if not p.is_file()]
    if missing:
        print(f"ragmcp eval-floor: no such report: {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        result = floor_fit.run(args.reports, args.out)
    except ValueError as exc:
        print(f"ragmcp eval-floor: {exc}", file=sys.stderr)
        return 2
    print(floor_fit.markdown(result), end="")
    return 0


def cmd_eval_parse(args: argparse.Namespace) -> int:
    from ragmcp_bench import parse_eval

    if not (args.docs / "MANIFEST.md").is_file():
        print(f"ragmcp eval-parse: no MANIFEST.md in {args.docs}", file=sys.stderr)
        return 2
    report = parse_eval.evaluate(args.docs, ocr=settings_from_args(args).ingest.ocr)
    print(parse_eval.markdown(report), end="")
    written = parse_eval.write(report, args.benchmarks, args.out)
    print("written: " + ", ".join(str(p) for p in written), file=sys.stderr)
    return 0 if report.met else 1


def cmd_eval_guards(args: argparse.Namespace) -> int:
    from ragmcp_bench import guard_eval

    for path in (args.injection, args.pii):
        if not path.is_file():
            print(f"ragmcp eval-guards: no labelled set at {path}", file=sys.stderr)
            return 2
    report = guard_eval.evaluate(args.injection, args.pii)
    section = guard_eval.markdown(report, f"ragmcp eval-guards --injection {args.injection} --pii {args.pii}")
    print(section, end="")
    if args.benchmarks is not None:
        guard_eval.write_section(args.benchmarks, section)
        print(f"written: {args.benchmarks}", file=sys.stderr)
    return 0 if report.meets_targets else 1

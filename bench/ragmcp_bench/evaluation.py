"""`ragmcp eval`: retrieval quality on a BEIR-format collection (corpus.jsonl, queries.jsonl, qrels/<split>.tsv).

The corpus goes through the normal ingestion pipeline into a fresh index (a temporary data
directory) that shares only a persistent embedding cache, so a re-run does not embed again.
Each query goes through `SearchService.search`, the service the MCP tools call; chunk hits
become a document ranking by each document's best chunk. nDCG@10, Recall@100 and MRR@10 are
computed here with trec_eval's conventions (linear gain, relevant means a judgment >= 1, a
query with no results scores 0) and, when `ir-measures` is installed, checked against it.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ragmcp.bootstrap import Services, build_services
from ragmcp.domain.models import Principal, ScoredChunk
from ragmcp.progress import Progress
from ragmcp.retrieval.coverage import coverage
from ragmcp.retrieval.service import SearchRequest, SearchService, floor_text
from ragmcp.settings import SearchSettings, Settings

Qrels = dict[str, dict[str, int]]
Run = dict[str, list[str]]

METRICS = ("ndcg@10", "recall@100", "mrr@10")
AGREEMENT_TOLERANCE = 5e-5
TENANT = "eval"
DEPTH = 100


@dataclass(frozen=True, slots=True)
class Mode:
    """A named way of searching: the service mode and the knobs of its SearchRequest."""

    name: str
    knobs: Mapping[str, Any]
    description: str
    peer: bool = False
    """A system other than ours (bm25s), run on the collection's documents directly."""


CANDIDATES = 300
"""Chunks a single-side mode's index search returns: enough for 100 distinct documents (about 2 chunks
each) for Recall@100; its first ten are the same at any depth."""
SHIPPED = SearchSettings()
"""The fusion modes fuse what the server fetches (SearchSettings.fts_k, vec_k), not more: min-max
normalisation spans the candidates a side fetched, so a deeper fetch would score another fusion."""

MODES: dict[str, Mode] = {
    mode.name: mode
    for mode in (
        Mode("fts", {"mode": "fts", "fts_k": CANDIDATES}, "FTS5 bm25 only"),
        Mode("vector", {"mode": "vector", "vec_k": CANDIDATES}, "cosine similarity of MiniLM embeddings only"),
        Mode(
            "hybrid_k60",
            {"mode": "hybrid", "fts_k": SHIPPED.fts_k, "vec_k": SHIPPED.vec_k, "rrf_k0": 60},
            "reciprocal rank fusion, k0=60 (the server default before hybrid_scores)",
        ),
        Mode(
            "hybrid",
            {"mode": "hybrid", "fts_k": SHIPPED.fts_k, "vec_k": SHIPPED.vec_k, "rrf_k0": 2},
            "reciprocal rank fusion, k0=2 (tuned on train)",
        ),
        Mode(
            "hybrid_scores",
            {
                "mode": "hybrid_scores",
                "fts_k": SHIPPED.fts_k,
                "vec_k": SHIPPED.vec_k,
                "fts_weight": 1.0,
                "vec_weight": 1.0,
            },
            "min-max normalised bm25 and cosine, weights 1:1 (tuned on train)",
        ),
    )
}
MODES["default"] = Mode("default", {}, "the server's default search with its relevance floor (from Settings)")
MODES["bm25s"] = Mode(
    "bm25s", {}, "peer: bm25s over whole documents, Snowball stemming, English stop words, k1 1.5, b 0.75", peer=True
)
DEFAULT_MODES = tuple(name for name in MODES if name != "bm25s" or importlib.util.find_spec("bm25s") is not None)
"""Every mode; the bm25s peer where bm25s (the bench extra) is installed."""


@dataclass(frozen=True, slots=True)
class Collection:
    """A BEIR collection restricted to one split: corpus rows, the judged queries and their qrels."""

    name: str
    split: str
    corpus: list[dict[str, Any]]
    queries: dict[str, str]
    qrels: Qrels


@dataclass(slots=True)
class ModeResult:
    mode: str
    description: str
    knobs: dict[str, Any]
    metrics: dict[str, float]
    reference: dict[str, float] | None
    agrees: bool | None
    seconds: float


@dataclass(slots=True)
class FloorRow:
    floor: float
    off_topic_silenced: float
    """Share of the off-topic queries the floor silences (none of their top hits reaches it)."""
    on_topic_silenced: float
    """Share of the judged queries it silences."""
    ndcg: float
    """nDCG@10 of the judged queries with this floor (a silenced query scores 0)."""


@dataclass(slots=True)
class FloorQuery:
    """What the floor sees of one query: the (cosine, word coverage) of its top hits, and for a
    judged query its nDCG@10 without a floor. `ragmcp_bench.floor_fit` fits the floor on these."""

    query: str
    ndcg: float | None
    hits: list[tuple[float, float]]


@dataclass(slots=True)
class FloorCalibration:
    mode: str
    coverage_weight: float
    off_topic_queries: int
    setting: float
    rows: list[FloorRow]
    queries: list[FloorQuery] = field(default_factory=list)


@dataclass(slots=True)
class KeywordRow:
    """One keyword ranking of the ablation: what differs from our default, and its metrics."""

    system: str
    what: str
    metrics: dict[str, float]


@dataclass(slots=True)
class EvalReport:
    dataset: str
    split: str
    documents: int
    queries: int
    chunks: int
    ingest_seconds: float
    settings: dict[str, Any]
    results: list[ModeResult] = field(default_factory=list)
    floor: FloorCalibration | None = None
    keyword: list[KeywordRow] = field(default_factory=list)


def read_jsonl(path: Path) -> Iterable[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        yield from (json.loads(line) for line in handle if line.strip())


def load_qrels(path: Path) -> Qrels:
    """`query-id corpus-id score` rows (tab-separated, with a header) as {query: {doc: grade}}."""
    qrels: Qrels = {}
    with path.open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            qrels.setdefault(row["query-id"], {})[row["corpus-id"]] = int(row["score"])
    return qrels


def load_collection(dataset: Path, split: str) -> Collection:
    """The corpus, and the queries of `split` that have judgments."""
    qrels = load_qrels(dataset / "qrels" / f"{split}.tsv")
    queries = {str(q["_id"]): q["text"] for q in read_jsonl(dataset / "queries.jsonl") if str(q["_id"]) in qrels}
    qrels = {qid: judged for qid, judged in qrels.items() if qid in queries}
    return Collection(dataset.name, split, list(read_jsonl(dataset / "corpus.jsonl")), queries, qrels)


def subset(collection: Collection, max_docs: int) -> Collection:
    """At most `max_docs` documents: judged queries in file order with all their relevant documents
    (up to half the budget), then other documents in corpus order as distractors."""
    kept_docs: set[str] = set()
    kept_queries: list[str] = []
    for qid, judged in collection.qrels.items():
        relevant = {doc for doc, grade in judged.items() if grade > 0}
        if len(kept_docs | relevant) > max_docs // 2:
            break
        kept_docs |= relevant
        kept_queries.append(qid)
    rows = [row for row in collection.corpus if str(row["_id"]) in kept_docs]
    rows += [row for row in collection.corpus if str(row["_id"]) not in kept_docs][: max_docs - len(rows)]
    present = {str(row["_id"]) for row in rows}
    qrels = {qid: {d: g for d, g in collection.qrels[qid].items() if d in present} for qid in kept_queries}
    queries = {qid: collection.queries[qid] for qid in kept_queries}
    return Collection(collection.name, collection.split, rows, queries, qrels)


# ---------------------------------------------------------------- metrics


def ndcg_at(ranking: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    """nDCG@k with linear gain (trec_eval's ndcg_cut)."""
    gains = sorted((g for g in judged.values() if g > 0), reverse=True)[:k]
    ideal = sum(g / math.log2(i + 2) for i, g in enumerate(gains))
    if ideal == 0:
        return 0.0
    dcg = sum(max(judged.get(doc, 0), 0) / math.log2(i + 2) for i, doc in enumerate(ranking[:k]))
    return dcg / ideal


def recall_at(ranking: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    relevant = {doc for doc, grade in judged.items() if grade > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranking[:k])) / len(relevant)


def mrr_at(ranking: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    """Reciprocal rank of the first relevant document within the top k, else 0."""
    return next((1.0 / (i + 1) for i, doc in enumerate(ranking[:k]) if judged.get(doc, 0) > 0), 0.0)


_SCORERS: dict[str, Callable[[Sequence[str], Mapping[str, int]], float]] = {
    "ndcg@10": lambda ranking, judged: ndcg_at(ranking, judged, 10),
    "recall@100": lambda ranking, judged: recall_at(ranking, judged, 100),
    "mrr@10": lambda ranking, judged: mrr_at(ranking, judged, 10),
}


def score_run(run: Run, qrels: Qrels) -> dict[str, float]:
    """Each metric's mean over the judged queries; a query missing from the run scores 0."""
    if not qrels:
        return {name: 0.0 for name in METRICS}
    return {
        name: sum(scorer(run.get(qid, []), judged) for qid, judged in qrels.items()) / len(qrels)
        for name, scorer in _SCORERS.items()
    }


def reference_scores(run: Run, qrels: Qrels) -> dict[str, float] | None:
    """The same metrics from ir-measures (trec_eval underneath), or None when it is not installed.

    Documents get strictly decreasing scores in ranking order, so no tie-breaking rule applies.
    """
    try:
        import ir_measures
    except ImportError:
        return None
    measures = {"ndcg@10": ir_measures.nDCG @ 10, "recall@100": ir_measures.R @ 100, "mrr@10": ir_measures.RR @ 10}
    scored = {qid: {doc: float(len(docs) - i) for i, doc in enumerate(docs)} for qid, docs in run.items() if docs}
    aggregate = ir_measures.calc_aggregate(list(measures.values()), qrels, scored)
    return {name: float(aggregate[measure]) for name, measure in measures.items()}


def agree(mine: Mapping[str, float], reference: Mapping[str, float]) -> bool:
    return all(abs(mine[name] - reference[name]) <= AGREEMENT_TOLERANCE for name in METRICS)


# ---------------------------------------------------------------- index and queries


def write_corpus(collection: Collection, folder: Path) -> Path:
    """The corpus as one JSONL file keyed by `_id`, in a folder of its own (the source's location)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = (json.dumps(row, ensure_ascii=False) for row in collection.corpus)
    (folder / "corpus.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    settings = {"name": collection.name, "pk_column": "_id", "text_columns": ["title", "text"]}
    (folder / ".source.json").write_text(json.dumps(settings))
    return folder


def build_index(
    collection: Collection, work: Path, cache: Path, tenant: str = TENANT, progress: Progress | None = None
) -> tuple[Services, int]:
    """A fresh index of the corpus under `work`, embedding through the shared cache; its chunk count."""
    folder = write_corpus(collection, work / "corpus")
    services = build_services(Settings(data_dir=work / "index", embedding_cache=cache))
    source = services.register_folder(tenant, collection.name, str(folder))
    report = services.ingest.sync(source, progress)
    failed = [f"{job.target}: {job.error}" for job in report.jobs if job.status == "failed"]
    if failed:
        raise RuntimeError(f"ingest of {collection.name} failed: {'; '.join(failed)}")
    return services, services.index.count_chunks(tenant)


def document_units(collection: Collection) -> list[tuple[str, str]]:
    """Each document as (primary key, title and text), as a stock BM25 indexes it."""
    return [(str(row["_id"]), f"{row.get('title') or ''} {row['text']}".strip()) for row in collection.corpus]


def document_ranking(hits: Iterable[ScoredChunk], depth: int = DEPTH) -> list[str]:
    """Documents (their primary keys) in the order of their best chunk, at most `depth`."""
    ranking = dict.fromkeys(hit.document.pk or hit.document.doc_id for hit in hits)
    return list(ranking)[:depth]


def run_mode(
    search: SearchService,
    mode: Mode,
    queries: Mapping[str, str],
    tenant: str = TENANT,
    progress: Progress | None = None,
) -> Run:
    """The document ranking of every query, searched one at a time through the search service."""
    principal = Principal(tenant=tenant)
    top_k = max(mode.knobs.get("fts_k", 0), mode.knobs.get("vec_k", 0), DEPTH)
    run: Run = {}
    for qid, text in queries.items():
        if progress is not None:
            progress.working_on(f"{mode.name} {qid}")
        hits = search.search(principal, SearchRequest(phrases=[text], top_k=top_k, **mode.knobs)).hits
        run[qid] = document_ranking(hits)
        if progress is not None:
            progress.advance()
    return run


def evaluate_mode(
    services: Services, mode: Mode, collection: Collection, progress: Progress | None = None
) -> ModeResult:
    started = time.perf_counter()
    if mode.peer:
        from ragmcp_bench import peer_bm25s

        run = peer_bm25s.ranking(document_units(collection), collection.queries)
        for _ in range(len(collection.queries) if progress is not None else 0):
            progress.advance()
    else:
        run = run_mode(services.search, mode, collection.queries, progress=progress)
    seconds = time.perf_counter() - started
    metrics = score_run(run, collection.qrels)
    reference = reference_scores(run, collection.qrels)
    return ModeResult(
        mode=mode.name,
        description=mode.description,
        knobs=dict(mode.knobs),
        metrics={name: round(value, 6) for name, value in metrics.items()},
        reference=None if reference is None else {name: round(value, 6) for name, value in reference.items()},
        agrees=None if reference is None else agree(metrics, reference),
        seconds=round(seconds, 2),
    )


FLOOR_GRID = tuple(round(0.3 + 0.01 * i, 2) for i in range(31))
"""Floors tried by the calibration: floor scores 0.30 to 0.60."""
FLOOR_HITS = 10
"""The hits of a query whose floor scores decide it: the top 10, as a search for 10 results sees."""


def default_mode(settings: Settings) -> Mode:
    """The server's own search: SearchSettings.defaults as the tools pass them, its candidate counts
    and relevance floor included."""
    knobs = settings.search.defaults()
    return Mode("default", knobs, f"the server's default: {settings.search.search_mode} with its relevance floor")


def floor_hits(text: str, hits: Sequence[ScoredChunk]) -> list[tuple[float, float]]:
    """(cosine, word coverage) of the top hits, the two parts of their floor scores."""
    return [
        (round(hit.similarity or 0.0, 6), round(coverage(text, floor_text(hit.chunk, hit.document))[0], 4))
        for hit in hits[:FLOOR_HITS]
    ]


def best_floor_score(hits: Sequence[tuple[float, float]], weight: float) -> float:
    """The best floor score among a query's hits (-1 when it has none): what the floor compares."""
    return max((cosine + weight * covered for cosine, covered in hits), default=-1.0)


def floor_rows(queries: Sequence[FloorQuery], weight: float, grid: Sequence[float] = FLOOR_GRID) -> list[FloorRow]:
    """What each floor of the grid does to these queries: off-topic and judged queries silenced, nDCG@10."""
    judged = [q for q in queries if q.ndcg is not None]
    off = [q for q in queries if q.ndcg is None]
    rows = []
    for floor in grid:
        heard = [best_floor_score(q.hits, weight) >= floor for q in judged]
        rows.append(
            FloorRow(
                floor=floor,
                off_topic_silenced=round(
                    sum(best_floor_score(q.hits, weight) < floor for q in off) / max(len(off), 1), 4
                ),
                on_topic_silenced=round(1 - sum(heard) / max(len(judged), 1), 4),
                ndcg=round(
                    sum(q.ndcg or 0.0 for q, h in zip(judged, heard, strict=True) if h) / max(len(judged), 1), 6
                ),
            )
        )
    return rows


def calibrate_floor(
    services: Services, collection: Collection, off_topic: Sequence[str], tenant: str = TENANT
) -> FloorCalibration:
    """How each floor of FLOOR_GRID would treat the server's default search (without its floor): the
    off-topic queries it silences, the judged queries it silences and their nDCG@10. The floor
    silences a query or keeps every hit, so one search per query at floor 0 tells every floor's
    outcome; each query's hits are kept in the report for `floor_fit`."""
    principal = Principal(tenant=tenant)
    knobs = default_mode(services.settings).knobs | {"floor": 0.0}

    def hits(text: str) -> list[ScoredChunk]:
        return services.search.search(principal, SearchRequest(phrases=[text], top_k=DEPTH, **knobs)).hits

    queries: list[FloorQuery] = []
    for qid, text in collection.queries.items():
        found = hits(text)
        ndcg = ndcg_at(document_ranking(found), collection.qrels[qid], 10)
        queries.append(FloorQuery(qid, round(ndcg, 6), floor_hits(text, found)))
    queries += [FloorQuery(f"off-topic:{i}", None, floor_hits(text, hits(text))) for i, text in enumerate(off_topic)]
    return floor_calibration(services, str(knobs["mode"]), queries, len(off_topic))


def floor_calibration(
    services: Services, mode: str, queries: list[FloorQuery], off_topic_queries: int
) -> FloorCalibration:
    """The report of `calibrate_floor` (and of eval-qa's): every floor's outcome over these queries
    at the settings' coverage weight."""
    weight = services.settings.search.floor_coverage
    return FloorCalibration(
        mode=mode,
        coverage_weight=weight,
        off_topic_queries=off_topic_queries,
        setting=services.settings.search.relevance_floor,
        rows=floor_rows(queries, weight),
        queries=queries,
    )


OUR_BM25 = (
    ("default", {}),
    ("headline weight 0 (text only)", {"headline": 0.0}),
    ("headline weight 1", {"headline": 1.0}),
    ("repeated query words count again", {"distinct": False}),
    ("k1 1.5", {"k1": 1.5}),
    ("k1 0.9, b 0.4 (Pyserini's BEIR setting)", {"k1": 0.9, "b": 0.4}),
    ("lengths against a fixed 120 tokens (OpenSearch's similarity)", {"avgdl": 120.0}),
    (
        "k1 1.5, headline 0, repeated words count (bm25s' choices on our passages)",
        {"k1": 1.5, "headline": 0.0, "distinct": False},
    ),
)
"""Our keyword side with one difference from its default at a time (adapters/local/bm25.py's Bm25)."""


def keyword_ablation(services: Services, collection: Collection, tenant: str = TENANT) -> list[KeywordRow]:
    """Which difference between our keyword side and a stock BM25 costs what: ours with one Bm25
    parameter changed at a time (the same index), and bm25s on whole documents or on our passages,
    with its stemmer or FTS5's (Porter), with or without stop words."""
    from ragmcp.adapters.local.bm25 import Bm25
    from ragmcp.adapters.local.postings import TermPostings
    from ragmcp.adapters.local.sqlite_index import SqliteSearchIndex
    from ragmcp_bench import peer_bm25s

    base = services.index
    if not isinstance(base, SqliteSearchIndex):
        raise TypeError("the keyword ablation runs on the embedded index")
    rows = []
    mode = MODES["fts"]
    for what, change in OUR_BM25:
        index = SqliteSearchIndex(base.db, None, TermPostings(), tokenizer=base.tokenizer, bm25=Bm25(**change))
        run = run_mode(SearchService(index, services.embedder), mode, collection.queries)
        rows.append(KeywordRow("ours (FTS5 terms, our bm25)", what, _rounded(score_run(run, collection.qrels))))
    passages = [(doc.pk or doc.doc_id, chunk.text) for chunk, doc, _ in base.iter_chunks(tenant)]
    documents = document_units(collection)
    peer = peer_bm25s.PEER
    porter = replace(peer, stemmer="porter", stopwords=None)
    for what, units, config in (
        ("the peer: whole documents, Snowball, English stop words, k1 1.5, b 0.75", documents, peer),
        ("whole documents, Porter (FTS5's stemmer), no stop words", documents, porter),
        ("our passages (best passage ranks its document)", passages, peer),
        ("our passages, Porter, no stop words", passages, porter),
        (
            "our passages, Porter, no stop words, k1 1.2, distinct query terms (as ours)",
            passages,
            replace(porter, k1=1.2, distinct_query_terms=True),
        ),
    ):
        run = peer_bm25s.ranking(units, collection.queries, config)
        rows.append(KeywordRow("bm25s", what, _rounded(score_run(run, collection.qrels))))
    return rows


def _rounded(metrics: Mapping[str, float]) -> dict[str, float]:
    return {name: round(value, 6) for name, value in metrics.items()}


def evaluate(
    collection: Collection,
    modes: Sequence[Mode],
    cache: Path,
    progress: Progress | None = None,
    off_topic: Sequence[str] = (),
    ablation: bool = False,
) -> EvalReport:
    """Ingest the collection into a fresh temporary index, then score every mode on its queries (and
    calibrate the relevance floor when off-topic queries are given); `progress` counts the corpus
    files, then the queries of every mode."""
    return evaluate_splits([collection], modes, cache, progress, off_topic, ablation)[0]


def evaluate_splits(
    collections: Sequence[Collection],
    modes: Sequence[Mode],
    cache: Path,
    progress: Progress | None = None,
    off_topic: Sequence[str] = (),
    ablation: bool = False,
) -> list[EvalReport]:
    """`evaluate` for several splits of one corpus over one index: the corpus is ingested once."""
    progress = progress or Progress()
    reports = []
    with tempfile.TemporaryDirectory(prefix="ragmcp-eval-") as scratch:
        started = time.perf_counter()
        progress.label = "corpus files"
        services, chunks = build_index(collections[0], Path(scratch), cache, progress=progress)
        ingest_seconds = round(time.perf_counter() - started, 2)
        chosen = [default_mode(services.settings) if mode.name == "default" else mode for mode in modes]
        for collection in collections:
            report = EvalReport(
                dataset=collection.name,
                split=collection.split,
                documents=len(collection.corpus),
                queries=len(collection.queries),
                chunks=chunks,
                ingest_seconds=ingest_seconds,
                settings={
                    "chunk_overlap": services.settings.ingest.chunk_overlap,
                    "chunk_tokens": services.settings.ingest.chunk_tokens,
                    "embed_max_tokens": services.settings.embedding.embed_max_tokens,
                }
                | {"embedding_model": services.embedder.model_id},
            )
            progress.label = f"{collection.split} queries"
            progress.begin(len(collection.queries) * len(chosen))
            report.results = [evaluate_mode(services, mode, collection, progress) for mode in chosen]
            progress.end()
            if off_topic:
                report.floor = calibrate_floor(services, collection, off_topic)
            if ablation:
                report.keyword = keyword_ablation(services, collection)
            reports.append(report)
    return reports


# ---------------------------------------------------------------- output


def markdown(report: EvalReport) -> str:
    lines = [
        f"# {report.dataset} ({report.split}): {report.queries} queries, {report.documents} documents, "
        f"{report.chunks} chunks",
        "",
        "| mode | nDCG@10 | Recall@100 | MRR@10 | ir-measures | what |",
        "|---|---|---|---|---|---|",
    ]
    for result in report.results:
        check = {None: "not installed", True: "agrees", False: "DISAGREES"}[result.agrees]
        values = " | ".join(f"{result.metrics[name]:.4f}" for name in METRICS)
        lines.append(f"| {result.mode} | {values} | {check} | {result.description} |")
    if report.keyword:
        lines += [
            "",
            "Keyword side, one difference at a time:",
            "",
            "| system | what | nDCG@10 | Recall@100 | MRR@10 |",
        ]
        lines.append("|---|---|---|---|---|")
        for row in report.keyword:
            values = " | ".join(f"{row.metrics[name]:.4f}" for name in METRICS)
            lines.append(f"| {row.system} | {row.what} | {values} |")
    if report.floor is not None:
        floor = report.floor
        lines += [
            "",
            f"Relevance floor on the {floor.mode} search (a query is silenced when none of its top {FLOOR_HITS} hits"
            f" has a floor score, cosine + {floor.coverage_weight} x word coverage, at the floor):"
            f" {floor.off_topic_queries} off-topic queries, {report.queries} judged; the setting is {floor.setting}.",
            "",
            "| floor | off-topic queries silenced | judged queries silenced | nDCG@10 |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {r.floor:.2f} | {r.off_topic_silenced:.4f} | {r.on_topic_silenced:.4f} | {r.ndcg:.4f} |"
            for r in floor.rows
        ]
    return "\n".join(lines) + "\n"


def write_report(report: EvalReport, out_dir: Path, stem: str) -> tuple[Path, Path]:
    """`<stem>.json` and `<stem>.md` in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    json_path, md_path = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    json_path.write_text(json.dumps({"kind": "eval", "at": at, **asdict(report)}, indent=2) + "\n")
    md_path.write_text(markdown(report))
    return json_path, md_path


def run(
    dataset: Path,
    splits: Sequence[str],
    modes: Sequence[Mode],
    *,
    cache: Path,
    out_dir: Path,
    max_docs: int | None = None,
    progress: Progress | None = None,
    off_topic: Sequence[str] = (),
    ablation: bool = False,
) -> list[tuple[EvalReport, tuple[Path, Path]]]:
    """Load each split, optionally cut to `max_docs` (one split only: a subset is cut per split),
    evaluate every mode over one index of the corpus, and write eval-<name>-<split>[-<n>docs].json/.md."""
    if max_docs is not None and len(splits) > 1:
        raise ValueError("--max-docs cuts a subset per split: give one split")
    collections = [load_collection(dataset, split) for split in splits]
    if max_docs is not None:
        collections = [subset(collections[0], max_docs)]
    reports = evaluate_splits(collections, modes, cache, progress, off_topic, ablation)
    suffix = f"-{max_docs}docs" if max_docs is not None else ""
    return [(r, write_report(r, out_dir, f"eval-{r.dataset}-{r.split}{suffix}")) for r in reports]

"""`ragmcp eval-qa`: retrieval, answers and silence on a labelled question set over a folder.

The folder goes through the normal ingestion pipeline into a fresh index (a temporary data
directory sharing only the embedding cache). Each question of the set (JSONL: `question`,
`answerable`, `expected` phrases, the `documents` that answer it) is then asked in every search
mode of `ragmcp eval`, plus the server's default:

- retrieval: documents ranked by their best chunk, scored with nDCG@10 and MRR@10 against the
  expected documents; `passage MRR@10` is the reciprocal rank of the first chunk of an expected
  document that holds an expected phrase (the passage an answer needs);
- answers: the synthesis steps (retrieve, gate, generate, cite) with that mode's search knobs and
  the server's floor and gate; an answerable question counts as answered when an expected phrase
  is in the answer text, an unanswerable one as silent when the answer is the Silence Protocol;
- the relevance floor: the share of off-topic queries (JSONL: `query`) for which the server's
  default search returns no hit at all.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ragmcp.bootstrap import Services, build_services
from ragmcp.domain.models import Principal, ScoredChunk
from ragmcp.retrieval.service import SearchRequest
from ragmcp.settings import Settings
from ragmcp.synthesis.models import Answer, SynthesisRequest
from ragmcp_bench.evaluation import (
    MODES,
    FloorCalibration,
    FloorQuery,
    Mode,
    default_mode,
    floor_calibration,
    floor_hits,
    mrr_at,
    ndcg_at,
)

TENANT = "eval"
SOURCE = "docs"
DEPTH = 50
ANSWER_PASSAGES = 5
_WORD = re.compile(r"\w+", re.UNICODE)


class Question(BaseModel):
    id: str
    question: str = Field(min_length=1)
    answerable: bool
    expected: list[str] = Field(default_factory=list, description="Phrases any of which an answer must contain.")
    documents: list[str] = Field(default_factory=list, description="File names of the documents that answer it.")


class OffTopic(BaseModel):
    id: str
    query: str = Field(min_length=1)


@dataclass(slots=True)
class ModeScores:
    mode: str
    description: str
    ndcg_at_10: float
    mrr_at_10: float
    passage_mrr_at_10: float
    answered: float
    silent: float
    seconds: float


@dataclass(slots=True)
class QAReport:
    folder: str
    documents: int
    chunks: int
    failed: list[str]
    answerable: int
    unanswerable: int
    off_topic: int
    settings: dict[str, Any]
    off_topic_silenced: float = 0.0
    dataset: str = "qa_shared"
    """The question set's name (its file's stem): the reports are eval-<dataset>.json and .md."""
    split: str = "all"
    """Every question: `ragmcp eval-floor` fits on the even-numbered ones and reports on the odd."""
    floor: FloorCalibration | None = None
    results: list[ModeScores] = field(default_factory=list)
    misses: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def read_jsonl(path: Path, model: type[BaseModel]) -> list[Any]:
    with path.open(encoding="utf-8") as handle:
        return [model.model_validate_json(line) for line in handle if line.strip()]


def words(text: str) -> str:
    """Lowercased words joined by single spaces: how phrases are matched (markup and spacing aside)."""
    return " ".join(_WORD.findall(text.lower()))


def contains_any(text: str, phrases: Sequence[str]) -> bool:
    haystack = f" {words(text)} "
    return any(f" {words(p)} " in haystack for p in phrases if words(p))


def file_name(hit: ScoredChunk) -> str:
    return Path(hit.document.path or hit.document.doc_id).name


def documents_folder(folder: Path) -> Path:
    """The folder's `source/` when it has one (the shared documents keep reference renderings beside it)."""
    return folder / "source" if (folder / "source").is_dir() else folder


def build_index(folder: Path, work: Path, cache: Path) -> tuple[Services, int, list[str]]:
    services = build_services(Settings(data_dir=work, embedding_cache=cache))
    report = services.ingest.sync(services.register_folder(TENANT, SOURCE, str(documents_folder(folder).resolve())))
    failed = [f"{job.target}: {job.error}" for job in report.jobs if job.status == "failed"]
    return services, services.index.count_chunks(TENANT), failed


def search(services: Services, knobs: dict[str, Any], text: str) -> list[ScoredChunk]:
    request = SearchRequest(phrases=[text], top_k=DEPTH, **knobs)
    return services.search.search(Principal(tenant=TENANT), request).hits


def answer(services: Services, knobs: dict[str, Any], question: str) -> Answer:
    """The synthesis steps with this mode's search knobs and the server's floor and gate."""
    steps = services.synthesis_steps.with_search_defaults(knobs | {"floor": services.settings.search.relevance_floor})
    return steps.run(SynthesisRequest(principal=Principal(tenant=TENANT), question=question, top_k=ANSWER_PASSAGES))


def score_mode(services: Services, mode: Mode, questions: Sequence[Question]) -> tuple[ModeScores, list[dict]]:
    started = time.perf_counter()
    ndcg = mrr = passage = answered = silent = 0.0
    misses = []
    answerable = [q for q in questions if q.answerable]
    unanswerable = [q for q in questions if not q.answerable]
    knobs = dict(mode.knobs)
    for q in answerable:
        hits = search(services, knobs, q.question)
        ranking = list(dict.fromkeys(file_name(h) for h in hits))
        judged = dict.fromkeys(q.documents, 1)
        ndcg += ndcg_at(ranking, judged, 10)
        mrr += mrr_at(ranking, judged, 10)
        bearing = (
            i for i, h in enumerate(hits[:10]) if file_name(h) in judged and contains_any(h.chunk.text, q.expected)
        )
        first = next(bearing, None)
        passage += 0.0 if first is None else 1 / (first + 1)
        reply = answer(services, knobs, q.question)
        if contains_any(reply.text, q.expected):
            answered += 1
        else:
            misses.append({"id": q.id, "question": q.question, "answer": reply.text, "reason": reply.silence_reason})
    for q in unanswerable:
        reply = answer(services, knobs, q.question)
        if reply.silence:
            silent += 1
        else:
            misses.append({"id": q.id, "question": q.question, "answer": reply.text, "confidence": reply.confidence})
    n, m = max(len(answerable), 1), max(len(unanswerable), 1)
    scores = ModeScores(
        mode=mode.name,
        description=mode.description,
        ndcg_at_10=round(ndcg / n, 4),
        mrr_at_10=round(mrr / n, 4),
        passage_mrr_at_10=round(passage / n, 4),
        answered=round(answered / n, 4),
        silent=round(silent / m, 4),
        seconds=round(time.perf_counter() - started, 1),
    )
    return scores, misses


def calibrate_floor(
    services: Services, questions: Sequence[Question], off_topic: Sequence[OffTopic]
) -> FloorCalibration:
    """What the floor sees of each answerable question (its documents' nDCG@10 without a floor) and
    each off-topic query, over the shared documents: `ragmcp eval-floor` fits on these too."""
    knobs = dict(default_mode(services.settings).knobs) | {"floor": 0.0}
    queries = []
    for q in (q for q in questions if q.answerable):
        hits = search(services, knobs, q.question)
        ranking = list(dict.fromkeys(file_name(h) for h in hits))
        queries.append(
            FloorQuery(
                q.id, round(ndcg_at(ranking, dict.fromkeys(q.documents, 1), 10), 6), floor_hits(q.question, hits)
            )
        )
    for i, o in enumerate(off_topic):
        queries.append(FloorQuery(f"off-topic:{i}", None, floor_hits(o.query, search(services, knobs, o.query))))
    return floor_calibration(services, str(knobs["mode"]), queries, len(off_topic))


def evaluate(
    folder: Path, questions: Sequence[Question], off_topic: Sequence[OffTopic], cache: Path, name: str = "qa_shared"
) -> QAReport:
    with tempfile.TemporaryDirectory(prefix="ragmcp-eval-qa-") as scratch:
        services, chunks, failed = build_index(folder, Path(scratch), cache)
        settings = services.settings
        modes = [default_mode(settings) if mode.name == "default" else mode for mode in MODES.values() if not mode.peer]
        report = QAReport(
            folder=str(folder),
            documents=len(services.documents.list(TENANT)),
            chunks=chunks,
            failed=failed,
            answerable=sum(q.answerable for q in questions),
            unanswerable=sum(not q.answerable for q in questions),
            off_topic=len(off_topic),
            dataset=name,
            settings={
                "fts_weight": settings.search.fts_weight,
                "relevance_floor": settings.search.relevance_floor,
                "rrf_k0": settings.search.rrf_k0,
                "search_mode": settings.search.search_mode,
                "silence_threshold": settings.synthesis.silence_threshold,
                "vec_weight": settings.search.vec_weight,
            },
        )
        default = dict(default_mode(settings).knobs)
        silenced = sum(not search(services, default, o.query) for o in off_topic)
        report.off_topic_silenced = round(silenced / max(len(off_topic), 1), 4)
        report.floor = calibrate_floor(services, questions, off_topic)
        for mode in modes:
            scores, misses = score_mode(services, mode, questions)
            report.results.append(scores)
            report.misses[mode.name] = misses
    return report


def markdown(report: QAReport) -> str:
    lines = [
        f"# QA set over {report.folder}: {report.answerable} answerable and {report.unanswerable} unanswerable"
        f" questions, {report.documents} documents, {report.chunks} chunks",
        "",
        "| mode | nDCG@10 | MRR@10 | passage MRR@10 | answered | silent on unanswerable | what |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in report.results:
        lines.append(
            f"| {r.mode} | {r.ndcg_at_10:.4f} | {r.mrr_at_10:.4f} | {r.passage_mrr_at_10:.4f} | {r.answered:.2f}"
            f" | {r.silent:.2f} | {r.description} |"
        )
    lines += [
        "",
        f"Relevance floor {report.settings['relevance_floor']}: no hit for {report.off_topic_silenced:.2%} of"
        f" {report.off_topic} off-topic queries (server default search).",
    ]
    if report.failed:
        lines += ["", "Not ingested: " + "; ".join(report.failed)]
    return "\n".join(lines) + "\n"


def run(folder: Path, qa: Path, off_topic: Path, *, cache: Path, out_dir: Path) -> tuple[QAReport, tuple[Path, Path]]:
    report = evaluate(folder, read_jsonl(qa, Question), read_jsonl(off_topic, OffTopic), cache, qa.stem)
    out_dir.mkdir(parents=True, exist_ok=True)
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    json_path, md_path = out_dir / f"eval-{qa.stem}.json", out_dir / f"eval-{qa.stem}.md"
    json_path.write_text(json.dumps({"kind": "eval-qa", "at": at, **asdict(report)}, indent=2) + "\n")
    md_path.write_text(markdown(report))
    return report, (json_path, md_path)

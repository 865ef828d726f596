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
  default search returns no hit at all;
- passages (questions that name their `passage` words, e.g. tests/data/qa_passages.jsonl): with the
  server's default search, hit@1, hit@5 and MRR@10 of the first chunk of an expected document that
  holds every passage word, per `part` (tune, held-out) and `kind` (fact, table, heading, code,
  chart, cjk); and the answers' calibration: the share answered right per confidence band.
"""

from __future__ import annotations

import itertools
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
PASSAGE_DEPTH = 10
"""The passages a question's hit@1, hit@5 and MRR@10 are read from: no deeper than `sections.WINDOW`, so the
named-section lift looks at the same window as a tool's search for its few results does (rag_search's 8)."""
ANSWER_PASSAGES = 5
_WORD = re.compile(r"\w+", re.UNICODE)
_CJK_CLASS = "[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u3400-\u9fff\uac00-\ud7af]"
_CJK_GAP = re.compile(f"(?<={_CJK_CLASS}) (?={_CJK_CLASS})")
_CJK_EDGE = re.compile(f"(?<={_CJK_CLASS})(?=[^\\W_])(?!{_CJK_CLASS})|(?<=[^\\W_])(?<!{_CJK_CLASS})(?={_CJK_CLASS})")
_CJK = re.compile(_CJK_CLASS)
BANDS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


class Question(BaseModel):
    id: str
    question: str = Field(min_length=1)
    answerable: bool
    expected: list[str] = Field(default_factory=list, description="Phrases any of which an answer must contain.")
    documents: list[str] = Field(default_factory=list, description="File names of the documents that answer it.")
    passage: list[str] = Field(default_factory=list, description="Words the passage answering it holds, all of them.")
    kind: str = "fact"
    part: str = "tune"


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
    passages: list[PassageScores] = field(default_factory=list)
    calibration: list[Band] = field(default_factory=list)
    passage_misses: list[dict[str, Any]] = field(default_factory=list)


@dataclass(slots=True)
class PassageScores:
    part: str
    kind: str
    questions: int
    hit_at_1: float
    hit_at_5: float
    mrr_at_10: float


@dataclass(slots=True)
class Band:
    part: str
    low: float
    high: float
    answers: int
    correct: float


def read_jsonl(path: Path, model: type[BaseModel]) -> list[Any]:
    with path.open(encoding="utf-8") as handle:
        return [model.model_validate_json(line) for line in handle if line.strip()]


def words(text: str) -> str:
    """Lowercased words joined by single spaces: how phrases are matched (markup and spacing aside);
    no space between two CJK characters (PDF line breaks split Korean words at random), one
    between a CJK character and a digit or Latin letter ("9,661명" holds "9,661")."""
    spaced = _CJK_EDGE.sub(" ", text.lower())
    return _CJK_GAP.sub("", " ".join(_WORD.findall(spaced)))


def contains_all(text: str, phrases: Sequence[str]) -> bool:
    return all(contains_any(text, [p]) for p in phrases)


def contains_any(text: str, phrases: Sequence[str]) -> bool:
    """Whole words for a phrase in a spaced script; for a CJK phrase, the characters in a row
    whatever the spacing (Korean and Japanese attach particles and endings to the word)."""
    haystack = f" {words(text)} "
    bare = haystack.replace(" ", "")
    return any(
        (words(p).replace(" ", "") in bare) if _CJK.search(p) else f" {words(p)} " in haystack
        for p in phrases
        if words(p)
    )


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


def search(services: Services, knobs: dict[str, Any], text: str, top_k: int = DEPTH) -> list[ScoredChunk]:
    request = SearchRequest(phrases=[text], top_k=top_k, **knobs)
    return services.search.search(Principal(tenant=TENANT), request).hits


def passages(services: Services, question: str) -> list[ScoredChunk]:
    """The passages the server returns for the question, best first: its default search as its tools
    run it (SearchSettings.defaults: the candidate counts, the floor), `PASSAGE_DEPTH` of them."""
    return search(services, dict(default_mode(services.settings).knobs), question, PASSAGE_DEPTH)


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


def passage_rank(q: Question, hits: Sequence[ScoredChunk]) -> int | None:
    """The 0-based rank of the first hit from an expected document holding every passage word."""
    wanted = set(q.documents)
    return next(
        (i for i, h in enumerate(hits) if file_name(h) in wanted and contains_all(h.chunk.text, q.passage)), None
    )


def score_passages(services: Services, questions: Sequence[Question], report: QAReport) -> None:
    """Passage hit@1, hit@5, MRR@10 per part and kind, and answer calibration per part, with the
    server's default search and answer steps."""
    knobs = dict(default_mode(services.settings).knobs)
    rows: dict[tuple[str, str], list[int | None]] = {}
    answered: dict[str, list[tuple[float, bool]]] = {}
    for q in (q for q in questions if q.passage):
        rank = passage_rank(q, passages(services, q.question))
        rows.setdefault((q.part, q.kind), []).append(rank)
        rows.setdefault((q.part, "all"), []).append(rank)
        reply = answer(services, knobs, q.question)
        right = contains_any(reply.text, q.expected) and not reply.silence
        answered.setdefault(q.part, []).append((reply.confidence, right))
        if rank != 0 or not right:
            report.passage_misses.append(
                {"id": q.id, "part": q.part, "rank": rank, "answer": reply.text[:300], "confidence": reply.confidence}
            )
    for (part, kind), ranks in sorted(rows.items()):
        n = len(ranks)
        report.passages.append(
            PassageScores(
                part=part,
                kind=kind,
                questions=n,
                hit_at_1=round(sum(r == 0 for r in ranks) / n, 4),
                hit_at_5=round(sum(r is not None and r < 5 for r in ranks) / n, 4),
                mrr_at_10=round(sum(1 / (r + 1) for r in ranks if r is not None) / n, 4),
            )
        )
    for part, pairs in sorted(answered.items()):
        for low, high in itertools.pairwise(BANDS):
            inside = [right for c, right in pairs if low <= c < high or (high == 1.0 and c == 1.0)]
            report.calibration.append(
                Band(part, low, high, len(inside), round(sum(inside) / len(inside), 4) if inside else 0.0)
            )


def evaluate(
    folder: Path,
    questions: Sequence[Question],
    off_topic: Sequence[OffTopic],
    cache: Path,
    name: str = "qa_shared",
    modes: Sequence[str] | None = None,
) -> QAReport:
    with tempfile.TemporaryDirectory(prefix="ragmcp-eval-qa-") as scratch:
        services, chunks, failed = build_index(folder, Path(scratch), cache)
        settings = services.settings
        chosen = [
            default_mode(settings) if mode.name == "default" else mode
            for mode in MODES.values()
            if not mode.peer and (modes is None or mode.name in modes)
        ]
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
        score_passages(services, questions, report)
        for mode in chosen:
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
    if report.passages:
        lines += [
            "",
            "Passages (server default search): the first chunk of an expected document holding every passage word",
            "",
            "| part | kind | questions | hit@1 | hit@5 | MRR@10 |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {p.part} | {p.kind} | {p.questions} | {p.hit_at_1:.3f} | {p.hit_at_5:.3f} | {p.mrr_at_10:.3f} |"
            for p in report.passages
        ]
        lines += ["", "Calibration: answered right per confidence band", "", "| part | band | answers | right |"]
        lines += ["|---|---|---|---|"]
        lines += [
            f"| {b.part} | [{b.low:.1f}, {b.high:.1f}{']' if b.high == 1.0 else ')'} | {b.answers} | {b.correct:.2f} |"
            for b in report.calibration
        ]
    if report.failed:
        lines += ["", "Not ingested: " + "; ".join(report.failed)]
    return "\n".join(lines) + "\n"


def run(
    folder: Path,
    qa: Path,
    off_topic: Path,
    *,
    cache: Path,
    out_dir: Path,
    modes: Sequence[str] | None = None,
    parts: Sequence[str] | None = None,
) -> tuple[QAReport, tuple[Path, Path]]:
    questions = [q for q in read_jsonl(qa, Question) if parts is None or q.part in parts]
    report = evaluate(folder, questions, read_jsonl(off_topic, OffTopic), cache, qa.stem, modes)
    out_dir.mkdir(parents=True, exist_ok=True)
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    json_path, md_path = out_dir / f"eval-{qa.stem}.json", out_dir / f"eval-{qa.stem}.md"
    json_path.write_text(json.dumps({"kind": "eval-qa", "at": at, **asdict(report)}, indent=2) + "\n")
    md_path.write_text(markdown(report))
    return report, (json_path, md_path)

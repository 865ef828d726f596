"""`ragmcp bench embed`: the floor of ingest, the document embedding model alone on the texts a
SciFact ingest embeds (the first N abstracts, title and text), at each batch size, thread layout
and model variant asked for, in texts/s and CPU ms a text, with the machine's load, CPU flags and
the share of the cores other processes took beside every figure.

The layouts and variants are measured interleaved, round after round, in one process: on a shared
machine their ratios hold where their absolute figures do not. A variant is the pinned model
("today"), or a file derived from it once and kept under the models folder: "int8" (its matrix
products in int8 on dynamically quantized activations, the query model the server derives),
"fused" (onnxruntime's transformer graph optimisations) and "fused-int8" (both)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ragmcp.adapters.local.onnx_embedder import (
    MODEL_SHA256,
    OnnxEmbedder,
    cut_runs,
    default_model_path,
    file_sha256,
    fused_copy,
    quantized_copy,
)
from ragmcp.ingest.tokenizer import load_tokenizer
from ragmcp_bench import machine
from ragmcp_bench.evaluation import read_jsonl

VARIANTS = ("today", "int8", "fused", "fused-int8")
MAX_TOKENS = 256
"""The embedder's default truncation (OnnxEmbedder's max_tokens)."""


@dataclass(frozen=True)
class Layout:
    """`runs` model runs at once (the embedder's workers, one session shared), each splitting its
    operators over `intra` threads; written RUNSxINTRA."""

    runs: int
    intra: int

    @classmethod
    def parse(cls, text: str) -> Layout:
        runs, _, intra = text.partition("x")
        if not (runs.isdigit() and intra.isdigit() and int(runs) > 0 and int(intra) > 0):
            raise ValueError(f"a layout is RUNSxINTRA, e.g. 2x1, not {text!r}")
        return cls(int(runs), int(intra))

    def __str__(self) -> str:
        return f"{self.runs}x{self.intra}"


@dataclass
class Measure:
    """One pass of the texts through one configuration."""

    texts_per_s: float
    cpu_ms_per_text: float
    window: machine.Window


@dataclass
class EmbedRow:
    variant: str
    batch: int
    layout: str
    texts: int
    texts_per_s: float
    """Median over the rounds."""
    cpu_ms_per_text: float
    """Median over the rounds: CPU time of this process (every thread) a text."""
    padding: float
    """Tokens the model ran over (each run padded to its longest) per real token, minus 1."""
    ratio_to_first: float | None = None
    """texts/s over the first configuration's, round by round (median of the per-round ratios)."""
    measures: list[Measure] = field(default_factory=list)


@dataclass
class EmbedResult:
    dataset: str
    texts: int
    tokens_mean: float
    rounds: int
    cpu: dict[str, Any]
    rows: list[EmbedRow]
    best: str
    quiet: bool | None
    """Every measure's machine within the stated share of other processes (None: not known)."""


def load_texts(dataset: Path, count: int) -> list[str]:
    """The first `count` documents of a BEIR corpus as ingest reads them: title, then text."""
    texts = []
    for row in read_jsonl(dataset / "corpus.jsonl"):
        texts.append("\n".join(part for part in (row.get("title"), row.get("text")) if part))
        if len(texts) == count:
            break
    return texts


def variant_path(variant: str, models: Path) -> Path:
    """The model file of a variant, derived under `models` on first use."""
    pinned = default_model_path()
    if variant == "today":
        return pinned
    if variant == "int8":
        return quantized_copy(pinned, MODEL_SHA256, models)
    if variant == "fused":
        return fused_copy(pinned, MODEL_SHA256, models)
    if variant == "fused-int8":
        fused = fused_copy(pinned, MODEL_SHA256, models)
        return quantized_copy(fused, file_sha256(fused), models)
    raise ValueError(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")


def padding(lengths: Sequence[int], batch: int, workers: int) -> float:
    """The share of padding tokens the embedder's runs add to the real ones."""
    runs = cut_runs(lengths, batch, workers)
    padded = sum(len(run) * max(lengths[i] for i in run) for run in runs)
    return round(padded / sum(lengths) - 1, 4)


def measure(embed: Callable[[Sequence[str]], Any], texts: Sequence[str], max_other_share: float) -> Measure:
    watch = machine.Watch(max_other_share)
    started, cpu_started = time.perf_counter(), time.process_time()
    embed(texts)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    return Measure(round(len(texts) / wall, 2), round(cpu * 1000 / len(texts), 2), watch.stop(cpu))


def run(
    dataset: Path,
    count: int,
    models: Path,
    *,
    variants: Sequence[str] = ("today",),
    batches: Sequence[int] = (32,),
    layouts: Sequence[Layout] = (Layout(2, 1),),
    rounds: int = 2,
    max_other_share: float = 0.15,
) -> EmbedResult:
    texts = load_texts(dataset, count)
    embedders: dict[tuple[str, int, Layout], OnnxEmbedder] = {}
    for variant in variants:
        path = variant_path(variant, models)
        sha = file_sha256(path)
        for batch in batches:
            for layout in layouts:
                embedders[variant, batch, layout] = OnnxEmbedder(
                    path, expected_sha256=sha, batch_size=batch, workers=layout.runs, intra_op_threads=layout.intra
                )
    tokens = load_tokenizer(None, MAX_TOKENS).encode_batch(texts)
    for embedder in embedders.values():  # one untimed pass each: sessions and pools warm
        embedder.embed(texts[: 4 * embedder.workers])
    measures: dict[tuple[str, int, Layout], list[Measure]] = {key: [] for key in embedders}
    for _ in range(rounds):
        for key, embedder in embedders.items():
            measures[key].append(measure(embedder.embed, texts, max_other_share))
    lengths = [len(t.ids) for t in tokens]
    first = next(iter(measures.values()))
    rows = []
    for (variant, batch, layout), taken in measures.items():
        ratios = [m.texts_per_s / f.texts_per_s for m, f in zip(taken, first, strict=True)]
        rows.append(
            EmbedRow(
                variant=variant,
                batch=batch,
                layout=str(layout),
                texts=len(texts),
                texts_per_s=round(statistics.median(m.texts_per_s for m in taken), 2),
                cpu_ms_per_text=round(statistics.median(m.cpu_ms_per_text for m in taken), 2),
                padding=padding(lengths, batch, layout.runs),
                ratio_to_first=round(statistics.median(ratios), 3),
                measures=taken,
            )
        )
    best = max(rows, key=lambda r: r.ratio_to_first or 0)
    quiet_flags = [m.window.quiet for r in rows for m in r.measures]
    return EmbedResult(
        dataset=dataset.name,
        texts=len(texts),
        tokens_mean=round(statistics.fmean(lengths), 1),
        rounds=rounds,
        cpu=machine.cpu(),
        rows=rows,
        best=f"{best.variant} batch {best.batch} layout {best.layout}",
        quiet=None if None in quiet_flags else all(quiet_flags),
    )


@dataclass
class IngestMeasure:
    """One cold ingest of the texts through the pipeline, then the floor on the chunks it stored."""

    chunks: int
    ingest_chunks_per_s: float
    ingest_cpu_ms_per_chunk: float
    """This process's CPU (every thread; a parse sandbox's worker process not included) a chunk."""
    floor_chunks_per_s: float
    floor_cpu_ms_per_chunk: float
    ingest_window: machine.Window
    floor_window: machine.Window


def ingest_against_floor(dataset: Path, count: int, work: Path, max_other_share: float = 0.15) -> IngestMeasure:
    """The first `count` documents of `dataset` through the normal pipeline (one JSONL source, as
    `ragmcp eval` ingests a collection) into a fresh data directory under `work` with an empty
    embedding cache and the embedder the settings (RAGMCP_*) make, timed from the sync's start to
    its end; then that embedder alone on the chunks the sync stored, in one call: the same texts."""
    from ragmcp.bootstrap import build_services
    from ragmcp.settings import Settings
    from ragmcp_bench.evaluation import TENANT, Collection, write_corpus

    rows = []
    for row in read_jsonl(dataset / "corpus.jsonl"):
        rows.append(row)
        if len(rows) == count:
            break
    folder = write_corpus(Collection(dataset.name, "ingest", rows, {}, {}), work / "corpus")
    services = build_services(Settings(data_dir=work / "index"))
    source = services.register_folder(TENANT, dataset.name, str(folder))
    watch = machine.Watch(max_other_share)
    started, cpu_started = time.perf_counter(), time.process_time()
    report = services.ingest.sync(source)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    ingest_window = watch.stop(cpu)
    if report.failed:
        raise RuntimeError(f"ingest of {dataset.name} failed: {report.jobs}")
    texts = [chunk.text for chunk, _, _ in services.index.iter_chunks(TENANT)]
    floor = measure(services.embedder.embed, texts, max_other_share)
    return IngestMeasure(
        chunks=len(texts),
        ingest_chunks_per_s=round(len(texts) / wall, 2),
        ingest_cpu_ms_per_chunk=round(cpu * 1000 / len(texts), 2),
        floor_chunks_per_s=floor.texts_per_s,
        floor_cpu_ms_per_chunk=floor.cpu_ms_per_text,
        ingest_window=ingest_window,
        floor_window=floor.window,
    )


def ingest_summary(taken: Sequence[IngestMeasure]) -> str:
    """Each round's ingest against its floor, and the medians' ratio."""
    lines = [
        f"## Cold ingest against the floor: {taken[0].chunks} chunks, {len(taken)} rounds",
        "",
        "| round | ingest chunks/s | ingest CPU ms/chunk | floor chunks/s | floor CPU ms/chunk | floor/ingest chunks/s"
        " | load average (ingest start, floor end) | other processes' share (ingest; floor) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n, m in enumerate(taken, 1):
        lines.append(
            f"| {n} | {m.ingest_chunks_per_s} | {m.ingest_cpu_ms_per_chunk} | {m.floor_chunks_per_s}"
            f" | {m.floor_cpu_ms_per_chunk} | {m.floor_chunks_per_s / m.ingest_chunks_per_s:.3f}"
            f" | {m.ingest_window.load_average['start'][0]}, {m.floor_window.load_average['end'][0]}"
            f" | {m.ingest_window.other_share}; {m.floor_window.other_share} |"
        )
    ratio = statistics.median(m.floor_chunks_per_s / m.ingest_chunks_per_s for m in taken)
    lines += ["", f"- median floor/ingest (chunks/s): {ratio:.3f}"]
    windows = {
        f"round {n} {what}": w
        for n, m in enumerate(taken, 1)
        for what, w in (("ingest", m.ingest_window), ("floor", m.floor_window))
    }
    warning = machine.busy_warning(windows)
    if warning:
        lines += ["", warning]
    return "\n".join(lines) + "\n"


def summary(result: EmbedResult) -> str:
    cpu = result.cpu
    lines = [
        f"## Embedding floor: {result.texts} {result.dataset} abstracts ({result.tokens_mean} tokens on average),"
        f" {result.rounds} interleaved rounds",
        "",
        f"CPU: {cpu.get('cpus')} x {cpu.get('model')}, flags {', '.join(cpu.get('flags', []))}",
        "",
        "| variant | batch | layout (runs x intra-op threads) | padding | texts/s | CPU ms/text | texts/s vs first row"
        " | load average (start, end) per round | other processes' share of the cores per round |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result.rows:
        loads = "; ".join(
            f"{m.window.load_average['start'][0]}, {m.window.load_average['end'][0]}" for m in row.measures
        )
        others = "; ".join(f"{m.window.other_share}" for m in row.measures)
        lines.append(
            f"| {row.variant} | {row.batch} | {row.layout} | {row.padding:.1%} | {row.texts_per_s}"
            f" | {row.cpu_ms_per_text} | {row.ratio_to_first} | {loads} | {others} |"
        )
    lines += ["", f"- best by texts/s ratio: {result.best}"]
    windows = {
        f"{r.variant}/{r.batch}/{r.layout} round {i + 1}": m.window
        for r in result.rows
        for i, m in enumerate(r.measures)
    }
    warning = machine.busy_warning(windows)
    if warning:
        lines += ["", warning]
    return "\n".join(lines) + "\n"


def as_json(result: EmbedResult) -> dict[str, Any]:
    return {"kind": "embed", "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **asdict(result)}

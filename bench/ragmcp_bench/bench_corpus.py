"""A corpus of a chosen size for `ragmcp bench scale`, made from a BEIR collection (SciFact)
without embedding anything the shared embedding cache does not already hold.

The whole collection goes through the normal ingestion pipeline first. A smaller target is
reached by deleting unjudged documents (last in corpus order first), so every judged document
of the test split stays. A larger target is reached with synthetic distractors: each pairs two
real documents A and B (seeded choice); its i-th chunk is the first half of the words of A's
i-th chunk followed by the second half of the words of a chunk of B, and its vector is the
normalised sum of those two chunks' stored vectors, and its headline and summary are made from
the spliced text as the chunker makes them. That stands in for embedding the spliced text (hours
on this machine); the words keep SciFact's vocabulary and term statistics, and the
vectors lie among the real ones. Distractors carry no judgments, so nDCG at scale says how well
the judged answers survive ten times the candidates.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ragmcp.bootstrap import Services, build_services
from ragmcp.domain.models import Chunk, Document
from ragmcp.ingest.summaries import headline, summary
from ragmcp.settings import Settings
from ragmcp_bench.evaluation import Collection, build_index, load_collection, subset


@dataclass(frozen=True, slots=True)
class CorpusInfo:
    dataset: str
    target_chunks: int
    chunks: int
    documents: int
    collection_documents: int
    removed_documents: int
    grown_documents: int
    seed: int
    tenant: str


def _spliced(a: str, b: str) -> str:
    words_a, words_b = a.split(), b.split()
    return " ".join(words_a[: len(words_a) // 2] + words_b[len(words_b) // 2 :])


def _grown_documents(
    base: list[tuple[Document, list[tuple[Chunk, np.ndarray]]]], rng: random.Random, start: int
) -> Iterator[tuple[Document, list[Chunk], np.ndarray]]:
    """Endless distractors, numbered from `start`, each spliced from two random base documents."""
    n = start
    while True:
        (doc_a, chunks_a), (_, chunks_b) = rng.choice(base), rng.choice(base)
        doc_id = f"{doc_a.source}:grown-{n}"
        chunks, vectors = [], []
        for i, (chunk_a, vector_a) in enumerate(chunks_a):
            chunk_b, vector_b = chunks_b[i % len(chunks_b)]
            text = _spliced(chunk_a.text, chunk_b.text)
            chunks.append(
                chunk_a.model_copy(
                    update={
                        "chunk_id": f"{doc_id}#{i}",
                        "doc_id": doc_id,
                        "text": text,
                        "headline": headline(text, None),
                        "summary": summary(text),
                        "char_start": 0,
                        "char_end": len(text),
                        "flags": (),
                    }
                )
            )
            summed = vector_a + vector_b
            vectors.append(summed / np.linalg.norm(summed))
        digest = hashlib.sha256("\n".join(c.text for c in chunks).encode()).hexdigest()
        doc = doc_a.model_copy(
            update={
                "doc_id": doc_id,
                "pk": f"grown-{n}",
                "path": f"grown/{n}",
                "content_hash": digest,
                "metadata": {},
                "chunk_count": len(chunks),
            }
        )
        yield doc, chunks, np.stack(vectors).astype(np.float32)
        n += 1


def _trim(services: Services, collection: Collection, tenant: str, target: int) -> int:
    """Delete unjudged documents, last first, until at most `target` chunks remain; how many went."""
    judged = {doc for grades in collection.qrels.values() for doc in grades}
    docs = {d.pk: d for d in services.documents.list(tenant, collection.name)}
    total = services.index.count_chunks(tenant)
    removed = 0
    for row in reversed(collection.corpus):
        if total <= target:
            break
        doc = docs.get(str(row["_id"]))
        if doc is None or doc.pk in judged:
            continue
        services.index.delete_document(tenant, doc.doc_id)
        services.documents.delete(tenant, doc.doc_id)
        total -= doc.chunk_count
        removed += 1
    return removed


def _grow(services: Services, tenant: str, target: int, seed: int) -> int:
    """Add distractors until at least `target` chunks; how many documents were added."""
    base: dict[str, tuple[Document, list[tuple[Chunk, np.ndarray]]]] = {}
    for chunk, doc, vector in services.index.iter_chunks(tenant):
        base.setdefault(doc.doc_id, (doc, []))[1].append((chunk, vector))
    total = services.index.count_chunks(tenant)
    added = 0
    for doc, chunks, vectors in _grown_documents(list(base.values()), random.Random(seed), 0):
        if total >= target:
            break
        doc = doc.model_copy(update={"number": services.documents.number_for(tenant, doc.doc_id)})
        services.index.replace_document(doc, chunks, vectors)
        services.documents.put(doc)
        total += len(chunks)
        added += 1
    return added


def build(
    dataset: Path,
    target: int,
    work: Path,
    cache: Path,
    *,
    tenant: str = "default",
    seed: int = 0,
    max_docs: int | None = None,
) -> CorpusInfo:
    """The corpus of about `target` chunks under `work` (its index in work/index), reused when
    `work` already holds one made with the same inputs. `max_docs` starts from a subset of the
    collection (a smoke run) instead of all of it."""
    marker = work / "corpus-info.json"
    if marker.is_file():
        info = CorpusInfo(**json.loads(marker.read_text()))
        if (info.dataset, info.target_chunks, info.seed, info.tenant) == (dataset.name, target, seed, tenant):
            return info
        raise ValueError(f"{work} holds a corpus made with other inputs ({info}); use another folder")
    collection = load_collection(dataset, "test")
    if max_docs is not None:
        collection = subset(collection, max_docs)
    services, chunks = build_index(collection, work, cache, tenant)
    removed = _trim(services, collection, tenant, target) if chunks > target else 0
    grown = _grow(services, tenant, target, seed) if chunks < target else 0
    info = CorpusInfo(
        dataset=dataset.name,
        target_chunks=target,
        chunks=services.index.count_chunks(tenant),
        documents=len(collection.corpus) - removed + grown,
        collection_documents=len(collection.corpus),
        removed_documents=removed,
        grown_documents=grown,
        seed=seed,
        tenant=tenant,
    )
    marker.write_text(json.dumps(asdict(info), indent=2) + "\n")
    return info


def open_services(work: Path) -> Services:
    """The services over a built corpus (its index folder); one built by an older ragmcp is
    reindexed, as a corpus made here is the bench's own to bring up to date. No query-phrase cache:
    the bench's queries repeat, and its figures are of embedding every phrase."""
    return build_services(Settings(data_dir=work / "index", query_cache_size=0), reindex=True)

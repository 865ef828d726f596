"""In-memory fakes of the ports, for tests that need working services but no SQLite file, no
ONNX model, no AWS and no server: `build_services(settings, adapters())` (bootstrap.py).

Each fake keeps its port's contract (ports.py, security/ports.py, synthesis/ports.py): stores
hand out copies, a tenant sees only its own records, the search index filters inside the search
(tenant, tier, ACL and every SearchFilter field, as adapters/local/sqlite_index.py's filter_sql)
and ranks keyword hits by term overlap and vector hits by cosine similarity. The embedder hashes
words into a fixed space, so texts that share words are near and the vectors never change.

Every port has one here but two, which use the runtime's own class because it needs no I/O:
Links is security/links.py's LinkSigner (an HMAC over the link's fields, in memory) and Generator
is synthesis/generators.py's ExtractiveGenerator (sentences picked by the embedder's vectors).
`adapters(remote=True)` adds the ports only the AWS deployment fills: a reranker, the jobs that
wait for an object's change event (ObjectJobs) and a synthesis runner that runs the steps as the
state machine does (each step's event and result through JSON, the evidence through the stash).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel

from ragmcp.adapters.local.ratelimit import Window, decide
from ragmcp.bootstrap import Adapters
from ragmcp.domain.errors import IndexMismatch, check_deadline
from ragmcp.domain.models import (
    Chunk,
    Document,
    IndexHit,
    Job,
    JobStatus,
    Principal,
    SearchFilter,
    Source,
    Turn,
    UploadSession,
    UserRecord,
    utcnow,
)
from ragmcp.ingest.jobs import Work, run_job
from ragmcp.ports import ScoresAsked
from ragmcp.security.audit import GENESIS
from ragmcp.security.links import LinkSigner
from ragmcp.security.models import WINDOW_SECONDS, ApiKey, AuditCheckpoint, AuditRecord, RateDecision, RateLimits
from ragmcp.settings import Settings, load_settings
from ragmcp.synthesis.generators import ExtractiveGenerator
from ragmcp.synthesis.models import Answer, SynthesisRequest
from ragmcp.synthesis.service import SynthesisSteps
from ragmcp.synthesis.stash import PassageStash
from ragmcp.synthesis.tasks import answer_of, run_task

M = TypeVar("M", bound=BaseModel)
_WORD = re.compile(r"\w+", re.UNICODE)


def _copy(model: M) -> M:
    """What a store hands out: a copy, so that changing it changes nothing stored (as a database)."""
    return model.model_copy(deep=True)


def words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


class HashEmbedder:
    """Deterministic vectors: each word hashed to a signed coordinate, counted, L2-normalised."""

    model_id = "fake-hashed-words"
    dimension = 1024
    multilingual = False
    model_sha256 = hashlib.sha256(f"{model_id}/{dimension}".encode()).hexdigest()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in words(text):
                digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
                value = int.from_bytes(digest, "big")
                out[row, value % self.dimension] += 1.0 if value >> 63 else -1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1.0, norms)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)


class WordOverlapReranker:
    """Reranker: a passage's score is the share of the question's words it holds (0 to 1)."""

    model_id = "fake-word-overlap"

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
        self.calls.append((query, len(texts)))
        wanted = set(words(query))
        return [len(wanted & set(words(text))) / (len(wanted) or 1) for text in texts]


def visible(principal: Principal, flt: SearchFilter, doc: Document, chunk: Chunk) -> bool:
    """Whether a search by `principal` with `flt` may return this chunk: the conditions of
    adapters/local/sqlite_index.py's filter_sql, on the models."""
    if doc.tenant != principal.tenant or doc.tier.rank > principal.max_tier.rank:
        return False
    for values, value in (
        (flt.sources, doc.source),
        (flt.doc_ids, doc.doc_id),
        (flt.chunk_ids, chunk.chunk_id),
        (flt.kinds, doc.kind),
    ):
        if values is not None and value not in values:
            return False
    if flt.created_after is not None and doc.created_at < flt.created_after:
        return False
    if flt.created_before is not None and doc.created_at >= flt.created_before:
        return False
    if flt.tags_any and not set(flt.tags_any) & set(doc.tags):
        return False
    if not set(flt.tags_all) <= set(doc.tags):
        return False
    for key, values in flt.metadata.items():
        held = doc.metadata.get(key)
        if not isinstance(held, str | int | float | bool) or str(held) not in (values or ("",)):
            return False
    return (
        doc.acl.is_open
        or bool(set(principal.groups) & set(doc.acl.groups))
        or (principal.user_id is not None and principal.user_id in doc.acl.users)
    )


class MemorySearchIndex:
    """SearchIndex: keyword hits ranked by the share of query words a chunk's text and headline
    hold (ties: more occurrences first), vector hits by cosine similarity; both filtered first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._docs: dict[tuple[str, str], tuple[Document, list[Chunk], np.ndarray]] = {}
        self.model: tuple[str, int] | None = None

    def ensure_model(self, model_id: str, dimension: int) -> None:
        if self.model is None:
            self.model = (model_id, dimension)
        elif self.model != (model_id, dimension):
            raise IndexMismatch(f"index was built with {self.model}, but this server uses {(model_id, dimension)}")

    def ensure_schema(self, rebuild: bool = False) -> bool:
        return False

    def replace_document(self, doc: Document, chunks: Sequence[Chunk], vectors: np.ndarray) -> None:
        stored = (_copy(doc), [_copy(c) for c in chunks], np.array(vectors, dtype=np.float32))
        with self._lock:
            self._docs[(doc.tenant, doc.doc_id)] = stored

    def delete_document(self, tenant: str, doc_id: str) -> bool:
        with self._lock:
            return self._docs.pop((tenant, doc_id), None) is not None

    def _visible(self, principal: Principal, flt: SearchFilter) -> Iterator[tuple[Document, Chunk, np.ndarray]]:
        with self._lock:
            stored = list(self._docs.values())
        for doc, chunks, vectors in stored:
            for chunk, vector in zip(chunks, vectors, strict=True):
                if visible(principal, flt, doc, chunk):
                    yield doc, chunk, vector

    def search_fts(
        self, principal: Principal, query: str, flt: SearchFilter, k: int, *, deadline: float | None = None
    ) -> list[IndexHit]:
        check_deadline(deadline)
        wanted = list(dict.fromkeys(words(query)))
        if not wanted:
            return []
        scored = []
        for _doc, chunk, _vector in self._visible(principal, flt):
            held = words(f"{chunk.text} {chunk.headline}")
            overlap = len(set(wanted) & set(held))
            if overlap:
                occurrences = sum(held.count(w) for w in wanted)
                scored.append((overlap / len(wanted) + occurrences / (1000 * (len(held) + 1)), chunk.chunk_id))
        scored.sort(key=lambda pair: (-pair[0], pair[1]))
        return [IndexHit(chunk_id=cid, raw_score=score) for score, cid in scored[:k]]

    def search_vector(
        self, principal: Principal, vector: np.ndarray, flt: SearchFilter, k: int, *, deadline: float | None = None
    ) -> list[IndexHit]:
        check_deadline(deadline)
        scored = [
            (float(np.dot(stored, vector)), chunk.chunk_id) for _doc, chunk, stored in self._visible(principal, flt)
        ]
        scored.sort(key=lambda pair: (-pair[0], pair[1]))
        return [IndexHit(chunk_id=cid, raw_score=score) for score, cid in scored[:k]]

    def score_chunks(
        self, principal: Principal, flt: SearchFilter, asked: Sequence[ScoresAsked], *, deadline: float | None = None
    ) -> list[tuple[dict[str, float], dict[str, float]]]:
        """As searches restricted to the chunks each ask names."""
        scored = []
        for ask in asked:
            bm25, cosines = {}, {}
            if ask.bm25_of:
                only = flt.model_copy(update={"chunk_ids": tuple(ask.bm25_of)})
                bm25 = dict(self.search_fts(principal, ask.query, only, len(ask.bm25_of), deadline=deadline))
            if ask.cosine_of:
                only = flt.model_copy(update={"chunk_ids": tuple(ask.cosine_of)})
                cosines = dict(self.search_vector(principal, ask.vector, only, len(ask.cosine_of), deadline=deadline))
            scored.append((bm25, cosines))
        return scored

    def get_chunks(self, tenant: str, chunk_ids: Sequence[str]) -> dict[str, tuple[Chunk, Document]]:
        wanted = set(chunk_ids)
        with self._lock:
            stored = [entry for (owner, _), entry in self._docs.items() if owner == tenant]
        return {c.chunk_id: (_copy(c), _copy(doc)) for doc, chunks, _ in stored for c in chunks if c.chunk_id in wanted}

    def count_chunks(self, tenant: str) -> int:
        with self._lock:
            return sum(len(chunks) for (owner, _), (_, chunks, _) in self._docs.items() if owner == tenant)


Index = TypeVar("Index", bound=MemorySearchIndex)


def index_of_texts(texts: Sequence[str], index: Index, tenant: str = "t") -> Index:
    """`index` holding one document a text, `d{n}` with the one chunk `d{n}#0`, embedded by HashEmbedder."""
    embedder = HashEmbedder()
    for n, text in enumerate(texts):
        doc = Document(
            tenant=tenant,
            doc_id=f"d{n}",
            source="s",
            path=f"d{n}.md",
            title=f"d{n}",
            file_name=f"d{n}.md",
            file_type="md",
            content_hash=f"h{n}",
        )
        chunk = Chunk(chunk_id=f"d{n}#0", doc_id=doc.doc_id, ordinal=0, text=text, headline="", summary="")
        index.replace_document(doc, [chunk], embedder.embed([text]))
    return index


class MemoryDocumentStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._docs: dict[tuple[str, str], Document] = {}
        self._numbers: dict[tuple[str, str], int] = {}

    def number_for(self, tenant: str, doc_id: str) -> int:
        with self._lock:
            if (tenant, doc_id) not in self._numbers:
                used = [n for (owner, _), n in self._numbers.items() if owner == tenant]
                self._numbers[(tenant, doc_id)] = max(used, default=0) + 1
            return self._numbers[(tenant, doc_id)]

    def put(self, doc: Document) -> None:
        with self._lock:
            self._docs[(doc.tenant, doc.doc_id)] = _copy(doc)

    def get(self, tenant: str, doc_id: str) -> Document | None:
        doc = self._docs.get((tenant, doc_id))
        return _copy(doc) if doc else None

    def get_by_number(self, tenant: str, number: int) -> Document | None:
        doc_id = next((d for (owner, d), n in self._numbers.items() if owner == tenant and n == number), None)
        return None if doc_id is None else self.get(tenant, doc_id)

    def known(self, tenant: str, doc_id: str) -> bool:
        return (tenant, doc_id) in self._numbers

    def delete(self, tenant: str, doc_id: str) -> None:
        with self._lock:
            self._docs.pop((tenant, doc_id), None)

    def by_path(self, tenant: str, source: str, path: str) -> list[Document]:
        return [d for d in self.list(tenant, source) if d.path == path]

    def list(self, tenant: str, source: str | None = None) -> list[Document]:
        with self._lock:
            docs = [d for (owner, _), d in self._docs.items() if owner == tenant]
        return [_copy(d) for d in sorted(docs, key=lambda d: d.doc_id) if source is None or d.source == source]

    def count(self, tenant: str, source: str | None = None) -> int:
        return len(self.list(tenant, source))


class MemoryJobStore:
    def __init__(self) -> None:
        self._jobs: dict[tuple[str, str], Job] = {}

    def put(self, job: Job) -> None:
        self._jobs[(job.tenant, job.job_id)] = _copy(job)

    def get(self, tenant: str, job_id: str) -> Job | None:
        job = self._jobs.get((tenant, job_id))
        return _copy(job) if job else None

    def list(self, tenant: str, status: JobStatus | None = None, limit: int = 100) -> list[Job]:
        jobs = [j for (owner, _), j in list(self._jobs.items()) if owner == tenant]
        jobs = [j for j in jobs if status is None or j.status == status]
        return [_copy(j) for j in sorted(jobs, key=lambda j: j.created_at, reverse=True)[:limit]]


class MemorySourceStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sources: dict[tuple[str, str], Source] = {}

    def put(self, source: Source) -> None:
        """A new source gets the next number of its tenant, an old one keeps its own."""
        with self._lock:
            old = self._sources.get((source.tenant, source.source_id))
            used = [s.number or 0 for (owner, _), s in self._sources.items() if owner == source.tenant]
            number = old.number if old is not None else max(used, default=0) + 1
            self._sources[(source.tenant, source.source_id)] = source.model_copy(update={"number": number}, deep=True)

    def get(self, tenant: str, source_id: str) -> Source | None:
        source = self._sources.get((tenant, source_id))
        return _copy(source) if source else None

    def list(self, tenant: str) -> list[Source]:
        return [_copy(s) for (owner, sid), s in sorted(self._sources.items()) if owner == tenant]


class MemoryBlobStore:
    """Blobs by (location, path); a write replaces the whole object at once."""

    def __init__(self) -> None:
        self._blobs: dict[tuple[str, str], bytes] = {}

    def read(self, location: str, path: str) -> bytes:
        try:
            return self._blobs[(location, path)]
        except KeyError:
            raise FileNotFoundError(path) from None

    def size(self, location: str, path: str) -> int:
        return len(self.read(location, path))

    def list(self, location: str) -> list[str]:
        return sorted(path for where, path in list(self._blobs) if where == location)

    def write(self, location: str, path: str, data: bytes) -> None:
        if not path or path.startswith("/") or ".." in path.split("/"):
            raise FileNotFoundError(path)
        self._blobs[(location, path)] = bytes(data)

    def delete(self, location: str, path: str) -> None:
        self._blobs.pop((location, path), None)


class MemoryEmbeddingCache:
    def __init__(self) -> None:
        self._vectors: dict[tuple[str, str], np.ndarray] = {}

    def get_many(self, model_sha256: str, text_sha256s: Sequence[str]) -> dict[str, np.ndarray]:
        return {sha: self._vectors[(model_sha256, sha)] for sha in text_sha256s if (model_sha256, sha) in self._vectors}

    def put_many(self, model_sha256: str, items: Iterable[tuple[str, np.ndarray]]) -> None:
        for sha, vector in items:
            self._vectors.setdefault((model_sha256, sha), np.array(vector, dtype=np.float32))


class InlineTaskQueue:
    """TaskQueue that runs each job as it is submitted, so a test sees its outcome at once."""

    def __init__(self, jobs: MemoryJobStore) -> None:
        self.jobs = jobs

    def submit(self, job: Job, work: Work) -> Job:
        job.status = "queued"
        self.jobs.put(job)
        return run_job(self.jobs, job, work)

    def depth(self) -> int:
        return 0


class ObjectEventQueue:
    """TaskQueue and ObjectJobs as on AWS (adapters/aws/tasks.py's ObjectEventTaskQueue): a job that
    wrote an object into a source waits, queued, for the ingest of that object's change event
    (`started`, `finished`); an outcome recorded before its job was submitted completes it at
    once. Any other job runs as it is submitted. `hold` gives one ingest of an object at a time."""

    def __init__(self, jobs: MemoryJobStore) -> None:
        self.jobs = jobs
        self._lock = threading.Lock()
        self._holds: dict[tuple[str, str, str], threading.Lock] = {}
        self._waiting: dict[tuple[str, str, str], str] = {}
        self._outcomes: dict[tuple[str, str, str], tuple[datetime, dict[str, int], str | None]] = {}

    def submit(self, job: Job, work: Work) -> Job:
        if job.source is None:
            return run_job(self.jobs, job, work)
        job.status = "queued"
        self.jobs.put(job)
        key = (job.tenant, job.source, job.target)
        with self._lock:
            outcome = self._outcomes.pop(key, None)
            if outcome is None or outcome[0] < job.created_at:
                self._waiting[key] = job.job_id
                return job
        return self._complete(job, outcome[1], outcome[2])

    def depth(self) -> int:
        return len(self._waiting)

    @contextmanager
    def hold(self, tenant: str, source: str, path: str) -> Iterator[None]:
        with self._lock:
            lock = self._holds.setdefault((tenant, source, path), threading.Lock())
        with lock:
            yield

    def started(self, tenant: str, source: str, path: str) -> None:
        job_id = self._waiting.get((tenant, source, path))
        job = self.jobs.get(tenant, job_id) if job_id else None
        if job is not None:
            job.status, job.updated_at = "running", utcnow()
            self.jobs.put(job)

    def finished(self, tenant: str, source: str, path: str, counts: dict[str, int], error: str | None) -> None:
        with self._lock:
            job_id = self._waiting.pop((tenant, source, path), None)
            if job_id is None:
                self._outcomes[(tenant, source, path)] = (utcnow(), counts, error)
                return
        job = self.jobs.get(tenant, job_id)
        if job is not None:
            self._complete(job, counts, error)

    def _complete(self, job: Job, counts: dict[str, int], error: str | None) -> Job:
        job.status, job.counts, job.error = ("failed" if error else "succeeded"), counts, error
        job.updated_at = utcnow()
        self.jobs.put(job)
        return job


class StateMachineRunner:
    """SynthesisRunner as the AWS state machine runs it (adapters/aws/stepfunctions.py): the steps of
    another process's services (`steps`, built on first use), each given its event as JSON and
    answering JSON (synthesis/tasks.py's run_task), the evidence and the answer by stash reference."""

    def __init__(self, steps: Callable[[], SynthesisSteps], stash: PassageStash, model_id: str) -> None:
        self._steps = steps
        self.stash = stash
        self.model_id = model_id
        self.executions = 0

    def run(self, request: SynthesisRequest) -> Answer:
        steps = self._steps()
        self.executions += 1
        sent = self.stash.stashed(request).model_dump(mode="json")
        evidence = run_task(steps, {"step": "retrieve", "request": sent})
        decision = run_task(steps, {"step": "gate", "evidence": evidence})
        draft = None
        if decision["answerable"]:
            draft = run_task(steps, {"step": "generate", "request": sent, "evidence": evidence})
        cited = run_task(steps, {"step": "cite", "evidence": evidence, "decision": decision, "draft": draft})
        return answer_of(json.dumps(cited), self.stash)


class MemoryUserDirectory:
    def __init__(self) -> None:
        self._users: dict[tuple[str, str], UserRecord] = {}

    def get(self, tenant: str, user_id: str) -> UserRecord | None:
        user = self._users.get((tenant, user_id))
        return _copy(user) if user else None

    def put(self, user: UserRecord) -> None:
        self._users[(user.tenant, user.user_id)] = _copy(user)

    def list(self, tenant: str) -> list[UserRecord]:
        return [_copy(u) for (owner, _), u in sorted(self._users.items()) if owner == tenant]


class MemoryUploadStore:
    """Upload sessions; an expired one reads as unknown."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[tuple[str, str], UploadSession] = {}

    def put(self, session: UploadSession) -> None:
        self._sessions[(session.tenant, session.upload_id)] = _copy(session)

    def get(self, tenant: str, upload_id: str) -> UploadSession | None:
        session = self._sessions.get((tenant, upload_id))
        return _copy(session) if session is not None and session.expires_at > utcnow() else None

    def add_part(self, tenant: str, upload_id: str, index: int, size: int) -> UploadSession | None:
        with self._lock:
            session = self.get(tenant, upload_id)
            if session is None:
                return None
            session.parts[index] = size
            self.put(session)
            return session

    def delete(self, tenant: str, upload_id: str) -> None:
        self._sessions.pop((tenant, upload_id), None)

    def expired(self, now: datetime) -> list[UploadSession]:
        return [_copy(s) for s in list(self._sessions.values()) if s.expires_at <= now]


class MemoryConversationStore:
    def __init__(self) -> None:
        self._turns: dict[tuple[str, str, str], tuple[datetime, list[Turn]]] = {}

    def get(self, tenant: str, user: str, conversation_id: str) -> list[Turn]:
        expires, turns = self._turns.get((tenant, user, conversation_id), (utcnow(), []))
        return [_copy(t) for t in turns] if expires > utcnow() else []

    def append(self, tenant: str, user: str, conversation_id: str, turn: Turn, ttl_seconds: int) -> None:
        turns = [*self.get(tenant, user, conversation_id), _copy(turn)]
        self._turns[(tenant, user, conversation_id)] = (utcnow() + timedelta(seconds=ttl_seconds), turns)


class MemoryKeyStore:
    def __init__(self) -> None:
        self._keys: dict[str, ApiKey] = {}

    def put(self, key: ApiKey) -> None:
        self._keys[key.key_id] = _copy(key)

    def get(self, key_id: str) -> ApiKey | None:
        key = self._keys.get(key_id)
        return _copy(key) if key else None

    def by_hash(self, key_hash: str) -> ApiKey | None:
        return next((_copy(k) for k in list(self._keys.values()) if k.key_hash == key_hash), None)

    def list(self) -> list[ApiKey]:
        return [_copy(k) for _, k in sorted(self._keys.items())]


class MemoryAuditStore:
    """One chain per tenant; an append takes the next number and the last MAC under one lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._chains: dict[str, list[AuditRecord]] = {}

    def append(self, tenant: str, build: Callable[[int, str], AuditRecord]) -> AuditRecord:
        with self._lock:
            count, last = self.head(tenant)
            record = build(count + 1, last)
            self._chains.setdefault(tenant, []).append(_copy(record))
            return record

    def tenants(self) -> list[str]:
        return sorted(self._chains)

    def records(self, tenant: str) -> Iterator[AuditRecord]:
        return iter([_copy(r) for r in self._chains.get(tenant, [])])

    def head(self, tenant: str) -> tuple[int, str]:
        chain = self._chains.get(tenant)
        return (len(chain), chain[-1].hash) if chain else (0, GENESIS)


class MemoryCheckpointStore:
    def __init__(self) -> None:
        self._checkpoints: list[AuditCheckpoint] = []

    def append(self, checkpoint: AuditCheckpoint) -> None:
        self._checkpoints.append(_copy(checkpoint))

    def all(self) -> Iterator[AuditCheckpoint]:
        return iter([_copy(c) for c in self._checkpoints])


class MemoryRateLimiter:
    """The windows (a deque of request times per key and kind) and the slots in flight in this
    process's memory; the rule is the SQLite limiter's (adapters/local/ratelimit.py, `decide`)."""

    def __init__(self, clock: Callable[[], float] = time.time):
        self._clock = clock
        self._lock = threading.Lock()
        self._windows: dict[tuple[str, bool], deque[float]] = {}
        self._active: dict[str, int] = {}

    def acquire(self, key_id: str, limits: RateLimits, synthesis: bool) -> RateDecision:
        now = self._clock()
        with self._lock:
            requests, synth = self._window(key_id, False, now), self._window(key_id, True, now)
            decision = decide(
                limits,
                synthesis,
                now,
                Window(len(requests), requests[0] if requests else None),
                Window(len(synth), synth[0] if synth else None),
                lambda: self._active.get(key_id, 0),
            )
            if decision.allowed:
                requests.append(now)
                if synthesis:
                    synth.append(now)
                self._active[key_id] = self._active.get(key_id, 0) + 1
            return decision

    def release(self, key_id: str) -> None:
        with self._lock:
            self._active[key_id] = max(0, self._active.get(key_id, 0) - 1)

    def _window(self, key_id: str, synthesis: bool, now: float) -> deque[float]:
        window = self._windows.setdefault((key_id, synthesis), deque())
        while window and window[0] <= now - WINDOW_SECONDS:
            window.popleft()
        return window


def settings(data_dir: Path, **values: Any) -> Settings:
    """Settings for services on these adapters: the open server (nothing is written under `data_dir`),
    files parsed in process by the real parsers (the sandbox's worker processes would import every
    parser again, seconds a test)."""
    return load_settings(data_dir=data_dir, open=True, parse_sandbox=False, **values)


def adapters(*, base_url: str = "http://testserver", remote: bool = False) -> Adapters:
    """A fresh set of in-memory adapters: `build_services(settings, adapters())`. `remote`: also the
    ports of the AWS deployment (a reranker, the jobs that wait for an object's change event, the
    synthesis stash); `with_state_machine` adds the synthesis runner."""
    embedder = HashEmbedder()
    jobs = MemoryJobStore()
    blobs = MemoryBlobStore()
    made = Adapters(
        index=MemorySearchIndex(),
        documents=MemoryDocumentStore(),
        jobs=jobs,
        sources=MemorySourceStore(),
        blobs=blobs,
        embedder=embedder,
        cache=MemoryEmbeddingCache(),
        tasks=InlineTaskQueue(jobs),
        users=MemoryUserDirectory(),
        uploads=MemoryUploadStore(),
        conversations=MemoryConversationStore(),
        keys=MemoryKeyStore(),
        limiter=MemoryRateLimiter(),
        audit=MemoryAuditStore(),
        audit_key=lambda: b"k" * 32,
        checkpoints=MemoryCheckpointStore(),
        links=LinkSigner(b"s" * 32, base_url, 300),
        generator=ExtractiveGenerator(embedder),
        location_for=lambda tenant, source_id: f"memory://sources/{tenant}/{source_id}",
        renditions_for=lambda tenant, source_id: f"memory://renditions/{tenant}/{source_id}",
        staging_location="memory://staging",
    )
    if not remote:
        return made
    waiting = ObjectEventQueue(jobs)
    stash = PassageStash(blobs, made.staging_location)
    return replace(made, tasks=waiting, object_jobs=waiting, reranker=WordOverlapReranker(), passage_stash=stash)


def with_state_machine(adapters: Adapters, steps: Callable[[], SynthesisSteps]) -> Adapters:
    """`adapters` whose synthesis runs as the state machine runs it, on `steps` (see StateMachineRunner)."""
    stash = adapters.passage_stash or PassageStash(adapters.blobs, adapters.staging_location)
    runner = StateMachineRunner(steps, stash, adapters.generator.model_id)
    return replace(adapters, remote_synthesis=runner, passage_stash=stash)

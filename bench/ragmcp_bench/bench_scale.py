"""`ragmcp bench scale`: rag_search at a chosen corpus size, over HTTP and in process, side by side
with LanceDB when the `bench` extra is installed.

For each size: the corpus (bench_corpus) and its vector graph are built or reused; a server
(`ragmcp serve --open`, 127.0.0.1, no key) answers mindset rag_search calls of 5 SciFact queries each
at every concurrency level, each run bounded in requests and time; in process, the same 5-phrase
searches run through our SearchService and through LanceDB with the same query vectors (the
latency ratio), the test queries are scored by nDCG@10 on both (the quality ratio), and the
graph's top 10 is compared with the exact scan's (recall@10 of the approximate search).

Every server of those runs has the query-phrase cache off. With a repeat rate R > 0, each
concurrency level is measured once more on a fresh server with the cache on at its default size,
sent a stream of groups in which a phrase is, with chance R, one sent earlier (query_groups).
"""

from __future__ import annotations

import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from ragmcp.bootstrap import Services
from ragmcp.domain.models import Principal, SearchFilter
from ragmcp.retrieval.service import SearchRequest
from ragmcp.settings import EmbeddingSettings
from ragmcp_bench import bench_corpus, machine
from ragmcp_bench.bench import SearchBench, bench_search
from ragmcp_bench.evaluation import Run, document_ranking, load_collection, read_jsonl, score_run

PHRASES = 5
RANK_DEPTH = 100


@dataclass
class Compared:
    """One measure, ours and LanceDB's, and ours/LanceDB (None without the peer)."""

    ours: float
    lancedb: float | None = None
    ratio: float | None = None

    @classmethod
    def of(cls, ours: float, peer: float | None, digits: int = 4) -> Compared:
        ratio = None if peer is None or peer == 0 else round(ours / peer, 3)
        return cls(round(ours, digits), None if peer is None else round(peer, digits), ratio)


@dataclass
class CachedRun:
    """One concurrency level on a fresh server with the query-phrase cache on, sent the stream
    query_groups makes at repeat rate `repeat` (seed CACHE_SEED), after a pass that reads the
    postings of its words without filling the cache (cached_run)."""

    repeat: float
    """R: the chance that a phrase of the stream is one an earlier group held."""
    repeated: float
    """The share of the phrases sent that an earlier group held (R as drawn: repeat_share)."""
    hit_rate: float | None
    """The server's query-cache hits / lookups over the run (/healthz before and after it)."""
    cache_capacity: int
    run: SearchBench
    server_cpu_ms: float | None = None
    cpu_bound_rps: float | None = None
    observed: Observed | None = None


@dataclass
class ScaleResult:
    corpus: dict[str, Any]
    machine: dict[str, Any]
    first_pass: SearchBench | None = None
    """Every query group once at concurrency 1 on a fresh server: the cost of cold caches (each
    query term's postings are read from FTS5 the first time the term is searched)."""
    http: list[SearchBench] = field(default_factory=list)
    """After the first pass: the levels measured, each a bounded run."""
    search_p50_ms: Compared | None = None
    """5-phrase hybrid searches in process, same query vectors for both engines, after one warm pass."""
    ndcg_at_10: Compared | None = None
    """SciFact test queries, one phrase each, hybrid RRF k0=60, 50+50 candidates, both engines."""
    vector_p50_ms: dict[str, float] = field(default_factory=dict)
    """One vector search (k=50): exact scan and graph."""
    graph_recall_at_10: float | None = None
    peer: str | None = None
    build_s: dict[str, float] = field(default_factory=dict)
    """Seconds this run spent making (or, when the folder held them, opening) the corpus, the vector
    graph and LanceDB's table."""
    workers: int = 1
    """Processes of the server (`ragmcp serve --workers`); its CPU and memory figures are all of theirs."""
    server_ready_s: float | None = None
    """Seconds from `ragmcp serve` to every process ready: listening, graph loaded, index warm."""
    server_rss_mb: dict[str, dict[str, float] | None] = field(default_factory=dict)
    """The server's resident memory (now, peak) once ready and after the runs."""
    server_pss_peak_mb: float | None = None
    """The highest PSS of the server's processes summed, sampled every second over the runs: a page
    they share (the mapped vector graph) counts once, where the peak of server_rss_mb (each
    process's VmHWM summed) counts it in each process that touched it."""
    server_pages_peak_mb: float | None = None
    """The physical pages the server's processes held together at the peak, each counted once
    (Served.pages_mb, sampled every 5 s over the runs): unlike the PSS sum, pages the bench process
    also maps count in full."""
    server_memory_mb: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    """Once ready and after the runs, by process ("writer", "reader-1", ...): resident (rss), its
    proportional share (pss: a page mapped by two processes counts half in each, as the vector
    graph file readers map), the resident peak, and the file-backed part of rss."""
    server_cpu_ms: dict[str, float] = field(default_factory=dict)
    """CPU time (user + system) of the server process per request, by run ("first pass", "1", ...)."""
    cpu_bound_rps: dict[str, float] = field(default_factory=dict)
    """By run: the requests a second every core could serve if all were busy with the server and the
    client at that run's CPU per request (cores x 1000 / (server + client CPU ms per request))."""
    request_cpu_ms: dict[str, float] = field(default_factory=dict)
    """Median CPU time of the two halves of a rag_search, in process, one call at a time: embedding
    its 5 phrases, and the search given their vectors (10 index searches, fusion, chunk reads)."""
    cached: list[CachedRun] = field(default_factory=list)
    """The levels again with the query-phrase cache on, at a stated repeat rate (none when R is 0)."""
    observed: dict[str, Observed] = field(default_factory=dict)
    """By run: the machine (load, other processes' share) and the server's CPU by process and thread role."""
    max_other_share: float = 1.0
    """A run during which other processes took more of the cores than this is busy: not a result."""

    def quiet(self) -> bool | None:
        """Every run's machine within max_other_share (None when not known)."""
        windows = [o.window.quiet for o in self.observed.values()]
        windows += [c.observed.window.quiet for c in self.cached if c.observed is not None]
        return None if not windows or None in windows else all(windows)


def machine_now() -> dict[str, Any]:
    return {
        **machine.cpu(),
        "python": sys.version.split()[0],
        "platform": sys.platform,
        "load_average": machine.load_average(),
    }


CACHE_SEED = 0


def phrase_groups(texts: Sequence[str], size: int = PHRASES, repeat: float = 0.0, seed: int = 0) -> Iterator[list[str]]:
    """Groups of `size` phrases, one rag_search call each, until `texts` runs out (a last, partial
    group is dropped). Each phrase is, with chance `repeat`, one an earlier group held, else the next
    of `texts` in order; with `repeat` 0 the groups are `texts` cut in consecutive runs of `size`.

    A repeat copies one of the phrases sent so far chosen in proportion to how often it was sent
    (every earlier occurrence equally likely, Simon's model): popular phrases grow more popular and
    popularity follows a power law, as query logs' does, with no parameter besides `repeat`. A
    repeat is never a phrase already in its own group. Seeded: the same arguments, the same groups."""
    if not 0 <= repeat < 1:
        raise ValueError(f"the repeat rate is a fraction in [0, 1), not {repeat}")
    draw = random.Random(seed)
    fresh = iter(texts)
    sent: list[str] = []  # every phrase of the earlier groups, once per time it was sent
    distinct: set[str] = set()
    while True:
        group: list[str] = []
        while len(group) < size:
            if draw.random() < repeat and len(distinct) > len(distinct.intersection(group)):
                phrase = draw.choice(sent)
                while phrase in group:
                    phrase = draw.choice(sent)
            else:
                phrase = next(fresh, None)
                if phrase is None:
                    return
            group.append(phrase)
        sent += group
        distinct.update(group)
        yield group


def repeat_share(groups: Sequence[Sequence[str]]) -> float:
    """The share of the phrases of `groups` that an earlier group held (0 when there are none)."""
    seen: set[str] = set()
    phrases = repeated = 0
    for group in groups:
        phrases += len(group)
        repeated += sum(phrase in seen for phrase in group)
        seen.update(group)
    return repeated / phrases if phrases else 0.0


def query_groups(dataset: Path, size: int = PHRASES, repeat: float = 0.0, seed: int = 0) -> list[list[str]]:
    """SciFact's queries (test and train, in file order) in groups of `size`, one rag_search call
    each: every query once when `repeat` is 0, else a stream in which phrases recur (phrase_groups)."""
    texts = [query["text"] for query in read_jsonl(dataset / "queries.jsonl")]
    return list(phrase_groups(texts, size, repeat, seed))


def open_corpus(work: Path) -> tuple[Services, Principal]:
    """The services over a corpus bench_corpus built, its graph caught up, and its tenant's principal."""
    services = bench_corpus.open_services(work)
    if services.vector_graph is not None:
        services.vector_graph.catch_up()
    return services, Principal(tenant=json.loads((work / "corpus-info.json").read_text())["tenant"])


def mindset_request(services: Services, phrases: list[str], vectors: np.ndarray) -> SearchRequest:
    """The search the mindset rag_search makes of `phrases` with the server's defaults, given their vectors."""
    return SearchRequest(
        phrases=phrases,
        top_k=services.settings.search.mindset_segments,
        query_vectors=vectors.tolist(),
        **services.settings.search.defaults(),
    )


def mindset_requests(services: Services, dataset: Path, requests: int) -> list[SearchRequest]:
    """The first `requests` groups of query_groups as the mindset rag_search's searches, embedded."""
    return [
        mindset_request(services, phrases, services.embedder.embed_queries(phrases))
        for phrases in query_groups(dataset)[:requests]
    ]


def _p50(samples: list[float]) -> float:
    return round(statistics.median(samples), 3)


def _exact(services: Services) -> Any:
    """The same index without its graph: the exact scan."""
    from ragmcp.adapters.local.sqlite_index import SqliteSearchIndex

    return SqliteSearchIndex(services.index.db, None)  # type: ignore[attr-defined]


def graph_check(services: Services, vectors: np.ndarray, tenant: str) -> tuple[float, dict[str, float]]:
    """Recall@10 of the graph against the exact scan, and each one's median latency (k=50)."""
    exact = _exact(services)
    principal, flt = Principal(tenant=tenant), SearchFilter()
    overlap, times = [], {"exact": [], "graph": []}
    for vector in vectors:
        found = {}
        for name, index in (("exact", exact), ("graph", services.index)):
            started = time.perf_counter()
            found[name] = [h.chunk_id for h in index.search_vector(principal, vector, flt, 50)]
            times[name].append((time.perf_counter() - started) * 1000)
        overlap.append(len(set(found["exact"][:10]) & set(found["graph"][:10])) / 10)
    return round(statistics.fmean(overlap), 4), {name: _p50(samples) for name, samples in times.items()}


def ours_ranking(services: Services, tenant: str, phrases: list[str], vectors: np.ndarray) -> list[str]:
    request = SearchRequest(
        phrases=phrases,
        top_k=RANK_DEPTH,
        query_vectors=vectors.tolist(),
        **(services.settings.search.defaults() | {"mode": "hybrid"}),
    )
    return document_ranking(services.search.search(Principal(tenant=tenant), request).hits)


def peer_ranking(peer: Any, settings: Any, phrases: list[str], vectors: np.ndarray) -> list[str]:
    hits = peer.search(
        phrases,
        vectors,
        top_k=RANK_DEPTH,
        fts_k=settings.search.fts_k,
        vec_k=settings.search.vec_k,
        k0=settings.search.rrf_k0,
    )
    return list(dict.fromkeys(doc_key for _, doc_key in hits))


PEER_FLAT_UP_TO = 100_000
"""LanceDB searches vectors exactly up to this many chunks (its docs find an index unnecessary up
to about there) and builds its own ANN index (IVF_HNSW_SQ) above it."""


def open_peer(work: Path, services: Services, tenant: str) -> tuple[Any, str] | None:
    """LanceDB over the same chunks and vectors (built once per corpus), or None when not installed."""
    try:
        from ragmcp_bench.peer_lancedb import LanceDBPeer, PeerChunk
    except ImportError:
        return None
    import lancedb

    folder = work / "lancedb"
    if (folder / "chunks.lance").is_dir():
        return LanceDBPeer.open(folder), lancedb.__version__
    chunks = (
        PeerChunk(chunk.chunk_id, doc.pk or doc.doc_id, chunk.text, vector)
        for chunk, doc, vector in services.index.iter_chunks(tenant)  # type: ignore[attr-defined]
    )
    indexed = services.index.count_chunks(tenant) > PEER_FLAT_UP_TO
    return LanceDBPeer.build(folder, chunks, vector_index=indexed), lancedb.__version__


def in_process(
    services: Services, peer: Any | None, dataset: Path, tenant: str, requests: int
) -> tuple[Compared, Compared]:
    """Median 5-phrase search latency and nDCG@10 on the test queries, ours and the peer's."""
    collection = load_collection(dataset, "test")
    present = {doc.pk for doc in services.documents.list(tenant)}
    kept = {qid: {d: g for d, g in judged.items() if d in present} for qid, judged in collection.qrels.items()}
    qrels = {qid: judged for qid, judged in kept.items() if any(g > 0 for g in judged.values())}
    embed = services.embedder.embed_queries
    runs: dict[str, Run] = {"ours": {}, "peer": {}}
    for qid in qrels:
        text = collection.queries[qid]
        vector = embed([text])
        runs["ours"][qid] = ours_ranking(services, tenant, [text], vector)
        if peer is not None:
            runs["peer"][qid] = peer_ranking(peer, services.settings, [text], vector)
    ndcg = {name: score_run(run, qrels)["ndcg@10"] for name, run in runs.items() if run}
    groups = [(phrases, embed(phrases)) for phrases in query_groups(dataset)[:requests]]
    engines = ("ours", "peer") if peer is not None else ("ours",)
    for phrases, vectors in groups:  # one untimed pass: both engines warm
        ours_ranking(services, tenant, phrases, vectors)
        if peer is not None:
            peer_ranking(peer, services.settings, phrases, vectors)
    latency: dict[str, list[float]] = {"ours": [], "peer": []}
    for phrases, vectors in groups:
        for name in engines:
            started = time.perf_counter()
            if name == "ours":
                ours_ranking(services, tenant, phrases, vectors)
            else:
                peer_ranking(peer, services.settings, phrases, vectors)
            latency[name].append((time.perf_counter() - started) * 1000)
    return (
        Compared.of(_p50(latency["ours"]), _p50(latency["peer"]) if latency["peer"] else None, 3),
        Compared.of(ndcg["ours"], ndcg.get("peer")),
    )


def request_cpu(services: Services, dataset: Path, tenant: str, requests: int) -> dict[str, float]:
    """Process CPU time (every thread's) of embedding a request's phrases and of the search given
    their vectors, as the mindset rag_search makes it with the server's defaults; medians."""
    principal = Principal(tenant=tenant)
    spent: dict[str, list[float]] = {"embed": [], "search": []}
    for phrases in query_groups(dataset)[:requests]:
        started = time.process_time()
        vectors = services.embedder.embed_queries(phrases)
        embedded = time.process_time()
        services.search.search(principal, mindset_request(services, phrases, vectors))
        spent["embed"].append((embedded - started) * 1000)
        spent["search"].append((time.process_time() - embedded) * 1000)
    return {name: _p50(samples) for name, samples in spent.items()}


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Served:
    url: str
    """The MCP endpoint."""
    pid: int
    ready_s: float = 0.0
    """Seconds from the command's start to every process ready (graph loaded, index warm)."""

    def rss_mb(self) -> dict[str, float] | None:
        """Resident memory of the server's processes together, now and at its peak (Linux's /proc)."""
        try:
            status = [Path(f"/proc/{pid}/status").read_text() for pid in _process_tree(self.pid)]
        except OSError:
            return None

        def total(field: str) -> float:
            kib = sum(int(line.split()[1]) for text in status for line in text.splitlines() if line.startswith(field))
            return round(kib / 1024, 1)

        return {"now": total("VmRSS:"), "peak": total("VmHWM:")}

    def memory_mb(self) -> dict[str, dict[str, float]]:
        """By process name: rss, pss, peak and file-backed resident MB (Linux's smaps_rollup and
        status; empty elsewhere or when a process is gone)."""
        found = {}
        for pid, name in self.process_names().items():
            try:
                rollup = _kib_fields(Path(f"/proc/{pid}/smaps_rollup").read_text())
                status = _kib_fields(Path(f"/proc/{pid}/status").read_text())
            except OSError:
                continue
            found[name] = {
                "rss": round(rollup["Rss"] / 1024, 1),
                "pss": round(rollup["Pss"] / 1024, 1),
                "peak": round(status["VmHWM"] / 1024, 1),
                "file": round(rollup.get("Pss_File", 0) / 1024, 1),
            }
        return found

    def pss_mb(self) -> float | None:
        """The PSS of the server's processes summed, MB (Linux's smaps_rollup; None elsewhere). A
        process that cannot be read (ended, or a zombie not yet reaped) holds nothing and is left out."""
        try:
            pids = _process_tree(self.pid)
        except OSError:
            return None
        kib = []
        for pid in pids:
            try:
                kib.append(_kib_fields(Path(f"/proc/{pid}/smaps_rollup").read_text()).get("Pss", 0))
            except OSError:
                continue
        return round(sum(kib) / 1024, 1) if kib else None

    def pages_mb(self) -> float | None:
        """The physical pages the server's processes hold together, MB: the union of the page frames
        resident in any of them (Linux's /proc/PID/pagemap), each counted once however many of them map
        it. It is what the machine gives the server; the PSS sum is lower whenever another process (the
        bench itself, mapping the same graph and postings files) shares the pages. None off Linux or
        without the right to read frame numbers (they then read as 0)."""
        try:
            pids = _process_tree(self.pid)
        except OSError:
            return None
        frames = []
        for pid in pids:
            with suppress(OSError):
                frames.append(_resident_frames(pid))
        held = np.unique(np.concatenate(frames)) if frames else np.zeros(0, dtype=np.uint64)
        if not held.size or not held[-1]:
            return None
        return round(held.size * _PAGE / 2**20, 1)

    def health(self) -> dict[str, Any]:
        """The server's /healthz."""
        return httpx.get(f"{self.url.removesuffix('/mcp')}/healthz", timeout=10).json()

    def process_names(self) -> dict[int, str]:
        """The server's processes by pid: "server" alone, else the "writer", its "reader-N"s (the
        processes it spawned to serve) and "helper-N"s (any other descendant: multiprocessing's
        resource tracker, a parse sandbox), each numbered in pid order; empty off Linux."""
        try:
            tree = _process_tree(self.pid)
        except OSError:
            return {}
        if len(tree) == 1:
            return {self.pid: "server"}
        others = sorted(pid for pid in tree if pid != self.pid)
        readers = [pid for pid in others if _spawned(pid)]
        helpers = [pid for pid in others if pid not in readers]
        return {
            self.pid: "writer",
            **{pid: f"reader-{n}" for n, pid in enumerate(readers, 1)},
            **{pid: f"helper-{n}" for n, pid in enumerate(helpers, 1)},
        }

    def cpu_seconds(self) -> float | None:
        """User + system CPU the server has used, its reader processes' too (Linux's /proc; None
        elsewhere)."""
        try:
            return sum(cpu_seconds_of(pid) for pid in _process_tree(self.pid))
        except OSError:
            return None


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_PRESENT = np.uint64(1 << 63)
_FRAME = np.uint64((1 << 55) - 1)


def _resident_frames(pid: int) -> np.ndarray:
    """The page frame numbers resident in one process's mappings (its pagemap's entries with the
    present bit), the kernel's own vsyscall area left out."""
    found = []
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        for line in maps:
            start, end = (int(part, 16) for part in line.split(maxsplit=1)[0].split("-"))
            if start >= 1 << 47:  # [vsyscall]: not the process's own memory
                continue
            pagemap.seek(start // _PAGE * 8)
            entries = np.frombuffer(pagemap.read((end - start) // _PAGE * 8), dtype=np.uint64)
            found.append(entries[(entries & _PRESENT) != 0] & _FRAME)
    return np.concatenate(found) if found else np.zeros(0, dtype=np.uint64)


@contextmanager
def pss_peak(served: Served, every: float = 1.0, pages_every: int = 5) -> Iterator[dict[str, float]]:
    """The highest `served.pss_mb()` while the block runs, in the dict yielded ("pss"), sampled when it
    starts, every `every` seconds and when it ends; and the highest `served.pages_mb()` ("pages"), at
    the same times but only every `pages_every`-th (it reads every mapping's page table)."""
    peak = {"pss": 0.0, "pages": 0.0}
    stop = threading.Event()
    count = iter(range(1 << 62))

    def sample(pages: bool = False) -> None:
        peak["pss"] = max(peak["pss"], served.pss_mb() or 0.0)
        if pages or next(count) % pages_every == 0:
            peak["pages"] = max(peak["pages"], served.pages_mb() or 0.0)

    def run() -> None:
        while not stop.wait(every):
            sample()

    sample()
    sampler = threading.Thread(target=run, name="pss-peak", daemon=True)
    sampler.start()
    try:
        yield peak
    finally:
        stop.set()
        sampler.join()
        sample(pages=True)


def _kib_fields(text: str) -> dict[str, int]:
    """The "Name: N kB" lines of a /proc file, by name."""
    fields = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB":
            fields[name] = int(parts[0])
    return fields


def _spawned(pid: int) -> bool:
    """Whether the process runs multiprocessing's spawned-child entry point (a reader of serve --workers N)."""
    try:
        return b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _process_tree(pid: int) -> list[int]:
    """`pid` and its descendants, as Linux lists each thread's children."""
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        try:
            tasks = list(Path(f"/proc/{current}/task").iterdir())
        except OSError:
            if current == pid:
                raise
            continue  # a descendant that ended while the tree was read
        found.append(current)
        for task in tasks:
            with suppress(OSError):  # a thread that ended while the tree was read: no children to list
                queue += [int(child) for child in (task / "children").read_text().split()]
    return found


def cpu_seconds_of(pid: int) -> float:
    """User + system CPU seconds one process has used (Linux's /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def serving(
    index_dir: Path, env: dict[str, str] | None = None, timeout: float = 1800, workers: int = 1
) -> Iterator[Served]:
    """`ragmcp serve --workers N` on 127.0.0.1 over `index_dir`, once each of its processes has
    said on /healthz that its vector graph is caught up and its index warm."""
    port = free_port()
    command = [sys.executable, "-m", "ragmcp.cli", "--data-dir", str(index_dir), "serve", "--open", "--port", str(port)]
    command += ["--workers", str(workers)]
    with tempfile.TemporaryFile() as log:
        started = time.monotonic()
        process = subprocess.Popen(
            [*command, "--no-watch"], env={**os.environ, **(env or {})}, stdout=log, stderr=subprocess.STDOUT
        )
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + timeout
            ready: set[int] = set()
            while len(ready) < workers:
                if process.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise RuntimeError(f"ragmcp serve did not become ready: {log.read().decode()[-2000:]}")
                try:
                    health = httpx.get(f"{base}/healthz", timeout=2).json()
                    graph, warm = health.get("vector_graph"), health.get("warm")
                    if (graph is None or (graph["state"] == "ready" and graph["behind"] == 0)) and (
                        warm is None or warm["state"] == "ready"
                    ):
                        ready.add(health["worker"]["pid"])
                except httpx.HTTPError:
                    pass
                time.sleep(0.25)
            yield Served(f"{base}/mcp", process.pid, round(time.monotonic() - started, 1))
        finally:
            process.terminate()
            process.wait(timeout=30)


@dataclass
class Observed:
    """The machine and the server's processes over one run."""

    window: machine.Window
    """Load average, and the share of the cores processes other than the server and the client took."""
    processes: dict[str, dict[str, Any]]
    """By process ("writer", "reader-1", ...; "server" when there is one): CPU ms per request in
    all, by thread role (machine.thread_role), by thread name, and of threads that ended meanwhile."""


THREAD_KINDS = (
    "main: the event loop (HTTP, the MCP transport, JSON in and out); tool: the tool body and the"
    " search's own work (the keyword searches, fusion, chunk reads, the floor's coverage); search: the"
    " vector searches (the graph) and waiting on the model; embed: the query model; the process's name:"
    " anyio's worker threads of the event loop (authentication, rate limits); others: background."
)


def thread_kinds(threads: dict[str, float]) -> dict[str, float]:
    """CPU by thread name with a pool's numbered names (embed_0, embed_1) added up, largest first."""
    kinds: dict[str, float] = {}
    for name, spent in threads.items():
        kind = re.sub(r"_\d+$", "", name)
        kinds[kind] = round(kinds.get(kind, 0.0) + spent, 2)
    return dict(sorted(kinds.items(), key=lambda item: -item[1]))


def _per_request(spent: dict[str, dict[str, Any]], requests: int) -> dict[str, dict[str, Any]]:
    def ms(seconds: float) -> float:
        return round(seconds * 1000 / requests, 2)

    return {
        name: {
            "pid": p["pid"],
            "cpu_ms": ms(p["cpu_s"]),
            "roles": {role: ms(s) for role, s in p["roles"].items()},
            "threads": {thread: ms(s) for thread, s in p["threads"].items()},
            "ended_threads_ms": ms(p["ended_threads_s"]),
        }
        for name, p in spent.items()
    }


def timed_run(
    server: Served, groups: list[list[str]], count: int, level: int, time_limit: float, max_other_share: float = 1.0
) -> tuple[SearchBench, float | None, float | None, Observed | None]:
    """`count` rag_search calls of `groups` at one concurrency level; the run, the server's CPU ms per
    request, the req/s every core could serve at that run's server + client CPU per request, and
    what the machine and each server process did meanwhile (None off Linux)."""
    names = server.process_names()
    before, client_before = machine.snapshot(names), cpu_seconds_of(os.getpid())
    watch = machine.Watch(max_other_share)
    run = bench_search(
        server.url, requests=count, concurrency=[level], time_limit=time_limit, warmup=0, queries=groups
    )[0]
    after, client_after = machine.snapshot(names), cpu_seconds_of(os.getpid())
    if not before or not after or not run.requests:
        return run, None, None, None
    spent = machine.split(before, after, names)
    server_s = sum(p["cpu_s"] for p in spent.values())
    observed = Observed(watch.stop(server_s + client_after - client_before), _per_request(spent, run.requests))
    server_ms = round(server_s * 1000 / run.requests, 1)
    ceiling = round((os.cpu_count() or 1) * 1000 / (server_ms + run.client_cpu_ms), 1)
    return run, server_ms, ceiling, observed


def cached_run(
    index_dir: Path,
    dataset: Path,
    repeat: float,
    level: int,
    requests: int,
    time_limit: float,
    max_other_share: float = 1.0,
) -> CachedRun:
    """`requests` groups of the repeat-rate stream (fewer if SciFact's queries run out first) at
    concurrency `level`, on a fresh server with the query-phrase cache on at its default size.

    First, at concurrency 1, the stream's phrases in upper case: the index reads the postings of
    their words (it folds case) as the cold server's first pass did, while the cache, keyed by the
    exact text, holds none of the stream's phrases. The hit rate is that of the measured run alone. One
    server process (each process of `serve --workers` keeps a cache of its own)."""
    stream = query_groups(dataset, repeat=repeat, seed=CACHE_SEED)[:requests]
    shouted = list(dict.fromkeys(p.upper() for group in stream for p in group if p.upper() != p))
    postings_pass = [shouted[i : i + PHRASES] for i in range(0, len(shouted), PHRASES)]
    capacity = EmbeddingSettings.model_fields["query_cache_size"].default
    with serving(index_dir, env={"RAGMCP_QUERY_CACHE_SIZE": str(capacity)}) as server:
        if postings_pass:
            bench_search(
                server.url,
                requests=len(postings_pass),
                concurrency=[1],
                time_limit=max(time_limit, 600),
                warmup=0,
                queries=postings_pass,
            )
        before = server.health()["query_cache"]
        if before is None:
            raise RuntimeError("the server started with RAGMCP_QUERY_CACHE_SIZE set reports no query cache")
        run, server_ms, ceiling, observed = timed_run(server, stream, len(stream), level, time_limit, max_other_share)
        after = server.health()["query_cache"]
    hits, misses = after["hits"] - before["hits"], after["misses"] - before["misses"]
    return CachedRun(
        repeat=repeat,
        repeated=round(repeat_share(stream[: run.requests]), 4),
        hit_rate=round(hits / (hits + misses), 4) if hits + misses else None,
        cache_capacity=after["capacity"],
        run=run,
        server_cpu_ms=server_ms,
        cpu_bound_rps=ceiling,
        observed=observed,
    )


def run_size(
    dataset: Path,
    size: int,
    work_root: Path,
    cache: Path,
    *,
    requests: int,
    concurrency: list[int],
    time_limit: float,
    max_docs: int | None = None,
    peer: bool = True,
    workers: int = 1,
    cache_repeat: float = 0.0,
    max_other_share: float = 1.0,
    recall_queries: int = 100,
) -> ScaleResult:
    work = work_root / (f"{dataset.name}-{size}" + ("" if max_docs is None else f"-{max_docs}docs"))
    started = time.perf_counter()
    info = bench_corpus.build(dataset, size, work, cache, max_docs=max_docs)
    built = {"corpus": round(time.perf_counter() - started, 1)}
    services = bench_corpus.open_services(work)
    started = time.perf_counter()
    if services.vector_graph is not None:
        services.vector_graph.catch_up()
    built["graph"] = round(time.perf_counter() - started, 1)
    result = ScaleResult(corpus=asdict(info), machine=machine_now(), build_s=built, max_other_share=max_other_share)
    if recall_queries:
        sample = services.embedder.embed_queries([q[0] for q in query_groups(dataset)[:recall_queries]])
        result.graph_recall_at_10, result.vector_p50_ms = graph_check(services, sample, info.tenant)
    started = time.perf_counter()
    opened = open_peer(work, services, info.tenant) if peer else None
    result.build_s["peer"] = round(time.perf_counter() - started, 1)
    result.peer = None if opened is None else f"lancedb {opened[1]}"
    result.search_p50_ms, result.ndcg_at_10 = in_process(
        services, None if opened is None else opened[0], dataset, info.tenant, requests
    )
    result.request_cpu_ms = request_cpu(services, dataset, info.tenant, requests)
    groups = query_groups(dataset)
    result.workers = workers
    with serving(work / "index", env={"RAGMCP_QUERY_CACHE_SIZE": "0"}, workers=workers) as server:
        result.server_ready_s, result.server_rss_mb["ready"] = server.ready_s, server.rss_mb()
        result.server_memory_mb["ready"] = server.memory_mb()
        runs = [("first pass", len(groups), 1, max(time_limit, 600))]
        runs += [(str(c), requests, c, time_limit) for c in concurrency]
        with pss_peak(server) as peak:
            for label, count, level, limit in runs:
                run, server_ms, ceiling, observed = timed_run(server, groups, count, level, limit, max_other_share)
                if server_ms is not None and ceiling is not None:
                    result.server_cpu_ms[label], result.cpu_bound_rps[label] = server_ms, ceiling
                if observed is not None:
                    result.observed[label] = observed
                if label == "first pass":
                    result.first_pass = run
                else:
                    result.http.append(run)
        result.server_pss_peak_mb = peak["pss"] or None
        result.server_pages_peak_mb = peak["pages"] or None
        result.server_rss_mb["after the runs"] = server.rss_mb()
        result.server_memory_mb["after the runs"] = server.memory_mb()
    if cache_repeat:
        result.cached = [
            cached_run(work / "index", dataset, cache_repeat, level, requests, time_limit, max_other_share)
            for level in concurrency
        ]
    return result


def write(result: ScaleResult, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    workers = "" if result.workers == 1 else f"-workers{result.workers}"
    path = out_dir / f"scale-{result.corpus['dataset']}-{result.corpus['target_chunks']}{workers}.json"
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    path.write_text(json.dumps({"kind": "scale", "at": at, **asdict(result), "quiet": result.quiet()}, indent=2) + "\n")
    return path


def chart(out_dir: Path) -> Path | None:
    """A PNG of rag_search latency (p50, p99) and throughput by corpus size and concurrency, from
    every single-process scale-*.json in `out_dir`; None when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    results = sorted(
        (json.loads(p.read_text()) for p in out_dir.glob("scale-*.json")), key=lambda r: r["corpus"]["chunks"]
    )
    results = [r for r in results if r.get("workers", 1) == 1]  # one line per size: the single process
    if not results:
        return None
    figure, (latency, throughput) = plt.subplots(1, 2, figsize=(11, 4.2))
    levels = sorted({row["concurrency"] for r in results for row in r["http"]})
    for level in levels:
        sizes, p50, p99, rps = [], [], [], []
        for r in results:
            row = next((row for row in r["http"] if row["concurrency"] == level), None)
            if row is not None:
                sizes.append(r["corpus"]["chunks"])
                p50.append(row["p50_ms"])
                p99.append(row["p99_ms"])
                rps.append(row["throughput_rps"])
        (line,) = latency.plot(sizes, p50, marker="o", label=f"p50, c={level}")
        latency.plot(sizes, p99, marker="x", linestyle="--", color=line.get_color(), label=f"p99, c={level}")
        throughput.plot(sizes, rps, marker="o", label=f"c={level}")
    latency.set_yscale("log")
    for axis, title, unit in ((latency, "rag_search latency", "ms"), (throughput, "rag_search throughput", "req/s")):
        axis.set_xscale("log")
        axis.set_xlabel("chunks in the index")
        axis.set_ylabel(unit)
        axis.set_title(title)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8)
    latency.axhline(60, color="grey", linewidth=0.8, linestyle=":")
    latency.axhline(250, color="grey", linewidth=0.8, linestyle=":")
    throughput.axhline(40, color="grey", linewidth=0.8, linestyle=":")
    figure.suptitle("ragmcp, mindset rag_search over HTTP, 5 phrases, hybrid (2 cores)")
    figure.tight_layout()
    path = out_dir / "scale.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def summary(result: ScaleResult) -> str:
    """The figures as a short Markdown table."""
    corpus = result.corpus
    lines = [
        f"## {corpus['dataset']} grown to {corpus['chunks']} chunks ({corpus['documents']} documents),"
        f" {result.workers} server process{'es' if result.workers > 1 else ''}",
        "",
        "| concurrency | requests | errors | p50 ms | p95 ms | p99 ms | req/s | server CPU ms/request"
        " | client CPU ms/request | machine busy | req/s with every core busy | query cache hit rate |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows = [("first pass", result.first_pass)] if result.first_pass else []
    rows += [(str(r.concurrency), r) for r in result.http]
    measured = [
        (label, r, result.server_cpu_ms.get(label), result.cpu_bound_rps.get(label), "off") for label, r in rows
    ]
    measured += [
        (f"{c.run.concurrency}, cache on, R={c.repeat}", c.run, c.server_cpu_ms, c.cpu_bound_rps, c.hit_rate)
        for c in result.cached
    ]
    lines += [
        f"| {label} | {r.requests} | {r.errors} | {r.p50_ms} | {r.p95_ms} | {r.p99_ms} | {r.throughput_rps}"
        f" | {'' if server_ms is None else server_ms} | {r.client_cpu_ms} | {r.machine_busy}"
        f" | {'' if ceiling is None else ceiling} | {cache} |"
        for label, r, server_ms, ceiling, cache in measured
    ]
    lines.append("")
    if result.cached:
        repeated = ", ".join(f"c={c.run.concurrency} {c.repeated}" for c in result.cached)
        lines.append(
            f"- query cache on ({result.cached[0].cache_capacity} phrases, a fresh server a level): phrases an"
            f" earlier request held, in the stream sent: {repeated}"
        )
    for label, value in (("search p50 ms (in process)", result.search_p50_ms), ("nDCG@10", result.ndcg_at_10)):
        if value is not None:
            lines.append(f"- {label}: ours {value.ours}, LanceDB {value.lancedb}, ours/LanceDB {value.ratio}")
    lines.append(f"- vector search p50 ms (k=50): {result.vector_p50_ms}; graph recall@10 {result.graph_recall_at_10}")
    lines.append(f"- CPU ms of a request in process (median): {result.request_cpu_ms}")
    lines.append(f"- server ready after {result.server_ready_s} s; resident MB: {result.server_rss_mb}")
    lines.append(f"- memory MB by process (rss, pss, peak, file-backed pss): {result.server_memory_mb}")
    lines.append(f"- PSS of the server's processes summed, MB, at its peak over the runs: {result.server_pss_peak_mb}")
    lines.append(
        "- physical pages the server's processes held together (each counted once), MB, at the peak:"
        f" {result.server_pages_peak_mb}"
    )
    lines.append(f"- seconds to make or open the corpus, graph and peer: {result.build_s}")
    lines.append(f"- peer: {result.peer or 'not run'}")
    lines.append(f"- CPU: {result.machine.get('model')}, flags {', '.join(result.machine.get('flags', []))}")
    observed = {**result.observed}
    observed |= {f"{c.run.concurrency}, cache on": c.observed for c in result.cached if c.observed is not None}
    if observed:
        lines += [
            "",
            "| run | load average (start, end) | other processes' share of the cores | server process"
            " | CPU ms/request | request handling | embedding | background | ended threads |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for label, seen in observed.items():
            load = f"{seen.window.load_average['start'][0]}, {seen.window.load_average['end'][0]}"
            for name, p in seen.processes.items():
                roles = p["roles"]
                lines.append(
                    f"| {label} | {load} | {seen.window.other_share} | {name} | {p['cpu_ms']}"
                    f" | {roles[machine.REQUESTS]} | {roles[machine.EMBEDDING]} | {roles[machine.BACKGROUND]}"
                    f" | {p['ended_threads_ms']} |"
                )
        lines += ["", f"CPU ms/request by thread: {THREAD_KINDS}", ""]
        lines += ["| run | server process | by thread |", "|---|---|---|"]
        for label, seen in observed.items():
            for name, p in seen.processes.items():
                kinds = [f"{kind} {ms}" for kind, ms in thread_kinds(p["threads"]).items()]
                kinds.append(f"ended threads {p['ended_threads_ms']}")
                lines.append(f"| {label} | {name} | {', '.join(kinds)} |")
        warning = machine.busy_warning({label: seen.window for label, seen in observed.items()})
        if warning:
            lines += ["", warning]
    return "\n".join(lines) + "\n"

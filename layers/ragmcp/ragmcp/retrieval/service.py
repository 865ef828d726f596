"""The search service every profile calls: modes, multi-phrase fusion, normalised scores.

Modes: fts (bm25), vector (cosine), hybrid (both, fused by weighted reciprocal rank),
hybrid_scores (both, fused by a weighted sum of min-max normalised scores), fts_then_vec
(keyword candidates ranked by vector similarity). In hybrid_scores every candidate of a phrase is
scored on both sides: a chunk only its vector search found gets its true bm25 on the keyword side,
one only its keyword search found its true cosine on the vector side, each placed on that side's own
min-max scale (below 0 under the side's lowest candidate), asked of the index once a request
(`SearchIndex.score_chunks`). An id one side did not fetch used to get 0 from it whatever it scored
there: SciFact test 0.7288 -> 0.7307, Cranfield test 0.4176 -> 0.4220 (BENCHMARKS.md).

The relevance floor: every returned hit carries its cosine similarity to the nearest search
phrase (`similarity`; computed for keyword-only hits too, from their stored vectors) and its
`floor_score`, that similarity plus `floor_coverage` times the share of a phrase's content words
the chunk or its document's title and file name hold (`floor_text`: a short query often names a
document, "release notes", "glossary", and one- to three-word queries embed far from any passage).
The floor decides per query, all or nothing: when no hit's floor score reaches
`floor`, the query is off-topic and every hit is dropped; otherwise every hit is kept, so the
floor never cuts a weak but relevant hit from an on-topic query. Fused scores are relative (1 is
the best of this query's candidates, however poor), so the floor compares these absolute signals
instead. In a search that fuses both indexes, a chunk under a heading the query names, or whose
heading path is the closest to the query, is pulled towards the top (`sections`); every other hit
keeps its fused score, and a single index's search keeps that index's order.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from pydantic import BaseModel, Field

from ragmcp.domain.errors import DeadlineExceeded, check_deadline
from ragmcp.domain.models import Chunk, Document, IndexHit, Principal, ScoredChunk, SearchFilter, SearchMode
from ragmcp.ports import Embedder, ScoresAsked, SearchIndex
from ragmcp.retrieval import sections
from ragmcp.retrieval.coverage import Questions
from ragmcp.retrieval.fusion import RankedList, ScoredList, convex, rrf
from ragmcp.retrieval.query_cache import CachedQueryEmbedder
from ragmcp.text import cjk_share, identifiers, keyword_text
from ragmcp.threadnames import name_native_thread


class SearchRequest(BaseModel):
    phrases: list[str] = Field(min_length=1)
    mode: SearchMode = "hybrid"
    top_k: int = Field(default=8, ge=1, le=1000)
    filter: SearchFilter = SearchFilter()
    fts_k: int = Field(default=50, ge=1, le=1000)
    vec_k: int = Field(default=50, ge=1, le=1000)
    rrf_k0: int = Field(default=60, ge=1)
    fts_weight: float = Field(default=1.0, ge=0.0)
    vec_weight: float = Field(default=1.0, ge=0.0)
    query_vectors: list[list[float]] | None = Field(
        default=None, description="Caller-supplied embeddings, one per phrase, instead of embedding the phrases."
    )
    floor: float = Field(
        default=0.0, ge=0.0, le=2.0, description="Drop every hit when none has a floor score this high; 0: off."
    )
    floor_coverage: float = Field(
        default=0.0, ge=0.0, le=1.0, description="Weight of the phrase's word coverage in a hit's floor score."
    )
    drop_below_floor: bool = Field(
        default=True, description="False: keep hits below the floor, only counting them (proxysql's contract)."
    )
    deadline: float | None = Field(
        default=None,
        exclude=True,
        description="A time.monotonic() by which the search stops: it raises DeadlineExceeded, starts no further "
        "index call, and each index call running then stops there too (the index port takes the deadline).",
    )


@dataclass(slots=True)
class SearchResult:
    hits: list[ScoredChunk]
    total_candidates: int
    elapsed_ms: float
    below_floor: int = 0
    """Hits of the top k silenced by the floor (all of them when none reached it; left out unless kept on request)."""


WALKERS = 2
"""Pool threads a search's phrases' vector searches are cut over when they are (`SearchService._walk`; each
takes every WALKERS-th phrase): a hand-off costs CPU, and two cores walk at most two graphs at once."""
HEADING_VECTORS = 4096
"""Heading path vectors a search service keeps (1.5 KB each at 384 dimensions): a section's
heading is embedded the first time a search meets one of its chunks, not at every search."""


class SearchService:
    def __init__(self, index: SearchIndex, embedder: Embedder, workers: int = 8):
        self.index = index
        self.embedder = embedder
        self._headings = CachedQueryEmbedder(
            embedder.inner if isinstance(embedder, CachedQueryEmbedder) else embedder, HEADING_VECTORS
        )
        self._pool = ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="search", initializer=name_native_thread
        )

    def search(self, principal: Principal, request: SearchRequest) -> SearchResult:
        started = time.perf_counter()
        phrases, flt, deadline = request.phrases, request.filter, request.deadline
        check_deadline(deadline)
        multilingual = self.embedder.multilingual
        shares = [vector_share(phrase, multilingual) for phrase in phrases]
        keyword_side = request.mode in ("fts", "hybrid", "hybrid_scores")
        wants_vectors = request.mode != "fts" or request.floor > 0
        # The pool takes the phrases' vectors and their walks in one hand-off, made first: the keyword searches
        # run here, on the caller's thread, meanwhile (a hand-off costs more CPU than a keyword search gains by
        # it). Not the walks: a search waits no longer than its deadline, whatever an index call does.
        split = request.mode != "fts" and (request.query_vectors is None or not keyword_side)  # fts: no walk
        walking = [self._pool.submit(self._walk, principal, request, shares, split)] if wants_vectors else []
        others: list[Future[list[tuple[np.ndarray, list[IndexHit]]]]] = []
        try:
            texts = [keyword_text(phrase) for phrase in phrases] if keyword_side else []
            keyword_hits = [
                self.index.search_fts(principal, text, flt, request.fts_k, deadline=deadline) for text in texts
            ]
            first, others = _results(walking, deadline)[0] if walking else ([], [])
            searched = _interleaved([first, *_results(others, deadline)]) if walking else []
        except DeadlineExceeded:  # waited until the deadline, or an index call stopped at it
            for future in (*walking, *others):
                future.cancel()  # the calls not started yet; the ones running stop at the deadline
            raise
        vectors = [vector for vector, _ in searched]
        pairs = [
            (keyword_hits[i] if keyword_hits else [], searched[i][1] if searched else []) for i in range(len(phrases))
        ]
        others = self._unfetched(principal, request, texts, vectors, pairs)
        runs: list[tuple[str, list[IndexHit], float]] = []
        unfetched: list[list[tuple[str, float]]] = []  # each run's scores of the ids only its phrase's other run has
        for (keyword, semantic), (bm25, cosines), share in zip(pairs, others, shares, strict=True):
            for kind, listed, weight, other in (
                ("fts", keyword, request.fts_weight, bm25),
                ("vec", semantic, request.vec_weight * share, cosines),
            ):
                if listed:
                    runs.append((kind, listed, weight))
                    unfetched.append(other)
        fused = _fuse(request, runs, unfetched)
        window = fused[: max(request.top_k, sections.WINDOW)]
        check_deadline(deadline)
        found = self.index.get_chunks(principal.tenant, [cid for cid, _ in window[: request.top_k]])
        headed = _fuses_both(request) and sections.has_headings(found.values())  # else no heading can count
        if headed:
            found |= self.index.get_chunks(principal.tenant, [cid for cid, _ in window[request.top_k :]])
        closeness = self._heading_closeness(vectors, found.values()) if headed and vectors else {}
        top = (sections.passages_first(phrases, window, found, closeness) if headed else window)[: request.top_k]
        raw: dict[str, dict[str, tuple[float, int]]] = {"fts": {}, "vec": {}}
        wanted = {cid for cid, _ in top}
        for kind, hits, _ in runs:
            _keep_best(raw[kind], hits, wanted)
        fts_raw, vec_raw = raw["fts"], raw["vec"]
        similarity = {cid: score for cid, (score, _) in vec_raw.items()}
        if vectors:
            check_deadline(deadline)
            unmeasured = tuple(c for c, _ in top if c not in similarity)
            unsearched = [vectors[i] for i, share in enumerate(shares) if not share]
            measured = tuple(c for c, _ in top if c in similarity)  # nearest to another phrase: nearer this one?
            asked = [ScoresAsked("", vector, (), measured) for vector in unsearched if measured]
            asked += [ScoresAsked("", vector, (), unmeasured) for vector in vectors if unmeasured]
            for _, cosines in self.index.score_chunks(principal, flt, asked, deadline=deadline) if asked else []:
                for cid, cosine in cosines.items():
                    similarity[cid] = max(cosine, similarity.get(cid, -1.0))
        questions = Questions.of(phrases)
        floor_scores = {
            cid: round(similarity[cid] + request.floor_coverage * questions.best_coverage(floor_text(*found[cid])), 6)
            for cid, _ in top
            if cid in found and cid in similarity
        }
        silent = request.floor > 0 and bool(floor_scores) and max(floor_scores.values()) < request.floor
        results = []
        below = 0
        for cid, score in top:
            if cid not in found:
                continue
            chunk, doc = found[cid]
            fts = fts_raw.get(cid)
            vec = vec_raw.get(cid)
            cosine = similarity.get(cid)
            floor_score = floor_scores.get(cid)
            if silent:
                below += 1
                if request.drop_below_floor:
                    continue
            results.append(
                ScoredChunk(
                    chunk=chunk,
                    document=doc,
                    score=round(max(score, 0.0), 6),  # below 0: an unfetched candidate's (convex)
                    fts_score=None if fts is None else fts[0],
                    fts_rank=None if fts is None else fts[1],
                    vec_score=None if vec is None else vec[0],
                    vec_rank=None if vec is None else vec[1],
                    similarity=cosine,
                    floor_score=floor_score,
                )
            )
        elapsed = (time.perf_counter() - started) * 1000
        return SearchResult(results, len(fused), elapsed, below_floor=below)

    def _heading_closeness(
        self, vectors: list[np.ndarray], found: Iterable[tuple[Chunk, Document]]
    ) -> dict[str, float]:
        """Each distinct heading path line of these chunks and its best cosine to a phrase vector. A
        path's vector is embedded once and kept (`HEADING_VECTORS` of them): headings repeat."""
        lines = sorted({line for chunk, _ in found if (line := sections.path_line(chunk.text))})
        if not lines:
            return {}
        cosines = self._headings.embed_queries(lines) @ np.stack(vectors).T
        return dict(zip(lines, cosines.max(axis=1).tolist(), strict=True))

    def _phrase_vectors(self, request: SearchRequest) -> np.ndarray:
        """The phrases' vectors: the caller's, or all of them embedded in one call (the embedder cuts
        it into runs that share the model's per-run cost)."""
        if request.query_vectors is not None:
            return np.asarray(request.query_vectors, dtype=np.float32)
        return self.embedder.embed_queries(request.phrases)

    def _walk(
        self, principal: Principal, request: SearchRequest, shares: list[float], split: bool
    ) -> tuple[list[tuple[np.ndarray, list[IndexHit]]], list[Future[list[tuple[np.ndarray, list[IndexHit]]]]]]:
        """The phrases' vectors and vector searches, on a pool thread: this thread walks every phrase, or with
        `split` every WALKERS-th from the first and hands the rest to WALKERS - 1 more pool threads (their
        futures returned beside its own part). Split when the caller's thread has nothing else to do meanwhile
        (the phrases were embedded first, or there is no keyword side): two cores walk at once; with the
        vectors given, the caller searches the keyword side while this thread walks."""
        vectors = self._phrase_vectors(request)
        step = WALKERS if split and len(vectors) > 1 else 1
        check_deadline(request.deadline)
        others = [
            self._pool.submit(self._semantics, principal, request, vectors, shares, start, step)
            for start in range(1, step)
        ]
        return self._semantics(principal, request, vectors, shares, 0, step), others

    def _semantics(
        self,
        principal: Principal,
        request: SearchRequest,
        vectors: np.ndarray,
        shares: list[float],
        start: int,
        step: int,
    ) -> list[tuple[np.ndarray, list[IndexHit]]]:
        """Every step-th phrase's vector, from phrase `start` on, and its vector search unless the mode is
        fts or the search would count for nothing (its share 0: a phrase all in CJK with an English-only
        embedder); the floor measures the cosines of the hits it scores to that phrase alone
        (`SearchIndex.score_chunks`)."""
        phrases, searched = request.phrases, []
        for i in range(start, len(vectors), step):
            walks = request.mode != "fts" and shares[i]
            searched.append(
                (vectors[i], self._vector_search(principal, request, phrases[i], vectors[i]) if walks else [])
            )
        return searched

    def _vector_search(
        self, principal: Principal, request: SearchRequest, phrase: str, vector: np.ndarray
    ) -> list[IndexHit]:
        """The phrase's nearest chunks; for fts_then_vec, among its keyword candidates only."""
        flt, deadline = request.filter, request.deadline
        if request.mode == "fts_then_vec":
            candidates = self.index.search_fts(principal, keyword_text(phrase), flt, request.fts_k, deadline=deadline)
            flt = flt.model_copy(update={"chunk_ids": tuple(h.chunk_id for h in candidates)})
        return self.index.search_vector(principal, vector, flt, request.vec_k, deadline=deadline)

    def _unfetched(
        self,
        principal: Principal,
        request: SearchRequest,
        texts: list[str],
        vectors: list[np.ndarray],
        pairs: list[tuple[list[IndexHit], list[IndexHit]]],
    ) -> list[tuple[list[tuple[str, float]], list[tuple[str, float]]]]:
        """For hybrid_scores, each phrase's true bm25 of the chunks only its vector search found (0: none
        of its words) and its true cosine of the chunks only its keyword search found, all asked of the
        index at once (`SearchIndex.score_chunks`), so that `convex` scores every candidate on both sides.
        Empty for any other mode or a fusion weighing one side only (its order stays that index's:
        `_fuses_both`), and for a phrase one of whose sides found nothing or both found the same."""
        none: list[tuple[list[tuple[str, float]], list[tuple[str, float]]]] = [([], [])] * len(pairs)
        if request.mode != "hybrid_scores" or not _fuses_both(request):
            return none
        asked, phrase = [], []
        for i, (keyword, semantic) in enumerate(pairs):
            if keyword and semantic:
                fetched = {hit.chunk_id for hit in keyword}
                only_semantic = tuple(hit.chunk_id for hit in semantic if hit.chunk_id not in fetched)
                fetched = {hit.chunk_id for hit in semantic}
                only_keyword = tuple(hit.chunk_id for hit in keyword if hit.chunk_id not in fetched)
                if only_semantic or only_keyword:
                    asked.append(ScoresAsked(texts[i], vectors[i], only_semantic, only_keyword))
                    phrase.append(i)
        if not asked:
            return none
        check_deadline(request.deadline)
        scored = self.index.score_chunks(principal, request.filter, asked, deadline=request.deadline)
        found = list(none)
        for i, ask, (bm25, cosines) in zip(phrase, asked, scored, strict=True):
            found[i] = ([(cid, bm25.get(cid, 0.0)) for cid in ask.bm25_of], list(cosines.items()))
        return found


R = TypeVar("R")


def _results(futures: list[Future[R]], deadline: float | None) -> list[R]:
    """Each future's result, waiting no later than the deadline (DeadlineExceeded at it)."""
    try:
        return [f.result(timeout=None if deadline is None else max(0.0, deadline - time.monotonic())) for f in futures]
    except FutureTimeout:
        raise DeadlineExceeded("the search reached its deadline") from None


def _interleaved(parts: list[list[R]]) -> list[R]:
    """One list from the parts _walk cut it into: part j held the items at j, j + len(parts), ..."""
    together: list[R] = [item for part in parts for item in part]
    for start, part in enumerate(parts):
        together[start :: len(parts)] = part
    return together


def _fuses_both(request: SearchRequest) -> bool:
    """Whether the search fuses both indexes with weight on each, so a heading signal joins them: a
    single index's search (fts, vector, fts_then_vec, or a fusion weighing one side only) keeps that
    index's own order and normalised scores, as proxysql's rag.search_fts and rag.search_vector promise."""
    return request.mode in ("hybrid", "hybrid_scores") and request.fts_weight > 0 and request.vec_weight > 0


def _fuse(
    request: SearchRequest,
    runs: list[tuple[str, list[IndexHit], float]],
    unfetched: Sequence[Sequence[tuple[str, float]]] = (),
) -> list[tuple[str, float]]:
    """One ranking from every index search, each with its weight: by score for hybrid_scores, else
    by reciprocal rank. `unfetched` (one list a run, or none: each run's candidates only): the run's
    index's true scores of the candidates only the phrase's other search found (`SearchService._unfetched`),
    which hybrid_scores maps on the run's own scale (`fusion.convex`)."""
    if request.mode == "hybrid_scores":
        return convex(
            [
                ScoredList(hits, weight * sureness(kind, hits), others)  # IndexHit is an (id, score) pair
                for (kind, hits, weight), others in zip(runs, unfetched or [()] * len(runs), strict=True)
            ]
        )
    return rrf([RankedList([h.chunk_id for h in hits], weight) for _, hits, weight in runs], request.rrf_k0)


CJK_VECTOR_CUT = 1.0
"""How much of the vector side's weight a phrase all in CJK loses: all of it (an English-only model's
vector of a Korean phrase is noise that flipped near ties between the keyword side's passages: 0.75, p27k's
fit, left a quarter; 1.0 was chosen on the cjk questions of the first three passage sets, BENCHMARKS.md)."""


CODE_NAME_VECTOR_SHARE = 0.5
"""How much the vector side of a phrase naming a name in code ("CUSTOMER_TAX_ID", `text.identifiers`)
counts: half. A text embedder reads the name as loose words and ranks the prose or the other code on
the same topic above the code that holds it, which the keyword side matches whole. Chosen on the
passage sets v1-v4 (BENCHMARKS.md): 0.5 put two more code questions first, 0.7 one, none fell."""


def vector_share(phrase: str, multilingual: bool) -> float:
    """How much a phrase's vector search counts beside its keyword search: 1 with a `multilingual`
    embedder (Embedder.multilingual) or for a phrase without CJK characters; with an English-only
    embedder, falling with their share (its vector of a Korean, Chinese or Japanese phrase is noise:
    a phrase all in CJK is ranked by the keyword side's CJK character pairs alone). Fitted on the cjk
    questions of the passage sets with the English-only MiniLM (BENCHMARKS.md). A phrase naming a
    name in code keeps `CODE_NAME_VECTOR_SHARE` of that, whatever the embedder."""
    share = 1.0 if multilingual else 1.0 - CJK_VECTOR_CUT * cjk_share(phrase)
    return share * CODE_NAME_VECTOR_SHARE if identifiers(phrase) else share


VECTOR_SURE = 0.45
"""The best cosine at which a phrase's vector side counts in full in hybrid_scores; below it, in proportion
(min-max maps the best of any side to 1, so a side whose best is a near-zero cosine would otherwise weigh as
much as a keyword side that matches the question's words). 0: always in full. Fitted by cross-validation
across SciFact train, Cranfield train and the passage question sets (`bench/fusion_fit.py`; BENCHMARKS.md,
"A weak vector side weighs less"): it moves few queries (a question whose every cosine is under 0.3)."""
LEAST_SURE = 0.1
"""The least share a vector side keeps, so a search whose every side is weak still ranks its candidates."""


def sureness(kind: str, hits: list[IndexHit]) -> float:
    """The share of its weight a side keeps in hybrid_scores: for a vector side, 1 when its best cosine
    reaches VECTOR_SURE, else in proportion to it, never below LEAST_SURE; a keyword side keeps all of
    it (a bound on its best bm25, 1 to 8, moved no query of the fit: BENCHMARKS.md)."""
    if kind != "vec" or VECTOR_SURE <= 0 or not hits:
        return 1.0
    best = max(h.raw_score for h in hits)
    return min(1.0, max(LEAST_SURE, best / VECTOR_SURE))


def floor_text(chunk: Chunk, document: Document) -> str:
    """What a hit's word coverage is measured on: its passage, and its document's title and file name."""
    return f"{document.title}\n{document.file_name}\n{chunk.text}"


def _keep_best(raw: dict[str, tuple[float, int]], hits: list[IndexHit], wanted: set[str]) -> None:
    """The best (score, rank) of each wanted chunk in one index's lists."""
    for rank, hit in enumerate(hits, start=1):
        if hit.chunk_id in wanted:
            seen = raw.get(hit.chunk_id)
            if seen is None or hit.raw_score > seen[0]:
                raw[hit.chunk_id] = (hit.raw_score, rank)

"""SearchIndex on OpenSearch: BM25 and filtered k-NN over one index of chunk documents.

Each chunk is one OpenSearch document carrying its document's filter fields (tenant, source,
kind, tier rank, ACL, tags, metadata terms, created_at) and the whole Document as an
unindexed object, so every search filters inside the query and `get_chunks` needs no other
store. Every request body is built by a pure function here, so tests can check each one
against the official OpenSearch API specification without a cluster.

Vectors: faiss HNSW with `innerproduct` over unit vectors (the score then converts back to the
cosine the embedded backend reports). faiss is the only ANN engine of Serverless vector
collections, filters during the graph search (efficient filtering, OpenSearch >= 2.9), and its
inner-product scoring has been the same in every release, while faiss `cosinesimil` only exists
from 2.19 on.

Writes and deletes go by document id, never by searching: OpenSearch Serverless makes writes
searchable only after its refresh interval (10 s NextGen, 60 s Classic), so a search for the chunks
to replace or delete misses those written a moment ago. Each document's current generation and the
ids of its chunks are kept in a ChunkLedger (DynamoDB); a new generation becomes current by a
compare-and-set on the ledger, so of two concurrent ingests of one document each replaces the
generation it saw current, and the chunks of every replaced generation are deleted by id. A failed
or lost write deletes its own chunks.

Service types (`serverless=True` for Amazon OpenSearch Serverless, `aoss`):
- no custom routing: a managed domain (`es`) routes every write and search by tenant, so a
  tenant's chunks share a shard and its searches touch one shard; Serverless places data itself;
- no `refresh` (Serverless rejects it): on a managed domain one refresh makes a document's new
  chunks and deletes visible together (one per document, not per bulk request);
- no custom document ids (Classic vector collections): chunks are indexed with the ids the
  collection generates, which the ledger records; a managed domain gets deterministic ids.

The index is created once, at deploy time (`create`, the stack's SearchIndex custom resource);
`ensure_model` only remembers the model, and the index is checked against it on first use, so a
function starts without calling OpenSearch and none but the setup role may create an index.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal, Protocol

import boto3
import numpy as np
from opensearchpy import AWSV4SignerAuth, OpenSearch, RequestsHttpConnection
from opensearchpy.exceptions import ConnectionTimeout, RequestError
from pydantic import BaseModel

from ragmcp.domain.errors import DeadlineExceeded, IndexMismatch, IndexOutdated, check_deadline
from ragmcp.domain.models import Chunk, Document, IndexHit, Principal, SearchFilter
from ragmcp.ports import ScoresAsked
from ragmcp.text import is_cjk

Json = dict[str, Any]
Service = Literal["es", "aoss"]

VECTOR_FIELD = "embedding"
TEMPLATE_PATTERNS = ("ragmcp-chunks*",)
HEADLINE_BOOST = 0.5
_MAX_QUERY_TERMS = 64
log = logging.getLogger(__name__)
_BULK_CHUNKS = 100
_SWEEP_CHUNKS = 10_000
_WORD = re.compile(r"\w+", re.UNICODE)
TEXT_ANALYZER = "ragmcp_text"
ANALYSIS: Json = {
    "analyzer": {
        TEXT_ANALYZER: {
            "type": "custom",
            "tokenizer": "standard",
            "filter": ["lowercase", "asciifolding", "porter_stem"],
        }
    }
}
"""The keyword analysis of text and headline: the embedded index's FTS5 `porter unicode61
remove_diacritics 2` in OpenSearch terms (words, lower-cased, diacritics folded, Porter stems; no
stop words, as FTS5 keeps them), so "ducks feeding" finds "duck feeds" on both back ends."""
SIMILARITY = "ragmcp_tenant_bm25"
BM25_K1 = 1.2
BM25_B = 0.75
BM25_AVGDL = 120.0
"""The chunk length (tokens) against which the similarity normalises lengths, fixed (BENCHMARKS.md)."""
SIMILARITY_SCRIPT = (
    f"double tf = doc.freq; double norm = {BM25_K1} * ({1 - BM25_B} + {BM25_B} * doc.length / {BM25_AVGDL});"
    f" return query.boost * tf * {BM25_K1 + 1} / (tf + norm);"
)
"""bm25's term-frequency part with no collection statistics: the query gives each word its weight
(boost), which is the word's idf among the searching tenant's own chunks (`idf`)."""
SCHEMA_VERSION = 4
"""Recorded in the mapping's _meta. 1 (nothing recorded): the `standard` analyzer, no stemming.
2: the `ragmcp_text` analyzer. 3: text and headline scored by SIMILARITY (per-tenant statistics).
4: `text.cjk`, the text again through OpenSearch's `cjk` analyzer (overlapping character pairs of
Chinese, Japanese and Korean, as `ragmcp.text.keyword_text` makes them for the embedded index),
matched by a query's CJK pairs."""
CJK_FIELD = {"cjk": {"type": "text", "analyzer": "cjk", "similarity": SIMILARITY}}
_KEYWORD = {"type": "keyword"}
_INTEGER = {"type": "integer"}


def opensearch_client(
    url_or_endpoint: str, region: str | None = None, service: Service | None = None, *, timeout: float = 30.0
) -> OpenSearch:
    """A client for a local URL (no auth, `service=None`) or an AWS endpoint signed with SigV4.

    `service` is `es` for a managed domain and `aoss` for a Serverless collection; the
    credentials come from boto3's default chain (the Lambda role in AWS).
    """
    url = url_or_endpoint if "://" in url_or_endpoint else f"https://{url_or_endpoint}"
    if service is None:
        return OpenSearch(hosts=[url], timeout=timeout)
    if not region:
        raise ValueError("signing OpenSearch requests needs the AWS region")
    auth = AWSV4SignerAuth(boto3.Session().get_credentials(), region, service)
    return OpenSearch(
        hosts=[url],
        http_auth=auth,
        use_ssl=True,
        verify_certs=True,
        connection_class=RequestsHttpConnection,
        pool_maxsize=20,
        timeout=timeout,
    )


def vector_mapping(dimension: int) -> Json:
    """The `knn_vector` field: faiss HNSW, inner product over unit vectors."""
    return {
        "type": "knn_vector",
        "dimension": dimension,
        "method": {
            "name": "hnsw",
            "engine": "faiss",
            "space_type": "innerproduct",
            "parameters": {"m": 16, "ef_construction": 128},
        },
    }


def mappings(model_id: str, dimension: int) -> Json:
    """Chunk fields, the document's filter fields, the Document itself (unindexed) and the vector."""
    return {
        "dynamic": "strict",
        "_meta": {"embedding_model": model_id, "embedding_dimension": dimension, "schema_version": SCHEMA_VERSION},
        "properties": {
            "chunk_id": _KEYWORD,
            "doc_id": _KEYWORD,
            "ordinal": _INTEGER,
            "text": {"type": "text", "analyzer": TEXT_ANALYZER, "similarity": SIMILARITY, "fields": CJK_FIELD},
            "headline": {"type": "text", "analyzer": TEXT_ANALYZER, "similarity": SIMILARITY},
            "summary": {"type": "text", "index": False},
            "page_start": _INTEGER,
            "page_end": _INTEGER,
            "char_start": _INTEGER,
            "char_end": _INTEGER,
            "locator": {"type": "keyword", "index": False, "doc_values": False},
            "flags": _KEYWORD,
            "generation": _KEYWORD,
            "tenant": _KEYWORD,
            "source": _KEYWORD,
            "kind": _KEYWORD,
            "tier": {"type": "byte"},
            "acl_open": {"type": "boolean"},
            "groups": _KEYWORD,
            "users": _KEYWORD,
            "tags": _KEYWORD,
            "meta": _KEYWORD,
            "created_at": {"type": "date"},
            "document": {"type": "object", "enabled": False},
            VECTOR_FIELD: vector_mapping(dimension),
        },
    }


def index_body(model_id: str, dimension: int) -> Json:
    """The `indices.create` body of a chunk index built for this embedding model."""
    similarity = {SIMILARITY: {"type": "scripted", "script": {"source": SIMILARITY_SCRIPT}}}
    settings = {"index": {"knn": True, "similarity": similarity}, "analysis": ANALYSIS}
    return {"settings": settings, "mappings": mappings(model_id, dimension)}


def index_template(model_id: str, dimension: int) -> Json:
    """The composable index template (infra/opensearch/index-template.json) for the same index."""
    return {"index_patterns": list(TEMPLATE_PATTERNS), "template": index_body(model_id, dimension)}


def recorded_models(mapping_response: Json) -> set[tuple[str | None, int | None]]:
    """(model, dimension) of each index behind a name or alias, from a `get_mapping` response."""
    found = set()
    for entry in mapping_response.values():
        mapping = entry["mappings"]
        vector = mapping.get("properties", {}).get(VECTOR_FIELD, {})
        found.add((mapping.get("_meta", {}).get("embedding_model"), vector.get("dimension")))
    return found


def recorded_schemas(mapping_response: Json) -> set[int]:
    """The schema version of each index behind a name or alias (1 where none is recorded)."""
    return {int(entry["mappings"].get("_meta", {}).get("schema_version", 1)) for entry in mapping_response.values()}


def unit_vector(vector: np.ndarray) -> list[float]:
    """The vector scaled to length 1, as JSON numbers (inner product of unit vectors is the cosine)."""
    v = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(v))
    return (v / norm if norm else v).tolist()


def cosine_from_score(score: float) -> float:
    """Undo faiss inner-product scoring: score = 1 + dot when dot > 0, else 1 / (1 - dot)."""
    return score - 1.0 if score >= 1.0 else 1.0 - 1.0 / score


def meta_term(key: str, value: object) -> str:
    """One metadata entry as a keyword term, the value as the embedded backend stores it (str)."""
    return f"{key}={value}"


def meta_terms(doc: Document) -> list[str]:
    """The document's scalar metadata as terms."""
    return [meta_term(k, v) for k, v in doc.metadata.items() if isinstance(v, str | int | float | bool)]


def document_fields(doc: Document) -> Json:
    """The document's filter fields, denormalised onto each of its chunks."""
    return {
        "tenant": doc.tenant,
        "source": doc.source,
        "kind": doc.kind,
        "tier": doc.tier.rank,
        "acl_open": doc.acl.is_open,
        "groups": list(doc.acl.groups),
        "users": list(doc.acl.users),
        "tags": list(doc.tags),
        "meta": meta_terms(doc),
        "created_at": doc.created_at.isoformat(),
        "document": doc.model_dump(mode="json"),
    }


def chunk_key(tenant: str, chunk_id: str, generation: str) -> str:
    """A document id unique per tenant, chunk and generation (chunk ids repeat across tenants)."""
    return hashlib.sha256(json.dumps([tenant, chunk_id, generation]).encode()).hexdigest()


def new_generation() -> str:
    """A fresh write generation: a countdown, so the newest generation sorts first (ascending)."""
    return f"{(1 << 64) - time.time_ns():016x}{secrets.token_hex(4)}"


def bulk_lines(
    doc: Document, chunks: Sequence[Chunk], vectors: np.ndarray, generation: str, *, with_ids: bool
) -> list[Json]:
    """`index` actions and sources for these chunks, all tagged with one generation."""
    shared = {**document_fields(doc), "generation": generation}
    lines: list[Json] = []
    for chunk, vector in zip(chunks, vectors, strict=True):
        action = {"_id": chunk_key(doc.tenant, chunk.chunk_id, generation)} if with_ids else {}
        lines.append({"index": action})
        lines.append({**chunk.model_dump(mode="json"), **shared, VECTOR_FIELD: unit_vector(vector)})
    return lines


def delete_lines(ids: Sequence[str]) -> list[Json]:
    """`delete` actions by document id."""
    return [{"delete": {"_id": i}} for i in ids]


def term(field: str, value: str | int | bool) -> Json:
    return {"term": {field: value}}


def any_of(field: str, values: Sequence[str]) -> Json:
    """The field holds one of the values; an empty list matches nothing."""
    return {"terms": {field: list(values)}} if values else {"match_none": {}}


def created_range(flt: SearchFilter) -> Json:
    """created_after (inclusive) and created_before (exclusive) on the document's creation time."""
    bounds = {}
    if flt.created_after is not None:
        bounds["gte"] = flt.created_after.isoformat()
    if flt.created_before is not None:
        bounds["lt"] = flt.created_before.isoformat()
    return {"range": {"created_at": bounds}}


def acl_clause(principal: Principal) -> Json:
    """Open documents, or one of the caller's groups, or the caller by name."""
    should = [term("acl_open", True)]
    if principal.groups:
        should.append(any_of("groups", principal.groups))
    if principal.user_id:
        should.append(term("users", principal.user_id))
    return {"bool": {"should": should, "minimum_should_match": 1}}


def filter_clauses(principal: Principal, flt: SearchFilter) -> list[Json]:
    """Tenant, tier, ACL and the search filter, as non-scoring clauses applied inside the search."""
    clauses = [term("tenant", principal.tenant), {"range": {"tier": {"lte": principal.max_tier.rank}}}]
    for field, values in (
        ("source", flt.sources),
        ("doc_id", flt.doc_ids),
        ("chunk_id", flt.chunk_ids),
        ("kind", flt.kinds),
    ):
        if values is not None:
            clauses.append(any_of(field, values))
    if flt.created_after is not None or flt.created_before is not None:
        clauses.append(created_range(flt))
    if flt.tags_any:
        clauses.append(any_of("tags", flt.tags_any))
    clauses += [term("tags", tag) for tag in flt.tags_all]
    clauses += [any_of("meta", [meta_term(key, v) for v in values]) for key, values in flt.metadata.items()]
    clauses.append(acl_clause(principal))
    return clauses


def query_words(query: str) -> list[str]:
    """The query's distinct words (at most 64), lower-cased."""
    return list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))[:_MAX_QUERY_TERMS]


def _word_match(word: str) -> Json:
    """A word of the query in text and headline; a CJK character pair (`ragmcp.text.keyword_text`
    adds them to the query) in the text's `cjk` field too, which holds the same pairs."""
    fields = ["text", f"headline^{HEADLINE_BOOST}", *(["text.cjk"] if is_cjk(word) else [])]
    return {"multi_match": {"query": word, "fields": fields, "type": "most_fields"}}


def stats_body(tenant: str, words: Sequence[str]) -> Json:
    """The tenant's chunk count and, for each word, how many of its chunks hold it (whatever the
    caller may read: the statistics are the tenant's, as on the embedded index)."""
    buckets = {str(i): _word_match(word) for i, word in enumerate(words)}
    return {
        "size": 0,
        "track_total_hits": True,
        "query": {"bool": {"filter": [term("tenant", tenant)]}},
        "aggs": {"df": {"filters": {"filters": buckets}}},
    }


def idf(chunks: int, df: int) -> float:
    """Lucene's idf, from the tenant's chunk count and the word's document frequency among them."""
    return math.log1p((chunks - df + 0.5) / (df + 0.5))


def tenant_idfs(words: Sequence[str], stats_response: Json) -> list[tuple[str, float]]:
    """Each word held by some chunk of the tenant, with its idf there."""
    chunks = stats_response["hits"]["total"]["value"]
    counts = stats_response["aggregations"]["df"]["buckets"]
    return [(w, idf(chunks, counts[str(i)]["doc_count"])) for i, w in enumerate(words) if counts[str(i)]["doc_count"]]


def fts_body(principal: Principal, weighted: Sequence[tuple[str, float]], flt: SearchFilter, k: int) -> Json:
    """bm25 over text and headline (any word may match) under the filter clauses: each word's
    match carries the word's idf among the tenant's chunks, the similarity adds tf and length."""
    should = [{"multi_match": {**_word_match(w)["multi_match"], "boost": weight}} for w, weight in weighted]
    return {
        "size": k,
        "track_total_hits": False,
        "_source": ["chunk_id"],
        "query": {"bool": {"should": should, "minimum_should_match": 1, "filter": filter_clauses(principal, flt)}},
    }


def knn_body(principal: Principal, vector: np.ndarray, flt: SearchFilter, k: int) -> Json:
    """k-NN with the filter inside the knn clause, so the top k is taken over allowed chunks only."""
    knn = {"vector": unit_vector(vector), "k": k, "filter": {"bool": {"filter": filter_clauses(principal, flt)}}}
    return {"size": k, "track_total_hits": False, "_source": ["chunk_id"], "query": {"knn": {VECTOR_FIELD: knn}}}


def chunks_body(tenant: str, chunk_ids: Sequence[str]) -> Json:
    """The newest generation of each requested chunk of the tenant, without its vector."""
    wanted = list(dict.fromkeys(chunk_ids))
    return {
        "size": len(wanted),
        "query": {"bool": {"filter": [term("tenant", tenant), any_of("chunk_id", wanted)]}},
        "sort": ["generation"],
        "collapse": {"field": "chunk_id"},
        "_source": {"excludes": [VECTOR_FIELD]},
    }


def count_body(tenant: str) -> Json:
    return {"query": term("tenant", tenant)}


def request_params(tenant: str, *, serverless: bool) -> dict[str, str]:
    """Query parameters of a write or search: tenant routing, where the service takes it."""
    return {} if serverless else {"routing": tenant}


def first_error(bulk_response: Json) -> str:
    """The first failed item of a bulk response, as one line."""
    errors = (result["error"] for item in bulk_response["items"] for result in item.values() if "error" in result)
    return f"OpenSearch bulk request failed: {next(errors, 'no item error reported')}"


def written_ids(bulk_response: Json) -> list[str]:
    """The ids of the documents a bulk request indexed (generated ones included)."""
    return [result["_id"] for item in bulk_response["items"] for result in item.values() if "error" not in result]


def hits_of(response: Json, score_of: Callable[[float], float]) -> list[IndexHit]:
    """Hits in rank order, one per chunk id (two generations may be visible for a moment)."""
    hits: dict[str, IndexHit] = {}
    for hit in response["hits"]["hits"]:
        chunk_id = hit["_source"]["chunk_id"]
        hits.setdefault(chunk_id, IndexHit(chunk_id=chunk_id, raw_score=score_of(hit["_score"])))
    return list(hits.values())


def chunk_and_document(source: Json) -> tuple[Chunk, Document]:
    chunk = Chunk.model_validate({name: source[name] for name in Chunk.model_fields if name in source})
    return chunk, Document.model_validate(source["document"])


def batches(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _time_left(deadline: float) -> tuple[Json, float]:
    """A search body's `timeout` and the client's `request_timeout` for the time left to `deadline`."""
    check_deadline(deadline)
    left = deadline - time.monotonic()
    return {"timeout": f"{max(1, math.ceil(left * 1000))}ms"}, left


@contextmanager
def _stopped_at_deadline() -> Iterator[None]:
    """The client giving up at the deadline is the search reaching it."""
    try:
        yield
    except ConnectionTimeout:
        raise DeadlineExceeded("the search reached its deadline") from None


class Generation(BaseModel):
    """A document's chunks in the index: one write generation, its chunk ids in `parts` ledger items."""

    generation: str
    parts: int


class ChunkLedger(Protocol):
    """Each document's current generation (compare-and-set) and the index ids of every generation."""

    def current(self, tenant: str, doc_id: str) -> Generation | None: ...

    def begin(self, tenant: str, doc_id: str, generation: str) -> None:
        """Note a generation before its first chunk is written."""

    def record(self, tenant: str, doc_id: str, generation: str, ids: Sequence[str], first_part: int = 0) -> Generation:
        """Keep the ids of a generation's chunks (as they are written, before it may become current)."""

    def generations(self, tenant: str, doc_id: str) -> list[Generation]:
        """Every generation of the document noted, whether current or not."""

    def swap(self, tenant: str, doc_id: str, expected: Generation | None, new: Generation | None) -> bool:
        """Make `new` current (None: no chunks) if `expected` still is; whether it was."""

    def ids(self, tenant: str, doc_id: str, generation: Generation) -> list[str]: ...

    def forget(self, tenant: str, doc_id: str, generation: Generation) -> None: ...


class OpenSearchIndex:
    """SearchIndex on one OpenSearch index (or alias) of chunk documents."""

    def __init__(self, client: OpenSearch, index: str, ledger: ChunkLedger, *, serverless: bool = False):
        self.client = client
        self.index = index
        self.ledger = ledger
        self.serverless = serverless
        self._model: tuple[str, int] | None = None
        self._checked = False
        self._checking = threading.Lock()

    def _params(self, tenant: str) -> dict[str, str]:
        return request_params(tenant, serverless=self.serverless)

    def ensure_model(self, model_id: str, dimension: int) -> None:
        """Remember the model; the index is checked against it on first use."""
        self._model = (model_id, dimension)
        self._checked = False

    def create(self, model_id: str, dimension: int) -> bool:
        """Create the index for this model unless it exists, then check it (deploy time); whether it was created."""
        self.ensure_model(model_id, dimension)
        created = False
        if not self.client.indices.exists(index=self.index):
            try:
                self.client.indices.create(index=self.index, body=index_body(model_id, dimension))
                created = True
            except RequestError as exc:
                if exc.error != "resource_already_exists_exception":
                    raise
        self._check()
        return created

    def _check(self) -> None:
        if self._checked or self._model is None:
            return
        with self._checking:
            if self._checked:
                return
            model_id, dimension = self._model
            if not self.client.indices.exists(index=self.index):
                raise IndexMismatch(
                    f"OpenSearch index {self.index!r} does not exist: the stack's SearchIndex custom resource "
                    "creates it at deploy time"
                )
            mapping = self.client.indices.get_mapping(index=self.index)
            for found_model, found_dimension in recorded_models(mapping):
                if found_model != model_id:
                    raise IndexMismatch(
                        f"OpenSearch index {self.index!r} was built with embedding model {found_model!r}, "
                        f"but this server uses {model_id!r}; use another index or re-ingest into a fresh one"
                    )
                if found_dimension != dimension:
                    raise IndexMismatch(
                        f"OpenSearch index {self.index!r} was built with embedding dimension {found_dimension}, "
                        f"but this server uses {dimension}; use another index or re-ingest into a fresh one"
                    )
            outdated = sorted(v for v in recorded_schemas(mapping) if v != SCHEMA_VERSION)
            if outdated:
                raise IndexOutdated(
                    f"OpenSearch index {self.index!r} has schema version {outdated[0]}, this server needs"
                    f" {SCHEMA_VERSION} (keyword analyzer {TEXT_ANALYZER!r}, similarity {SIMILARITY!r}); neither can"
                    " change in place:"
                    " delete the index, deploy again (the SearchIndex custom resource creates it with this"
                    " mapping) and drop the documents again to re-ingest them"
                )
            self._checked = True

    def ensure_schema(self, rebuild: bool = False) -> bool:
        """The schema version is checked with the model on first use (IndexOutdated), or now when a
        rebuild is asked for: an analyzer cannot change on an existing OpenSearch index, so the index
        is made anew (delete it, deploy again) and the documents ingested again."""
        if rebuild:
            self._check()
        return False

    def replace_document(self, doc: Document, chunks: Sequence[Chunk], vectors: np.ndarray) -> None:
        """Write the chunks as a new generation, make it current, then delete the one it replaced.

        Searchers never see the document missing: for a moment both generations are visible (hits
        are deduplicated by chunk id, get_chunks prefers the newest). If any chunk fails to index,
        the new generation is deleted and the current one stays whole.
        """
        self._check()
        tenant, doc_id = doc.tenant, doc.doc_id
        seen = self.ledger.current(tenant, doc_id)
        written = self._write(doc, chunks, vectors, new_generation())
        while not self.ledger.swap(tenant, doc_id, seen, written):
            seen = self.ledger.current(tenant, doc_id)  # another ingest made its generation current meanwhile
        if seen is not None:
            self._drop(tenant, doc_id, seen)
        self._refresh()

    def delete_document(self, tenant: str, doc_id: str) -> bool:
        """Remove every generation of the document: the current one, and any a failed write left."""
        self._check()
        while True:
            seen = self.ledger.current(tenant, doc_id)
            if seen is None or self.ledger.swap(tenant, doc_id, seen, None):
                break
        generations = self.ledger.generations(tenant, doc_id)
        for generation in generations:
            self._drop(tenant, doc_id, generation, sweep=True)
        self._refresh()
        return seen is not None or bool(generations)

    def _write(self, doc: Document, chunks: Sequence[Chunk], vectors: np.ndarray, generation: str) -> Generation:
        """Index the chunks as one generation, noted in the ledger before the first is written and their
        ids recorded after each request. A failure part-way (a refused request, a lost answer) deletes
        what is known to be written; the generation stays noted until a delete of the document has
        removed everything of it (some ids may never have come back)."""
        tenant, doc_id = doc.tenant, doc.doc_id
        lines = bulk_lines(doc, chunks, vectors, generation, with_ids=not self.serverless)
        self.ledger.begin(tenant, doc_id, generation)
        recorded = Generation(generation=generation, parts=0)
        try:
            for batch in batches(lines, 2 * _BULK_CHUNKS):
                response = self.client.bulk(body=batch, index=self.index, params=self._params(tenant))
                ids = written_ids(response)
                recorded = self.ledger.record(tenant, doc_id, generation, ids, first_part=recorded.parts)
                if response["errors"]:
                    raise RuntimeError(first_error(response))
        except Exception:
            try:
                self._delete_ids(tenant, self.ledger.ids(tenant, doc_id, recorded))
            except Exception:  # the write's own error is the one to report; delete_document retries
                log.warning("removing a failed write of %s left chunks for a later delete", doc_id, exc_info=True)
            raise
        return recorded

    def _drop(self, tenant: str, doc_id: str, generation: Generation, *, sweep: bool = False) -> None:
        """Delete a generation's recorded chunks (and, with `sweep`, any of its chunks the search finds,
        written by a request whose answer was lost), then forget it."""
        self._delete_ids(tenant, self.ledger.ids(tenant, doc_id, generation))
        if sweep:
            self._delete_ids(tenant, self._find_generation(tenant, doc_id, generation.generation))
        self.ledger.forget(tenant, doc_id, generation)

    def _find_generation(self, tenant: str, doc_id: str, generation: str) -> list[str]:
        clauses = [term("tenant", tenant), term("doc_id", doc_id), term("generation", generation)]
        body = {"size": _SWEEP_CHUNKS, "_source": ["chunk_id"], "query": {"bool": {"filter": clauses}}}
        response = self.client.search(index=self.index, body=body, params=self._params(tenant))
        return [hit["_id"] for hit in response["hits"]["hits"]]

    def _delete_ids(self, tenant: str, ids: Sequence[str]) -> None:
        for batch in batches(ids, _BULK_CHUNKS * 10):
            response = self.client.bulk(body=delete_lines(batch), index=self.index, params=self._params(tenant))
            if response["errors"]:
                raise RuntimeError(first_error(response))

    def _refresh(self) -> None:
        """One refresh per document on a managed domain; Serverless refreshes on its own interval."""
        if not self.serverless:
            self.client.indices.refresh(index=self.index)

    def search_fts(
        self, principal: Principal, query: str, flt: SearchFilter, k: int, *, deadline: float | None = None
    ) -> list[IndexHit]:
        """Two requests: the tenant's statistics for the query's words, then the search weighted by them."""
        self._check()
        words = query_words(query)
        if not words:
            return []
        stats = self._search(stats_body(principal.tenant, words), principal.tenant, deadline)
        weighted = tenant_idfs(words, stats)
        if not weighted:
            return []
        return hits_of(self._search(fts_body(principal, weighted, flt, k), principal.tenant, deadline), float)

    def search_vector(
        self, principal: Principal, vector: np.ndarray, flt: SearchFilter, k: int, *, deadline: float | None = None
    ) -> list[IndexHit]:
        self._check()
        response = self._search(knn_body(principal, vector, flt, k), principal.tenant, deadline)
        return hits_of(response, cosine_from_score)

    def score_chunks(
        self, principal: Principal, flt: SearchFilter, asked: Sequence[ScoresAsked], *, deadline: float | None = None
    ) -> list[tuple[dict[str, float], dict[str, float]]]:
        """Two multi-search requests for every ask at once, where restricted searches would make up to three
        round trips an ask: the tenant's statistics for each ask's words, then each ask's bm25 search and k-NN
        search, each restricted to the chunks it names (the cluster filters by chunk id inside a search)."""
        self._check()
        tenant = principal.tenant
        words = [query_words(ask.query) if ask.bm25_of else [] for ask in asked]
        counted = [n for n, listed in enumerate(words) if listed]
        stats = self._msearch([stats_body(tenant, words[n]) for n in counted], tenant, deadline)
        weighted = {n: tenant_idfs(words[n], response) for n, response in zip(counted, stats, strict=True)}
        bodies: list[Json] = []
        sides: list[tuple[int, int]] = []  # (ask, 0: its bm25 search, 1: its k-NN search) of each body
        for n, ask in enumerate(asked):
            if weighted.get(n):
                only = flt.model_copy(update={"chunk_ids": tuple(ask.bm25_of)})
                bodies.append(fts_body(principal, weighted[n], only, len(ask.bm25_of)))
                sides.append((n, 0))
            if ask.cosine_of:
                only = flt.model_copy(update={"chunk_ids": tuple(ask.cosine_of)})
                bodies.append(knn_body(principal, ask.vector, only, len(ask.cosine_of)))
                sides.append((n, 1))
        scored: list[tuple[dict[str, float], dict[str, float]]] = [({}, {}) for _ in asked]
        for (n, side), response in zip(sides, self._msearch(bodies, tenant, deadline), strict=True):
            scored[n][side].update(hits_of(response, cosine_from_score if side else float))
        return scored

    def _search(self, body: Json, tenant: str, deadline: float | None) -> Json:
        """One search request; with a deadline, bounded by the time left to it: the cluster stops searching
        then (the body's `timeout`) and the client stops waiting (`request_timeout`). Either raises
        DeadlineExceeded: the partial hits of a search the cluster cut short are never used."""
        params = self._params(tenant)
        if deadline is None:
            return self.client.search(index=self.index, body=body, params=params)
        timeout, left = _time_left(deadline)
        with _stopped_at_deadline():
            timed = {**body, **timeout}
            response = self.client.search(index=self.index, body=timed, params=params, request_timeout=left)
        if response.get("timed_out"):
            raise DeadlineExceeded("the search reached its deadline")
        return response

    def _msearch(self, bodies: Sequence[Json], tenant: str, deadline: float | None) -> list[Json]:
        """Several searches in one multi-search request, bounded by a deadline as `_search` is; their
        responses in order. A search the cluster failed raises, as one request of `_search` would."""
        if not bodies:
            return []
        header = {"index": self.index, **self._params(tenant)}
        if deadline is None:
            answered = self.client.msearch(index=self.index, body=[part for b in bodies for part in (header, b)])
        else:
            timeout, left = _time_left(deadline)
            lines = [part for body in bodies for part in (header, {**body, **timeout})]
            with _stopped_at_deadline():
                answered = self.client.msearch(index=self.index, body=lines, request_timeout=left)
        responses: list[Json] = answered["responses"]
        for response in responses:
            if "error" in response:
                raise RuntimeError(f"OpenSearch multi-search failed: {response['error']}")
            if response.get("timed_out"):
                raise DeadlineExceeded("the search reached its deadline")
        return responses

    def get_chunks(self, tenant: str, chunk_ids: Sequence[str]) -> dict[str, tuple[Chunk, Document]]:
        if not chunk_ids:
            return {}
        self._check()
        body = chunks_body(tenant, chunk_ids)
        response = self.client.search(index=self.index, body=body, params=self._params(tenant))
        found = (chunk_and_document(hit["_source"]) for hit in response["hits"]["hits"])
        return {chunk.chunk_id: (chunk, doc) for chunk, doc in found}

    def count_chunks(self, tenant: str) -> int:
        self._check()
        response = self.client.count(index=self.index, body=count_body(tenant), params=self._params(tenant))
        return response["count"]

"""An OpenSearch client double with the documented semantics of the two AWS services, for the
adapter's write and delete flows without a cluster.

Serverless (`serverless=True`, as Amazon OpenSearch Serverless vector collections behave):
- a write or delete becomes visible to search `delay` seconds after it is made (the collection's
  refresh interval), never sooner: there is no refresh API and no `refresh` parameter;
- no `routing` parameter and no custom document ids (Classic vector collections): ids are generated;
- no `_delete_by_query`.
Managed domain (`serverless=False`): routing and deterministic ids are accepted; writes are
visible after `delay` seconds or after a refresh.

Access (`access_after` seconds, either service): OpenSearch Serverless enforces a new data access
policy only after it has propagated (up to about a minute; AWS says so, and first deploys see 403s
for exactly this), so every request made before `access_after` seconds have passed (real time, from
the double's creation, which stands for the policy's) is refused with 403 Forbidden.

Faults (`faults`, by the number of the bulk request, counted from 1): "refuse" answers 429 Too Many
Requests without writing (AOSS throttles a collection at its OCU cap); "timeout" writes, then the
client gives up waiting (the ids it generated never reach the caller).

Every request body and query parameter is checked against the official OpenSearch API
specification on its way in (opensearch_spec.py), as the real client would send it. Searches
implement the query subset the adapter sends (bool with must, should and filter, term, terms,
range, match_none, multi_match, knn with its filter scored as faiss inner product, `filters`
aggregations, `track_total_hits`) over the documents visible at the double's clock, which tests
move forward. A text field is scored as OpenSearch scores it: by default BM25 (k1 1.2, b 0.75)
with the statistics of every visible document of the index (one shard), or by the adapter's
scripted similarity where the mapping names it (the double runs that script's formula: it cannot
run Painless, and knows no other script).
"""

from __future__ import annotations

import itertools
import json
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from opensearchpy.exceptions import (
    AuthorizationException,
    ConnectionTimeout,
    NotFoundError,
    RequestError,
    TransportError,
)

from ragmcp.adapters.aws.opensearch import BM25_AVGDL, BM25_B, BM25_K1, SIMILARITY

from .opensearch_spec import OpenSearchSpec

Json = dict[str, Any]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class _Op:
    at: float
    doc_id: str
    source: Json | None  # None: a delete


@dataclass
class _Index:
    body: Json
    ops: list[_Op] = field(default_factory=list)
    refreshed_at: float = -1.0


def _tokens(text: str) -> list[str]:
    return [w.lower() for w in "".join(c if c.isalnum() else " " for c in text).split()]


def _words(text: str) -> set[str]:
    return set(_tokens(text))


def _scripted_bm25(boost: float, freq: float, length: float) -> float:
    """What opensearch.SIMILARITY_SCRIPT computes."""
    norm = BM25_K1 * (1 - BM25_B + BM25_B * length / BM25_AVGDL)
    return boost * freq * (BM25_K1 + 1) / (freq + norm)


@dataclass(frozen=True)
class _Scorer:
    """How a search scores text fields: each field's similarity (from the index body) and the
    statistics of the documents the search sees (for BM25)."""

    similarity: dict[str, str]
    docs: list[Json]

    def field(self, name: str, words: list[str], doc: Json, boost: float) -> float:
        tokens = _tokens(doc.get(name) or "")
        score = 0.0
        for word in words:
            freq = tokens.count(word)
            if not freq:
                continue
            if self.similarity.get(name) == SIMILARITY:
                score += _scripted_bm25(boost, freq, len(tokens))
                continue
            holders = [_tokens(d.get(name) or "") for d in self.docs if d.get(name)]
            df = sum(word in t for t in holders)
            avgdl = sum(map(len, holders)) / len(holders)
            idf = math.log1p((len(holders) - df + 0.5) / (df + 0.5))
            score += boost * idf * freq * 2.2 / (freq + 1.2 * (0.25 + 0.75 * len(tokens) / avgdl))
        return score

    def match(self, match: Json, doc: Json) -> float:
        words = _tokens(match["query"])
        score = 0.0
        for spec in match["fields"]:
            name, _, boost = spec.partition("^")
            score += self.field(name, words, doc, match.get("boost", 1.0) * (float(boost) if boost else 1.0))
        return score

    def query(self, query: Json, doc: Json) -> float:
        clauses = query.get("bool", {}).get("must", []) + query.get("bool", {}).get("should", [])
        return sum(self.match(q["multi_match"], doc) for q in clauses if "multi_match" in q and _matches(q, doc))


def _matches(query: Json, doc: Json) -> bool:
    ((kind, arg),) = query.items()
    if kind == "bool":
        if not all(_matches(q, doc) for q in arg.get("must", []) + arg.get("filter", [])):
            return False
        if any(_matches(q, doc) for q in arg.get("must_not", [])):
            return False
        should = arg.get("should", [])
        return not should or sum(_matches(q, doc) for q in should) >= arg.get("minimum_should_match", 1)
    if kind == "match_none":
        return False
    if kind in ("term", "terms"):
        ((name, wanted),) = arg.items()
        wanted = wanted if kind == "terms" else [wanted]
        value = doc.get(name)
        values = value if isinstance(value, list) else [value]
        return any(v in wanted for v in values)
    if kind == "range":
        ((name, bounds),) = arg.items()
        value = doc.get(name)
        checks = {
            "gte": lambda b: value >= b,
            "gt": lambda b: value > b,
            "lte": lambda b: value <= b,
            "lt": lambda b: value < b,
        }
        return value is not None and all(checks[op](bound) for op, bound in bounds.items())
    if kind == "multi_match":
        words = _words(arg["query"])
        return any(words & _words(doc.get(spec.partition("^")[0]) or "") for spec in arg["fields"])
    raise AssertionError(f"the double does not know the query {kind!r}")


def _faiss_inner_product(dot: float) -> float:
    return 1.0 + dot if dot >= 0 else 1.0 / (1.0 - dot)


class _Indices:
    def __init__(self, double: OpenSearchDouble):
        self.double = double

    def exists(self, index: str, **_: Any) -> bool:
        self.double.authorize()
        return index in self.double.indexes

    def create(self, index: str, body: Json, **_: Any) -> Json:
        self.double.authorize()
        self.double.spec.validate_body("indices.create", body)
        with self.double.lock:
            if index in self.double.indexes:
                raise RequestError(400, "resource_already_exists_exception", {"index": index})
            self.double.indexes[index] = _Index(json.loads(json.dumps(body)))
        self.double.calls.append(("indices.create", index))
        return {"acknowledged": True, "index": index}

    def get_mapping(self, index: str, **_: Any) -> Json:
        self.double.authorize()
        return {index: {"mappings": self.double._index(index).body["mappings"]}}

    def refresh(self, index: str, **_: Any) -> Json:
        if self.double.serverless:
            raise NotFoundError(404, "the refresh API is not supported by OpenSearch Serverless", {})
        self.double._index(index).refreshed_at = self.double.clock.now
        self.double.calls.append(("indices.refresh", index))
        return {"_shards": {"failed": 0}}


class OpenSearchDouble:
    """The parts of `opensearchpy.OpenSearch` the adapter uses."""

    def __init__(
        self, spec: OpenSearchSpec, clock: Clock, *, serverless: bool, delay: float = 10.0, access_after: float = 0.0
    ):
        self.spec = spec
        self.access_from = time.monotonic() + access_after
        self.refused = 0
        self.faults: dict[int, str] = {}
        self._bulks = 0
        self.clock = clock
        self.serverless = serverless
        self.delay = delay
        self.indexes: dict[str, _Index] = {}
        self.indices = _Indices(self)
        self.calls: list[tuple[str, str]] = []
        self.search_timeouts: list[tuple[float | None, str | None]] = []
        """Each search's `request_timeout` (how long the client waits for it) and its body's `timeout` (when the
        cluster stops searching); None where not given."""
        self.cut_short = False
        """True: each search answers as a cluster that reached the body's `timeout` does (timed_out, partial hits)."""
        self.lock = threading.Lock()
        self._ids = itertools.count(1)

    def authorize(self) -> None:
        """403 until the data access policy has propagated (see the module's docstring)."""
        if time.monotonic() < self.access_from:
            self.refused += 1
            raise AuthorizationException(403, "Forbidden", {"status": 403, "error": {"reason": "403 Forbidden"}})

    def _index(self, name: str) -> _Index:
        self.authorize()
        if name not in self.indexes:
            raise NotFoundError(404, "index_not_found_exception", {"index": name})
        return self.indexes[name]

    def _params(self, group: str, params: Json | None) -> None:
        params = params or {}
        self.spec.validate_params(group, params)
        if self.serverless and params:
            raise RequestError(400, "illegal_argument_exception", f"Serverless takes no {sorted(params)}")

    def visible(self, name: str) -> dict[str, Json]:
        """The documents a search sees now: every operation at least `delay` old, or before a refresh."""
        index = self._index(name)
        horizon = max(self.clock.now - self.delay, index.refreshed_at)
        docs: dict[str, Json] = {}
        for op in index.ops:
            if op.at > horizon:
                continue
            if op.source is None:
                docs.pop(op.doc_id, None)
            else:
                docs[op.doc_id] = op.source
        return docs

    def stored(self, name: str) -> dict[str, Json]:
        """Every document, visible or not (what the collection holds)."""
        docs: dict[str, Json] = {}
        for op in self._index(name).ops:
            if op.source is None:
                docs.pop(op.doc_id, None)
            else:
                docs[op.doc_id] = op.source
        return docs

    def bulk(self, body: list[Json], index: str, params: Json | None = None, **_: Any) -> Json:
        self.spec.validate_bulk(body)
        self._params("bulk", params)
        target = self._index(index)
        self._bulks += 1
        fault = self.faults.get(self._bulks)
        if fault == "refuse":
            raise TransportError(429, "429 Too Many Requests", {"status": 429})
        if fault == "timeout":
            self._apply_bulk(body, index, target)
            raise ConnectionTimeout("TIMEOUT", "read timed out", None)
        return self._apply_bulk(body, index, target)

    def _apply_bulk(self, body: list[Json], index: str, target: _Index) -> Json:
        items, errors = [], False
        with self.lock:
            lines = iter(body)
            for line in lines:
                ((action, meta),) = line.items()
                if action == "index":
                    source = next(lines)
                    if "_id" in meta and self.serverless:
                        error = {"type": "illegal_argument_exception", "reason": "Document ID is not supported"}
                        items.append({"index": {"status": 400, "error": error}})
                        errors = True
                        continue
                    doc_id = meta.get("_id") or f"gen{next(self._ids):08d}"
                    target.ops.append(_Op(self.clock.now, doc_id, json.loads(json.dumps(source))))
                    items.append({"index": {"_id": doc_id, "status": 201, "result": "created"}})
                elif action == "delete":
                    exists = meta["_id"] in self.stored(index)
                    target.ops.append(_Op(self.clock.now, meta["_id"], None))
                    items.append(
                        {
                            "delete": {
                                "_id": meta["_id"],
                                "status": 200 if exists else 404,
                                "result": "deleted" if exists else "not_found",
                            }
                        }
                    )
                else:
                    raise AssertionError(f"the double does not know the bulk action {action!r}")
        self.calls.append(("bulk", index))
        return {"took": 1, "errors": errors, "items": items}

    def search(
        self, index: str, body: Json, params: Json | None = None, request_timeout: float | None = None, **_: Any
    ) -> Json:
        self.spec.validate_body("search", body)
        self._params("search", params)
        self.search_timeouts.append((request_timeout, body.get("timeout")))
        docs = self.visible(index)
        query = body["query"]
        if "knn" in query:
            knn = query["knn"]["embedding"]
            vector = np.asarray(knn["vector"], dtype=np.float32)
            allowed = [(i, d) for i, d in docs.items() if _matches(knn.get("filter", {"bool": {}}), d)]
            scored = [(i, d, _faiss_inner_product(float(vector @ np.asarray(d["embedding"])))) for i, d in allowed]
            scored = sorted(scored, key=lambda x: -x[2])[: knn["k"]]
        else:
            body_of = self._index(index).body
            fields = body_of.get("mappings", {}).get("properties", {})
            scorer = _Scorer({n: f["similarity"] for n, f in fields.items() if "similarity" in f}, list(docs.values()))
            scored = [(i, d, scorer.query(query, d) or 1.0) for i, d in docs.items() if _matches(query, d)]
            scored.sort(key=lambda x: -x[2])
            if "aggs" in body:
                return self._aggregate(index, body, [d for _, d, _ in scored])
        for name in reversed(body.get("sort", [])):
            scored.sort(key=lambda x, name=name: x[1][name])
        if "collapse" in body:
            seen: set[Any] = set()
            collapsed = []
            for hit in scored:
                value = hit[1][body["collapse"]["field"]]
                if value not in seen:
                    seen.add(value)
                    collapsed.append(hit)
            scored = collapsed
        hits = [
            {"_id": i, "_score": score, "_source": self._source(d, body.get("_source", True))} for i, d, score in scored
        ]
        self.calls.append(("search", index))
        if self.cut_short and "timeout" in body:
            return {"timed_out": True, "hits": {"hits": hits[:1]}}
        return {"timed_out": False, "hits": {"hits": hits[: body.get("size", 10)]}}

    def msearch(
        self, body: list[Json], index: str | None = None, request_timeout: float | None = None, **_: Any
    ) -> Json:
        """Each (header, search body) pair searched as `search` does: the header's index (else the
        request's) and routing; one response a search, in order."""
        assert len(body) % 2 == 0, "a multi-search body is header and search lines in pairs"
        responses = []
        for header, search in zip(body[::2], body[1::2], strict=True):
            assert set(header) <= {"index", "routing"}, f"the double does not know the header {header}"
            params = {"routing": header["routing"]} if "routing" in header else None
            target = header.get("index") or index
            assert target is not None
            responses.append(self.search(target, search, params, request_timeout))
        self.calls.append(("msearch", index or ""))
        return {"took": 1, "responses": responses}

    def _aggregate(self, index: str, body: Json, matched: list[Json]) -> Json:
        """`filters` aggregations over the matching documents, and their total (track_total_hits)."""
        assert body.get("size") == 0 and body.get("track_total_hits") is True, "the adapter asks for counts only"
        aggregations = {}
        for name, agg in body["aggs"].items():
            ((kind, arg),) = agg.items()
            assert kind == "filters", f"the double does not know the aggregation {kind!r}"
            buckets = {key: {"doc_count": sum(_matches(q, d) for d in matched)} for key, q in arg["filters"].items()}
            aggregations[name] = {"buckets": buckets}
        self.calls.append(("search", index))
        return {"hits": {"total": {"value": len(matched), "relation": "eq"}, "hits": []}, "aggregations": aggregations}

    @staticmethod
    def _source(doc: Json, wanted: Any) -> Json:
        if wanted is False:
            return {}
        if isinstance(wanted, list):
            return {k: doc[k] for k in wanted if k in doc}
        if isinstance(wanted, dict):
            return {k: v for k, v in doc.items() if k not in wanted.get("excludes", [])}
        return doc

    def count(self, index: str, body: Json, params: Json | None = None, **_: Any) -> Json:
        self.spec.validate_body("count", body)
        self._params("count", params)
        return {"count": sum(_matches(body["query"], d) for d in self.visible(index).values())}

"""The stores on DynamoDB: documents, jobs, sources and users, API keys, upload sessions,
conversations, the embedding cache, the audit chain, and rate-limit windows.

Every table has a string partition key `pk` and sort key `sk`; each record is stored as its
pydantic model's JSON in `body`, with the attributes a key, an index or a condition needs beside
it. Data that expires carries `expires_at` (epoch seconds), the table's TTL attribute; DynamoDB
deletes such items late (up to days), so every read checks `expires_at` too.
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from boto3.dynamodb.conditions import Attr, Key
from botocore.exceptions import ClientError

from ragmcp.domain.errors import RagError
from ragmcp.domain.models import (
    Document,
    Job,
    JobStatus,
    Source,
    Turn,
    UploadSession,
    UserRecord,
    random_document_number,
    utcnow,
)
from ragmcp.security.audit import GENESIS
from ragmcp.security.models import WINDOW_SECONDS, ApiKey, AuditRecord, RateDecision, RateLimits

Item = dict[str, Any]
Table = Any  # boto3.resources DynamoDB Table

_SEP = "\x1f"
_BATCH_GET = 100
EMBEDDING_TTL = timedelta(days=90)


def error_code(exc: ClientError) -> str:
    return exc.response.get("Error", {}).get("Code", "")


def is_conflict(exc: ClientError) -> bool:
    """A condition or a transaction lost to another writer (not a fault)."""
    return error_code(exc) in ("ConditionalCheckFailedException", "TransactionCanceledException")


def epoch(at: datetime) -> int:
    return int(at.timestamp())


def now_epoch() -> int:
    return int(time.time())


def query_all(table: Table, **kwargs: Any) -> Iterator[Item]:
    """Every item of a query, page by page."""
    while True:
        page = table.query(**kwargs)
        yield from page.get("Items", [])
        if "LastEvaluatedKey" not in page:
            return
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def scan_all(table: Table, **kwargs: Any) -> Iterator[Item]:
    while True:
        page = table.scan(**kwargs)
        yield from page.get("Items", [])
        if "LastEvaluatedKey" not in page:
            return
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def get_item(table: Table, pk: str, sk: str) -> Item | None:
    return table.get_item(Key={"pk": pk, "sk": sk}, ConsistentRead=True).get("Item")


def next_number(table: Table, pk: str, counter: str) -> int:
    """The next value of a per-partition counter (atomic)."""
    response = table.update_item(
        Key={"pk": pk, "sk": counter},
        UpdateExpression="ADD #n :one",
        ExpressionAttributeNames={"#n": "number"},
        ExpressionAttributeValues={":one": 1},
        ReturnValues="UPDATED_NEW",
    )
    return int(response["Attributes"]["number"])


class DynamoDocumentStore:
    """Items per tenant: `doc#<doc_id>` (the Document), `id#<doc_id>` and `no#<number>` (the number,
    drawn at random, kept after deletion so a deleted document is known; `counter` numbered them
    before). Index `by_path` on `path_key`."""

    def __init__(self, table: Table):
        self.table = table

    @staticmethod
    def path_key(tenant: str, source: str, path: str) -> str:
        return _SEP.join((tenant, source, path))

    def number_for(self, tenant: str, doc_id: str) -> int:
        found = get_item(self.table, tenant, f"id#{doc_id}")
        if found:
            return int(found["number"])
        put = {"TableName": self.table.name, "ConditionExpression": "attribute_not_exists(pk)"}
        while True:  # a random number: it says nothing of how many documents there are
            number = random_document_number()
            try:
                self.table.meta.client.transact_write_items(
                    TransactItems=[
                        {"Put": {**put, "Item": {"pk": tenant, "sk": f"id#{doc_id}", "number": number}}},
                        {"Put": {**put, "Item": {"pk": tenant, "sk": f"no#{number:012d}", "doc_id": doc_id}}},
                    ]
                )
            except ClientError as exc:
                if not is_conflict(exc):
                    raise
                existing = get_item(self.table, tenant, f"id#{doc_id}")
                if existing is not None:  # another writer numbered it first
                    return int(existing["number"])
                continue  # the number drawn was taken: draw again
            return number

    def put(self, doc: Document) -> None:
        self.table.put_item(
            Item={
                "pk": doc.tenant,
                "sk": f"doc#{doc.doc_id}",
                "source": doc.source,
                "path_key": self.path_key(doc.tenant, doc.source, doc.path),
                "body": doc.model_dump_json(),
            }
        )

    def get(self, tenant: str, doc_id: str) -> Document | None:
        item = get_item(self.table, tenant, f"doc#{doc_id}")
        return Document.model_validate_json(item["body"]) if item else None

    def get_by_number(self, tenant: str, number: int) -> Document | None:
        item = get_item(self.table, tenant, f"no#{number:012d}")
        return self.get(tenant, item["doc_id"]) if item else None

    def known(self, tenant: str, doc_id: str) -> bool:
        return get_item(self.table, tenant, f"id#{doc_id}") is not None

    def delete(self, tenant: str, doc_id: str) -> None:
        self.table.delete_item(Key={"pk": tenant, "sk": f"doc#{doc_id}"})

    def by_path(self, tenant: str, source: str, path: str) -> list[Document]:
        condition = Key("path_key").eq(self.path_key(tenant, source, path))
        items = query_all(self.table, IndexName="by_path", KeyConditionExpression=condition)
        return sorted((Document.model_validate_json(i["body"]) for i in items), key=lambda d: d.doc_id)

    def list(self, tenant: str, source: str | None = None) -> list[Document]:
        query: dict[str, Any] = {"KeyConditionExpression": Key("pk").eq(tenant) & Key("sk").begins_with("doc#")}
        if source is not None:
            query["FilterExpression"] = Attr("source").eq(source)
        return [Document.model_validate_json(i["body"]) for i in query_all(self.table, **query)]

    def count(self, tenant: str, source: str | None = None) -> int:
        query: dict[str, Any] = {
            "KeyConditionExpression": Key("pk").eq(tenant) & Key("sk").begins_with("doc#"),
            "Select": "COUNT",
        }
        if source is not None:
            query["FilterExpression"] = Attr("source").eq(source)
        total = 0
        while True:
            page = self.table.query(**query)
            total += int(page["Count"])
            if "LastEvaluatedKey" not in page:
                return total
            query["ExclusiveStartKey"] = page["LastEvaluatedKey"]


class DynamoJobStore:
    """Items `job#<job_id>` per tenant; index `by_created` (pk, created_at) lists the newest first."""

    def __init__(self, table: Table):
        self.table = table

    def put(self, job: Job) -> None:
        self.table.put_item(
            Item={
                "pk": job.tenant,
                "sk": f"job#{job.job_id}",
                "status": job.status,
                "created_at": job.created_at.isoformat(),
                "body": job.model_dump_json(),
            }
        )

    def get(self, tenant: str, job_id: str) -> Job | None:
        item = get_item(self.table, tenant, f"job#{job_id}")
        return Job.model_validate_json(item["body"]) if item else None

    def list(self, tenant: str, status: JobStatus | None = None, limit: int = 100) -> list[Job]:
        query: dict[str, Any] = {
            "IndexName": "by_created",
            "KeyConditionExpression": Key("pk").eq(tenant),
            "ScanIndexForward": False,
        }
        if status is not None:
            query["FilterExpression"] = Attr("status").eq(status)
        jobs: list[Job] = []
        for item in query_all(self.table, **query):
            jobs.append(Job.model_validate_json(item["body"]))
            if len(jobs) >= limit:
                break
        return jobs


class DynamoSourceStore:
    """Items `source#<id>` per tenant in the catalog table; numbers from the tenant's `counter#source`."""

    def __init__(self, table: Table):
        self.table = table

    def put(self, source: Source) -> None:
        """Store the source; a new one gets the next number of its tenant, an old one keeps its own."""
        existing = self.get(source.tenant, source.source_id)
        if existing is not None:
            self._write(source.model_copy(update={"number": existing.number}))
            return
        stored = source.model_copy(update={"number": next_number(self.table, source.tenant, "counter#source")})
        try:
            self._write(stored, condition="attribute_not_exists(pk)")
        except ClientError as exc:
            if not is_conflict(exc):
                raise
            self.put(source)

    def _write(self, source: Source, condition: str | None = None) -> None:
        item = {"pk": source.tenant, "sk": f"source#{source.source_id}", "body": source.model_dump_json()}
        self.table.put_item(Item=item, **({"ConditionExpression": condition} if condition else {}))

    def get(self, tenant: str, source_id: str) -> Source | None:
        item = get_item(self.table, tenant, f"source#{source_id}")
        return Source.model_validate_json(item["body"]) if item else None

    def list(self, tenant: str) -> list[Source]:
        items = query_all(self.table, KeyConditionExpression=Key("pk").eq(tenant) & Key("sk").begins_with("source#"))
        return [Source.model_validate_json(i["body"]) for i in items]


class DynamoUserDirectory:
    """Items `user#<id>` per tenant in the catalog table."""

    def __init__(self, table: Table):
        self.table = table

    def get(self, tenant: str, user_id: str) -> UserRecord | None:
        item = get_item(self.table, tenant, f"user#{user_id}")
        return UserRecord.model_validate_json(item["body"]) if item else None

    def put(self, user: UserRecord) -> None:
        self.table.put_item(Item={"pk": user.tenant, "sk": f"user#{user.user_id}", "body": user.model_dump_json()})

    def list(self, tenant: str) -> list[UserRecord]:
        items = query_all(self.table, KeyConditionExpression=Key("pk").eq(tenant) & Key("sk").begins_with("user#"))
        return [UserRecord.model_validate_json(i["body"]) for i in items]


class DynamoKeyStore:
    """Two items per key, written together: `key#<key_id>` (sk `key`) and `hash#<sha256>` (sk `key`),
    so a request's key is one GetItem by its hash; only `list` (an operator's command) scans."""

    def __init__(self, table: Table):
        self.table = table

    def put(self, key: ApiKey) -> None:
        body = key.model_dump_json()
        items = [
            {"pk": f"key#{key.key_id}", "sk": "key", "body": body},
            {"pk": f"hash#{key.key_hash}", "sk": "key", "body": body},
        ]
        self.table.meta.client.transact_write_items(
            TransactItems=[{"Put": {"TableName": self.table.name, "Item": item}} for item in items]
        )

    def get(self, key_id: str) -> ApiKey | None:
        item = get_item(self.table, f"key#{key_id}", "key")
        return ApiKey.model_validate_json(item["body"]) if item else None

    def by_hash(self, key_hash: str) -> ApiKey | None:
        item = get_item(self.table, f"hash#{key_hash}", "key")
        return ApiKey.model_validate_json(item["body"]) if item else None

    def list(self) -> list[ApiKey]:
        items = scan_all(self.table, FilterExpression=Attr("pk").begins_with("key#"))
        return sorted((ApiKey.model_validate_json(i["body"]) for i in items), key=lambda k: k.key_id)


class DynamoUploadStore:
    """One item per session: the session without its parts in `body`, the parts as the map `parts`
    (index -> size), so a part is recorded by one conditional update."""

    def __init__(self, table: Table):
        self.table = table

    def put(self, session: UploadSession) -> None:
        self.table.put_item(
            Item={
                "pk": session.tenant,
                "sk": session.upload_id,
                "body": session.model_dump_json(exclude={"parts"}),
                "parts": {str(i): size for i, size in session.parts.items()},
                "expires_at": epoch(session.expires_at),
            }
        )

    @staticmethod
    def session_of(item: Item) -> UploadSession:
        parts = {int(i): int(size) for i, size in item.get("parts", {}).items()}
        return UploadSession.model_validate_json(item["body"]).model_copy(update={"parts": parts})

    def get(self, tenant: str, upload_id: str) -> UploadSession | None:
        item = get_item(self.table, tenant, upload_id)
        return self.session_of(item) if item and int(item["expires_at"]) > now_epoch() else None

    def add_part(self, tenant: str, upload_id: str, index: int, size: int) -> UploadSession | None:
        try:
            response = self.table.update_item(
                Key={"pk": tenant, "sk": upload_id},
                UpdateExpression="SET parts.#i = :size",
                ConditionExpression="attribute_exists(pk) AND expires_at > :now",
                ExpressionAttributeNames={"#i": str(index)},
                ExpressionAttributeValues={":size": size, ":now": now_epoch()},
                ReturnValues="ALL_NEW",
            )
        except ClientError as exc:
            if is_conflict(exc):
                return None
            raise
        return self.session_of(response["Attributes"])

    def delete(self, tenant: str, upload_id: str) -> None:
        self.table.delete_item(Key={"pk": tenant, "sk": upload_id})

    def expired(self, now: datetime) -> list[UploadSession]:
        return [self.session_of(i) for i in scan_all(self.table, FilterExpression=Attr("expires_at").lte(epoch(now)))]


class DynamoConversationStore:
    """One item per conversation: its turns (JSON each) and when it expires; the sort key is the
    JSON pair [user, conversation id], so two users reusing an id never share a conversation
    (items of the id alone, kept before users were part of the key, are never read: TTL removes them)."""

    def __init__(self, table: Table):
        self.table = table

    @staticmethod
    def sort_key(user: str, conversation_id: str) -> str:
        return json.dumps([user, conversation_id], separators=(",", ":"))

    def get(self, tenant: str, user: str, conversation_id: str) -> list[Turn]:
        item = get_item(self.table, tenant, self.sort_key(user, conversation_id))
        if item is None or int(item["expires_at"]) <= now_epoch():
            return []
        return [Turn.model_validate_json(t) for t in item["turns"]]

    def append(self, tenant: str, user: str, conversation_id: str, turn: Turn, ttl_seconds: int) -> None:
        now = now_epoch()
        key = {"pk": tenant, "sk": self.sort_key(user, conversation_id)}
        values = {":turn": [turn.model_dump_json()], ":exp": now + ttl_seconds, ":now": now}
        try:
            self.table.update_item(
                Key=key,
                UpdateExpression="SET turns = list_append(turns, :turn), expires_at = :exp",
                ConditionExpression="expires_at > :now",
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if not is_conflict(exc):
                raise
            self.table.put_item(Item={**key, "turns": values[":turn"], "expires_at": values[":exp"]})


class DynamoEmbeddingCache:
    """Vectors by (model, text hash), float32 bytes; they expire after 90 days unused."""

    def __init__(self, table: Table):
        self.table = table

    def get_many(self, model_sha256: str, text_sha256s: Sequence[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        client = self.table.meta.client
        wanted = list(dict.fromkeys(text_sha256s))
        for start in range(0, len(wanted), _BATCH_GET):
            keys = [{"pk": model_sha256, "sk": sha} for sha in wanted[start : start + _BATCH_GET]]
            request = {self.table.name: {"Keys": keys}}
            while request:
                response = client.batch_get_item(RequestItems=request)
                for item in response["Responses"].get(self.table.name, []):
                    found[item["sk"]] = np.frombuffer(bytes(item["vector"]), dtype=np.float32)
                request = response.get("UnprocessedKeys") or {}
        return found

    def put_many(self, model_sha256: str, items: Iterable[tuple[str, np.ndarray]]) -> None:
        expires = epoch(utcnow() + EMBEDDING_TTL)
        with self.table.batch_writer(overwrite_by_pkeys=["pk", "sk"]) as batch:
            for sha, vector in items:
                data = np.asarray(vector, dtype=np.float32).tobytes()
                batch.put_item(Item={"pk": model_sha256, "sk": sha, "vector": data, "expires_at": expires})


class DynamoAuditStore:
    """One chain per tenant: items `record#<tenant>`/<seq> and a head item `head`/<tenant>. An
    append is one transaction that adds the record and moves the tenant's head only if no other
    writer moved it first. The last head seen is kept, so a lone writer appends in one round trip;
    a writer that lost the race re-reads the head after a jittered, exponentially growing pause
    (so that writers of one tenant spread out instead of colliding again at once). Tenants never
    contend: their heads are different items."""

    HEADS = "head"

    def __init__(
        self,
        table: Table,
        attempts: int = 10,
        base_delay: float = 0.02,
        max_delay: float = 1.0,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.table = table
        self.attempts = attempts
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.sleep = sleep
        self.conflicts = 0
        """Appends lost to another writer since this store was made (each one retried)."""
        self._known: dict[str, tuple[int, str]] = {}
        self._lock = threading.Lock()

    def append(self, tenant: str, build: Callable[[int, str], AuditRecord]) -> AuditRecord:
        with self._lock:
            known = self._known.get(tenant)
        for attempt in range(self.attempts):
            fresh = known is None
            count, last_hash = known if known is not None else self.head(tenant)
            record = build(count + 1, last_hash)
            try:
                self.table.meta.client.transact_write_items(TransactItems=self._append_items(tenant, record, count))
            except ClientError as exc:
                if not is_conflict(exc):
                    raise
                with self._lock:
                    self.conflicts += 1
                known = None
                if fresh:  # a head remembered from an earlier append is re-read at once
                    self.sleep(random.uniform(0, min(self.max_delay, self.base_delay * 2**attempt)))
                continue
            with self._lock:
                if record.seq > self._known.get(tenant, (0, ""))[0]:
                    self._known[tenant] = (record.seq, record.hash)
            return record
        raise RagError(f"audit trail busy: {self.attempts} attempts lost to other writers of tenant {tenant!r}")

    def _append_items(self, tenant: str, record: AuditRecord, count: int) -> list[dict[str, Any]]:
        item = {"pk": f"record#{tenant}", "sk": f"{record.seq:012d}", "body": record.model_dump_json()}
        head = {"pk": self.HEADS, "sk": tenant, "seq": record.seq, "hash": record.hash}
        return [
            {"Put": {"TableName": self.table.name, "Item": item, "ConditionExpression": "attribute_not_exists(pk)"}},
            {
                "Put": {
                    "TableName": self.table.name,
                    "Item": head,
                    "ConditionExpression": "attribute_not_exists(pk) OR seq = :seq",
                    "ExpressionAttributeValues": {":seq": count},
                }
            },
        ]

    def tenants(self) -> list[str]:
        heads = query_all(self.table, KeyConditionExpression=Key("pk").eq(self.HEADS), ConsistentRead=True)
        return sorted(item["sk"] for item in heads)

    def records(self, tenant: str) -> Iterator[AuditRecord]:
        for item in query_all(self.table, KeyConditionExpression=Key("pk").eq(f"record#{tenant}"), ConsistentRead=True):
            yield AuditRecord.model_validate_json(item["body"])

    def head(self, tenant: str) -> tuple[int, str]:
        item = self.table.get_item(Key={"pk": self.HEADS, "sk": tenant}, ConsistentRead=True).get("Item")
        return (int(item["seq"]), item["hash"]) if item else (0, GENESIS)


class DynamoRateLimiter:
    """Requests and synthesis calls counted in one-minute windows (an item per key, kind and
    minute, with a TTL), and the requests in flight as a counter per key. Each count is one
    conditional update, so no two Lambdas can both take the last unit; a refused request is not
    counted. A counter of requests in flight whose last request started more than the lease ago
    is stale (a function that died never released it) and starts again."""

    def __init__(self, table: Table, lease_seconds: int, clock: Callable[[], float] = time.time):
        self.table = table
        self.lease = lease_seconds
        self.clock = clock

    def acquire(self, key_id: str, limits: RateLimits, synthesis: bool) -> RateDecision:
        now = self.clock()
        window = int(now // WINDOW_SECONDS * WINDOW_SECONDS)
        reset = math.ceil(window + WINDOW_SECONDS)
        expires = window + 2 * int(WINDOW_SECONDS)
        taken: list[str] = []
        count = self._count(key_id, f"all#{window}", limits.per_minute, expires)
        if count is None:
            return RateDecision(False, limits.per_minute, 0, reset, f"more than {limits.per_minute} requests a minute")
        taken.append(f"all#{window}")
        if synthesis:
            if self._count(key_id, f"synthesis#{window}", limits.synthesis_per_minute, expires) is None:
                self._give_back(key_id, taken)
                reason = f"more than {limits.synthesis_per_minute} synthesis calls a minute"
                return RateDecision(False, limits.per_minute, limits.per_minute - count + 1, reset, reason)
            taken.append(f"synthesis#{window}")
        if not self._enter(key_id, limits.concurrent, now):
            self._give_back(key_id, taken)
            reason = f"more than {limits.concurrent} concurrent requests"
            return RateDecision(False, limits.per_minute, limits.per_minute - count + 1, reset, reason)
        return RateDecision(True, limits.per_minute, max(0, limits.per_minute - count), reset)

    def release(self, key_id: str) -> None:
        try:
            self.table.update_item(
                Key={"pk": key_id, "sk": "active"},
                UpdateExpression="ADD #n :minus",
                ConditionExpression="#n > :zero",
                ExpressionAttributeNames={"#n": "count"},
                ExpressionAttributeValues={":minus": -1, ":zero": 0},
            )
        except ClientError as exc:
            if not is_conflict(exc):
                raise

    def _count(self, key_id: str, window: str, limit: int, expires: int) -> int | None:
        """Count one in the window if it is below the limit: the new count, or None when full."""
        try:
            response = self.table.update_item(
                Key={"pk": key_id, "sk": window},
                UpdateExpression="ADD #n :one SET expires_at = :exp",
                ConditionExpression="attribute_not_exists(#n) OR #n < :limit",
                ExpressionAttributeNames={"#n": "count"},
                ExpressionAttributeValues={":one": 1, ":limit": limit, ":exp": expires},
                ReturnValues="UPDATED_NEW",
            )
        except ClientError as exc:
            if is_conflict(exc):
                return None
            raise
        return int(response["Attributes"]["count"])

    def _give_back(self, key_id: str, windows: list[str]) -> None:
        for window in windows:
            self.table.update_item(
                Key={"pk": key_id, "sk": window},
                UpdateExpression="ADD #n :minus",
                ExpressionAttributeNames={"#n": "count"},
                ExpressionAttributeValues={":minus": -1},
            )

    def _enter(self, key_id: str, limit: int, now: float) -> bool:
        key = {"pk": key_id, "sk": "active"}
        held_until = int(now) + self.lease
        try:
            self.table.update_item(
                Key=key,
                UpdateExpression="ADD #n :one SET expires_at = :held",
                ConditionExpression="attribute_not_exists(#n) OR (#n < :limit AND expires_at > :now)",
                ExpressionAttributeNames={"#n": "count"},
                ExpressionAttributeValues={":one": 1, ":limit": limit, ":held": held_until, ":now": int(now)},
            )
            return True
        except ClientError as exc:
            if not is_conflict(exc):
                raise
        try:
            self.table.put_item(
                Item={**key, "count": 1, "expires_at": held_until},
                ConditionExpression="expires_at <= :now",
                ExpressionAttributeValues={":now": int(now)},
            )
            return True
        except ClientError as exc:
            if is_conflict(exc):
                return False
            raise

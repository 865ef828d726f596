"""The audit trail: every tool call appended to a hash chain. Each record's hash covers its
fields and the previous record's hash, so an edited, deleted or reordered record breaks the
chain at that point and `ragmcp audit verify` says where."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ragmcp.domain.models import Principal, utcnow
from ragmcp.ports import AuditStore
from ragmcp.security.models import AuditRecord

GENESIS = "0" * 64
ID_FIELDS = frozenset({"segment_uid", "chunk_id", "doc_id", "document_id", "resourceId", "id", "job_id", "upload_id"})
MAX_IDS = 100


def canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def digest(value: Any) -> str:
    return hashlib.sha256(canonical(value)).hexdigest()


def record_hash(record: AuditRecord) -> str:
    return digest(record.body())


def returned_ids(payload: Any) -> list[str]:
    """The identifiers a tool handed back (segments, chunks, documents, jobs), in order, at most MAX_IDS."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if len(found) >= MAX_IDS:
            return
        if isinstance(value, dict):
            for key, item in value.items():
                if key in ID_FIELDS and isinstance(item, str | int) and not isinstance(item, bool):
                    found.append(str(item))
                else:
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(payload)
    return list(dict.fromkeys(found))[:MAX_IDS]


class AuditLog:
    def __init__(self, store: AuditStore):
        self.store = store

    def append(self, principal: Principal, tool: str, arguments: Any, payload: Any, outcome: str) -> AuditRecord:
        def build(seq: int, prev_hash: str) -> AuditRecord:
            record = AuditRecord(
                seq=seq,
                at=utcnow(),
                tenant=principal.tenant,
                key_id=principal.key_id,
                user=principal.user_id,
                tool=tool,
                args_digest=digest(arguments),
                returned_ids=returned_ids(payload),
                outcome=outcome,
                prev_hash=prev_hash,
            )
            return record.model_copy(update={"hash": record_hash(record)})

        return self.store.append(build)


@dataclass(frozen=True, slots=True)
class ChainCheck:
    ok: bool
    records: int
    problem: str | None = None


def verify(records: Iterable[AuditRecord], head: tuple[int, str]) -> ChainCheck:
    """Walk the chain from the first record; the first broken link is reported, and a chain that
    ends before the recorded head (records removed from the end) too."""
    prev_hash, expected_seq, count = GENESIS, 1, 0
    for record in records:
        count += 1
        if record.seq != expected_seq:
            problem = f"record {record.seq}: expected record {expected_seq} (deleted or reordered)"
            return ChainCheck(False, count, problem)
        if record.prev_hash != prev_hash:
            return ChainCheck(False, count, f"record {record.seq}: does not follow the record before it")
        if record_hash(record) != record.hash:
            return ChainCheck(False, count, f"record {record.seq}: contents do not match its hash (edited)")
        prev_hash, expected_seq = record.hash, expected_seq + 1
    if (count, prev_hash) != head:
        return ChainCheck(False, count, f"the chain ends at record {count}, but {head[0]} were written")
    return ChainCheck(True, count)

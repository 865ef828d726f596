"""The audit trail: every tool call, refused request and download appended to its tenant's chain.

Each record carries an HMAC-SHA256 over its fields and the previous record's MAC, keyed by a
secret that is not in the database (a 0600 key file beside it locally, a Secrets Manager secret
on AWS). Someone who can rewrite the database but not read the key cannot edit, re-chain, forge
or move a record without breaking a MAC.

What a MAC cannot show is records taken away from the end of a chain (or the whole of it). So
signed checkpoints (each tenant's record count and last MAC, signed with the same key) are
written outside the database, at a fixed interval and at shutdown, by a background thread, never
on the request path: an append-only file locally, the Object Lock bucket on AWS. `verify` checks
every chain against every checkpoint; records written since the last checkpoint are only as
safe as the database until the next one.

Each tenant has its own chain (and head), so one tenant's appends never wait on another's.

Refused requests are recorded in aggregate (`AuditLog.refused`): the first of a reason (tenant, key,
outcome) at once, as any record; those that follow within a second are counted and written as one
record when the second ends, so a flood of refusals is at most one record a second per reason.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ragmcp.domain.errors import RagError
from ragmcp.domain.models import Principal, utcnow
from ragmcp.security.models import AuditCheckpoint, AuditRecord
from ragmcp.security.ports import AuditStore, CheckpointStore

log = logging.getLogger(__name__)

GENESIS = "0" * 64
UNAUTHENTICATED = "(unauthenticated)"
"""The chain of requests refused before any key named their tenant."""
ID_FIELDS = frozenset({"segment_uid", "chunk_id", "doc_id", "document_id", "resourceId", "id", "job_id", "upload_id"})
MAX_IDS = 100
MIN_KEY_BYTES = 32
REFUSAL_WINDOW_SECONDS = 1.0
MAX_AUDITED_TOOL = 200
MAX_COUNTED_TOOLS = 20


def canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def digest(value: Any) -> str:
    return hashlib.sha256(canonical(value)).hexdigest()


def sign(key: bytes, value: Any) -> str:
    """HMAC-SHA256 of the value's canonical JSON."""
    return hmac.new(key, canonical(value), hashlib.sha256).hexdigest()


def record_mac(key: bytes, record: AuditRecord) -> str:
    return sign(key, record.body())


def checkpoint_mac(key: bytes, checkpoint: AuditCheckpoint) -> str:
    return sign(key, checkpoint.body())


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


class Checkpointer:
    """Keeps the heads this process appended and writes them, signed, to the checkpoint store on
    its own thread: every `interval` seconds when a head moved, and once more at `close()`. The
    thread starts with the first record, so a process that audits nothing starts none."""

    def __init__(self, store: CheckpointStore, key: Callable[[], bytes], interval: float):
        self.store = store
        self.key = key
        self.interval = interval
        self._last_flush = time.monotonic()
        self._heads: dict[str, tuple[int, str]] = {}
        self._written: dict[str, tuple[int, str]] = {}
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def note(self, record: AuditRecord) -> None:
        with self._lock:
            if record.seq > self._heads.get(record.tenant, (0, ""))[0]:
                self._heads[record.tenant] = (record.seq, record.hash)
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(target=self._run, name="audit-checkpoints", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.flush()
            except Exception:  # the next interval tries again; the records stay in the database
                log.exception("writing an audit checkpoint failed")

    def flush_if_due(self) -> AuditCheckpoint | None:
        """`flush` when `interval` has passed since the last one, from the caller's thread: on AWS
        Lambda the process is frozen between invocations (and never shut down cleanly), so the
        thread may not run; the handler calls this after each invocation. A failure is logged,
        never raised: the records stay in the database and the next call tries again."""
        if time.monotonic() - self._last_flush < self.interval:
            return None
        try:
            return self.flush()
        except Exception:
            log.exception("writing an audit checkpoint failed")
            return None

    def flush(self) -> AuditCheckpoint | None:
        """Write a checkpoint of the heads if any moved since the last one written."""
        with self._flushing:
            self._last_flush = time.monotonic()
            with self._lock:
                heads = dict(self._heads)
            if heads == self._written:
                return None
            checkpoint = AuditCheckpoint(at=utcnow(), heads=dict(sorted(heads.items())))
            checkpoint = checkpoint.model_copy(update={"mac": checkpoint_mac(self.key(), checkpoint)})
            self.store.append(checkpoint)
            self._written = heads
            return checkpoint

    def close(self) -> None:
        """Stop the thread and write the last checkpoint (at shutdown)."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join()
        self.flush()


@dataclass
class _Refusals:
    """The refusals of one reason since its last record: counted, not yet written."""

    principal: Principal
    written_at: float
    count: int = 0
    first: str = ""
    last: str = ""
    tools: Counter[str] | None = None

    def add(self, principal: Principal, tool: str) -> None:
        now = utcnow().isoformat()
        if not self.count:
            self.principal, self.first, self.tools = principal, now, Counter()
        assert self.tools is not None
        if tool in self.tools or len(self.tools) < MAX_COUNTED_TOOLS:
            self.tools[tool] += 1
        self.count += 1
        self.last = now

    def take(self, now: float) -> tuple[Principal, str, dict[str, Any]]:
        """The summary record's principal, tool and arguments; the count starts again."""
        tools = (self.tools or Counter()).most_common()
        named = ", ".join(f"{name} x{n}" for name, n in tools[:5])
        summary = {"refused": self.count, "tools": dict(tools), "first": self.first, "last": self.last}
        tool = f"{self.count} refused: {named}"[:MAX_AUDITED_TOOL]
        principal = self.principal
        self.count, self.tools, self.written_at = 0, None, now
        return principal, tool, summary


class AuditLog:
    def __init__(
        self,
        store: AuditStore,
        key: Callable[[], bytes],
        checkpoints: Checkpointer,
        refusal_window: float = REFUSAL_WINDOW_SECONDS,
    ):
        self.store = store
        self.key = key
        self.checkpoints = checkpoints
        self.refusal_window = refusal_window
        self._refusals: dict[tuple[str, str | None, str], _Refusals] = {}
        self._refusals_lock = threading.Lock()
        self._flusher: threading.Thread | None = None
        self._stop_flushing = threading.Event()

    def refused(self, principal: Principal, tool: str, arguments: Any, outcome: str) -> None:
        """A refused request: written at once when its reason (tenant, key, outcome) has no record in
        the last `refusal_window` seconds, else counted and written with the others of its window as
        one record (tool "N refused: name xN, ...", the arguments' digest over the names, counts and
        times) when the window ends, or at `close()`."""
        reason = (principal.tenant, principal.key_id, outcome)
        now = time.monotonic()
        summary = None
        with self._refusals_lock:
            held = self._refusals.get(reason)
            if held is None:
                self._refusals[reason] = _Refusals(principal, now)
            elif now - held.written_at < self.refusal_window:
                held.add(principal, tool)
                self._flush_later()
                return
            elif held.count:  # the window ended before the flusher wrote it: this one joins it
                held.add(principal, tool)
                summary = held.take(now)
            else:
                held.written_at = now
        if summary is None:
            self.append(principal, tool, arguments, None, outcome)
        else:
            self.append(*summary, None, outcome)

    def _flush_later(self) -> None:
        if self._flusher is None or not self._flusher.is_alive():
            self._stop_flushing.clear()
            self._flusher = threading.Thread(target=self._flush_refusals, name="audit-refusals", daemon=True)
            self._flusher.start()

    def _flush_refusals(self) -> None:
        while not self._stop_flushing.wait(self.refusal_window / 4):
            try:
                if not self.flush_refusals():
                    return
            except Exception:  # the counts stay; the next round tries again
                log.exception("writing the audit record of refused requests failed")

    def flush_refusals(self, everything: bool = False) -> bool:
        """Write the counted refusals whose window ended (all of them with `everything`); forget
        reasons idle for a minute. Whether any refusal is still counted."""
        now = time.monotonic()
        due: list[tuple[str, tuple[Principal, str, dict[str, Any]]]] = []
        with self._refusals_lock:
            for reason, held in list(self._refusals.items()):
                if held.count and (everything or now - held.written_at >= self.refusal_window):
                    due.append((reason[2], held.take(now)))
                elif not held.count and now - held.written_at > 60:
                    del self._refusals[reason]
            waiting = any(held.count for held in self._refusals.values())
        for outcome, (principal, tool, summary) in due:
            self.append(principal, tool, summary, None, outcome)
        return waiting

    def append(
        self, principal: Principal, tool: str, arguments: Any, payload: Any, outcome: str
    ) -> AuditRecord:
        key = self.key()

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
            return record.model_copy(update={"hash": record_mac(key, record)})

        record = self.store.append(principal.tenant, build)
        self.checkpoints.note(record)
        return record

    def verify(self) -> ChainCheck:
        return verify(self.store, self.checkpoints.store.all(), self.key())

    def close(self) -> None:
        self._stop_flushing.set()
        if self._flusher is not None:
            self._flusher.join()
        self.flush_refusals(everything=True)
        self.checkpoints.close()


@dataclass(frozen=True, slots=True)
class ChainCheck:
    ok: bool
    records: int
    chains: int = 0
    checkpoints: int = 0
    unvouched: int = 0
    """Records written after the last checkpoint that covers their chain."""
    problem: str | None = None


def _broken(problem: str, records: int = 0) -> ChainCheck:
    return ChainCheck(False, records, problem=problem)


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:200]


def verify(store: AuditStore, checkpoints: Iterable[AuditCheckpoint], key: bytes) -> ChainCheck:
    """Every checkpoint's signature, then every tenant's chain from its first record: numbering,
    tenant, link to the record before and MAC; the chain's end against its head, and every
    checkpointed (count, MAC) against the record of that number. The first problem is reported."""
    pinned: dict[str, dict[int, tuple[str, int]]] = {}
    checkpoint_count = 0
    try:
        for checkpoint_count, checkpoint in enumerate(checkpoints, start=1):
            if not hmac.compare_digest(checkpoint_mac(key, checkpoint), checkpoint.mac):
                at = f"{checkpoint.at:%Y-%m-%dT%H:%M:%SZ}"
                return _broken(f"checkpoint {checkpoint_count} ({at}): its signature does not match")
            for tenant, (seq, mac) in checkpoint.heads.items():
                pinned.setdefault(tenant, {})[seq] = (mac, checkpoint_count)
    except RagError as exc:
        return _broken(exc.message)
    except ValueError as exc:  # a checkpoint that cannot be parsed
        return _broken(f"checkpoint {checkpoint_count + 1}: cannot be read ({_first_line(exc)})")
    total = unvouched = 0
    tenants = sorted(set(store.tenants()) | set(pinned))
    for tenant in tenants:
        prev_hash, expected_seq = GENESIS, 1
        records = store.records(tenant)
        while True:
            try:
                record = next(records, None)
            except ValueError as exc:  # a stored record that is not a record any more
                problem = f"tenant {tenant!r}, record {expected_seq}: cannot be read ({_first_line(exc)})"
                return _broken(problem, total)
            if record is None:
                break
            total += 1
            where = f"tenant {tenant!r}, record {record.seq}"
            if record.seq != expected_seq:
                return _broken(f"{where}: expected record {expected_seq} (deleted or reordered)", total)
            if record.tenant != tenant:
                return _broken(f"{where}: belongs to tenant {record.tenant!r} (moved)", total)
            if record.prev_hash != prev_hash:
                return _broken(f"{where}: does not follow the record before it", total)
            if not hmac.compare_digest(record_mac(key, record), record.hash):
                return _broken(f"{where}: its MAC does not match (edited, re-chained or forged)", total)
            vouched = pinned.get(tenant, {}).get(record.seq)
            if vouched is not None and vouched[0] != record.hash:
                return _broken(f"{where}: differs from checkpoint {vouched[1]}", total)
            prev_hash, expected_seq = record.hash, expected_seq + 1
        length, head = expected_seq - 1, store.head(tenant)
        if head != (length, prev_hash):
            return _broken(f"tenant {tenant!r}: the chain ends at record {length}, but its head says {head[0]}", total)
        vouched_to = max(pinned.get(tenant, {0: ("", 0)}))
        if vouched_to > length:
            at = pinned[tenant][vouched_to][1]
            problem = f"tenant {tenant!r}: the chain ends at record {length}, but checkpoint {at} vouches for"
            problem += f" {vouched_to}"
            return _broken(problem, total)
        unvouched += length - vouched_to
    return ChainCheck(True, total, len(tenants), checkpoint_count, unvouched)

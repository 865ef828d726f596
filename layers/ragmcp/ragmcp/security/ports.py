"""The seams of the security package: where keys, the audit trail and rate-limit windows are kept
(adapters/local: SQLite and files; adapters/aws: DynamoDB and S3)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol

from ragmcp.security.models import ApiKey, AuditCheckpoint, AuditRecord, RateDecision, RateLimits


class KeyStore(Protocol):
    def put(self, key: ApiKey) -> None: ...

    def get(self, key_id: str) -> ApiKey | None: ...

    def by_hash(self, key_hash: str) -> ApiKey | None: ...

    def list(self) -> list[ApiKey]: ...


class AuditStore(Protocol):
    """Audit records as one chain per tenant, each with its head (count, last MAC)."""

    def append(self, tenant: str, build: Callable[[int, str], AuditRecord]) -> AuditRecord:
        """Atomically: give `build` the tenant's next sequence number and last record's MAC, store
        its record, and move the tenant's head to it. Appends of other tenants never wait on it."""

    def tenants(self) -> list[str]: ...

    def records(self, tenant: str) -> Iterator[AuditRecord]:
        """The tenant's chain in order of sequence number."""

    def head(self, tenant: str) -> tuple[int, str]:
        """(number of records, MAC of the last one) as recorded at the tenant's last append."""


class CheckpointStore(Protocol):
    """Signed audit checkpoints, kept outside the database and never rewritten."""

    def append(self, checkpoint: AuditCheckpoint) -> None: ...

    def all(self) -> Iterator[AuditCheckpoint]:
        """Every checkpoint, oldest first."""


class RateLimiter(Protocol):
    def acquire(self, key_id: str, limits: RateLimits, synthesis: bool) -> RateDecision:
        """Count one request and hold a concurrency slot, if every limit allows it."""

    def release(self, key_id: str) -> None: ...

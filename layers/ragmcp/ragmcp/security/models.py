"""Security records: API keys, rate limits and their decisions, audit records."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from ragmcp.domain.models import Tier, utcnow

WINDOW_SECONDS = 60.0
"""The rate limits' sliding window: the limits count requests a minute."""


class RateLimits(BaseModel):
    per_minute: int = Field(default=60, ge=1, le=1_000_000)
    synthesis_per_minute: int = Field(default=10, ge=1, le=1_000_000)
    concurrent: int = Field(default=5, ge=1, le=10_000)


@dataclass(frozen=True, slots=True)
class RateDecision:
    allowed: bool
    limit: int
    remaining: int
    reset_epoch: int
    reason: str | None = None

    def headers(self) -> dict[str, str]:
        return {
            "x-ratelimit-limit": str(self.limit),
            "x-ratelimit-remaining": str(self.remaining),
            "x-ratelimit-reset": str(self.reset_epoch),
        }


class ApiKey(BaseModel):
    key_id: str
    tenant: str
    name: str = ""
    scopes: tuple[str, ...] = ("read", "write")
    max_tier: Tier = Tier.standard
    limits: RateLimits = Field(default_factory=RateLimits)
    user: str | None = Field(default=None, description="The user the key acts for; None: itself, or a platform.")
    key_hash: str = Field(repr=False)
    created_at: datetime = Field(default_factory=utcnow)
    revoked_at: datetime | None = None


class AuditRecord(BaseModel):
    """One tool call, refused request or download; `seq` numbers it in its tenant's chain, `hash`
    is the HMAC of every other field (keyed outside the database), `prev_hash` the record before's."""

    seq: int
    at: datetime
    tenant: str
    key_id: str | None
    user: str | None
    tool: str
    args_digest: str
    returned_ids: list[str]
    outcome: str
    prev_hash: str
    hash: str = ""

    def body(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={"hash"})


class AuditCheckpoint(BaseModel):
    """What a process vouches for, outside the database: each tenant's [record count, last MAC]
    at `at`, signed (`mac`) with the audit key."""

    at: datetime
    heads: dict[str, tuple[int, str]]
    mac: str = ""

    def body(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={"mac"})

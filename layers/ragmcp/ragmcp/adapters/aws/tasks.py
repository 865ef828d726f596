"""Jobs on AWS: a job that wrote an object into a source (a note, an upload) is done by the ingest
function when the object's S3 event reaches it; any other job (a sync) runs at once, in process.

A job waiting for an object is linked to the object's event by one item per object in the jobs
table (`wait#<source>/<path>`): the MCP side records the job id there, the ingest side records
the outcome there. Each side writes with one atomic update that returns the item as it was, so
whichever comes second sees what the first wrote and completes the job: an event processed
before its job was recorded still completes it.

Ingests of one object take turns (`hold`: a lease item `hold#<source>/<path>`, taken by a
conditional write, given back at the end, expired after the ingest function's longest run): two
changes of one object processed at once would otherwise let whichever finished last become
current, the one that read the older version included. The second waits, then reads the newer.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from ragmcp.adapters.aws.dynamodb import Table, get_item, is_conflict, now_epoch
from ragmcp.domain.errors import RagError
from ragmcp.domain.models import Job, utcnow
from ragmcp.ingest.jobs import Work, run_job
from ragmcp.ports import JobStore

SqsClient = Any  # boto3 SQS client

LINK_TTL_SECONDS = 24 * 3600
HOLD_SECONDS = 330
"""A lease outlives the ingest function's 300 s timeout: a function that died gives its turn up then."""
WAIT_SECONDS = 240
"""How long an ingest waits for its turn before its message goes back to the queue (and is retried)."""
_SEP = "\x1f"
_DEPTH_ATTRIBUTES = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]


class ObjectEventTaskQueue:
    """TaskQueue (MCP side) and ObjectJobs (ingest side) over the jobs table and the ingest queue."""

    def __init__(
        self,
        jobs: JobStore,
        table: Table,
        sqs: SqsClient,
        queue_url: str | None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.jobs = jobs
        self.table = table
        self.sqs = sqs
        self.queue_url = queue_url
        self.sleep = sleep

    @staticmethod
    def _key(tenant: str, source: str, path: str) -> dict[str, str]:
        return {"pk": tenant, "sk": f"wait#{source}{_SEP}{path}"}

    def submit(self, job: Job, work: Work) -> Job:
        if job.source is None:
            return run_job(self.jobs, job, work)
        job.status = "queued"
        self.jobs.put(job)
        before = self.table.update_item(
            Key=self._key(job.tenant, job.source, job.target),
            UpdateExpression="SET job_id = :job, expires_at = :exp",
            ExpressionAttributeValues={":job": job.job_id, ":exp": now_epoch() + LINK_TTL_SECONDS},
            ReturnValues="ALL_OLD",
        ).get("Attributes", {})
        if "outcome_at" in before and datetime.fromisoformat(before["outcome_at"]) >= job.created_at:
            self._complete(job, before)
            self.table.delete_item(Key=self._key(job.tenant, job.source, job.target))
        return job

    def depth(self) -> int:
        """Change events waiting in (or being processed from) the ingest queue."""
        if self.queue_url is None:
            return 0
        attributes = self.sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=_DEPTH_ATTRIBUTES)
        return sum(int(v) for v in attributes["Attributes"].values())

    @contextmanager
    def hold(self, tenant: str, source: str, path: str) -> Iterator[None]:
        key = {"pk": tenant, "sk": f"hold#{source}{_SEP}{path}"}
        token = secrets.token_hex(8)
        give_up = time.monotonic() + WAIT_SECONDS
        while True:
            now = now_epoch()
            try:
                self.table.put_item(
                    Item={**key, "token": token, "expires_at": now + HOLD_SECONDS},
                    ConditionExpression="attribute_not_exists(pk) OR expires_at < :now",
                    ExpressionAttributeValues={":now": now},
                )
                break
            except ClientError as exc:
                if not is_conflict(exc):
                    raise
            if time.monotonic() > give_up:
                raise RagError(f"another ingest of {path!r} is still running; the change is retried later")
            self.sleep(0.5)
        try:
            yield
        finally:
            try:
                self.table.delete_item(
                    Key=key,
                    ConditionExpression="#t = :token",
                    ExpressionAttributeNames={"#t": "token"},
                    ExpressionAttributeValues={":token": token},
                )
            except ClientError as exc:
                if not is_conflict(exc):  # expired and taken by another ingest: nothing to give back
                    raise

    def started(self, tenant: str, source: str, path: str) -> None:
        link = get_item(self.table, **self._key(tenant, source, path))
        job = self.jobs.get(tenant, link["job_id"]) if link and "job_id" in link else None
        if job is not None:
            job.status, job.updated_at = "running", utcnow()
            self.jobs.put(job)

    def finished(self, tenant: str, source: str, path: str, counts: dict[str, int], error: str | None) -> None:
        before = self.table.update_item(
            Key=self._key(tenant, source, path),
            UpdateExpression=(
                "SET outcome_at = :at, outcome_counts = :counts, outcome_error = :error, expires_at = :exp"
            ),
            ExpressionAttributeValues={
                ":at": utcnow().isoformat(),
                ":counts": counts,
                ":error": error,
                ":exp": now_epoch() + LINK_TTL_SECONDS,
            },
            ReturnValues="ALL_OLD",
        ).get("Attributes", {})
        job = self.jobs.get(tenant, before["job_id"]) if "job_id" in before else None
        if job is not None:
            self._complete(job, {"outcome_counts": counts, "outcome_error": error})
            self.table.delete_item(Key=self._key(tenant, source, path))

    def _complete(self, job: Job, outcome: dict[str, Any]) -> None:
        error = outcome.get("outcome_error")
        job.status = "failed" if error else "succeeded"
        job.error = error
        job.counts = {k: int(v) for k, v in (outcome.get("outcome_counts") or {}).items()}
        job.updated_at = utcnow()
        self.jobs.put(job)

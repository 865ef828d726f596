"""Dead letters back to work: the drop bucket's change events that failed their retries wait in the
ingest queue's dead-letter queue; once the cause is fixed (`ragmcp jobs redrive`), they are moved
back to the ingest queue, ten at a time, each deleted from the dead-letter queue only after the
ingest queue has accepted it. A message sent twice (a crash between the two) is harmless: every
change is idempotent on (key, version)."""

from __future__ import annotations

from typing import Any

from ragmcp.domain.errors import RagError

SqsClient = Any  # boto3 SQS client
_BATCH = 10
_HIDE_SECONDS = 60


class DeadLetters:
    def __init__(self, sqs: SqsClient, dead_letter_url: str, queue_url: str):
        self.sqs = sqs
        self.dead_letter_url = dead_letter_url
        self.queue_url = queue_url

    def redrive(self, limit: int) -> int:
        """Move at most `limit` messages back; how many moved."""
        moved = 0
        while moved < limit:
            messages = self.sqs.receive_message(
                QueueUrl=self.dead_letter_url,
                MaxNumberOfMessages=min(_BATCH, limit - moved),
                WaitTimeSeconds=0,
                VisibilityTimeout=_HIDE_SECONDS,
                MessageAttributeNames=["All"],
            ).get("Messages", [])
            if not messages:
                break
            entries = [
                {"Id": str(n), "MessageBody": m["Body"], **_attributes(m)} for n, m in enumerate(messages)
            ]
            sent = self.sqs.send_message_batch(QueueUrl=self.queue_url, Entries=entries)
            done = [messages[int(e["Id"])] for e in sent.get("Successful", [])]
            if done:
                self.sqs.delete_message_batch(
                    QueueUrl=self.dead_letter_url,
                    Entries=[{"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(done)],
                )
            moved += len(done)
            if sent.get("Failed"):
                failure = sent["Failed"][0]
                raise RagError(f"redrive stopped after {moved}: {failure.get('Code')}: {failure.get('Message')}")
        return moved

    def waiting(self) -> int:
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.dead_letter_url, AttributeNames=["ApproximateNumberOfMessages"]
        )
        return int(attributes["Attributes"]["ApproximateNumberOfMessages"])


def _attributes(message: dict[str, Any]) -> dict[str, Any]:
    return {"MessageAttributes": message["MessageAttributes"]} if message.get("MessageAttributes") else {}

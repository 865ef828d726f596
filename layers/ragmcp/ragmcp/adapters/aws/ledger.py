"""The OpenSearch index's ChunkLedger in the documents table: which generation of each document's
chunks is current, and the index ids of every generation's chunks.

Items per tenant (`pk`): `chunks#<doc_id>` holds the current generation and how many id items it
has; `chunks#<doc_id>␟<generation>␟<part>` hold the ids, at most 2,000 a part (an item stays far below
DynamoDB's 400 KB), recorded after each bulk request; `chunks#<doc_id>␟<generation>␟begun` is
written before the generation's first chunk, so a write that fails part-way (its ids, or some of
them, unknown) is still found and removed (`generations`). The current generation changes only by a
conditional write on the generation it was read as (compare-and-set), so two ingests of one document
cannot both replace the same one.
"""

from __future__ import annotations

from collections.abc import Sequence

from boto3.dynamodb.conditions import Key
from botocore.exceptions import ClientError

from ragmcp.adapters.aws.dynamodb import Table, get_item, is_conflict, query_all
from ragmcp.adapters.aws.opensearch import Generation

IDS_PER_PART = 2000
_SEP = "\x1f"
_BEGUN = "begun"


class DynamoChunkLedger:
    def __init__(self, table: Table):
        self.table = table

    @staticmethod
    def _head(doc_id: str) -> str:
        return f"chunks#{doc_id}"

    @staticmethod
    def _parts(doc_id: str, generation: str) -> str:
        return f"chunks#{doc_id}{_SEP}{generation}{_SEP}"

    def current(self, tenant: str, doc_id: str) -> Generation | None:
        item = get_item(self.table, tenant, self._head(doc_id))
        return Generation(generation=item["generation"], parts=int(item["parts"])) if item else None

    def begin(self, tenant: str, doc_id: str, generation: str) -> None:
        self.table.put_item(Item={"pk": tenant, "sk": f"{self._parts(doc_id, generation)}{_BEGUN}", "ids": []})

    def record(self, tenant: str, doc_id: str, generation: str, ids: Sequence[str], first_part: int = 0) -> Generation:
        prefix = self._parts(doc_id, generation)
        parts = [list(ids[i : i + IDS_PER_PART]) for i in range(0, len(ids), IDS_PER_PART)]
        with self.table.batch_writer() as batch:
            for n, part in enumerate(parts, start=first_part):
                batch.put_item(Item={"pk": tenant, "sk": f"{prefix}{n:06d}", "ids": part})
        return Generation(generation=generation, parts=first_part + len(parts))

    def generations(self, tenant: str, doc_id: str) -> list[Generation]:
        """Every generation of the document the ledger knows: current, superseded or abandoned."""
        head = f"{self._head(doc_id)}{_SEP}"
        items = query_all(
            self.table, KeyConditionExpression=Key("pk").eq(tenant) & Key("sk").begins_with(head), ConsistentRead=True
        )
        parts: dict[str, int] = {}
        for item in items:
            generation, _, part = item["sk"].removeprefix(head).partition(_SEP)
            parts[generation] = parts.get(generation, 0) + (part != _BEGUN)
        return [Generation(generation=g, parts=n) for g, n in parts.items()]

    def swap(self, tenant: str, doc_id: str, expected: Generation | None, new: Generation | None) -> bool:
        key = {"pk": tenant, "sk": self._head(doc_id)}
        if expected is None:
            condition, values = "attribute_not_exists(pk)", {}
        else:
            condition, values = "generation = :seen", {":seen": expected.generation}
        try:
            if new is None:
                self.table.delete_item(Key=key, ConditionExpression=condition, ExpressionAttributeValues=values)
            else:
                self.table.put_item(
                    Item={**key, "generation": new.generation, "parts": new.parts},
                    ConditionExpression=condition,
                    **({"ExpressionAttributeValues": values} if values else {}),
                )
        except ClientError as exc:
            if is_conflict(exc):
                return False
            raise
        return True

    def ids(self, tenant: str, doc_id: str, generation: Generation) -> list[str]:
        condition = Key("pk").eq(tenant) & Key("sk").begins_with(self._parts(doc_id, generation.generation))
        items = query_all(self.table, KeyConditionExpression=condition, ConsistentRead=True)
        return [chunk_id for item in items for chunk_id in item["ids"]]

    def forget(self, tenant: str, doc_id: str, generation: Generation) -> None:
        prefix = self._parts(doc_id, generation.generation)
        with self.table.batch_writer() as batch:
            for n in range(generation.parts):
                batch.delete_item(Key={"pk": tenant, "sk": f"{prefix}{n:06d}"})
            batch.delete_item(Key={"pk": tenant, "sk": f"{prefix}{_BEGUN}"})

"""Issue 25's owners and per-user conversations on the DynamoDB stores (moto, in process): the
services are the real ones, over the in-memory fakes but for the documents, jobs, upload sessions
and conversations, which are the DynamoDB adapters on tables made as provision.py makes them."""

from __future__ import annotations

import base64
import dataclasses
import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from ragmcp.adapters.aws.dynamodb import (
    DynamoConversationStore,
    DynamoDocumentStore,
    DynamoJobStore,
    DynamoUploadStore,
)
from ragmcp.bootstrap import build_services
from ragmcp.domain.errors import Forbidden
from ragmcp.domain.models import DOCUMENT_NUMBERS, Principal, Turn
from ragmcp.services import Services
from ragmcp.settings import Settings
from tests import fakes

REGION = "us-east-1"
PROVISION = Path(__file__).resolve().parents[2] / "localstack" / "init" / "ready.d" / "provision.py"
TENANT = "acme"


def principal(user: str, *scopes: str) -> Principal:
    return Principal(tenant=TENANT, via="key", key_id=f"k-{user}", user_id=user, scopes=scopes or ("read", "write"))


ALICE, BOB, ADMIN = principal("alice"), principal("bob"), principal("ops", "read", "write", "admin")


@dataclasses.dataclass
class Aws:
    services: Services
    tables: dict[str, object]


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Aws]:
    for name, value in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": REGION}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    spec = importlib.util.spec_from_file_location("provision", PROVISION)
    provision = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(provision)
    with mock_aws():
        client = boto3.client("dynamodb", region_name=REGION)
        names = ("documents", "jobs", "uploads", "conversations")
        for name in names:
            provision.create_table(client, name, provision.TABLES[name])
        resource = boto3.resource("dynamodb", region_name=REGION)
        tables = {name: resource.Table(name) for name in names}
        jobs = DynamoJobStore(tables["jobs"])
        adapters = dataclasses.replace(
            fakes.adapters(),
            documents=DynamoDocumentStore(tables["documents"]),
            jobs=jobs,
            tasks=fakes.InlineTaskQueue(jobs),
            uploads=DynamoUploadStore(tables["uploads"]),
            conversations=DynamoConversationStore(tables["conversations"]),
        )
        yield Aws(build_services(Settings(data_dir=tmp_path / "data"), adapters), tables)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_a_notes_owner_is_stored_and_only_they_or_an_admin_change_it(aws: Aws) -> None:
    services = aws.services
    job = services.notes.add(ALICE, "Alice's note: the heron survey is on Friday.", "documents", [])
    assert job.status == "succeeded" and services.jobs.get(TENANT, job.job_id).owner == "alice"
    doc = services.documents.by_path(TENANT, job.source, job.target)[0]
    stored = aws.tables["documents"].get_item(Key={"pk": TENANT, "sk": f"doc#{doc.doc_id}"})["Item"]
    assert json.loads(stored["body"])["owner"] == "alice"
    with pytest.raises(Forbidden):
        services.notes.update(BOB, doc, "Bob rewrote it.")
    assert services.notes.update(ADMIN, doc, "The survey moved to Saturday.").owner == "alice"
    assert "Saturday" in services.catalog.chunks_of(services.notes.update(ALICE, doc, "Saturday, 7 am."), 5)[0].text


def test_an_upload_session_and_its_file_belong_to_who_started_it(aws: Aws) -> None:
    uploads = aws.services.uploads
    data = b"# Report\n\nAlice's report.\n"
    session = uploads.start(ALICE, "report.md", len(data), [], "documents")
    item = aws.tables["uploads"].get_item(Key={"pk": TENANT, "sk": session.upload_id})["Item"]
    assert json.loads(item["body"])["owner"] == "alice"
    with pytest.raises(Forbidden):
        uploads.add_part(BOB, session.upload_id, b64(data), 0)
    uploads.add_part(ALICE, session.upload_id, b64(data[:8]), 0)
    uploads.add_part(ADMIN, session.upload_id, b64(data[8:]), 1)
    with pytest.raises(Forbidden):
        uploads.finish(BOB, session.upload_id)
    assert uploads.finish(ADMIN, session.upload_id).status == "succeeded"  # an admin finishes it: still Alice's
    assert [d.owner for d in aws.services.documents.by_path(TENANT, "uploads", "report.md")] == ["alice"]
    with pytest.raises(Forbidden):  # Bob may not replace Alice's file
        uploads.start(BOB, "report.md", 10, [], "documents")
    assert uploads.start(ALICE, "report.md", 10, [], "documents").owner == "alice"
    assert uploads.start(ADMIN, "report.md", 10, [], "documents").owner == "ops"


def test_conversations_are_kept_per_user(aws: Aws) -> None:
    store = aws.services.synthesis.conversations
    store.append(TENANT, "alice", "c1", Turn(question="Where do herons nest?", answer="In reeds."), 600)
    store.append(TENANT, "bob", "c1", Turn(question="What do quokkas eat?", answer="Leaves."), 600)
    assert [t.question for t in store.get(TENANT, "alice", "c1")] == ["Where do herons nest?"]
    assert [t.question for t in store.get(TENANT, "bob", "c1")] == ["What do quokkas eat?"]
    assert store.get(TENANT, "mallory", "c1") == [] and store.get("other", "alice", "c1") == []
    answers = aws.services.synthesis
    answers.answer(ALICE, "Where do herons nest?", conversation_id="c2")
    answers.answer(BOB, "What do quokkas eat?", conversation_id="c2")
    assert [t.question for t in store.get(TENANT, "bob", "c2")] == ["What do quokkas eat?"]


def test_document_numbers_are_drawn_at_random_and_kept(aws: Aws) -> None:
    store = aws.services.documents
    numbers = [store.number_for(TENANT, f"docs:{n}.md") for n in range(12)]
    assert len(set(numbers)) == 12 and all(1 <= n <= DOCUMENT_NUMBERS for n in numbers)
    assert max(numbers) > 1000 * len(numbers)  # not 1, 2, 3 ...: a gap says nothing of hidden documents
    assert [store.number_for(TENANT, f"docs:{n}.md") for n in range(12)] == numbers

"""What a synthesis run carries by reference instead of inline: a state machine's input and every
state's input and output are limited to 256 KB, so caller-provided passages
(`SynthesisRequest.provided_ref`), the retrieve step's evidence and the cite step's answer (20
passages of up to 20,000 characters, cited again) are kept here and the execution carries their
references. The stash lives in the staging area of the blob store (on AWS the drop bucket's
`staging/`, which a lifecycle rule empties after a day)."""

from __future__ import annotations

import uuid
from typing import TypeVar

from pydantic import BaseModel, TypeAdapter

from ragmcp.domain.errors import InvalidArgument
from ragmcp.ports import BlobStore
from ragmcp.synthesis.models import Passage, SynthesisRequest

PASSAGES = TypeAdapter(list[Passage])
_REF_PREFIX = "synthesis/"
M = TypeVar("M", bound=BaseModel)


class PassageStash:
    def __init__(self, blobs: BlobStore, location: str):
        self.blobs = blobs
        self.location = location

    def write(self, data: bytes) -> str:
        ref = f"{_REF_PREFIX}{uuid.uuid4().hex}.json"
        self.blobs.write(self.location, ref, data)
        return ref

    def read(self, ref: str) -> bytes:
        if not ref.startswith(_REF_PREFIX) or "/" in ref.removeprefix(_REF_PREFIX):
            raise InvalidArgument("not a stash reference")
        return self.blobs.read(self.location, ref)

    def put(self, passages: list[Passage]) -> str:
        return self.write(PASSAGES.dump_json(passages))

    def get(self, ref: str) -> list[Passage]:
        return PASSAGES.validate_json(self.read(ref))

    def keep(self, model: BaseModel) -> str:
        return self.write(model.model_dump_json().encode())

    def load(self, ref: str, kind: type[M]) -> M:
        return kind.model_validate_json(self.read(ref))

    def stashed(self, request: SynthesisRequest) -> SynthesisRequest:
        """The request with its provided passages replaced by their reference."""
        if request.provided is None:
            return request
        return request.model_copy(update={"provided": None, "provided_ref": self.put(request.provided)})

    def restored(self, request: SynthesisRequest) -> SynthesisRequest:
        """The request with its provided passages read back."""
        if request.provided_ref is None:
            return request
        return request.model_copy(update={"provided": self.get(request.provided_ref), "provided_ref": None})

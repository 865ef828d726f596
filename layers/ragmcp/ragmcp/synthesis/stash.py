"""Caller-provided passages kept beside a synthesis run instead of inside it: a state machine's
input and every state's data are limited to 256 KB, so the execution carries the passages' reference
(`SynthesisRequest.provided_ref`) and the retrieve step reads them back. The stash lives in the
staging area of the blob store (on AWS the drop bucket's `staging/`, which a lifecycle rule empties
after a day)."""

from __future__ import annotations

import uuid

from pydantic import TypeAdapter

from ragmcp.domain.errors import InvalidArgument
from ragmcp.ports import BlobStore
from ragmcp.synthesis.models import Passage, SynthesisRequest

PASSAGES = TypeAdapter(list[Passage])
_REF_PREFIX = "synthesis/"


class PassageStash:
    def __init__(self, blobs: BlobStore, location: str):
        self.blobs = blobs
        self.location = location

    def put(self, passages: list[Passage]) -> str:
        ref = f"{_REF_PREFIX}{uuid.uuid4().hex}.json"
        self.blobs.write(self.location, ref, PASSAGES.dump_json(passages))
        return ref

    def get(self, ref: str) -> list[Passage]:
        if not ref.startswith(_REF_PREFIX) or "/" in ref.removeprefix(_REF_PREFIX):
            raise InvalidArgument("provided_ref is not a stashed passage list")
        return PASSAGES.validate_json(self.blobs.read(self.location, ref))

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

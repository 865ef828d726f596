"""Audit checkpoints in an append-only file beside the database (one JSON line each, mode 0600).

The file is opened for appending only (O_APPEND) and each line is synced to disk before the
write returns. On Linux, `chattr +a` on the file (as root) makes the kernel refuse anything but
appends, even to its owner.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from pydantic import ValidationError

from ragmcp.domain.errors import RagError
from ragmcp.security.models import AuditCheckpoint


class FileCheckpointStore:
    def __init__(self, path: Path):
        self.path = path

    def append(self, checkpoint: AuditCheckpoint) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = checkpoint.model_dump_json().encode() + b"\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def all(self) -> Iterator[AuditCheckpoint]:
        if not self.path.exists():
            return
        with self.path.open("rb") as lines:
            for number, line in enumerate(lines, start=1):
                try:
                    yield AuditCheckpoint.model_validate_json(line)
                except ValidationError:
                    raise RagError(f"audit checkpoint file {self.path}, line {number}: unreadable") from None

"""Originals in local folders: a source's location is a folder, paths are relative to it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


class LocalBlobStore:
    def _resolve(self, location: str, path: str) -> Path:
        root = Path(location).resolve()
        target = (root / path).resolve()
        if not target.is_relative_to(root) or target == root:
            raise FileNotFoundError(path)
        return target

    def read(self, location: str, path: str) -> bytes:
        target = self._resolve(location, path)
        if not target.is_file():
            raise FileNotFoundError(path)
        return target.read_bytes()

    def size(self, location: str, path: str) -> int:
        target = self._resolve(location, path)
        if not target.is_file():
            raise FileNotFoundError(path)
        return target.stat().st_size

    def list(self, location: str) -> list[str]:
        root = Path(location).resolve()
        if not root.is_dir():
            return []
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


    def write(self, location: str, path: str, data: bytes) -> None:
        target = self._resolve(location, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".part-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def delete(self, location: str, path: str) -> None:
        self._resolve(location, path).unlink(missing_ok=True)

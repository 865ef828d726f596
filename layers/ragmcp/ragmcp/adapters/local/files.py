"""Originals in local folders: a source's location is a folder, paths are relative to it. The
folders a write makes are 0700; a delete removes the folders it leaves empty."""

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
        _private_dirs(target.parent)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".part-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def delete(self, location: str, path: str) -> None:
        """Remove the file, and the folders it leaves empty below `location` (an upload's staging
        folder goes with its last part)."""
        target = self._resolve(location, path)
        target.unlink(missing_ok=True)
        root = Path(location).resolve()
        for folder in target.parents:
            if folder == root or not folder.is_relative_to(root):
                break
            try:
                folder.rmdir()
            except OSError:  # not empty (or already gone): the folders above it are not empty either
                break


def _private_dirs(folder: Path) -> None:
    """Make `folder` and the folders missing above it, each 0700 (the data directory's files are
    private: the umask would leave them 0755)."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for each in reversed(missing):
        each.mkdir(mode=0o700, exist_ok=True)
        each.chmod(0o700)

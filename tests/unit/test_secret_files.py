"""The server's secret files (signing, console and audit keys): created once, 0600, and agreed on by
processes that start together (`ragmcp serve --workers N`), where two keys would make one process's
links, cookies or audit records look forged to the other."""

import multiprocessing
import stat
from pathlib import Path

import pytest

from ragmcp.security.links import load_or_create_secret


def test_a_secret_is_created_once_private_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "signing.key"
    first = load_or_create_secret(path)
    assert len(first) == 32 and load_or_create_secret(path) == first
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["signing.key"]  # no candidate left behind


def _race(path: str, start, results) -> None:
    start.wait()
    results.put(load_or_create_secret(Path(path)))


@pytest.mark.slow  # 40 processes started through a forkserver: 25 s of the fast tier's wall time on a busy machine
def test_processes_creating_the_same_secret_at_once_all_get_one_key(tmp_path: Path) -> None:
    context = multiprocessing.get_context("forkserver")  # not a fork of this (large, threaded) test process
    for round_ in range(5):
        path = tmp_path / f"audit-{round_}.key"
        start, results = context.Barrier(8), context.Queue()
        processes = [context.Process(target=_race, args=(str(path), start, results)) for _ in range(8)]
        for process in processes:
            process.start()
        keys = {results.get(timeout=30) for _ in processes}
        for process in processes:
            process.join(timeout=30)
        assert keys == {path.read_bytes()}
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []

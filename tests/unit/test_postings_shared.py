"""Term postings shared by the processes of `ragmcp serve --workers N` (issue 31: at 1M chunks each
process held its own copy, about 300 MB): a column is written once to a file of the index's folder and
every process maps that file, so the machine holds it once; the top k are those of the columns as
computed."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from ragmcp.adapters.local import postings as postings_module
from ragmcp.adapters.local.postings import SHARED_MIN_ENTRIES, Generation, SharedColumns, TermPostings
from tests.traced import kept_under

ROWS = 300_000
NOW = Generation(3, "5e1f")


def _columns() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(11)
    columns = {f"rare{n}": (np.sort(rng.choice(ROWS, 40_000, replace=False)), rng.random(40_000) * 9) for n in range(3)}
    columns["the"] = (np.arange(1, ROWS, dtype=np.int64), rng.random(ROWS - 1))  # dense
    columns["none"] = (np.zeros(0, dtype=np.int64), np.zeros(0))
    return columns


class Loads:
    """A loader that counts the columns it was asked for."""

    def __init__(self, columns: dict[str, tuple[np.ndarray, np.ndarray]]):
        self.columns = columns
        self.calls: list[str] = []

    def __call__(self, key: tuple[str, str]) -> tuple[np.ndarray, np.ndarray]:
        self.calls.append(key[1])
        return self.columns[key[1]]


def _top(postings: TermPostings, loads: Loads, generation: Generation = NOW) -> tuple[list[int], list[float]]:
    allowed = np.ones(ROWS, dtype=bool)
    allowed[::7] = False
    keys = [("t", term) for term in loads.columns]
    ids, scores = postings.top(generation, keys, loads, allowed, 25)
    return ids.tolist(), scores.tolist()


def test_a_second_process_maps_the_columns_the_first_wrote_and_ranks_alike(tmp_path: Path):
    columns = _columns()
    alone = _top(TermPostings(10**9), Loads(columns))
    first_loads, second_loads = Loads(columns), Loads(columns)
    first = TermPostings(10**9, SharedColumns(tmp_path, "db-1"))
    assert _top(first, first_loads) == alone
    assert sorted(first_loads.calls) == sorted(columns)
    second = TermPostings(10**9, SharedColumns(tmp_path, "db-1"))  # another process: its own memory
    assert _top(second, second_loads) == alone
    assert second_loads.calls == ["none"]  # only the short column (kept in each process) read again


def test_mapped_columns_take_no_memory_of_their_own(tmp_path: Path):
    """The second process's columns are the file's pages (held once, by the OS, for every process),
    not arrays of its own; a process keeping its own copy holds 4 bytes a pair."""
    columns = _columns()
    TermPostings(10**9, SharedColumns(tmp_path, "db-1")).preload(
        NOW, [("t", term) for term in columns], Loads(columns), threading.Event()
    )

    def held(postings: TermPostings) -> int:
        return kept_under(
            postings_module,
            lambda: postings.preload(NOW, [("t", term) for term in columns], Loads(columns), threading.Event()),
        )

    own = held(TermPostings(10**9))
    mapped = held(TermPostings(10**9, SharedColumns(tmp_path, "db-1")))
    assert own >= 4 * (3 * 40_000 + ROWS - 1)
    assert mapped < 64 * 1024  # bookkeeping only


def test_a_new_generation_reads_the_database_again_and_drops_the_old_files(tmp_path: Path):
    columns = _columns()
    first = TermPostings(10**9, SharedColumns(tmp_path, "db-1"))
    _top(first, Loads(columns))
    old = sorted(p.name for p in tmp_path.iterdir())
    assert old
    changed = {**columns, "rare0": (columns["rare0"][0], columns["rare0"][1] * 2)}  # a write changed the scores
    loads = Loads(changed)
    again = TermPostings(10**9, SharedColumns(tmp_path, "db-1"))
    later = Generation(4, "a09c")
    assert _top(again, loads, generation=later) == _top(TermPostings(10**9), Loads(changed), generation=later)
    assert sorted(loads.calls) == sorted(columns)
    assert not set(old) & {p.name for p in tmp_path.iterdir()}


def test_another_database_or_scoring_never_reads_these_files(tmp_path: Path):
    columns = _columns()
    _top(TermPostings(10**9, SharedColumns(tmp_path, "db-1")), Loads(columns))
    loads = Loads(columns)
    _top(TermPostings(10**9, SharedColumns(tmp_path, "db-2")), loads)
    assert sorted(loads.calls) == sorted(columns)


def test_a_folder_it_cannot_write_keeps_the_columns_in_memory(tmp_path: Path):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    columns = _columns()
    loads = Loads(columns)
    postings = TermPostings(10**9, SharedColumns(blocked / "postings", "db-1"))
    assert _top(postings, loads) == _top(TermPostings(10**9), Loads(columns))
    assert _top(postings, loads) == _top(TermPostings(10**9), Loads(columns))
    assert sorted(loads.calls) == sorted(columns)  # each column read once, then kept


def test_a_damaged_file_is_read_again_from_the_database(tmp_path: Path):
    columns = _columns()
    _top(TermPostings(10**9, SharedColumns(tmp_path, "db-1")), Loads(columns))
    for path in tmp_path.rglob("*.col"):
        path.write_bytes(path.read_bytes()[:20])  # cut short
    loads = Loads(columns)
    again = TermPostings(10**9, SharedColumns(tmp_path, "db-1"))
    assert _top(again, loads) == _top(TermPostings(10**9), Loads(columns))
    assert sorted(loads.calls) == sorted(columns)


def test_a_short_column_stays_in_memory_so_the_mappings_stay_few(tmp_path: Path):
    """Linux allows a process 65,530 mappings: a column per searched word would reach that; only the
    long columns (SHARED_MIN_ENTRIES pairs or more) are files, at most budget / that many mappings."""
    rng = np.random.default_rng(5)
    short = {
        f"w{n}": (np.sort(rng.choice(ROWS, SHARED_MIN_ENTRIES - 1, replace=False)), rng.random(SHARED_MIN_ENTRIES - 1))
        for n in range(3)
    }
    postings = TermPostings(10**9, SharedColumns(tmp_path, "db-1"))
    postings.preload(NOW, [("t", term) for term in short], Loads(short), threading.Event())
    assert not list(tmp_path.rglob("*.col"))
    again = Loads(short)
    TermPostings(10**9, SharedColumns(tmp_path, "db-1")).preload(
        NOW, [("t", t) for t in short], again, threading.Event()
    )
    assert sorted(again.calls) == sorted(short)

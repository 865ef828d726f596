"""Chunk row id -> chunk id (sqlite_index.ChunkNames) over real SQLite: the names every process holds
for the whole table (1M chunks: about 85 MB a process as str objects), kept compact."""

import sqlite3

import numpy as np
import pytest

from ragmcp.adapters.local import sqlite_index
from ragmcp.adapters.local.sqlite_index import ChunkNames
from tests.traced import kept_under


class Table:
    """The chunks table's two columns ChunkNames reads, on one SQLite connection."""

    def __init__(self) -> None:
        self.connection = sqlite3.connect(":memory:", check_same_thread=False)
        self.connection.execute("CREATE TABLE chunks(id INTEGER PRIMARY KEY AUTOINCREMENT, chunk_id TEXT NOT NULL)")

    def conn(self) -> sqlite3.Connection:
        return self.connection

    def add(self, names: list[str]) -> None:
        self.connection.executemany("INSERT INTO chunks(chunk_id) VALUES (?)", [(name,) for name in names])


def test_names_are_found_by_row_id_across_growth_and_deletions():
    table = Table()
    table.add([f"scifact:grown-{n}#{n % 3}" for n in range(1, 101)])
    names = ChunkNames(table)  # type: ignore[arg-type]
    assert names.of(np.array([1, 100, 50])) == ["scifact:grown-1#1", "scifact:grown-100#1", "scifact:grown-50#2"]
    table.connection.execute("DELETE FROM chunks WHERE id BETWEEN 101 AND 200")
    table.add([f"d{n}" for n in range(101, 201)])  # rows 101-200 (AUTOINCREMENT: ids never reused)
    table.connection.execute("DELETE FROM chunks WHERE id IN (150, 151)")
    table.add(["résumé-ü#0", "数据#1"])
    assert names.of(np.array([202, 149, 150, 151, 152, 201, 7])) == [
        "数据#1", "d149", None, None, "d152", "résumé-ü#0", "scifact:grown-7#1",
    ]  # fmt: skip
    assert names.of(np.array([], dtype=np.int64)) == []


@pytest.mark.slow  # tracemalloc over 20,000 rows' reads: seconds on a loaded machine
def test_names_take_about_their_bytes_not_an_object_each():
    """Names of 22 bytes, as the 1M bench corpus's: at most 40 bytes a row held, the name and where it
    starts (an array of str objects held 79: a pointer and a str object)."""
    rows = 20_000
    table = Table()
    table.add([f"scifact:grown-{n:06d}#{n % 3}" for n in range(1, rows + 1)])
    names = ChunkNames(table)  # type: ignore[arg-type]
    held = kept_under(sqlite_index, lambda: names.of(np.array([rows])))
    assert held <= 40 * rows, f"{held / rows:.1f} bytes a row"
    assert names.of(np.array([rows, 1])) == [f"scifact:grown-{rows:06d}#{rows % 3}", "scifact:grown-000001#1"]

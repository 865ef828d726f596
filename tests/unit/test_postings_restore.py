"""A backup restored over the database (SQLite's backup API, as `.restore` does; `cp` keeps the inode
too) sends the index generation's number back. The column files written at higher numbers by the
timeline it replaced stay in `postings/`, and nothing in-process was told either: when the restored
index climbs to those numbers again, the ranking must still be the restored index's own, never the
old timeline's postings (review of stop 36)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sqlean

from ragmcp.adapters.local import postings as postings_module
from ragmcp.adapters.local.database import STEMMED, Database
from ragmcp.adapters.local.postings import Generation, TermPostings
from ragmcp.adapters.local.sqlite_index import SqliteSearchIndex, shared_columns
from ragmcp.domain.models import Principal, SearchFilter
from tests.fakes import HashEmbedder, index_of_texts

FIRST = ["apple pie with cinnamon"]
OLD_TIMELINE = [*FIRST, "apple cider, pressed apple juice and apple vinegar"]
NEW_TIMELINE = [*FIRST, "banana bread"]
"""Each text a document written in its own generation (d0 again, then d1): both timelines reach the
same generation number, with different chunks in the same row ids."""


def _index(path: Path, shared: bool = True) -> SqliteSearchIndex:
    db = Database(path)
    postings = TermPostings(10**6, shared_columns(db, STEMMED) if shared else None)
    index = SqliteSearchIndex(db, postings=postings)
    index.ensure_model("hash", HashEmbedder().dimension)
    return index


def _ranking(index: SqliteSearchIndex) -> list[tuple[str, float]]:
    hits = index.search_fts(Principal(tenant="t"), "apple", SearchFilter(), k=10)
    return [(hit.chunk_id, round(hit.raw_score, 6)) for hit in hits]


def test_a_restored_backup_never_ranks_with_the_replaced_timeline_s_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(postings_module, "SHARED_MIN_ENTRIES", 1)  # every column a file, as at 1M chunks
    path = tmp_path / "data" / "ragmcp.db"
    running = _index(path)
    index_of_texts(FIRST, running)
    backup = tmp_path / "backup.db"
    with sqlean.connect(backup) as copy:
        running.db.conn().backup(copy)
    index_of_texts(OLD_TIMELINE, running)
    assert [chunk for chunk, _ in _ranking(running)] == ["d1#0", "d0#0"]  # its columns written
    assert list((path.parent / "postings").rglob("*.col"))
    inode = path.stat().st_ino

    source, target = sqlean.connect(backup), sqlean.connect(path)
    source.backup(target)  # the operator's restore
    source.close()
    target.close()
    assert path.stat().st_ino == inode
    index_of_texts(NEW_TIMELINE, running)  # back to the generation number of the old timeline's columns

    fresh = _index(tmp_path / "fresh" / "ragmcp.db", shared=False)
    index_of_texts(NEW_TIMELINE, fresh)
    expected = _ranking(fresh)
    assert [chunk for chunk, _ in expected] == ["d0#0"]
    assert _ranking(_index(path)) == expected  # another process, starting now
    assert _ranking(running) == expected  # the process that searched the old timeline


def test_an_unstamped_index_is_stamped_at_start_and_the_older_layout_s_folders_go(tmp_path: Path):
    """An index written before stamps has none until its next write: the process starting on it
    stamps it (until then its count alone could repeat, so nothing of it is shared). The folders of
    the earlier layout (named by the count alone) are a cache: removed on the first read, rebuilt."""
    index = _index(tmp_path / "ragmcp.db")
    index_of_texts(FIRST, index)
    with index.db.write() as conn:
        conn.execute("DELETE FROM meta WHERE key = 'index_stamp'")
    columns = shared_columns(index.db, STEMMED)
    unstamped = Generation(1, None)
    column = postings_module._Column.of(np.arange(5), np.ones(5))
    old_layout = columns.folder / f"{columns._tag}-1"
    old_layout.mkdir(parents=True)
    (old_layout / "x.col").write_bytes(b"old")
    assert columns.write(unstamped, ("t", "appl"), column) is column
    assert columns.read(unstamped, ("t", "appl")) is None
    assert not old_layout.exists()

    stamp = index.db.conn().execute("SELECT value FROM meta WHERE key = 'index_stamp'").fetchone()
    assert stamp is not None and len(stamp[0]) == 16
    stamped = Generation(1, stamp[0])
    assert columns.write(stamped, ("t", "appl"), column) is not column  # mapped from its file
    assert columns.read(stamped, ("t", "appl")) is not None

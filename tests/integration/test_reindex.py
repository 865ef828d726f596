"""An index written by an older ragmcp: refused at start with a message naming `ragmcp reindex`,
which brings it up to date without losing a document, a chunk or a vector."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import sqlean

from ragmcp.bootstrap import build_services
from ragmcp.cli import main
from ragmcp.domain.errors import IndexOutdated
from ragmcp.domain.models import Principal
from ragmcp.retrieval.service import SearchRequest
from ragmcp.settings import Settings

ME = Principal(tenant="default")
DUCKS = "The mallard is a dabbling duck. It feeds at the surface of the water and rarely dives.\n"
GEESE = "Geese graze on land. A goose eats grass, grain and roots through most of the year.\n"


def rows(db_path):
    """Every document and chunk the index holds, vectors included."""
    conn = sqlean.connect(str(db_path))
    try:
        docs = conn.execute("SELECT tenant, doc_id, doc_json FROM documents ORDER BY doc_id").fetchall()
        chunks = conn.execute("SELECT chunk_id, text, embedding FROM chunks ORDER BY id").fetchall()
        return docs, chunks
    finally:
        conn.close()


def make_old(db_path):
    """What an index of schema version 1 looked like: no version recorded, words unstemmed."""
    conn = sqlean.connect(str(db_path), isolation_level=None)
    try:
        conn.execute("BEGIN")
        conn.execute("DROP TABLE chunks_fts")
        conn.execute(
            "CREATE VIRTUAL TABLE chunks_fts USING fts5(text, headline, content='chunks', content_rowid='id',"
            " tokenize='unicode61')"
        )
        conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild')")
        conn.execute("DELETE FROM meta WHERE key = 'schema_version'")
        conn.execute("COMMIT")
    finally:
        conn.close()


def fts(services, phrase):
    result = services.search.search(ME, SearchRequest(phrases=[phrase], mode="fts", top_k=5))
    return [hit.document.path for hit in result.hits]


@pytest.fixture
def old_index(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "ducks.txt").write_text(DUCKS)
    (docs / "geese.txt").write_text(GEESE)
    data = tmp_path / "data"
    assert main(["--data-dir", str(data), "ingest", str(docs)]) == 0
    before = rows(data / "ragmcp.db")
    make_old(data / "ragmcp.db")
    return data, docs, before


def test_an_old_index_is_refused_at_start_naming_the_command(old_index, capsys):
    data, docs, _ = old_index
    with pytest.raises(IndexOutdated, match=r"schema version 1 .*`ragmcp reindex`"):
        build_services(Settings(data_dir=data))
    assert main(["--data-dir", str(data), "ingest", str(docs)]) == 2
    assert "`ragmcp reindex`" in capsys.readouterr().err


def test_serve_does_not_start_on_an_old_index(old_index):
    data, docs, _ = old_index
    env = {**os.environ, "RAGMCP_DATA_DIR": str(data), "RAGMCP_PORT": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "ragmcp.cli", "serve", "--docs", str(docs)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "ragmcp reindex" in done.stderr


def test_reindex_brings_it_up_to_date_keeping_every_document(old_index, capsys):
    data, _, before = old_index
    assert main(["--data-dir", str(data), "reindex"]) == 0
    assert "rebuilt" in capsys.readouterr().out
    assert rows(data / "ragmcp.db") == before
    services = build_services(Settings(data_dir=data))
    assert fts(services, "ducks feeding") == ["ducks.txt"]
    assert fts(services, "goose eating grasses") == ["geese.txt"]
    assert main(["--data-dir", str(data), "reindex"]) == 0
    assert "already up to date" in capsys.readouterr().out

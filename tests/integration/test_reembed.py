"""`ragmcp reindex` after the embedding model changed: the stored chunk texts are embedded again."""

from __future__ import annotations

import numpy as np
import pytest

from ragmcp.adapters.local.database import Database
from ragmcp.adapters.local.onnx_embedder import MODEL_ID, MODEL_ID_DYNAMIC_INT8
from ragmcp.adapters.local.sqlite_index import SqliteSearchIndex
from ragmcp.bootstrap import _onnx_embedder, build_services
from ragmcp.domain.errors import IndexMismatch
from ragmcp.domain.models import Principal
from ragmcp.retrieval.service import SearchRequest
from ragmcp.settings import Settings

ME = Principal(tenant="default")


def stored(services) -> tuple[str, dict[int, tuple[str, np.ndarray]]]:
    conn = services.database.conn()
    model = conn.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchone()[0]
    rows = conn.execute("SELECT id, text, embedding FROM chunks ORDER BY id").fetchall()
    return model, {i: (text, np.frombuffer(blob, dtype=np.float32)) for i, text, blob in rows}


def test_reindex_re_embeds_an_index_built_with_float_documents_when_int8_documents_are_switched_on(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "turbines.md").write_text(
        "# Wind turbines\n\nA wind turbine turns the kinetic energy of wind into electricity.\n\n"
        "## Maintenance\n\nGearboxes are inspected every six months for wear and oil leaks.\n"
    )
    (docs / "ducks.md").write_text("# Ducks\n\nWild ducks eat seeds, aquatic plants, insects and small fish.\n")
    data = tmp_path / "data"
    floats = build_services(Settings(data_dir=data, document_int8=False))
    floats.ingest.sync(floats.register_folder("default", "docs", str(docs)))
    floats.vector_graph.catch_up()  # a saved graph of the float vectors
    graph_file = floats.vector_graph.path
    saved = graph_file.stat().st_mtime_ns
    model, before = stored(floats)
    assert model == MODEL_ID and len(before) >= 3

    # RAGMCP_DOCUMENT_INT8 unset (the default: int8): a new index gets int8 documents, this one
    # keeps its float ones and starts
    assert build_services(Settings(data_dir=tmp_path / "new")).embedder.model_id == MODEL_ID_DYNAMIC_INT8
    assert build_services(Settings(data_dir=data)).embedder.model_id == MODEL_ID

    ints = Settings(data_dir=data, document_int8=True)
    with pytest.raises(IndexMismatch, match=f"{MODEL_ID!r}.*{MODEL_ID_DYNAMIC_INT8!r}.*`ragmcp reindex`"):
        build_services(ints)
    # a reindex that stops after its first batch (killed): still refused, and the next one resumes
    int8 = _onnx_embedder(ints)
    calls = []

    def embed_then_stop(texts):
        calls.append(texts)
        if len(calls) > 1:
            raise KeyboardInterrupt
        return int8.embed(texts)

    index = SqliteSearchIndex(Database(data / "ragmcp.db"))
    with pytest.raises(KeyboardInterrupt):
        index.reembed(int8.model_id, int8.dimension, embed_then_stop, lambda: None, batch=1)
    assert stored(floats)[0] == MODEL_ID
    progress = dict(index.db.conn().execute("SELECT key, value FROM meta WHERE key LIKE 'reembed%'").fetchall())
    assert progress == {"reembed_model": MODEL_ID_DYNAMIC_INT8, "reembed_upto": str(min(before))}
    with pytest.raises(IndexMismatch, match="`ragmcp reindex`"):
        build_services(ints)
    services = build_services(ints, reindex=True)
    assert services.reindexed
    model, after = stored(services)
    assert model == MODEL_ID_DYNAMIC_INT8
    assert after.keys() == before.keys()
    texts = [after[i][0] for i in sorted(after)]
    assert texts == [before[i][0] for i in sorted(before)]  # the same chunks, nothing parsed again
    fresh = services.embedder.embed(texts)
    for n, i in enumerate(sorted(after)):
        assert not np.array_equal(after[i][1], before[i][1])
        np.testing.assert_allclose(after[i][1], fresh[n], atol=1e-5)
    # the graph was rebuilt from the new vectors (not the float one kept)
    assert graph_file.stat().st_mtime_ns != saved
    assert services.vector_graph.status()["nodes"] == len(after)

    again = build_services(Settings(data_dir=data))  # the next start, setting unset: int8, not refused
    assert not again.reindexed and again.embedder.model_id == MODEL_ID_DYNAMIC_INT8
    assert stored(again)[0] == MODEL_ID_DYNAMIC_INT8
    hits = again.search.search(ME, SearchRequest(phrases=["what do wild ducks eat"], mode="vector", top_k=1)).hits
    assert "ducks" in hits[0].chunk.text.lower()

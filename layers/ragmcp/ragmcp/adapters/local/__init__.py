"""Embedded adapters: SQLite (FTS5 + sqlite-vec), local files, ONNX embedder."""

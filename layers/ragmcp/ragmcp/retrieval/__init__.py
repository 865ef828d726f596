"""Hybrid search, reciprocal rank fusion, multi-phrase fusion."""

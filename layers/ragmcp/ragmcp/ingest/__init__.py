"""Parsers, chunking, headlines and summaries, and the ingestion pipeline."""

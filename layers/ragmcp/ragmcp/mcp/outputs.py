"""The `outputSchema` of every tool whose payload goes out as `structuredContent` (a JSON object).

Each names the payload's top-level fields and their JSON types, as its contract gives them;
what lies inside a field (a hit, a document) is left open, since contracts let those grow.
ragbox's tools have none: its contract answers with text content only, and MCP asks a tool
with an output schema to send structured content.
"""

from __future__ import annotations

from typing import Any

Json = str | list[str]


def shape(required: dict[str, Json], optional: dict[str, Json] | None = None) -> dict[str, Any]:
    fields = {**required, **(optional or {})}
    return {
        "type": "object",
        "properties": {name: {"type": kind} for name, kind in fields.items()},
        "required": list(required),
    }


# kb's document (kb-mcp-server.md: Get document tool), as kb_get and kb_update_note answer with it.
DOCUMENT: dict[str, Json] = {
    "document_id": "integer",
    "doc_id": "string",
    "title": "string",
    "source": "string",
    "source_path": "string",
    "file_name": "string",
    "file_type": "string",
    "kind": "string",
    "collection": "string",
    "tags": "array",
    "metadata": "object",
    "pages": ["integer", "null"],
    "size_bytes": "integer",
    "url": "string",
    "created_at": "string",
    "updated_at": "string",
    "chunk_count": "integer",
    "chunks": "array",
    "truncated": "boolean",
}
SEARCH = shape({"results": "array", "truncated": "boolean", "stats": "object"})
OUTPUTS: dict[str, dict[str, Any]] = {
    # mindset
    "rag_search": shape({"status": "string", "segments": "array"}),
    "verify_document_access": shape(
        {"has_access": "boolean", "refreshed_url": ["string", "null"], "error": ["string", "null"]},
        {"access_level": "string"},
    ),
    # proxysql
    "rag.search_fts": SEARCH,
    "rag.search_vector": SEARCH,
    "rag.search_hybrid": SEARCH,
    "rag.get_chunks": shape({"chunks": "array", "truncated": "boolean", "stats": "object"}),
    "rag.get_docs": shape({"docs": "array", "truncated": "boolean", "stats": "object"}),
    "rag.fetch_from_source": shape({"rows": "array", "truncated": "boolean", "stats": "object"}),
    "rag.admin.stats": shape({"sources": "array", "stats": "object"}),
    "rag.admin.sync": shape({"accepted": "boolean", "job_id": "string"}),
    # kb
    "kb_search": shape(
        {"results": "array", "count": "integer", "mode": "string", "elapsed_ms": "number"}, {"warning": "string"}
    ),
    "kb_addnote": shape(
        {"job_id": "string", "status": "string", "document_id": "integer", "doc_id": "string", "collection": "string"}
    ),
    "kb_upload_start": shape({"upload_id": "string"}),
    "kb_upload_chunk": shape(
        {
            "upload_id": "string",
            "chunk_index": "integer",
            "size": "integer",
            "chunks_received": "integer",
            "bytes_received": "integer",
            "total_size": "integer",
        }
    ),
    "kb_upload_finish": shape({"job_id": "string", "status": "string", "filename": ["string", "null"]}),
    "kb_update_note": shape(DOCUMENT),
    "kb_get": shape({}, {**DOCUMENT, "documents": "array", "count": "integer"}),
    "kb_status": shape(
        {
            "status": "string",
            "version": "string",
            "embedding_model": "string",
            "embedding_dimension": "integer",
            "device": "string",
            "counts": "object",
            "queue": "object",
        }
    ),
    "kb_jobs": shape({"jobs": "array", "count": "integer"}),
    # chat
    "rag_discover_resources": shape({"results": "object", "meta_data": "object"}, {"artifacts": "array"}),
    "rag_get_raw_results": shape({"results": "object", "meta_data": "object"}, {"artifacts": "array"}),
    "rag_get_synthesized_results": shape({"results": "object", "meta_data": "object"}, {"artifacts": "array"}),
}

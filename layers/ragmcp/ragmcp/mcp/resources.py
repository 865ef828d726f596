"""Documents as MCP resources: each readable document is `ragmcp://documents/<doc_id>` (its text,
as indexed: redacted where its source redacts), and each document with pages has a template for
one page, `ragmcp://documents/<doc_id>/pages/{page}`.

Every list and read applies the caller's access exactly as the profile's tools do (the catalog's
policy, narrowed as the profile narrows it: ragbox's vault below privileged); a document the caller
may not read is reported like one that does not exist.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, unquote

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp.types import INTERNAL_ERROR, INVALID_PARAMS

from ragmcp.domain.errors import Forbidden, InvalidArgument, NotFound
from ragmcp.domain.models import Document, Principal
from ragmcp.mcp.caller import Caller, current_caller
from ragmcp.mcp.errors import UNAUTHORIZED, unaudited
from ragmcp.retrieval.catalog import Catalog, Excerpt
from ragmcp.security.audit import AuditLog

SCHEME = "ragmcp://documents/"
RESOURCE_NOT_FOUND = -32002
READ_TEXT_BYTES_MAX = 4_000_000
"""A read's text at most (UTF-8), as kb_get's: the answer stays within the 5 MB of a response the
ProxySQL contract sets. A longer document (or page) is cut there, and its contents say
`_meta: {"truncated": true}`."""
_URI = re.compile(r"ragmcp://documents/(?P<doc>[^/]+)(?:/pages/(?P<page>[1-9][0-9]{0,5}))?")
DOCUMENT_TEMPLATE = types.ResourceTemplate(
    name="document",
    title="A document's text",
    uri_template=SCHEME + "{doc_id}",
    description="The indexed text of one document (redacted where its source redacts); doc_id URL-encoded.",
    mime_type="text/plain",
)


def document_uri(doc: Document, page: int | str | None = None) -> str:
    uri = SCHEME + quote(doc.doc_id, safe="")
    return uri if page is None else f"{uri}/pages/{page}"


def _offset(params: types.PaginatedRequestParams | None) -> int:
    cursor = params.cursor if params else None
    if cursor is None:
        return 0
    if not cursor.isdigit() or len(cursor) > 9:
        raise MCPError(INVALID_PARAMS, "Invalid params: unknown cursor", {"code": InvalidArgument.code})
    return int(cursor)


class DocumentResources:
    def __init__(
        self,
        catalog: Catalog,
        audit: AuditLog,
        page_size: int,
        reader: Callable[[Caller], Principal] = Caller.require,
    ):
        self.catalog = catalog
        self.audit = audit
        self.page_size = page_size
        self.reader = reader

    def reading_as(self, reader: Callable[[Caller], Principal]) -> DocumentResources:
        """The same resources for a profile whose tools see the caller as `reader` makes them."""
        return DocumentResources(self.catalog, self.audit, self.page_size, reader)

    def principal(self) -> Principal:
        """The caller as the profile's tools see them (the one policy function), who must hold the read scope."""
        caller = current_caller.get()
        if "read" not in caller.scopes:
            message = "this credential may not read resources (it needs the 'read' scope)"
            raise MCPError(UNAUTHORIZED, message, {"code": Forbidden.code})
        return self.reader(caller)

    def _page(self, params: types.PaginatedRequestParams | None) -> tuple[list[Document], str | None]:
        offset = _offset(params)
        size = self.page_size
        docs, total = self.catalog.list_documents(self.principal(), "title", size, offset)
        return docs, str(offset + size) if offset + size < total else None

    async def list_resources(self, _ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        docs, cursor = await anyio.to_thread.run_sync(self._page, params)
        resources = [
            types.Resource(
                uri=document_uri(d),
                name=d.doc_id,
                title=d.title,
                description=f"{d.file_type} in source {d.source}, {d.chunk_count} chunks"
                + (f", {d.pages} pages" if d.pages else ""),
                mime_type="text/plain",
            )
            for d in docs
        ]
        return types.ListResourcesResult(resources=resources, next_cursor=cursor)

    async def list_templates(
        self, _ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        docs, cursor = await anyio.to_thread.run_sync(self._page, params)
        templates = [DOCUMENT_TEMPLATE] if _offset(params) == 0 else []
        templates += [
            types.ResourceTemplate(
                name=f"{d.doc_id} page",
                title=f"{d.title}: one page",
                uri_template=document_uri(d, "{page}"),
                description=f"The text of one page (1-{d.pages}) of {d.title}.",
                mime_type="text/plain",
            )
            for d in docs
            if d.pages
        ]
        return types.ListResourceTemplatesResult(resource_templates=templates, next_cursor=cursor)

    async def read(self, _ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        excerpt = await anyio.to_thread.run_sync(self._read, str(params.uri))
        meta = {"truncated": True} if excerpt.truncated else None
        contents = types.TextResourceContents(uri=str(params.uri), mime_type="text/plain", text=excerpt.text, meta=meta)
        return types.ReadResourceResult(contents=[contents])

    def _read(self, uri: str) -> Excerpt:
        principal = self.principal()
        match = _URI.fullmatch(uri)
        outcome, returned = "ok", None
        try:
            if match is None:
                raise NotFound("unknown resource")
            doc = self.catalog.document(principal, unquote(match["doc"]))
            page = int(match["page"]) if match["page"] else None
            excerpt = self.catalog.text_within(doc, READ_TEXT_BYTES_MAX, page=page)
            if page is not None and not excerpt.chunks:
                raise NotFound("no such page")
            returned = {"doc_id": doc.doc_id}
        except NotFound as exc:
            outcome = "not found"
            raise MCPError(RESOURCE_NOT_FOUND, f"Resource not found: {exc.message}", {"uri": uri[:512]}) from None
        finally:
            try:  # one record a read, or no answer: a failed append is not tried again
                self.audit.append(principal, "resources/read", {"uri": uri[:512]}, returned, outcome)
            except Exception as exc:
                raise unaudited("resources/read", INTERNAL_ERROR, exc, answered=outcome == "ok") from None
        return excerpt

"""The one access policy: a document's ACL and tier decide; no ACL means the whole tenant.

The index applies the same rule inside its queries (adapters' filter builders); this is
the rule for single documents (verify access, fetch by id, discovery).
"""

from __future__ import annotations

from ragmcp.domain.models import Document, Principal, Source
from ragmcp.security.keys import self_identity


def can_read(principal: Principal, doc: Document) -> bool:
    if doc.tenant != principal.tenant or doc.tier.rank > principal.max_tier.rank:
        return False
    if doc.acl.is_open:
        return True
    if principal.user_id is not None and principal.user_id in doc.acl.users:
        return True
    return any(g in doc.acl.groups for g in principal.groups)


def can_see_source(principal: Principal, source: Source) -> bool:
    """A source with groups is visible to members of any of them; one without, to its whole tenant."""
    if source.tenant != principal.tenant or source.tier.rank > principal.max_tier.rank:
        return False
    return not source.groups or any(g in source.groups for g in principal.groups)


def owner_of(principal: Principal) -> str | None:
    """Who owns what this principal writes over MCP (notes, uploads, upload sessions, conversations):
    its user (a directory user, a token's, an asserted one, or a key's own `key:<key_id>`), else, for
    a platform key naming no user, that key; None for the open server naming no user."""
    if principal.user_id is not None:
        return principal.user_id
    return self_identity(principal.key_id) if principal.key_id is not None else None


def may_change(principal: Principal, owner: str | None) -> bool:
    """Whether the principal may change or replace what `owner` wrote: it is theirs, or they are an
    admin (the `admin` scope). Nothing without an owner (written before owners were kept) is
    anyone's: only an admin changes it."""
    return "admin" in principal.scopes or (owner is not None and owner == owner_of(principal))

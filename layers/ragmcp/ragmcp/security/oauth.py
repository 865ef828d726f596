"""ragmcp as an OAuth 2.1 resource server, as the MCP specification's authorization section asks.

Access tokens are JWTs checked with PyJWT against the issuer's JWKS: the signature (asymmetric
algorithms only; `none` and HMAC are never accepted), `iss`, `aud` equal to this server's resource
URL, `exp` and `nbf`, and the scopes, which map to read / write / admin. Configurable claims name
the tenant, the user, the groups and the tier (RAGMCP_OAUTH_CLAIMS_*).

The JWKS is fetched once and kept; a token signed by a key id it does not hold refetches it, at
most once per RAGMCP_OAUTH_JWKS_MIN_REFRESH_SECONDS, so a request never waits on the network
except right after the issuer rotates its keys, and forged key ids cannot make it fetch in a loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import jwt
from mcp.server.auth.routes import build_resource_metadata_url
from mcp.shared.auth import ProtectedResourceMetadata
from pydantic import AnyHttpUrl

from ragmcp.domain.models import Tier
from ragmcp.security.identity import Credential, TokenRejected, TokenVerifier
from ragmcp.settings import Settings

SCOPES = ("read", "write", "admin")
_NEVER = {"none", "HS256", "HS384", "HS512"}
FETCH_TIMEOUT_SECONDS = 5.0

Fetch = Callable[[str], dict[str, Any]]


def fetch_json(url: str) -> dict[str, Any]:
    response = httpx.get(url, timeout=FETCH_TIMEOUT_SECONDS, follow_redirects=False)
    response.raise_for_status()
    body = response.json()
    if not isinstance(body, dict):
        raise ValueError(f"{url} did not answer a JSON object")
    return body


def discover_jwks_url(issuer: str, fetch: Fetch) -> str:
    """The issuer's jwks_uri from its metadata (OpenID Connect discovery, then RFC 8414)."""
    base = issuer.rstrip("/")
    for path in ("/.well-known/openid-configuration", "/.well-known/oauth-authorization-server"):
        try:
            uri = fetch(base + path).get("jwks_uri")
        except (httpx.HTTPError, ValueError):
            continue
        if isinstance(uri, str) and uri:
            return uri
    return base + "/.well-known/jwks.json"


class JwksCache:
    """The issuer's signing keys by key id, fetched when first needed and again for an unknown id."""

    def __init__(self, url: Callable[[], str], fetch: Fetch, min_refresh_seconds: float, clock=time.monotonic):
        self._url = url
        self._fetch = fetch
        self._min_refresh = min_refresh_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._keys: dict[str | None, jwt.PyJWK] = {}
        self._fetched_at: float | None = None
        self.fetches = 0

    def key(self, kid: str | None) -> jwt.PyJWK:
        found = self._keys.get(kid)
        if found is not None:
            return found
        with self._lock:
            due = self._fetched_at is None or self._clock() - self._fetched_at >= self._min_refresh
            if kid not in self._keys and due:
                self._refresh()
        found = self._keys.get(kid)
        if found is None:
            raise TokenRejected("invalid_token", "the token is signed by a key the issuer does not publish")
        return found

    def _refresh(self) -> None:
        self._fetched_at = self._clock()
        self.fetches += 1
        try:
            keys = jwt.PyJWKSet.from_dict(self._fetch(self._url())).keys
        except (httpx.HTTPError, ValueError, jwt.PyJWKSetError, jwt.InvalidKeyError):
            raise TokenRejected("invalid_token", "the issuer's signing keys could not be read") from None
        usable = {k.key_id: k for k in keys if k.public_key_use in (None, "sig")}
        if len(usable) == 1:
            usable[None] = next(iter(usable.values()))  # a token without kid, from an issuer with one key
        self._keys = usable


class JwtVerifier:
    def __init__(
        self,
        *,
        issuer: str,
        audience: str,
        jwks: JwksCache,
        audience_claim: str = "auto",
        algorithms: list[str],
        scope_prefix: str = "",
        tenant_claim: str = "tenant",
        user_claim: str = "sub",
        groups_claim: str | None = "groups",
        tier_claim: str | None = "tier",
        default_tenant: str | None = None,
        leeway_seconds: int = 30,
    ):
        forbidden = sorted(set(algorithms) & _NEVER)
        if forbidden:
            raise ValueError(f"OAuth algorithms must be asymmetric; refusing {', '.join(forbidden)}")
        self.issuer = issuer
        self.audience = audience
        self.audience_claim = audience_claim
        self.jwks = jwks
        self.algorithms = list(algorithms)
        self.scope_prefix = scope_prefix
        self.scopes_supported = tuple(scope_prefix + s for s in SCOPES)
        self.tenant_claim = tenant_claim
        self.user_claim = user_claim
        self.groups_claim = groups_claim
        self.tier_claim = tier_claim
        self.default_tenant = default_tenant
        self.leeway = leeway_seconds

    @classmethod
    def from_settings(
        cls, s: Settings, fetch: Fetch = fetch_json, clock: Callable[[], float] = time.monotonic
    ) -> JwtVerifier:
        issuer = s.security.oauth_issuer or ""
        url = s.security.oauth_jwks_url
        jwks_url = (lambda: url) if url else (lambda: discover_jwks_url(issuer, fetch))
        return cls(
            issuer=issuer,
            audience=s.oauth_token_audience,
            audience_claim=s.security.oauth_audience_claim,
            jwks=JwksCache(jwks_url, fetch, s.security.oauth_jwks_min_refresh_seconds, clock),
            algorithms=s.security.oauth_algorithms,
            scope_prefix=s.security.oauth_scope_prefix,
            tenant_claim=s.security.oauth_claims_tenant,
            user_claim=s.security.oauth_claims_user,
            groups_claim=s.security.oauth_claims_groups,
            tier_claim=s.security.oauth_claims_tier,
            default_tenant=s.security.oauth_default_tenant,
            leeway_seconds=s.security.oauth_leeway_seconds,
        )

    def verify(self, token: str) -> Credential:
        claims = self._claims(token)
        granted = _token_scopes(claims)
        scopes = tuple(s for s in SCOPES if self.scope_prefix + s in granted)
        if not scopes:
            needed = " ".join(self.scopes_supported)
            raise TokenRejected("insufficient_scope", f"the token grants none of this server's scopes ({needed})", 403)
        tenant = claims.get(self.tenant_claim, self.default_tenant)
        user = claims.get(self.user_claim)
        if not isinstance(tenant, str) or not tenant:
            raise TokenRejected("invalid_token", f"the token has no {self.tenant_claim!r} claim naming a tenant")
        if not isinstance(user, str) or not user:
            raise TokenRejected("invalid_token", f"the token has no {self.user_claim!r} claim naming a user")
        return Credential(
            tenant=tenant,
            via="token",
            subject=f"oauth:{user}",
            user_id=user,
            groups=self._groups(claims),
            tier=self._tier(claims),
            max_tier=Tier.privileged,
            scopes=scopes,
            expires_at=int(claims["exp"]),
        )

    def _claims(self, token: str) -> dict[str, Any]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.DecodeError:
            raise TokenRejected("invalid_token", "the bearer token is not a JWT") from None
        algorithm = header.get("alg")
        if algorithm not in self.algorithms:
            raise TokenRejected("invalid_token", f"tokens signed with {algorithm!r} are not accepted")
        key = self.jwks.key(header.get("kid"))
        audience_claim = self._audience_claim(token)
        by_aud = audience_claim == "aud"
        try:
            claims = jwt.decode(
                token,
                key=key.key,
                algorithms=[algorithm],
                audience=self.audience if by_aud else None,
                issuer=self.issuer,
                leeway=self.leeway,
                options={"require": ["exp", "iss", audience_claim], "verify_aud": by_aud},
            )
        except jwt.ExpiredSignatureError:
            raise TokenRejected("invalid_token", "the token has expired") from None
        except jwt.ImmatureSignatureError:
            raise TokenRejected("invalid_token", "the token is not valid yet") from None
        except jwt.InvalidAudienceError:
            raise TokenRejected("invalid_token", "the token was not issued for this server (aud)") from None
        except jwt.InvalidIssuerError:
            raise TokenRejected("invalid_token", "the token is not from the trusted issuer (iss)") from None
        except jwt.InvalidSignatureError:
            raise TokenRejected("invalid_token", "the token's signature does not verify") from None
        except (jwt.InvalidTokenError, jwt.InvalidKeyError, ValueError, TypeError):
            raise TokenRejected("invalid_token", "the token is invalid") from None
        if not by_aud and claims.get(audience_claim) != self.audience:
            raise TokenRejected("invalid_token", f"the token was not issued for this server ({audience_claim})")
        return claims

    def _audience_claim(self, token: str) -> str:
        """Where the audience is: the configured claim; `auto`: `aud`, or `client_id` when a token has no
        `aud` (Cognito's access tokens). Only the choice reads the unverified payload; the value is
        compared after the signature is verified."""
        if self.audience_claim != "auto":
            return self.audience_claim
        try:
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.InvalidTokenError:
            return "aud"
        return "aud" if "aud" in unverified or "client_id" not in unverified else "client_id"

    def _groups(self, claims: dict[str, Any]) -> tuple[str, ...] | None:
        value = claims.get(self.groups_claim) if self.groups_claim else None
        if value is None:
            return None
        if isinstance(value, str):
            value = value.split()
        if not isinstance(value, list) or not all(isinstance(g, str) for g in value):
            raise TokenRejected("invalid_token", f"the {self.groups_claim!r} claim is not a list of groups")
        return tuple(dict.fromkeys(value))

    def _tier(self, claims: dict[str, Any]) -> Tier | None:
        value = claims.get(self.tier_claim) if self.tier_claim else None
        if value is None:
            return None
        try:
            return Tier(value)
        except ValueError:
            raise TokenRejected("invalid_token", f"the {self.tier_claim!r} claim is not a tier") from None


def _token_scopes(claims: dict[str, Any]) -> set[str]:
    """`scope` (RFC 9068: space-separated) or `scp` (a list, as some issuers send it)."""
    scope = claims.get("scope")
    if isinstance(scope, str):
        return set(scope.split())
    scp = claims.get("scp")
    if isinstance(scp, list):
        return {s for s in scp if isinstance(s, str)}
    return set()


def metadata_url(s: Settings) -> str:
    """Where this server's protected resource metadata is (RFC 9728: inserted before the path)."""
    return str(build_resource_metadata_url(AnyHttpUrl(s.resource_url)))


def protected_resource_metadata(s: Settings, verifier: TokenVerifier) -> dict[str, Any]:
    """RFC 9728 metadata: this resource, its authorization server, its scopes, header bearer tokens."""
    metadata = ProtectedResourceMetadata(
        resource=AnyHttpUrl(s.resource_url),
        authorization_servers=[AnyHttpUrl(s.security.oauth_issuer or "")],
        scopes_supported=list(verifier.scopes_supported),
        bearer_methods_supported=["header"],
        resource_name="ragmcp",
    )
    document = metadata.model_dump(mode="json", exclude_none=True)
    # Identifiers exactly as configured: pydantic's URL type would add a "/" to a bare origin, and
    # clients compare an issuer identifier character for character (RFC 8414, section 3.3).
    return {**document, "resource": s.resource_url, "authorization_servers": [s.security.oauth_issuer]}


def bearer_challenge(s: Settings, error: str, description: str, scopes: tuple[str, ...] = ()) -> str:
    """The WWW-Authenticate value of a 401/403 (RFC 6750 with RFC 9728's resource_metadata)."""
    clean = description.replace("\\", "").replace('"', "'")
    parts = [f'error="{error}"', f'error_description="{clean}"']
    if error == "insufficient_scope" and scopes:
        parts.append(f'scope="{" ".join(scopes)}"')
    parts.append(f'resource_metadata="{metadata_url(s)}"')
    return "Bearer " + ", ".join(parts)

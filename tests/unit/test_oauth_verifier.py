"""The OAuth access-token verifier (security/oauth.py) in process: tokens signed with an EC key whose
JWKS an in-memory issuer publishes (its fetches counted), on a clock the test moves. The HTTP side,
with a real issuer on loopback, is tests/integration/test_oauth.py (slow)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from ragmcp.domain.models import Tier
from ragmcp.security.identity import TokenRejected
from ragmcp.security.oauth import (
    JwtVerifier,
    bearer_challenge,
    discover_jwks_url,
    metadata_url,
    protected_resource_metadata,
)
from ragmcp.settings import Settings, load_settings

ISSUER = "https://issuer.example"
AUDIENCE = "https://rag.example/mcp"


@dataclass
class Issuer:
    """Signs tokens with its current key; publishes the public halves of its keys as a JWKS."""

    keys: dict[str, ec.EllipticCurvePrivateKey] = field(default_factory=dict)
    current: str = ""
    fetched: list[str] = field(default_factory=list)

    def rotate(self, kid: str) -> None:
        self.keys[kid] = ec.generate_private_key(ec.SECP256R1())
        self.current = kid

    def fetch(self, url: str) -> dict[str, Any]:
        self.fetched.append(url)
        if url.endswith("/.well-known/openid-configuration"):
            return {"issuer": ISSUER, "jwks_uri": f"{ISSUER}/keys"}
        jwks = []
        for kid, key in self.keys.items():
            jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
            jwks.append({**jwk, "kid": kid, "use": "sig", "alg": "ES256"})
        return {"keys": jwks}

    def mint(self, **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": ISSUER, "aud": AUDIENCE, "sub": "ada", "tenant": "acme", "scope": "read write"}
        body |= {"exp": now + 300, "iat": now}
        body |= claims
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, self.keys[self.current], algorithm="ES256", headers={"kid": self.current})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def settings(**values: Any) -> Settings:
    given = {"oauth_issuer": ISSUER, "oauth_audience": AUDIENCE, "oauth_jwks_min_refresh_seconds": 60}
    return load_settings(**(given | values))


@pytest.fixture
def issuer() -> Issuer:
    made = Issuer()
    made.rotate("k1")
    return made


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def verifier(issuer: Issuer, clock: Clock) -> JwtVerifier:
    return JwtVerifier.from_settings(settings(), fetch=issuer.fetch, clock=clock)


def test_a_good_token_is_the_credential_its_claims_say(verifier: JwtVerifier, issuer: Issuer) -> None:
    token = issuer.mint(groups=["finance", "finance", "legal"], tier="confidential", scope="read admin other")
    credential = verifier.verify(token)
    assert (credential.tenant, credential.user_id, credential.subject) == ("acme", "ada", "oauth:ada")
    assert credential.groups == ("finance", "legal") and credential.tier == Tier.confidential
    assert credential.scopes == ("read", "admin") and credential.via == "token"
    assert issuer.fetched == [f"{ISSUER}/.well-known/openid-configuration", f"{ISSUER}/keys"]
    assert verifier.verify(issuer.mint(groups="a b", tier=None)).groups == ("a", "b")  # keys kept: no fetch
    assert len(issuer.fetched) == 2


BAD: dict[str, tuple[Callable[[Issuer], str], str]] = {
    "expired": (lambda i: i.mint(exp=int(time.time()) - 600), "the token has expired"),
    "not yet valid": (lambda i: i.mint(nbf=int(time.time()) + 600), "the token is not valid yet"),
    "another audience": (lambda i: i.mint(aud="https://other.example/mcp"), "not issued for this server (aud)"),
    "another issuer": (lambda i: i.mint(iss="https://evil.example"), "not from the trusted issuer"),
    "no expiry": (lambda i: i.mint(exp=None), "the token is invalid"),
    "no tenant": (lambda i: i.mint(tenant=None), "no 'tenant' claim naming a tenant"),
    "no user": (lambda i: i.mint(sub=None), "no 'sub' claim naming a user"),
    "groups not a list": (lambda i: i.mint(groups={"a": 1}), "'groups' claim is not a list of groups"),
    "unknown tier": (lambda i: i.mint(tier="secret"), "'tier' claim is not a tier"),
    "not a JWT": (lambda i: "not.a.jwt", "the bearer token is not a JWT"),
    "HMAC": (lambda i: jwt.encode({"sub": "x"}, "k" * 32, algorithm="HS256"), "'HS256' are not accepted"),
    "forged signature": (lambda i: i.mint()[:-8] + "AAAAAAAA", "signature does not verify"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_token_is_refused_saying_why(case: str, verifier: JwtVerifier, issuer: Issuer) -> None:
    make, reason = BAD[case]
    with pytest.raises(TokenRejected) as refused:
        verifier.verify(make(issuer))
    assert refused.value.error == "invalid_token" and reason in refused.value.description


def test_a_token_without_this_servers_scopes_is_forbidden(verifier: JwtVerifier, issuer: Issuer) -> None:
    with pytest.raises(TokenRejected) as refused:
        verifier.verify(issuer.mint(scope="email profile"))
    assert (refused.value.error, refused.value.status) == ("insufficient_scope", 403)


def test_an_unknown_key_id_refetches_at_most_once_a_refresh_interval(
    verifier: JwtVerifier, issuer: Issuer, clock: Clock
) -> None:
    verifier.verify(issuer.mint())
    issuer.rotate("k2")
    clock.now += 10  # within the refresh interval: the issuer's new key is not fetched yet
    with pytest.raises(TokenRejected) as refused:
        verifier.verify(issuer.mint())
    assert "a key the issuer does not publish" in refused.value.description
    assert verifier.jwks.fetches == 1
    clock.now += 60
    assert verifier.verify(issuer.mint()).user_id == "ada"
    assert verifier.jwks.fetches == 2


def test_a_cognito_access_token_is_matched_by_its_client_id(issuer: Issuer, clock: Clock) -> None:
    verifier = JwtVerifier.from_settings(settings(oauth_audience="app-client"), fetch=issuer.fetch, clock=clock)
    assert verifier.verify(issuer.mint(aud=None, client_id="app-client")).user_id == "ada"
    with pytest.raises(TokenRejected) as refused:
        verifier.verify(issuer.mint(aud=None, client_id="another-client"))
    assert "not issued for this server (client_id)" in refused.value.description


def test_symmetric_algorithms_cannot_be_configured(issuer: Issuer) -> None:
    with pytest.raises(ValueError, match="must be asymmetric"):
        JwtVerifier.from_settings(settings(oauth_algorithms=["ES256", "HS256"]), fetch=issuer.fetch)


def test_the_issuer_without_discovery_documents_serves_the_default_jwks_path() -> None:
    def nothing(url: str) -> dict[str, Any]:
        raise ValueError(f"{url}: 404")

    assert discover_jwks_url(ISSUER + "/", nothing) == f"{ISSUER}/.well-known/jwks.json"


def test_the_protected_resource_metadata_and_the_challenge_name_this_resource(verifier: JwtVerifier) -> None:
    s = settings()
    document = protected_resource_metadata(s, verifier)
    assert document["resource"] == AUDIENCE and document["authorization_servers"] == [ISSUER]
    assert document["scopes_supported"] == ["read", "write", "admin"]
    assert metadata_url(s) == "https://rag.example/.well-known/oauth-protected-resource/mcp"
    challenge = bearer_challenge(s, "insufficient_scope", 'needs "admin"', ("admin",))
    assert challenge == (
        "Bearer error=\"insufficient_scope\", error_description=\"needs 'admin'\", scope=\"admin\", "
        f'resource_metadata="{metadata_url(s)}"'
    )

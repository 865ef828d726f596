"""ragmcp as an OAuth 2.1 resource server (the MCP authorization specification), against a real
token issuer on 127.0.0.1: its own RSA and EC keys, a JWKS endpoint and OpenID discovery served
over HTTP, and a client-credentials token endpoint. Every refusal a resource server owes is tried:
expired, not yet valid, wrong audience, wrong issuer, unsigned (`alg: none`), HMAC signed with the
public key, wrong key, unknown key id, no scope of this server. The Python SDK's MCP client and
the MCP Inspector CLI call tools with a token from the issuer."""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx
import httpx2
import jwt
import pytest
import uvicorn
from cfnlint.decode.cfn_yaml import loads
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from starlette.testclient import TestClient

from ragmcp.bootstrap import Services, build_registry, build_services
from ragmcp.domain.models import UserRecord
from ragmcp.http import create_app
from ragmcp.security.identity import TokenRejected
from ragmcp.security.oauth import JwksCache, JwtVerifier, fetch_json
from ragmcp.settings import Settings
from ragmcp_bench.bench_scale import free_port

TENANT = "acme"
UNAUTHORIZED = -32000
_ids = itertools.count(1)
NODE_MODULES = Path(__file__).resolve().parents[1] / "e2e" / "node" / "node_modules"
NODE = NODE_MODULES / ".bin" / "node"
INSPECTOR = NODE_MODULES / "@modelcontextprotocol" / "inspector" / "clients" / "launcher" / "build" / "index.js"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


class Issuer:
    """An authorization server: signs access tokens with its RSA or EC key, publishes the public
    halves as a JWKS (counting every fetch), answers OpenID discovery and client-credentials grants."""

    CLIENTS: ClassVar[dict[str, tuple[str, dict[str, Any]]]] = {
        "agent": ("agent-secret", {"tenant": TENANT, "groups": ["finance"]})
    }

    def __init__(self) -> None:
        self.signing = {
            "rsa-1": (rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256"),
            "ec-1": (ec.generate_private_key(ec.SECP256R1()), "ES256"),
        }
        self.jwks_fetches = 0
        self.audience = ""
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/.well-known/openid-configuration":
                    self.answer(
                        200,
                        {
                            "issuer": issuer.url,
                            "jwks_uri": f"{issuer.url}/jwks.json",
                            "token_endpoint": f"{issuer.url}/token",
                        },
                    )
                elif self.path == "/jwks.json":
                    issuer.jwks_fetches += 1
                    self.answer(200, issuer.jwks())
                else:
                    self.answer(404, {"error": "not found"})

            def do_POST(self) -> None:
                form = parse_qs(self.rfile.read(int(self.headers["content-length"])).decode())
                client = form.get("client_id", [""])[0]
                secret, claims = issuer.CLIENTS.get(client, (None, {}))
                if form.get("grant_type") != ["client_credentials"] or form.get("client_secret", [""])[0] != secret:
                    self.answer(401, {"error": "invalid_client"})
                    return
                scope = form.get("scope", ["read"])[0]
                token = issuer.mint(sub=client, scope=scope, **claims)
                self.answer(200, {"access_token": token, "token_type": "Bearer", "expires_in": 300, "scope": scope})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def jwks(self) -> dict[str, Any]:
        keys = []
        for kid, (private, alg) in self.signing.items():
            algorithm = jwt.algorithms.RSAAlgorithm if alg.startswith("RS") else jwt.algorithms.ECAlgorithm
            jwk = algorithm.to_jwk(private.public_key(), as_dict=True)
            keys.append({**jwk, "kid": kid, "use": "sig", "alg": alg})
        return {"keys": keys}

    def claims(self, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        base = {
            "iss": self.url,
            "aud": self.audience,
            "sub": "ana",
            "tenant": TENANT,
            "scope": "read write",
            "iat": now,
            "nbf": now,
            "exp": now + 300,
        }
        return {k: v for k, v in {**base, **overrides}.items() if v is not None}

    def mint(self, kid: str = "rsa-1", key: Any = None, alg: str | None = None, **overrides: Any) -> str:
        private, default_alg = self.signing.get(kid, (None, "RS256"))
        return jwt.encode(self.claims(**overrides), key or private, algorithm=alg or default_alg, headers={"kid": kid})

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Clock:
    """A monotonic clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Protected:
    issuer: Issuer
    services: Services
    http: TestClient
    url: str
    """The MCP endpoint of the same app served by uvicorn on 127.0.0.1."""
    clock: Clock | None = None
    """The verifier's clock, where the fixture gave it one: the JWKS is fetched again only when a test moves it."""


@pytest.fixture(scope="module")
def protected(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Protected]:
    root = tmp_path_factory.mktemp("oauth")
    docs = root / "docs"
    docs.mkdir()
    (docs / "open.md").write_text("# Handbook\n\nThe falcon handbook says everyone may read the falcon notes.\n")
    (docs / "finance.md").write_text("# Budget\n\nFALCONFIN the falcon budget is for finance only.\n")
    (docs / "finance.md.metadata.json").write_text('{"groups": ["finance"]}')
    issuer = Issuer()
    port = free_port()
    settings = Settings(
        data_dir=root / "data",
        host="127.0.0.1",
        port=port,
        oauth_issuer=issuer.url,
        oauth_jwks_min_refresh_seconds=2.0,
    )
    issuer.audience = settings.resource_url
    services = build_services(settings)
    clock = Clock()
    # The same verifier the settings build, on a clock the tests move (the JWKS refresh interval).
    services.identities.tokens = JwtVerifier.from_settings(settings, clock=clock)
    services.ingest.sync(services.register_folder(TENANT, "docs", str(docs)))
    app = create_app(services, build_registry(services))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    try:
        with TestClient(app, base_url=f"http://127.0.0.1:{port}") as http:
            yield Protected(issuer, services, http, f"http://127.0.0.1:{port}/mcp", clock)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        issuer.close()


def call(p: Protected, tool: str, arguments: dict[str, Any], token: str | None, **headers: str):
    body = {
        "jsonrpc": "2.0",
        "id": next(_ids),
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    return p.http.post("/mcp", json=body, headers=headers)


def texts(response) -> str:
    body = response.json()
    assert response.status_code == 200 and "result" in body, body
    return body["result"]["content"][0]["text"]


def challenge(response) -> dict[str, str]:
    scheme, _, params = response.headers["www-authenticate"].partition(" ")
    assert scheme == "Bearer"
    return {k.strip(): v.strip().strip('"') for k, v in (part.split("=", 1) for part in params.split('", '))}


def test_protected_resource_metadata_names_the_issuer(protected: Protected) -> None:
    for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"):
        metadata = protected.http.get(path).json()
        assert metadata["resource"] == protected.url
        assert metadata["authorization_servers"] == [protected.issuer.url]
        assert metadata["scopes_supported"] == ["read", "write", "admin"]
        assert metadata["bearer_methods_supported"] == ["header"]


def test_a_request_without_a_token_is_challenged_toward_the_metadata(protected: Protected) -> None:
    refused = call(protected, "kb_search", {"query": "falcon"}, None)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == UNAUTHORIZED
    params = challenge(refused)
    assert (
        params["resource_metadata"] == f"{protected.url.removesuffix('/mcp')}/.well-known/oauth-protected-resource/mcp"
    )
    fetched = httpx.get(params["resource_metadata"], timeout=10).json()
    assert fetched["authorization_servers"] == [protected.issuer.url]


def test_rsa_and_ec_tokens_call_tools_as_their_user(protected: Protected) -> None:
    issuer = protected.issuer
    for kid in ("rsa-1", "ec-1"):
        found = texts(call(protected, "kb_search", {"query": "falcon"}, issuer.mint(kid=kid)))
        assert "falcon handbook" in found and "FALCONFIN" not in found
    finance = issuer.mint(groups=["finance"])
    assert "FALCONFIN" in texts(call(protected, "kb_search", {"query": "falcon budget"}, finance))
    record = list(protected.services.audit.store.records(TENANT))[-1]
    assert (record.key_id, record.user, record.tool) == ("oauth:ana", "ana", "kb_search")
    other = call(protected, "kb_search", {"query": "falcon"}, finance, **{"x-user-id": "boss"})
    assert other.json()["error"]["code"] == UNAUTHORIZED


def test_a_link_minted_for_a_token_ends_with_the_token(protected: Protected) -> None:
    exp = int(time.time()) + 120
    hits = json.loads(texts(call(protected, "kb_search", {"query": "falcon handbook"}, protected.issuer.mint(exp=exp))))
    expires = int(parse_qs(urlsplit(hits["results"][0]["url"]).query)["expires"][0])
    assert expires == exp


def test_a_link_minted_with_a_token_is_rechecked_against_the_directory(protected: Protected) -> None:
    """As a key's link is: what the directory decided when the link was made (the token named no
    groups) is read again at download, so a user who left the group loses the link; what the
    token's claims fixed stays the token's (the issuer is its authority, and the link ends with it)."""
    services = protected.services

    def budget_link(token: str) -> str:
        hits = json.loads(texts(call(protected, "kb_search", {"query": "falcon budget"}, token)))["results"]
        return next(h["url"] for h in hits if "FALCONFIN" in h["text"])

    def download(url: str) -> int:
        parts = urlsplit(url)
        return protected.http.get(f"{parts.path}?{parts.query}").status_code

    services.users.put(UserRecord(tenant=TENANT, user_id="fran", groups=("finance",)))
    url = budget_link(protected.issuer.mint(sub="fran"))
    assert download(url) == 200
    services.users.put(UserRecord(tenant=TENANT, user_id="fran", groups=("sales",)))  # left finance
    assert download(url) == 404
    services.users.put(UserRecord(tenant=TENANT, user_id="fran", groups=("finance",)))
    assert download(url) == 200

    claimed = budget_link(protected.issuer.mint(sub="gina", groups=["finance"]))  # not in the directory
    assert download(claimed) == 200


def unsigned(issuer: Issuer) -> str:
    header = b64url(json.dumps({"alg": "none", "typ": "JWT", "kid": "rsa-1"}).encode())
    return f"{header}.{b64url(json.dumps(issuer.claims()).encode())}."


def hmac_with_public_key(issuer: Issuer) -> str:
    public = jwt.algorithms.RSAAlgorithm.to_jwk(issuer.signing["rsa-1"][0].public_key()).encode()
    header = b64url(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}).encode())
    body = b64url(json.dumps(issuer.claims()).encode())
    signature = hmac.new(public, f"{header}.{body}".encode(), hashlib.sha256).digest()
    return f"{header}.{body}.{b64url(signature)}"


BAD_TOKENS = {
    "expired": (lambda i: i.mint(exp=int(time.time()) - 120), "expired"),
    "not yet valid": (lambda i: i.mint(nbf=int(time.time()) + 600), "not valid yet"),
    "wrong audience": (lambda i: i.mint(aud="https://elsewhere.example/mcp"), "not issued for this server"),
    "wrong issuer": (lambda i: i.mint(iss="https://evil.example"), "trusted issuer"),
    "alg none": (unsigned, "'none'"),
    "hmac with the public key": (hmac_with_public_key, "'HS256'"),
    "wrong key": (
        lambda i: i.mint(key=rsa.generate_private_key(public_exponent=65537, key_size=2048)),
        "signature does not verify",
    ),
    "unknown key id": (
        lambda i: i.mint(kid="rogue", key=rsa.generate_private_key(public_exponent=65537, key_size=2048)),
        "key the issuer does not publish",
    ),
    "no expiry": (lambda i: i.mint(exp=None), "invalid"),
    "not a jwt": (lambda i: "rmcpish-but-not-a-key", "not a JWT"),
}


@pytest.mark.parametrize("case", sorted(BAD_TOKENS))
def test_bad_tokens_are_refused_with_the_reason(protected: Protected, case: str) -> None:
    make, reason = BAD_TOKENS[case]
    refused = call(protected, "kb_search", {"query": "falcon"}, make(protected.issuer))
    assert refused.status_code == 401, refused.text
    assert refused.json()["error"]["code"] == UNAUTHORIZED and reason in refused.json()["error"]["message"]
    params = challenge(refused)
    assert params["error"] == "invalid_token" and reason in params["error_description"]
    assert "resource_metadata" in params


def test_api_keys_of_either_format_still_work_beside_oauth(protected: Protected) -> None:
    """ragbox-mcp.md, Key Format: `rbx_live_[64-character hexadecimal string]`: with OAuth on, a key
    of that format is checked as a key (not read as a JWT), as an rmcp_ key is."""
    for key_format in ("ragmcp", "ragbox"):
        created = protected.services.keys.create(TENANT, name=f"beside-oauth-{key_format}", key_format=key_format)
        assert "falcon" in texts(call(protected, "kb_search", {"query": "falcon"}, created.secret)).lower()
        wrong = created.secret[:-8] + "00000000"
        refused = call(protected, "kb_search", {"query": "falcon"}, wrong)
        assert refused.status_code == 401 and "invalid_token" in refused.headers["www-authenticate"]
        assert "not a JWT" not in refused.headers["www-authenticate"], refused.headers["www-authenticate"]


def test_scopes_decide_what_a_token_may_do(protected: Protected) -> None:
    issuer = protected.issuer
    none = call(protected, "kb_search", {"query": "falcon"}, issuer.mint(scope="profile email"))
    assert none.status_code == 403 and challenge(none)["error"] == "insufficient_scope"
    assert challenge(none)["scope"] == "read write admin"
    reader = issuer.mint(scope="read")
    assert "falcon" in texts(call(protected, "kb_search", {"query": "falcon"}, reader))
    refused = call(protected, "kb_addnote", {"text": "a note"}, reader).json()["error"]
    assert refused["code"] == UNAUTHORIZED and "access token may not call kb_addnote" in refused["message"]
    admin = call(protected, "rag.admin.stats", {}, issuer.mint(scope="read write")).json()["error"]
    assert "'admin' scope" in admin["message"]


def test_the_jwks_is_fetched_once_and_again_only_for_a_new_key(protected: Protected) -> None:
    issuer, clock = protected.issuer, protected.clock
    assert clock is not None
    texts(call(protected, "kb_search", {"query": "falcon"}, issuer.mint()))
    before = issuer.jwks_fetches
    for _ in range(10):
        texts(call(protected, "kb_search", {"query": "falcon"}, issuer.mint(kid="ec-1")))
    assert issuer.jwks_fetches == before
    clock.advance(2.1)  # past oauth_jwks_min_refresh_seconds
    rogue = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    for _ in range(10):
        assert call(protected, "kb_search", {"query": "falcon"}, issuer.mint(kid="rogue", key=rogue)).status_code == 401
    assert issuer.jwks_fetches == before + 1  # ten forged key ids, one fetch
    issuer.signing["rsa-2"] = (rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256")
    try:
        # within the refresh interval a new key id is not fetched for, not even a real one
        assert call(protected, "kb_search", {"query": "falcon"}, issuer.mint(kid="rsa-2")).status_code == 401
        assert issuer.jwks_fetches == before + 1
        clock.advance(2.1)
        assert "falcon" in texts(call(protected, "kb_search", {"query": "falcon"}, issuer.mint(kid="rsa-2")))
        assert issuer.jwks_fetches == before + 2  # the issuer rotated: its new key is fetched
    finally:
        del issuer.signing["rsa-2"]


def issued_token(issuer: Issuer, scope: str = "read") -> str:
    answer = httpx.post(
        f"{issuer.url}/token",
        data={
            "grant_type": "client_credentials",
            "client_id": "agent",
            "client_secret": "agent-secret",
            "scope": scope,
        },
        timeout=10,
    )
    answer.raise_for_status()
    return answer.json()["access_token"]


def test_the_python_sdk_client_calls_tools_with_a_token(protected: Protected) -> None:
    token = issued_token(protected.issuer)

    async def run() -> None:
        http = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=60)
        async with http, Client(streamable_http_client(protected.url + "/kb", http_client=http)) as client:
            assert "kb_search" in {t.name for t in (await client.list_tools()).tools}
            result = await client.call_tool("kb_search", {"query": "falcon budget"})
            assert not result.is_error and "FALCONFIN" in result.content[0].text  # the token's groups
            with pytest.raises(MCPError) as refused:
                await client.call_tool("kb_addnote", {"text": "read scope only"})
            assert refused.value.code == UNAUTHORIZED

    anyio.run(run)


@pytest.mark.e2e
@pytest.mark.skipif(
    not (NODE.exists() and INSPECTOR.exists()), reason="MCP Inspector CLI not installed (make node-tools)"
)
def test_the_mcp_inspector_cli_calls_tools_with_a_token(protected: Protected, tmp_path: Path) -> None:
    def inspector(*args: str, token: str | None) -> subprocess.CompletedProcess:
        header = ["--header", f"Authorization: Bearer {token}"] if token else []
        command = [
            str(NODE),
            str(INSPECTOR),
            "--cli",
            "--transport",
            "http",
            "--server-url",
            protected.url + "/kb",
            *args,
            *header,
            "--format",
            "json",
        ]
        env = {
            **os.environ,
            "PATH": f"{NODE.parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "HOME": str(tmp_path),
            "NO_COLOR": "1",
        }
        return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path, check=False)

    token = issued_token(protected.issuer)
    called = inspector(
        "--method", "tools/call", "--tool-name", "kb_search", "--tool-arg", "query=falcon budget", token=token
    )
    assert called.returncode == 0, called.stderr
    result = json.loads(called.stdout)["result"]
    assert result["isError"] is False and "FALCONFIN" in result["content"][0]["text"]
    refused = inspector("--method", "tools/list", token=protected.issuer.mint(exp=int(time.time()) - 600))
    assert refused.returncode != 0


def test_cognito_style_tokens_name_their_audience_in_client_id(protected: Protected) -> None:
    """Cognito access tokens carry the app client in `client_id` and no `aud`: RAGMCP_OAUTH_AUDIENCE_CLAIM."""
    issuer = protected.issuer
    verifier = JwtVerifier(
        issuer=issuer.url,
        audience="app-client-1",
        audience_claim="client_id",
        jwks=JwksCache(lambda: f"{issuer.url}/jwks.json", fetch_json, 60.0),
        algorithms=["RS256", "ES256"],
        groups_claim="cognito:groups",
    )
    token = issuer.mint(aud=None, client_id="app-client-1", **{"cognito:groups": ["finance"]})
    credential = verifier.verify(token)
    assert (credential.user_id, credential.groups, credential.scopes) == ("ana", ("finance",), ("read", "write"))
    for wrong in (issuer.mint(aud=None, client_id="other-client"), issuer.mint(aud=None)):
        with pytest.raises(TokenRejected):
            verifier.verify(wrong)
    # The server's default (`auto`): a token without `aud` is checked on its client_id, never let through.
    cognito = issuer.mint(aud=None, client_id=protected.url)
    assert "falcon" in texts(call(protected, "kb_search", {"query": "falcon"}, cognito))
    for wrong in (issuer.mint(aud=None, client_id="other-client"), issuer.mint(aud=None)):
        refused = call(protected, "kb_search", {"query": "falcon"}, wrong)
        assert refused.status_code == 401 and challenge(refused)["error"] == "invalid_token"


COGNITO_CLIENT = "3n4b5urk1ft4fl3mg5e62d9ado"  # the shape of a user pool app client id


def cognito_settings(issuer: Issuer, data_dir: Path) -> Settings:
    """The function's settings under the template's Authentication=cognito: its OAuth environment,
    each Fn::If's Cognito branch, with this test's issuer and app client in place of the pool's."""
    template = loads((Path(__file__).resolve().parents[2] / "template.yaml").read_text())
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    chosen = {}
    for name, value in env.items():
        if name.startswith("RAGMCP_OAUTH_") and name not in ("RAGMCP_OAUTH_ISSUER", "RAGMCP_OAUTH_AUDIENCE"):
            condition, cognito, _ = value["Fn::If"]
            assert condition == "UseCognito"
            if cognito == {"Ref": "CognitoTenant"}:
                cognito = template["Parameters"]["CognitoTenant"]["Default"]
            chosen[name.removeprefix("RAGMCP_").lower()] = cognito
    assert set(chosen) == {"oauth_default_tenant", "oauth_scope_prefix", "oauth_claims_groups"}
    return Settings(
        data_dir=data_dir,
        host="127.0.0.1",
        oauth_issuer=issuer.url,
        oauth_audience=COGNITO_CLIENT,
        **chosen,
    )


def cognito_access_token(issuer: Issuer, scope: str, **overrides: Any) -> str:
    """What Cognito issues for the app client: client_id and no aud, no tenant, `<resource server>/<scope>`."""
    now = int(time.time())
    claims = {
        "aud": None,
        "tenant": None,
        "sub": "5a1f2c3d-0e4b-4f6a-9b8c-7d6e5f4a3b2c",
        "cognito:groups": ["finance"],
        "token_use": "access",
        "scope": scope,
        "auth_time": now,
        "client_id": COGNITO_CLIENT,
        "username": "ana@example.com",
        "jti": "b0c1d2e3",
        **overrides,
    }
    return issuer.mint(**claims)


def test_cognito_access_tokens_pass_with_the_templates_settings(tmp_path: Path) -> None:
    issuer = Issuer()
    try:
        settings = cognito_settings(issuer, tmp_path / "data")
        tenant = settings.security.oauth_default_tenant
        assert tenant and settings.security.oauth_scope_prefix.endswith("/")
        docs = tmp_path / "docs"
        docs.mkdir()
        (docs / "open.md").write_text("# Handbook\n\nThe falcon handbook says everyone may read the falcon notes.\n")
        (docs / "finance.md").write_text("# Budget\n\nFALCONFIN the falcon budget is for finance only.\n")
        (docs / "finance.md.metadata.json").write_text('{"groups": ["finance"]}')
        services = build_services(settings)
        services.ingest.sync(services.register_folder(tenant, "docs", str(docs)))
        app = create_app(services, build_registry(services))
        with TestClient(app, base_url=f"http://127.0.0.1:{settings.server.port}") as http:
            p = Protected(issuer, services, http, f"http://127.0.0.1:{settings.server.port}/mcp")
            read = settings.security.oauth_scope_prefix + "read"
            found = texts(call(p, "kb_search", {"query": "falcon budget"}, cognito_access_token(issuer, read)))
            assert "FALCONFIN" in found  # cognito:groups named the finance group
            record = list(services.audit.store.records(tenant))[-1]
            user = "5a1f2c3d-0e4b-4f6a-9b8c-7d6e5f4a3b2c"
            assert (record.key_id, record.user, record.tool) == (f"oauth:{user}", user, "kb_search")
            outsider = cognito_access_token(issuer, read, **{"cognito:groups": None})
            assert "FALCONFIN" not in texts(call(p, "kb_search", {"query": "falcon budget"}, outsider))
            refused = call(p, "kb_addnote", {"text": "a note"}, cognito_access_token(issuer, read)).json()["error"]
            assert "access token may not call kb_addnote" in refused["message"]
            # Scopes of another resource server, unprefixed ones, another app client: refused.
            for scope in ("read write admin", "other/read", "openid email"):
                denied = call(p, "kb_search", {"query": "falcon"}, cognito_access_token(issuer, scope))
                assert denied.status_code == 403 and challenge(denied)["error"] == "insufficient_scope", scope
            other_client = cognito_access_token(issuer, read, client_id="another-app-client")
            assert call(p, "kb_search", {"query": "falcon"}, other_client).status_code == 401
            # The audience is the app client id; the resource the metadata names stays this server's URL.
            metadata = http.get("/.well-known/oauth-protected-resource/mcp").json()
            assert metadata["resource"] == p.url
            assert metadata["scopes_supported"] == [
                settings.security.oauth_scope_prefix + s for s in ("read", "write", "admin")
            ]
    finally:
        issuer.close()


@pytest.mark.parametrize("algorithms", [["HS256"], ["RS256", "none"]])
def test_symmetric_or_no_signature_is_never_configurable(algorithms: list[str]) -> None:
    with pytest.raises(ValueError, match="asymmetric"):
        JwtVerifier(
            issuer="https://issuer.example",
            audience="https://rag.example/mcp",
            jwks=JwksCache(lambda: "https://issuer.example/jwks.json", fetch_json, 60.0),
            algorithms=algorithms,
        )

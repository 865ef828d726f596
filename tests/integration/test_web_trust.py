"""Issue 25's web findings, each over the real app (real ingest, real SQLite, the MCP endpoint and the
console through Starlette's test client):

- H1: every download (/files, /console/open) is inert on the server's origin: nosniff, a sandboxing
  CSP, and an attachment unless plain text, a PDF or a raster image (the browser test shows the
  script of a raw HTML original never reaching the console);
- H2: a row's link serves that row, with its source's column rules, never the file of every row;
- M4: the console is bound by its own admin's principal (tier, scopes), and audits every action and
  login, which has an Origin check and a throttle;
- M5: a Host that is not allowed gets 421 on every route, and the console compares a POST's Origin
  with the allowed hosts, not with the request's Host;
- M6: resources on /mcp/ragbox keep privileged documents out, as ragbox's tools do;
- Low: a sidecar's source_url is handed out only when it is http(s).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
from starlette.testclient import TestClient

from ragmcp.bootstrap import Services, build_registry, build_services
from ragmcp.domain.models import Tier, UserRecord
from ragmcp.http import create_app
from ragmcp.security.audit import UNAUTHENTICATED
from ragmcp.settings import Settings

TENANT = "default"
TAKEOVER = "<html><body><p>Osprey figures.</p><script>fetch('/console/access')</script></body></html>\n"
PEOPLE = "id,name,salary,team\n1,Ada Heron,91000,ospreys\n2,Bo Egret,87000,kingfishers\n3,Cy Stork,99000,ospreys\n"


@dataclass
class World:
    services: Services
    app: Any
    admin: str
    """An admin key with every scope and the privileged tier."""
    capped: str
    """An admin key (read, admin) capped at the standard tier."""

    def client(self, host: str = "testserver") -> TestClient:
        return TestClient(self.app, base_url=f"https://{host}")


def write(folder: Path, name: str, text: str, sidecar: dict[str, Any] | None = None) -> None:
    (folder / name).write_text(text)
    if sidecar is not None:
        (folder / f"{name}.metadata.json").write_text(json.dumps(sidecar))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("web-trust")
    raw = root / "raw"
    raw.mkdir()
    (raw / ".source.json").write_text(json.dumps({"serve_originals": "raw"}))
    write(raw, "figures.html", TAKEOVER)
    write(raw, "plain.txt", "The osprey count rose to forty pairs this spring.\n")
    write(raw, "vault.md", "# Vault\n\nThe privileged osprey ledger is kept under lock.\n", {"tier": "privileged"})
    write(raw, "scripted.md", "# Scripted\n\nA note on egrets.\n", {"source_url": "javascript:alert(document.domain)"})
    write(raw, "linked.md", "# Linked\n\nA note on storks.\n", {"source_url": "https://wiki.example/storks"})
    rows = root / "rows"
    rows.mkdir()
    (rows / ".source.json").write_text(json.dumps({"serve_originals": "raw", "hidden_columns": ["salary"]}))
    write(rows, "people.csv", PEOPLE)
    board = root / "board"
    board.mkdir()
    (board / ".source.json").write_text(json.dumps({"name": "boardroom", "tier": "privileged"}))
    write(board, "minutes.md", "# Minutes\n\nThe board approved the heron sanctuary.\n")
    services = build_services(Settings(data_dir=root / "data", host="testserver", allowed_hosts=["proxy.internal"]))
    for source, folder in (("raw", raw), ("rows", rows), ("board", board)):
        report = services.ingest.sync(services.register_folder(TENANT, source, str(folder)))
        assert report.failed == 0, report
    admin = services.keys.create(TENANT, name="ops", scopes=("read", "write", "admin"), max_tier=Tier.privileged)
    capped = services.keys.create(TENANT, name="capped", scopes=("read", "admin"), max_tier=Tier.standard)
    services.users.put(UserRecord(tenant=TENANT, user_id="priv@example.com", max_tier=Tier.privileged))
    yield World(services, create_app(services, build_registry(services)), admin.secret, capped.secret)


def mcp(http: TestClient, key: str, method: str, params: dict[str, Any], profile: str = "") -> dict[str, Any]:
    path = f"/mcp/{profile}" if profile else "/mcp"
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    return http.post(path, json=body, headers={"x-api-key": key}).json()


def link(world: World, doc_id: str, key: str | None = None) -> str:
    """The doc's link as kb_get hands it out, as a path and query on this server."""
    answer = mcp(
        world.client(), key or world.admin, "tools/call", {"name": "kb_get", "arguments": {"document_id": doc_id}}, "kb"
    )
    url = answer["result"]["structuredContent"]["url"]
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}" if parts.query else url


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def opened(world: World, doc_id: str, key: str | None = None, **params: str) -> Any:
    return world.client().get(
        f"/console/open/{quote(doc_id, safe='')}", headers=bearer(key or world.admin), params=params
    )


# -- H1 ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("doc_id", ["raw:figures.html", "raw:plain.txt"])
def test_every_download_is_inert_on_the_servers_origin(world, doc_id):
    for response in (world.client().get(link(world, doc_id)), opened(world, doc_id)):
        assert response.status_code == 200
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["content-security-policy"] == "sandbox; default-src 'none'"
        disposition = response.headers["content-disposition"]
        if doc_id.endswith(".html"):
            assert disposition.startswith("attachment;"), disposition
            assert response.headers["content-type"].startswith("text/html")  # served as what it is, never run
        else:
            assert disposition.startswith("inline;"), disposition


def test_only_plain_text_pdf_and_raster_images_are_shown_in_place():
    from ragmcp.security.originals import shown_inline

    shown = ["text/plain", "text/plain; charset=utf-8", "application/pdf", "image/png", "image/jpeg"]
    downloaded = ["text/html", "image/svg+xml", "application/xhtml+xml", "text/xml", "application/octet-stream"]
    assert all(shown_inline(t) for t in shown)
    assert not any(shown_inline(t) for t in downloaded)


# -- H2 ----------------------------------------------------------------------------------------------


def test_a_rows_link_serves_that_row_with_its_columns_rules_never_the_file(world):
    row = world.services.documents.by_path(TENANT, "rows", "people.csv")
    ada = next(d for d in row if d.pk == "1")
    for response in (world.client().get(link(world, ada.doc_id)), opened(world, ada.doc_id)):
        assert response.status_code == 200, response.text
        body = response.text
        assert "Ada Heron" in body and "ospreys" in body
        assert "Bo Egret" not in body and "Cy Stork" not in body, "one row, not the file"
        assert "91000" not in body and "salary" not in body, "a hidden column never leaves"
        assert response.headers["x-content-type-options"] == "nosniff"


# -- M4 ----------------------------------------------------------------------------------------------


def test_the_console_is_bound_by_its_admins_own_tier(world):
    http = world.client()
    capped = bearer(world.capped)
    assert opened(world, "raw:vault.md").status_code == 200, "the privileged admin opens it"
    assert opened(world, "raw:vault.md", world.capped).status_code == 404
    assert opened(world, "raw:vault.md", world.capped, user_id="priv@example.com").status_code == 404
    documents = http.get("/console/documents", headers=capped).text
    assert "vault.md" not in documents and "Vault" not in documents
    assert "plain.txt" in documents
    assert "vault.md" in http.get("/console/documents", headers=bearer(world.admin)).text
    assert "boardroom" not in documents, "nor a source above the admin's tier"
    assert "boardroom" in http.get("/console/documents", headers=bearer(world.admin)).text
    jobs = http.get("/console/jobs", headers=capped).text
    assert 'data-target="vault.md"' not in jobs and 'data-target="plain.txt"' in jobs
    assert 'data-target="vault.md"' in http.get("/console/jobs", headers=bearer(world.admin)).text

    search = http.get("/console/search", params={"user_id": "priv@example.com", "q": "osprey ledger"}, headers=capped)
    assert 'data-doc="raw:vault.md"' not in search.text
    assert 'id="capped"' in search.text and "Your own tier (standard) capped this search" in search.text
    full = http.get(
        "/console/search", params={"user_id": "priv@example.com", "q": "osprey ledger"}, headers=bearer(world.admin)
    )
    assert 'data-doc="raw:vault.md"' in full.text and 'id="capped"' not in full.text

    before = {k.key_id for k in world.services.keys.store.list()}
    for form in (
        {"name": "up", "scopes": ["read"], "max_tier": "privileged", "platform": "1"},
        {"name": "wider", "scopes": ["read", "write"], "max_tier": "standard"},
    ):
        refused = http.post("/console/keys", data=form, headers=capped, follow_redirects=False)
        assert refused.status_code == 303 and "may%20not%20exceed%20your%20own" in refused.headers["location"]
    assert {k.key_id for k in world.services.keys.store.list()} == before, "no key beyond the minter"
    raised = http.post(
        "/console/users", data={"user_id": "mallory", "max_tier": "privileged"}, headers=capped, follow_redirects=False
    )
    assert raised.status_code == 303 and world.services.users.get(TENANT, "mallory") is None
    demoted = http.post(
        "/console/users",
        data={"user_id": "priv@example.com", "groups": "anyone", "max_tier": "standard"},
        headers=capped,
        follow_redirects=False,
    )
    assert (
        demoted.status_code == 303 and world.services.users.get(TENANT, "priv@example.com").max_tier is Tier.privileged
    )
    admin_key = next(k for k in world.services.keys.store.list() if k.name == "ops")
    revoked = http.post(f"/console/keys/{admin_key.key_id}/revoke", data={}, headers=capped, follow_redirects=False)
    assert revoked.status_code == 303 and "not%20yours%20to%20revoke" in revoked.headers["location"]
    assert world.services.keys.store.get(admin_key.key_id).revoked_at is None
    capped_id = next(k.key_id for k in world.services.keys.store.list() if k.name == "capped")
    refusals = [
        r.tool
        for r in world.services.audit.store.records(TENANT)
        if r.key_id == capped_id and r.outcome == "refused 403"
    ]
    assert sorted(refusals) == sorted(
        ["POST /console/keys"] * 2 + ["POST /console/users"] * 2 + ["POST /console/keys/revoke"]
    )


def test_every_console_action_and_login_is_audited(world):
    http = world.client()
    auth = bearer(world.admin)
    http.get("/console/search", params={"user_id": "priv@example.com", "q": "storks"}, headers=auth)
    http.post("/console/users", data={"user_id": "carol", "groups": "ops", "max_tier": "standard"}, headers=auth)
    created = http.post(
        "/console/keys", data={"name": "audited", "scopes": ["read"], "max_tier": "standard"}, headers=auth
    )
    assert created.status_code == 200 and 'id="secret"' in created.text
    key_id = next(k.key_id for k in world.services.keys.store.list() if k.name == "audited")
    http.post(f"/console/keys/{key_id}/revoke", data={}, headers=auth)
    http.post("/console/login", data={"key": "rmcp_live_" + "0" * 64})
    http.post("/console/login", data={"key": world.admin})
    tools = [r.tool for r in world.services.audit.store.records(TENANT)]
    for action in ("GET /console/search", "POST /console/users", "POST /console/keys", "POST /console/keys/revoke"):
        assert action in tools, action
    assert "POST /console/login" in tools
    failed = [r for r in world.services.audit.store.records(UNAUTHENTICATED) if r.tool == "POST /console/login"]
    assert any(r.outcome == "refused 401" for r in failed), "a failed login is audited apart from the tenants"


def test_login_checks_its_origin_and_is_throttled(tmp_path):
    services = build_services(Settings(data_dir=tmp_path / "data", host="testserver"))
    admin = services.keys.create(TENANT, name="ops", scopes=("read", "admin")).secret
    http = TestClient(create_app(services, build_registry(services)), base_url="https://testserver")
    foreign = http.post("/console/login", data={"key": admin}, headers={"Origin": "https://evil.example"})
    assert foreign.status_code == 403 and "ragmcp_console" not in foreign.headers.get("set-cookie", "")
    nulled = http.post("/console/login", data={"key": admin}, headers={"Origin": "null"})
    assert nulled.status_code == 403
    same = http.post(
        "/console/login", data={"key": admin}, headers={"Origin": "https://testserver"}, follow_redirects=False
    )
    assert same.status_code == 303
    statuses = [
        http.post("/console/login", data={"key": "rmcp_live_" + "1" * 64}, follow_redirects=False).status_code
        for _ in range(12)
    ]
    assert statuses[0] == 401 and statuses[-1] == 429, statuses
    throttled = http.post("/console/login", data={"key": admin}, follow_redirects=False)
    assert throttled.status_code == 429, "a right key waits too: the throttle counts attempts, not failures"
    outcomes = [r.outcome for r in services.audit.store.records(UNAUTHENTICATED) if r.tool == "POST /console/login"]
    assert outcomes.count("refused 403") == 2 and "refused 429" in outcomes


# -- M5 ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/console/access", "/console", "/healthz", "/console/login"])
def test_a_host_that_is_not_allowed_gets_421_everywhere(world, path):
    rebound = world.client("attacker.example:8080")
    assert rebound.get(path, headers=bearer(world.admin)).status_code == 421
    listed = rebound.post(
        "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers={"x-api-key": world.admin}
    )
    assert listed.status_code == 421 and listed.json()["error"]["code"] == -32600
    assert rebound.get(link(world, "raw:plain.txt")).status_code == 421
    for host in ("testserver", "localhost:9000", "127.0.0.1:1234", "proxy.internal"):
        assert world.client(host).get("/console", headers=bearer(world.admin)).status_code == 200, host


def test_the_consoles_origin_check_compares_with_the_allowed_hosts_not_the_host(world):
    http = world.client()
    http.post("/console/login", data={"key": world.admin})
    token = re.search(r'name="csrf" value="([0-9a-f]{64})"', http.get("/console").text).group(1)
    for origin in ("https://attacker.example", "null", "https://testserver.attacker.example"):
        refused = http.post("/console/audit/verify", data={"csrf": token}, headers={"Origin": origin})
        assert refused.status_code == 403, origin
    fine = http.post(
        "/console/audit/verify", data={"csrf": token}, headers={"Origin": "https://testserver"}, follow_redirects=False
    )
    assert fine.status_code == 303


def test_open_mode_answers_loopback_names_only(tmp_path):
    settings = Settings(
        data_dir=tmp_path / "data",
        host="127.0.0.1",
        open=True,
        public_url="https://rag.example",
        allowed_hosts=["proxy"],
    )
    services = build_services(settings)
    app = create_app(services, build_registry(services))
    assert TestClient(app, base_url="http://localhost:8080").get("/console").status_code == 200
    for host in ("rag.example", "proxy", "attacker.example"):
        assert TestClient(app, base_url=f"http://{host}").get("/console").status_code == 421, host


# -- M6 ----------------------------------------------------------------------------------------------


def test_resources_on_ragbox_keep_privileged_documents_out_as_its_tools_do(world):
    http = world.client()
    uri = "ragmcp://documents/" + quote("raw:vault.md", safe="")

    def listed(profile: str) -> set[str]:
        return {r["uri"] for r in mcp(http, world.admin, "resources/list", {}, profile)["result"]["resources"]}

    assert uri in listed(""), "the whole server's resources follow the caller's own tier"
    assert uri not in listed("ragbox")
    assert (
        "privileged osprey ledger"
        in mcp(http, world.admin, "resources/read", {"uri": uri})["result"]["contents"][0]["text"]
    )
    refused = mcp(http, world.admin, "resources/read", {"uri": uri}, "ragbox")
    assert refused["error"]["code"] == -32002 and "privileged" not in json.dumps(refused)
    tool = mcp(
        http,
        world.admin,
        "tools/call",
        {"name": "get_document", "arguments": {"document_id": "raw:vault.md"}},
        "ragbox",
    )
    assert "not found" in json.dumps(tool)
    plain = "ragmcp://documents/" + quote("raw:plain.txt", safe="")
    assert plain in listed("ragbox")


# -- Low ---------------------------------------------------------------------------------------------


def test_a_sidecars_source_url_is_handed_out_only_when_it_is_http(world):
    scripted = link(world, "raw:scripted.md")
    assert "javascript" not in scripted and scripted.startswith("/files/")
    assert link(world, "raw:linked.md") == "https://wiki.example/storks"

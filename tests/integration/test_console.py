"""The console's gate, over the real app: who gets in (an admin key by header or by the login
form's cookie), what the cookie is, and the forms' CSRF and origin checks. The browser test
(tests/e2e/test_console_browser.py) drives the pages themselves."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from starlette.testclient import TestClient

from ragmcp.bootstrap import Services, build_registry, build_services
from ragmcp.console.sessions import COOKIE
from ragmcp.domain.models import Tier
from ragmcp.http import create_app
from ragmcp.settings import Settings


@dataclass
class Console:
    services: Services
    app: object
    admin: str
    reader: str

    def client(self) -> TestClient:
        return TestClient(self.app, base_url="https://testserver")


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    root = tmp_path_factory.mktemp("console-gate")
    docs = root / "docs"
    docs.mkdir()
    (docs / "note.md").write_text("# A note\n\nKingfishers nest in river banks.\n")
    services = build_services(Settings(data_dir=root / "data", host="testserver"))
    services.ingest.sync(services.register_folder("default", "docs", str(docs)))
    admin = services.keys.create("default", name="ops", scopes=("read", "write", "admin"), max_tier=Tier.privileged)
    reader = services.keys.create("default", name="agent", scopes=("read",))
    yield Console(services, create_app(services, build_registry(services)), admin.secret, reader.secret)


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', html)
    assert found, "the page's forms carry a CSRF token"
    return found.group(1)


def test_only_an_admin_credential_gets_in(console):
    http = console.client()
    assert http.get("/console").status_code == 401
    assert http.get("/console", headers={"Authorization": f"Bearer {console.reader}"}).status_code == 401
    page = http.get("/console", headers={"Authorization": f"Bearer {console.admin}"})
    assert page.status_code == 200 and "<h1>Overview</h1>" in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert not re.search(r'(src|href)="(https?:)?//', page.text), "nothing is loaded from outside the server"
    # A header-authenticated form needs no CSRF token: a browser never adds that header by itself.
    auth = {"Authorization": f"Bearer {console.admin}"}
    verify = http.post("/console/audit/verify", headers=auth, data={}, follow_redirects=False)
    assert verify.status_code == 303 and verify.headers["location"] == "/console"


def test_the_login_cookie_is_secure_http_only_strict_and_holds_no_key(console):
    http = console.client()
    assert http.post("/console/login", data={"key": console.reader}, follow_redirects=False).status_code == 401
    signed = http.post("/console/login", data={"key": console.admin}, follow_redirects=False)
    assert signed.status_code == 303
    header = signed.headers["set-cookie"]
    assert header.startswith(f"{COOKIE}=") and console.admin not in header
    for attribute in ("Secure", "HttpOnly", "SameSite=strict", "Path=/console"):
        assert attribute.lower() in header.lower(), header
    assert http.get("/console/documents").status_code == 200


def test_forms_need_the_csrf_token_and_the_same_origin(console):
    http = console.client()
    http.post("/console/login", data={"key": console.admin})
    token = csrf_of(http.get("/console").text)
    assert http.post("/console/audit/verify", data={}, follow_redirects=False).status_code == 403
    assert http.post("/console/audit/verify", data={"csrf": "0" * 64}, follow_redirects=False).status_code == 403
    evil = {"Origin": "https://evil.example"}
    assert http.post("/console/audit/verify", data={"csrf": token}, headers=evil).status_code == 403
    done = http.post("/console/audit/verify", data={"csrf": token}, follow_redirects=False)
    assert done.status_code == 303
    assert "Intact" in http.get("/console").text


def test_a_tampered_cookie_or_a_revoked_key_ends_the_session(console):
    http = console.client()
    http.post("/console/login", data={"key": console.admin})
    cookie = http.cookies[COOKIE]
    key_id, expires, signature = cookie.split(".")
    forged = TestClient(console.app, base_url="https://testserver")
    forged.cookies.set(COOKIE, f"{key_id}.{int(expires) + 10**6}.{signature}", domain="testserver", path="/console")
    assert forged.get("/console").status_code == 401
    extra = console.services.keys.create("default", name="temp", scopes=("read", "admin"))
    temp = console.client()
    assert temp.post("/console/login", data={"key": extra.secret}, follow_redirects=False).status_code == 303
    assert temp.get("/console").status_code == 200
    console.services.keys.revoke(extra.key.key_id)
    assert temp.get("/console").status_code == 401


def test_search_as_a_user_and_user_management(console):
    http = console.client()
    auth = {"Authorization": f"Bearer {console.admin}"}
    saved = http.post(
        "/console/users",
        data={"user_id": "carol@example.com", "groups": "ops, finance", "max_tier": "standard"},
        headers=auth,
        follow_redirects=False,
    )
    assert saved.status_code == 303
    assert console.services.users.get("default", "carol@example.com").groups == ("ops", "finance")
    page = http.get("/console/search", params={"user_id": "carol@example.com", "q": "kingfishers"}, headers=auth)
    assert page.status_code == 200 and 'data-doc="docs:note.md"' in page.text
    bad = http.post(
        "/console/users", data={"user_id": "x", "max_tier": "godlike"}, headers=auth, follow_redirects=False
    )
    assert bad.status_code == 303 and "unknown%20tier" in bad.headers["location"]


def test_the_mcp_endpoint_is_untouched(console):
    http = console.client()
    listed = http.post(
        "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers={"x-api-key": console.reader}
    )
    assert listed.status_code == 200 and listed.json()["result"]["tools"]
    assert http.get("/console", headers={"x-api-key": console.admin}).status_code == 401


def test_an_open_server_opens_the_console_but_still_checks_its_forms(tmp_path):
    services = build_services(Settings(data_dir=tmp_path / "data", host="testserver", open=True))
    http = TestClient(create_app(services, build_registry(services)), base_url="http://testserver")
    page = http.get("/console")
    assert page.status_code == 200 and "open server (--open)" in page.text
    assert http.post("/console/audit/verify", data={}, follow_redirects=False).status_code == 403
    token = csrf_of(page.text)
    assert http.post("/console/audit/verify", data={"csrf": token}, follow_redirects=False).status_code == 303
    services.keys.create("default", name="first", scopes=("read",))
    assert http.get("/console").status_code == 200, "the mode is fixed at start: a new key changes nothing"
    keyed = build_services(Settings(data_dir=tmp_path / "data", host="testserver"))
    closed = TestClient(create_app(keyed, build_registry(keyed)), base_url="http://testserver")
    assert closed.get("/console").status_code == 401, "a server started without --open has no open console"


def test_keys_are_created_bound_to_a_user_or_as_platform_keys_and_revoked(console):
    http = console.client()
    auth = {"Authorization": f"Bearer {console.admin}"}
    form = {"name": "bound", "scopes": ["read"], "max_tier": "standard", "acts_for": "carol@example.com"}
    created = http.post("/console/keys", data=form, headers=auth)
    assert created.status_code == 200
    secret = re.search(r'<code id="secret">([^<]+)</code>', created.text).group(1)
    key = console.services.keys.authenticate(secret)
    assert key is not None and key.user == "carol@example.com" and key.scopes == ("read",)
    both = {**form, "platform": "1"}
    refused = http.post("/console/keys", data=both, headers=auth, follow_redirects=False)
    assert refused.status_code == 303 and "not%20both" in refused.headers["location"]
    platform = http.post("/console/keys", data={**form, "acts_for": "", "platform": "1"}, headers=auth)
    pkey = console.services.keys.authenticate(re.search(r'<code id="secret">([^<]+)</code>', platform.text).group(1))
    assert pkey is not None and "assert-identity" in pkey.scopes and pkey.user is None
    revoked = http.post(f"/console/keys/{key.key_id}/revoke", data={}, headers=auth, follow_redirects=False)
    assert revoked.status_code == 303 and console.services.keys.authenticate(secret) is None


def test_the_access_page_names_a_key_without_a_user_as_the_identity_it_acts_as(console):
    reader = console.services.keys.authenticate(console.reader)
    assert reader is not None and reader.user is None
    page = console.client().get("/console/access", headers={"Authorization": f"Bearer {console.admin}"})
    assert page.status_code == 200
    assert f"<td>key:{reader.key_id}</td>" in page.text and "itself" not in page.text


def test_held_mass_deletes_are_listed_and_confirmed_only_with_the_csrf_token_by_an_admin(tmp_path):
    folder = tmp_path / "metals"
    folder.mkdir()
    words = ["copper", "zinc", "tin", "nickel"]
    for n, word in enumerate(words):
        (folder / f"note-{n}.md").write_text(f"# Note {n}\n\nThe {word} inventory is counted by the warehouse team.\n")
    services = build_services(Settings(data_dir=tmp_path / "data", host="testserver"))
    source = services.register_folder("default", "metals", str(folder))
    assert services.ingest.sync(source).ingested == 4
    admin = services.keys.create("default", name="ops", scopes=("read", "write", "admin"), max_tier=Tier.privileged)
    reader = services.keys.create("default", name="agent", scopes=("read", "write"))
    for path in folder.iterdir():
        path.unlink()
    assert services.ingest.sync(source).held == 4
    app = create_app(services, build_registry(services))

    def indexed() -> set[str]:
        return {d.path for d in services.documents.list("default", source.source_id)}

    def found(http: TestClient, word: str) -> bool:
        page = http.get("/console/search", params={"user_id": "someone", "q": word})
        assert page.status_code == 200
        return 'data-doc="' in page.text

    http = TestClient(app, base_url="https://testserver")
    assert http.post("/console/login", data={"key": admin.secret}, follow_redirects=False).status_code == 303
    page = http.get("/console/documents").text
    held = re.search(r'<tr data-source="metals">(.*?)</tr>', page, re.S)
    assert held, "the held source is listed"
    assert '<td class="held-count">4</td>' in held.group(1)
    assert all(f"<code>note-{n}.md</code>" in held.group(1) for n in range(4))
    assert "Confirm 4 deletions" in held.group(1)
    confirm = f"/console/sources/{source.source_id}/held/confirm"

    assert http.post(confirm, data={}, follow_redirects=False).status_code == 403
    assert http.post(confirm, data={"csrf": "0" * 64}, follow_redirects=False).status_code == 403
    not_admin = TestClient(app, base_url="https://testserver")
    assert not_admin.post(confirm, headers={"Authorization": f"Bearer {reader.secret}"}).status_code == 401
    assert not_admin.post("/console/login", data={"key": reader.secret}).status_code == 401
    assert indexed() == {f"note-{n}.md" for n in range(4)}, "a refused confirmation deletes nothing"
    assert len(services.sources.get("default", source.source_id).held_deletions) == 4
    assert found(http, "copper")

    done = http.post(confirm, data={"csrf": csrf_of(page)}, follow_redirects=False)
    assert done.status_code == 303 and "4%20deleted" in done.headers["location"]
    assert indexed() == set()
    assert services.sources.get("default", source.source_id).held_deletions == ()
    [audited] = [r for r in services.audit.store.records("default") if r.tool == "POST /console/sources/held/confirm"]
    assert audited.key_id == admin.key.key_id and len(audited.returned_ids) == 4
    after = http.get("/console/documents").text
    assert 'id="held"' not in after and "note-0.md" not in after
    assert not any(found(http, word) for word in words), "the deleted documents are no longer searchable"
    again = http.post(confirm, data={"csrf": csrf_of(after)}, follow_redirects=False)
    assert again.status_code == 303 and "holds%20no%20deletions" in again.headers["location"]

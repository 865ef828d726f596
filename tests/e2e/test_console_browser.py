"""The web console in a real browser: Debian's Chromium driven by Playwright for Python.

An admin signs in with the login form (a Secure, HttpOnly, SameSite=Strict cookie), searches as
two users of the directory and sees different results (the ACL applied inside the search), opens
a citation, finds a failed file with its reason, fixes it on disk and retries its job from the
page, and every page is saved as a screenshot that is checked to be more than a blank page.
Forms without the CSRF token, or posted from another origin, are refused. A raw HTML original whose
script tries to take over the console, opened by the signed-in admin from its link or from the
console, runs nothing on the console's origin: it is a download.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlsplit

import httpx
import pytest

from tests.conftest import RunningServer, start_server, stop_server
from tests.e2e.test_fuzz import cli

CHROMIUM = Path(os.environ.get("RAGMCP_CHROMIUM", "/usr/bin/chromium"))
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(os.environ.get("RAGMCP_SCREENSHOTS", "")) if os.environ.get("RAGMCP_SCREENSHOTS") else None

try:
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import Page, sync_playwright
except ImportError:  # pragma: no cover - the test set-up installs it
    sync_playwright = None

TAKEOVER = """<!doctype html><html><head><title>Quarterly figures</title></head><body>
<p>The quarterly figures of the osprey programme are attached.</p>
<script>
fetch('/console/access', {credentials: 'include'})
  .then(r => r.text())
  .then(page => {
    const token = (page.match(/name="csrf" value="([0-9a-f]+)"/) || [])[1] || '';
    const form = new FormData();
    for (const [k, v] of [['csrf', token], ['name', 'taken'], ['scopes', 'admin'], ['max_tier', 'privileged'],
                          ['platform', '1']]) form.append(k, v);
    return fetch('/console/keys', {method: 'POST', body: form, credentials: 'include'});
  });
</script></body></html>
"""
"""A raw HTML original that, run on the console's origin by a signed-in admin, mints itself an admin key."""

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        sync_playwright is None or not CHROMIUM.exists(),
        reason=f"no browser: needs Playwright for Python and Chromium at {CHROMIUM} "
        "(`make test` installs them where it runs as root with apt-get: apt-get install chromium)",
    ),
]


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, str]]:
    root = tmp_path_factory.mktemp("console")
    docs = root / "docs"
    docs.mkdir()
    (docs / "budget.md").write_text(
        "# Travel budget 2027\n\nThe finance team plans a four per cent rise in the travel budget for 2027.\n"
    )
    (docs / "budget.md.metadata.json").write_text(json.dumps({"groups": ["finance"]}))
    (docs / "handbook.md").write_text(
        "# Travel handbook\n\nBook travel through the portal; the travel budget of each team is set by finance.\n"
    )
    (docs / "broken.md").write_bytes(b"")
    (docs / "figures.html").write_text(TAKEOVER)
    (docs / ".source.json").write_text(json.dumps({"serve_originals": "raw"}))
    data = root / "data"
    admin = ("--scopes", "read,write,admin", "--max-tier", "privileged")
    created = cli(data, "keys", "create", "--tenant", "default", *admin)
    assert created.returncode == 0, created.stderr
    key = next(line.split()[-1] for line in created.stdout.splitlines() if line.startswith("secret:"))
    for user, groups in (("alice@example.com", "finance"), ("bob@example.com", "")):
        assert cli(data, "users", user, "--tenant", "default", "--groups", groups).returncode == 0
    os.environ["RAGMCP_WATCH"] = "false"
    try:
        server = start_server(docs, data, ingest_timeout=300, open_access=False)
    finally:
        del os.environ["RAGMCP_WATCH"]
    yield server, key
    stop_server(server)


def not_blank(path: Path) -> None:
    from PIL import Image

    with Image.open(path) as image:
        assert image.width >= 800 and image.height >= 400
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20) or []
    assert len(colours) > 50, f"{path.name} looks blank ({len(colours)} colours)"
    dominant = max(count for count, _ in colours) / (image.width * image.height)
    assert dominant < 0.97, f"{path.name} is {dominant:.0%} one colour"


def shoot(page: Page, folder: Path, name: str) -> None:
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    not_blank(path)
    if SCREENSHOTS is not None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, SCREENSHOTS / path.name)


def hits_as(page: Page, user: str, query: str) -> list[str]:
    page.goto("/console/search")
    page.fill("#user_id", user)
    page.fill("#q", query)
    page.click("#search")
    page.wait_for_selector("#hits")
    return [row.get_attribute("data-doc") or "" for row in page.query_selector_all("#hits tr.hit")]


def test_the_console_in_a_browser(console, tmp_path):
    server, key = console
    base = server.base.replace("127.0.0.1", "localhost")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        try:
            context = browser.new_context(base_url=base, viewport={"width": 1280, "height": 800})
            page = context.new_page()
            outside = []
            page.on("request", lambda r: outside.append(r.url) if not r.url.startswith(base) else None)

            response = page.goto("/console")
            assert response is not None and response.status == 401
            page.fill("#key", "rmcp_live_" + "0" * 64)
            page.click("#sign-in")
            assert "not an active admin key" in page.inner_text("#problem")
            page.fill("#key", key)
            page.click("#sign-in")
            assert page.inner_text("h1") == "Overview"
            cookie = next(c for c in context.cookies() if c["name"] == "ragmcp_console")
            assert cookie["httpOnly"] and cookie["secure"] and cookie["sameSite"] == "Strict"
            assert key not in cookie["value"]
            page.click("#verify-audit")
            assert "Intact" in page.inner_text("#audit")
            shoot(page, tmp_path, "console-overview")

            alice = hits_as(page, "alice@example.com", "travel budget for 2027")
            assert alice and "docs:budget.md" in alice and "docs:handbook.md" in alice
            ranks = page.query_selector_all("#hits tr.hit td")
            assert ranks, "the hits table shows scores and ranks"
            shoot(page, tmp_path, "console-search-alice")
            citation = page.query_selector('#hits tr.hit[data-doc="docs:budget.md"] a.citation')
            assert citation is not None
            opened = context.request.get(base + (citation.get_attribute("href") or ""))
            assert opened.status == 200 and b"four per cent rise" in opened.body()

            bob = hits_as(page, "bob@example.com", "travel budget for 2027")
            assert "docs:budget.md" not in bob and "docs:handbook.md" in bob
            shoot(page, tmp_path, "console-search-bob")

            page.goto("/console/documents")
            broken = page.query_selector("#documents tr.state-failed")
            assert broken is not None and "broken.md" in broken.inner_text() and "empty file" in broken.inner_text()
            shoot(page, tmp_path, "console-documents")

            mended = "# Mended\n\nThe broken file now has a sentence about kingfishers.\n"
            (server.docs / "broken.md").write_text(mended)
            page.goto("/console/jobs")
            row = page.query_selector('#jobs tr.status-failed[data-target="broken.md"]')
            assert row is not None
            row.query_selector("button.retry").click()
            assert "retried broken.md: succeeded" in page.inner_text("#message")
            shoot(page, tmp_path, "console-jobs")
            page.goto("/console/documents")
            assert "kingfishers" not in page.content()  # texts stay out of the table
            indexed = [r.inner_text() for r in page.query_selector_all("#documents tr.state-indexed")]
            assert any("Mended" in r for r in indexed)

            page.goto("/console/access")
            shoot(page, tmp_path, "console-access")

            # CSRF: the cookie alone does not let a form through, nor does a post from another site.
            forged = context.request.post(base + "/console/audit/verify", form={"csrf": "forged"})
            assert forged.status == 403
            cross = context.request.post(
                base + "/console/audit/verify", form={"csrf": "x"}, headers={"Origin": "http://evil.example"}
            )
            assert cross.status == 403
            assert outside == [], f"the console fetched from outside the server: {outside}"
        finally:
            browser.close()


def link_of(server: RunningServer, key: str, doc_id: str) -> str:
    """The document's link, as kb_get gives it to the admin's own key."""
    arguments = {"document_id": doc_id}
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "kb_get", "arguments": arguments}}
    headers = {"x-api-key": key, "accept": "application/json, text/event-stream"}
    answer = httpx.post(f"{server.base}/mcp/kb", json=call, headers=headers, timeout=30).json()
    assert "result" in answer, answer
    return answer["result"]["structuredContent"]["url"]


def test_a_raw_html_original_runs_nothing_on_the_console_origin(console):
    server, key = console
    base = server.base.replace("127.0.0.1", "localhost")
    link = link_of(server, key, "docs:figures.html").replace("127.0.0.1", "localhost")
    assert link.startswith(base + "/files/")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        try:
            context = browser.new_context(base_url=base, viewport={"width": 1280, "height": 800}, accept_downloads=True)
            page = context.new_page()
            page.goto("/console/login")
            page.fill("#key", key)
            page.click("#sign-in")
            assert page.inner_text("h1") == "Overview"
            reached: list[str] = []
            context.on(
                "request",
                lambda r: (
                    reached.append(r.url) if urlsplit(r.url).path in ("/console/access", "/console/keys") else None
                ),
            )
            downloads: list[str] = []
            page.on("download", lambda d: downloads.append(d.suggested_filename))
            for target in (link, f"{base}/console/open/{quote('docs:figures.html', safe='')}"):
                with contextlib.suppress(PlaywrightError):  # Chromium says "Download is starting"
                    page.goto(target)
                page.wait_for_timeout(1500)  # the time the script would need to reach the console
            assert reached == [], f"the original reached the console: {reached}"
            assert downloads == ["figures.html", "figures.html"], "both open the HTML original as a download"
            # The watch is live: the same script's first request, run on the console's own page, is seen.
            page.goto("/console")
            page.evaluate("fetch('/console/access', {credentials: 'include'}).then(r => r.status)")
            page.wait_for_timeout(500)
            assert reached == [f"{base}/console/access"]
            page.goto("/console/access")
            assert "taken" not in page.inner_text("main"), "no key was minted by the original"
        finally:
            browser.close()

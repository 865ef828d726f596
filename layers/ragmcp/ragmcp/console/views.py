"""The web console at /console: server-rendered pages over `console.data`, for an admin.

Signed in by `Authorization: Bearer <admin key>` or by the login form (a signed session cookie).
State-changing requests are POST forms carrying a CSRF token; a POST whose Origin is not one of the
server's allowed hosts (web/hosts.py; not the request's own Host, which a rebinding page chooses)
is refused, the login form's included. Logins are throttled per client address and audited, as is
every action. Pages set a Content-Security-Policy that allows nothing from outside the server;
originals are served as downloads that cannot run on the console's origin.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Annotated, Any, TypeVar
from urllib.parse import quote, urlsplit

import anyio
from fastapi import APIRouter, Depends, FastAPI, Form, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response

from ragmcp import __version__
from ragmcp.console import data
from ragmcp.console.sessions import COOKIE, OPEN_SESSION, SESSION_SECONDS, ConsoleSessions, ConsoleUser
from ragmcp.domain.errors import RagError
from ragmcp.domain.models import Principal, Tier
from ragmcp.security.audit import UNAUTHENTICATED
from ragmcp.security.models import RateLimits
from ragmcp.security.originals import download_headers
from ragmcp.services import Services
from ragmcp.web.hosts import origin_allowed

HERE = Path(__file__).parent
T = TypeVar("T")
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; form-action 'self'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}
LOGIN_LIMITS = RateLimits(per_minute=10, concurrent=2)
"""Login attempts a minute from one client address (each tries a key: a throttle on guessing)."""


class Refused(Exception):
    def __init__(self, response: Response):
        self.response = response


@cache
def templates() -> Any:
    """Jinja loads on the first page, so building the app (a Lambda's cold start) never pays for it."""
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    return Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]))


def back(to: str, message: str | None = None) -> RedirectResponse:
    suffix = f"?message={quote(message)}" if message else ""
    return RedirectResponse("/console" + (f"/{to}" if to else "") + suffix, status_code=303)


@dataclass
class Console:
    """One app's console: its services and sessions, the audit verification it last ran, and the hosts a
    POST's Origin may name. `install` puts it on the app; each route asks for it (`console`)."""

    services: Services
    sessions: ConsoleSessions
    state: data.ConsoleState = field(default_factory=data.ConsoleState)

    def __post_init__(self) -> None:
        self.hosts = self.services.settings.transport_hosts()[0]
        self.rebinding_checked = self.services.settings.security.dns_rebinding_protection

    def page(self, request: Request, user: ConsoleUser, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        html = (
            templates()
            .get_template(name)
            .render(
                user=user,
                csrf=self.sessions.csrf(user.session) if user.session else "",
                open_server=user.session == OPEN_SESSION,
                version=__version__,
                path=request.url.path,
                **context,
            )
        )
        return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)

    def login_page(self, request: Request, problem: str | None = None, status: int = 200) -> HTMLResponse:
        html = templates().get_template("login.html").render(problem=problem, version=__version__, path="")
        return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)

    def signed_in(self, request: Request) -> ConsoleUser:
        """The admin behind the request, or a Refused carrying the login page."""
        opened = self.sessions.open_user()
        if opened is not None:
            return opened
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            user = self.sessions.bearer(token.strip())
            if user is None:
                raise Refused(self.login_page(request, "That credential has no admin scope here.", 401))
            return user
        cookie = request.cookies.get(COOKIE)
        user = self.sessions.resume(cookie) if cookie else None
        if user is None:
            raise Refused(self.login_page(request, "Your session ended; sign in again." if cookie else None, 401))
        return user

    def same_origin(self, request: Request) -> bool:
        """A POST's Origin, when a browser sends one, names this server: an allowed host (or, where
        the Host is not checked, behind API Gateway, the request's Host). `null` is another site."""
        origin = request.headers.get("origin")
        if origin is None:
            return True
        if self.rebinding_checked:
            return origin_allowed(origin, self.hosts)
        return urlsplit(origin).netloc == request.headers.get("host")

    def checked_post(self, request: Request, token: str) -> ConsoleUser:
        if not self.same_origin(request):
            raise Refused(Response("cross-site request refused", status_code=403, headers=SECURITY_HEADERS))
        user = self.signed_in(request)
        if not self.sessions.csrf_ok(user, token):
            raise Refused(Response("missing or wrong CSRF token", status_code=403, headers=SECURITY_HEADERS))
        return user

    async def guarded(self, request: Request, handler: Any, token: str | None = None) -> Response:
        try:
            user = self.signed_in(request) if token is None else self.checked_post(request, token)
            return await handler(user)
        except Refused as refused:
            return refused.response

    async def act(
        self, request: Request, token: str, to: str, work: Callable[[Principal], T], say: Callable[[T], str]
    ) -> Response:
        """A form's action: CSRF-checked, `work` run off the event loop as the signed-in user, and
        back to the page `to` saying what came of it (or the error that stopped it)."""

        async def run(user: ConsoleUser) -> Response:
            try:
                outcome = await anyio.to_thread.run_sync(work, user.principal)
            except RagError as exc:
                return back(to, exc.message)
            return back(to, say(outcome))

        return await self.guarded(request, run, token)

    def login_audit(self, user: ConsoleUser | None, outcome: str) -> None:
        who = user.principal if user else Principal(tenant=UNAUTHENTICATED, scopes=())
        self.services.audit.append(who, "POST /console/login", {}, None, outcome)


def console(request: Request) -> Console:
    """The console of the app answering (a FastAPI dependency of every route)."""
    return request.app.state.console


On = Annotated[Console, Depends(console)]
router = APIRouter(prefix="/console")


def install(app: FastAPI, services: Services, sessions: ConsoleSessions) -> None:
    """The console's routes on `app`, over `services` and `sessions`."""
    app.state.console = Console(services, sessions)
    app.include_router(router)


@router.get("/static/console.css")
async def stylesheet() -> FileResponse:
    return FileResponse(HERE / "static" / "console.css", media_type="text/css", headers=SECURITY_HEADERS)


@router.get("/login")
async def login_form(request: Request, c: On) -> Response:
    return c.login_page(request)


@router.post("/login")
async def login(request: Request, c: On, key: str = Form(default="", max_length=512)) -> Response:
    if not c.same_origin(request):
        await anyio.to_thread.run_sync(c.login_audit, None, "refused 403")
        return Response("cross-site request refused", status_code=403, headers=SECURITY_HEADERS)
    address = f"console-login:{request.client.host if request.client else '-'}"
    decision = await anyio.to_thread.run_sync(c.services.limiter.acquire, address, LOGIN_LIMITS, False)
    try:
        if not decision.allowed:
            await anyio.to_thread.run_sync(c.login_audit, None, "refused 429")
            throttled = c.login_page(request, "Too many sign-in attempts; wait a minute.", 429)
            throttled.headers.update(decision.headers())
            return throttled
        cookie, user = await anyio.to_thread.run_sync(c.sessions.start, key.strip())
    finally:
        c.services.limiter.release(address)
    await anyio.to_thread.run_sync(c.login_audit, user, "ok" if user else "refused 401")
    if cookie is None:
        return c.login_page(request, "That key is not an active admin key.", 401)
    response = RedirectResponse("/console", status_code=303)
    response.set_cookie(
        COOKIE, cookie, max_age=SESSION_SECONDS, path="/console", secure=True, httponly=True, samesite="strict"
    )
    return response


@router.post("/logout")
async def logout(request: Request, c: On, csrf: str = Form(default="")) -> Response:
    async def out(user: ConsoleUser) -> Response:
        await anyio.to_thread.run_sync(c.services.audit.append, user.principal, "POST /console/logout", {}, None, "ok")
        response = RedirectResponse("/console/login", status_code=303)
        response.delete_cookie(COOKIE, path="/console", secure=True, httponly=True, samesite="strict")
        return response

    return await c.guarded(request, out, csrf)


@router.get("")
async def overview(request: Request, c: On) -> Response:
    async def show(user: ConsoleUser) -> Response:
        health = await anyio.to_thread.run_sync(data.health, c.services, request.app.state.serve)
        return c.page(request, user, "overview.html", health=health, verification=c.state.verification)

    return await c.guarded(request, show)


@router.post("/audit/verify")
async def audit_verify(request: Request, c: On, csrf: str = Form(default="")) -> Response:
    async def run(user: ConsoleUser) -> Response:
        await anyio.to_thread.run_sync(data.verify_audit, c.services, user.principal, c.state)
        return back("")

    return await c.guarded(request, run, csrf)


@router.get("/documents")
async def documents(request: Request, c: On, message: str | None = None) -> Response:
    async def show(user: ConsoleUser) -> Response:
        rows = await anyio.to_thread.run_sync(data.document_rows, c.services, user.principal)
        sources = await anyio.to_thread.run_sync(data.sources, c.services, user.principal)
        held = await anyio.to_thread.run_sync(data.held_deletions, c.services, user.principal)
        return c.page(
            request,
            user,
            "documents.html",
            rows=rows,
            sources=sources,
            held=held,
            held_shown=data.HELD_PATHS_SHOWN,
            message=message,
        )

    return await c.guarded(request, show)


@router.post("/sources/{source_id}/held/confirm")
async def confirm_held(request: Request, c: On, source_id: str, csrf: str = Form(default="")) -> Response:
    return await c.act(
        request,
        csrf,
        "documents",
        lambda principal: data.confirm_deletions(c.services, principal, source_id),
        lambda report: f"{source_id}: {report.line()}",
    )


@router.get("/jobs")
async def jobs(request: Request, c: On, message: str | None = None) -> Response:
    async def show(user: ConsoleUser) -> Response:
        found = await anyio.to_thread.run_sync(data.recent_jobs, c.services, user.principal)
        return c.page(request, user, "jobs.html", jobs=found, retryable=data.RETRYABLE, message=message)

    return await c.guarded(request, show)


@router.post("/jobs/{job_id}/retry")
async def retry(request: Request, c: On, job_id: str, csrf: str = Form(default="")) -> Response:
    return await c.act(
        request,
        csrf,
        "jobs",
        lambda principal: data.retry(c.services, principal, job_id),
        lambda job: f"retried {job.target}: {job.status}" + (f" ({job.error})" if job.error else ""),
    )


@router.get("/open/{doc_id:path}")
async def open_document(request: Request, c: On, doc_id: str, user_id: str = "") -> Response:
    """A citation's target: the original, or the redacted rendition of a redacting source, as the
    admin may read it (or, for a search as a user, as that user may, within the admin's tier)."""

    async def serve(user: ConsoleUser) -> Response:
        found = await anyio.to_thread.run_sync(data.original, c.services, user.principal, doc_id, user_id.strip()[:256])
        if found.status != 200:
            return Response(found.error, status_code=found.status, headers=SECURITY_HEADERS)
        headers = {**SECURITY_HEADERS, **download_headers(found.media_type, found.file_name)}
        return Response(found.data, media_type=found.media_type, headers=headers)

    return await c.guarded(request, serve)


@router.get("/search")
async def search(request: Request, c: On, user_id: str = "", q: str = "") -> Response:
    async def show(user: ConsoleUser) -> Response:
        known = await anyio.to_thread.run_sync(data.users, c.services, user.principal)
        found: data.SearchAs | None = None
        problem = None
        if q.strip():
            try:
                found = await anyio.to_thread.run_sync(
                    data.search_as, c.services, user.principal, user_id.strip()[:256], q.strip()[:2000]
                )
            except RagError as exc:
                problem = exc.message
        hits, capped = (found.hits, found.capped) if found else (None, None)
        context = {"users": known, "user_id": user_id, "q": q, "hits": hits, "capped": capped, "problem": problem}
        return c.page(request, user, "search.html", **context)

    return await c.guarded(request, show)


@router.get("/access")
async def access(request: Request, c: On, message: str | None = None) -> Response:
    async def show(user: ConsoleUser) -> Response:
        keys = await anyio.to_thread.run_sync(c.services.keys.store.list)
        mine = [k for k in keys if k.tenant == user.principal.tenant]
        known = await anyio.to_thread.run_sync(data.users, c.services, user.principal)
        tiers = [t.value for t in Tier]
        return c.page(request, user, "access.html", keys=mine, users=known, tiers=tiers, message=message)

    return await c.guarded(request, show)


@router.post("/keys")
async def create_key(
    request: Request,
    c: On,
    csrf: str = Form(default=""),
    name: str = Form(default="", max_length=200),
    scopes: Annotated[list[str] | None, Form()] = None,
    max_tier: str = Form(default="standard"),
    acts_for: str = Form(default="", max_length=256),
    platform: str = Form(default=""),
) -> Response:
    async def run(user: ConsoleUser) -> Response:
        chosen = tuple(s for s in ("read", "write", "admin") if s in (scopes or ()))
        if not chosen or max_tier not in {t.value for t in Tier}:
            return back("access", "choose at least one scope and a tier")
        if acts_for.strip() and platform:
            return back("access", "a key acts for one user or is a platform key, not both")

        def create() -> Any:
            return data.create_key(
                c.services, user.principal, name, chosen, Tier(max_tier), acts_for.strip() or None, bool(platform)
            )

        try:
            created = await anyio.to_thread.run_sync(create)
        except RagError as exc:
            return back("access", exc.message)
        known = await anyio.to_thread.run_sync(data.users, c.services, user.principal)
        keys = [k for k in c.services.keys.store.list() if k.tenant == user.principal.tenant]
        tiers = [t.value for t in Tier]
        return c.page(request, user, "access.html", keys=keys, users=known, tiers=tiers, created=created)

    return await c.guarded(request, run, csrf)


@router.post("/keys/{key_id}/revoke")
async def revoke_key(request: Request, c: On, key_id: str, csrf: str = Form(default="")) -> Response:
    return await c.act(
        request,
        csrf,
        "access",
        lambda principal: data.revoke_key(c.services, principal, key_id),
        lambda _: f"revoked {key_id}",
    )


@router.post("/users")
async def put_user(
    request: Request,
    c: On,
    csrf: str = Form(default=""),
    user_id: str = Form(default="", max_length=256),
    groups: str = Form(default="", max_length=4000),
    max_tier: str = Form(default="standard"),
) -> Response:
    async def run(user: ConsoleUser) -> Response:
        if max_tier not in {t.value for t in Tier}:
            return back("access", "unknown tier")
        try:
            record = await anyio.to_thread.run_sync(
                data.put_user, c.services, user.principal, user_id, groups, max_tier
            )
        except RagError as exc:
            return back("access", exc.message)
        return back("access", f"saved {record.user_id}")

    return await c.guarded(request, run, csrf)

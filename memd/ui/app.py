"""The page's web application: starlette routes behind the guard (`memd.ui.guard`).

Routes are exactly the pages, one cheap JSON fingerprint for the live update, and the actions;
there is no static-file route, so nothing of the home is served but what a page renders. Page
work (reading the home, the write path) runs in a worker thread: the write path takes file locks
and may wait for them.

Every response carries a content policy that allows the page's own inline style and script (by a
per-response nonce), data: images and same-origin fetches, and nothing else; no framing; the
referrer only to itself (with `no-referrer` a browser posts `Origin: null`); no caching.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memd.daemon.lock import daemon_alive
from memd.daemon.status import gather
from memd.errors import MemdError
from memd.sync.run import render_status
from memd.tree import Home
from memd.ui import actions, guard, pages, views
from memd.ui.cost import report
from memd.write import proposals

MAX_FORM_BYTES = 2 << 20


@dataclass
class UI:
    """One running page: its home, port, secret and the write tokens it issued."""

    home: Home
    port: int
    secret: str
    clock: Callable[[], datetime]
    tokens: guard.WriteTokens = field(default_factory=guard.WriteTokens)


def _headers(nonce: str) -> list[tuple[bytes, bytes]]:
    csp = (f"default-src 'none'; style-src 'nonce-{nonce}'; script-src 'nonce-{nonce}'; img-src data:; "
           "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")  # fmt: skip
    return [(b"content-security-policy", csp.encode()), (b"x-frame-options", b"DENY"),
            (b"referrer-policy", b"same-origin"), (b"cache-control", b"no-store"),
            (b"x-content-type-options", b"nosniff")]  # fmt: skip


class Guard:
    """ASGI middleware: Host, then the secret (URL once, cookie after), then Origin for writes."""

    def __init__(self, app: ASGIApp, ui: UI) -> None:
        self.app, self.ui = app, ui

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        nonce = secrets.token_urlsafe(16)
        scope.setdefault("state", {})["nonce"] = nonce

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_headers(nonce)]
            await send(message)

        refusal = self.refusal(Request(scope))
        await (refusal or self.app)(scope, receive, send_with_headers)

    def refusal(self, req: Request) -> Response | None:
        ui = self.ui
        if not guard.host_ok(req.headers.get("host"), ui.port):
            return PlainTextResponse("refused: this page answers only to 127.0.0.1 and localhost\n", 403)
        if req.method not in ("GET", "HEAD", "POST"):
            return PlainTextResponse("method not allowed\n", 405)
        token = req.query_params.get("token")
        if token is not None:
            if not guard.secret_ok(token, ui.secret):
                return PlainTextResponse("refused: wrong token; open the address `memd ui` printed\n", 403)
            rest = urlencode([(k, v) for k, v in parse_qsl(req.url.query) if k != "token"])
            r = RedirectResponse(req.url.path + (f"?{rest}" if rest else ""), 303)
            r.set_cookie(guard.cookie_name(ui.port), ui.secret, httponly=True, samesite="strict", path="/")
            return r
        if not guard.secret_ok(req.cookies.get(guard.cookie_name(ui.port)), ui.secret):
            return PlainTextResponse("refused: open the address `memd ui` printed (it carries the page's token)\n", 403)
        if req.method == "POST" and not guard.origin_ok(req.headers.get("origin"), ui.port):
            return PlainTextResponse("refused: a change must come from this page (Origin)\n", 403)
        return None


def build(ui: UI) -> Starlette:
    """The application for one `memd ui`."""

    def chrome(req: Request, title: str, body: str, version: str, *, error: str = "") -> str:
        waiting = len(proposals.list_proposals(ui.home))
        daemon = daemon_alive(ui.home) or {}
        return pages.layout(title=title, path=req.url.path, body=body, nonce=req.state.nonce, version=version,
                            home=str(ui.home.root), daemon={"running": bool(daemon), **daemon},
                            flash=req.query_params.get("done", ""), error=error, waiting=waiting)  # fmt: skip

    def here(req: Request) -> str:
        rest = urlencode([(k, v) for k, v in parse_qsl(req.url.query) if k not in ("done", "token")])
        return req.url.path + (f"?{rest}" if rest else "")

    def body_of(req: Request, csrf: str) -> tuple[str, str]:
        now, q, path = ui.clock(), req.query_params, req.url.path
        if path == "/":
            query = q.get("q", "").strip()
            scopes = [(str(place), [views.memory_row(m, now) for m in mems if not query or views.matches(m, query)], probs)
                      for place, mems, probs in views.scopes(ui.home)]  # fmt: skip
            return "Memories", pages.home_page(scopes, query)
        if path == "/memory":
            place = views.place_of(q.get("scope", ""))
            d = views.memory_page(ui.home, place, q.get("file", ""), now)
            return (d["row"] or {}).get("name", d["file"]), pages.memory_page(d, csrf, here(req))
        if path == "/review":
            on = proposals.review_on(views.settings_of(ui.home))
            return "Review", pages.review_page(views.proposal_rows(ui.home, now), csrf, here(req), on)
        if path == "/daemon":
            return "Daemon", pages.daemon_page(views.daemon_page(ui.home, now))
        if path == "/cost":
            days = q.get("days", "30")
            r = report(ui.home, now.date(), int(days) if days.isdigit() and 0 < int(days) <= 366 else 30)
            today = r["by_day"][-1]["tokens"] if r["by_day"] else 0
            return "Cost", pages.cost_page(r, int(today))
        status = gather(ui.home, now)
        return "Dreams & sync", pages.dreams_page(views.dream_runs(ui.home), status, render_status(status["sync"]),
                                                  csrf, here(req))  # fmt: skip

    async def page(req: Request) -> Response:
        def work() -> tuple[str, int]:
            version = views.version(ui.home)
            csrf = ui.tokens.issue()
            try:
                title, body = body_of(req, csrf)
                return chrome(req, title, body, version), 200
            except MemdError as exc:
                return chrome(req, "not found", pages.error_page(str(exc), "/"), version), 404

        html, code = await run_in_threadpool(work)
        return HTMLResponse(html, code)

    async def version(_req: Request) -> Response:
        return JSONResponse({"v": await run_in_threadpool(views.version, ui.home)})

    async def action(req: Request) -> Response:
        if int(req.headers.get("content-length") or 0) > MAX_FORM_BYTES:
            return PlainTextResponse("too large\n", 413)
        if req.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
            return PlainTextResponse("refused: a form post is expected\n", 415)
        raw = await req.body()
        form = {k: v[0] for k, v in parse_qs(raw[:MAX_FORM_BYTES].decode("utf-8", "replace"), keep_blank_values=True).items()}
        if not ui.tokens.use(form.get("csrf")):
            return PlainTextResponse("refused: this page's write token is missing or was used; reload the page\n", 403)
        back = guard.safe_back(form.get("back"))
        fn = _ACTIONS.get(req.path_params["name"])
        if fn is None:
            return PlainTextResponse("no such action\n", 404)

        def work() -> tuple[str | None, str]:
            try:
                return fn(ui, form), ""
            except MemdError as exc:
                return None, str(exc)
            except ValueError as exc:
                return None, f"bad request: {exc}"

        done, error = await run_in_threadpool(work)
        if done is None:
            html = await run_in_threadpool(lambda: chrome(req, "not done", pages.error_page(error, back),
                                                          views.version(ui.home), error=""))  # fmt: skip
            return HTMLResponse(html, 409)
        parts = urlsplit(back)
        query = urlencode([*[(k, v) for k, v in parse_qsl(parts.query) if k != "done"], ("done", done)])
        return RedirectResponse(f"{parts.path}?{query}", 303)

    routes = [Route(p, page, methods=["GET", "HEAD"]) for p in ("/", "/memory", "/review", "/daemon", "/cost", "/dreams")]
    routes += [Route("/api/version", version, methods=["GET"]),
               Route("/action/{name}", action, methods=["POST"])]  # fmt: skip
    return Starlette(routes=routes, middleware=[])


def _accept(ui: UI, f: dict[str, str]) -> str:
    return actions.accept(ui.home, ui.clock, f.get("id", ""))


def _reject(ui: UI, f: dict[str, str]) -> str:
    return actions.reject(ui.home, ui.clock, f.get("id", ""))


def _edit_proposal(ui: UI, f: dict[str, str]) -> str:
    return actions.edit_proposal(ui.home, ui.clock, f.get("id", ""), int(f.get("n", "-1")), f.get("text", ""))


def _undo(ui: UI, f: dict[str, str]) -> str:
    return actions.undo(ui.home, ui.clock, f.get("scope", ""), f.get("run", ""))


def _edit_memory(ui: UI, f: dict[str, str]) -> str:
    return actions.edit_memory(ui.home, ui.clock, f.get("scope", ""), f.get("file", ""), f.get("base", ""),
                               f.get("text", ""))  # fmt: skip


_ACTIONS: dict[str, Callable[[UI, dict[str, str]], str]] = {
    "accept": _accept, "reject": _reject, "edit-proposal": _edit_proposal, "undo": _undo, "edit-memory": _edit_memory,
}  # fmt: skip


def application(ui: UI) -> Any:
    """The guarded application uvicorn serves."""
    return Guard(build(ui), ui)

"""Nobody but the page gets in: each attack from a plain HTTP client against a real `memd ui` process.

The client is not a browser and not the page: it sends exactly the headers an attacker's page or a
process on the machine could make a browser (or itself) send.
"""

from __future__ import annotations

import http.client
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import psutil
import pytest

from memd.tree import Home
from memd.ui import guard
from memd.write import proposals
from tests.ui.world import Page, build, served, today

# One server for the module, in one worker; it only reads the home. The one test that writes (the
# control) has a home and server of its own: in another order (or alone) the others found the
# proposal already rejected.
pytestmark = pytest.mark.xdist_group("ui-guard")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Page, str]]:
    home = tmp_path_factory.mktemp("guard") / "home"
    info = build(home, today())
    with served(home) as page:
        yield home, page, str(info["proposal"])


def req(page: Page, method: str, path: str, *, host: str | None = None, cookie: str | None = None,
        origin: str | None = None, body: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:  # fmt: skip
    c = http.client.HTTPConnection("127.0.0.1", page.port, timeout=60)
    headers = {"Host": host or f"127.0.0.1:{page.port}"}
    if cookie is not None:
        headers["Cookie"] = f"{guard.cookie_name(page.port)}={cookie}"
    if origin is not None:
        headers["Origin"] = origin
    data = None
    if body is not None:
        data = urlencode(body)
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    c.request(method, path, body=data, headers=headers)
    r = c.getresponse()
    out = r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode("utf-8", "replace")
    c.close()
    return out


def csrf_of(page: Page, path: str = "/review") -> str:
    code, _h, html = req(page, "GET", path, cookie=page.token)
    assert code == 200
    m = re.search(r'name="csrf" value="([^"]+)"', html)
    assert m, html[:500]
    return m.group(1)


def waiting(home: Path) -> list[str]:
    return [p.id for p in proposals.list_proposals(Home(home))]


def test_it_listens_on_loopback_only(world: tuple[Path, Page, str]) -> None:
    _home, page, _pid = world
    procs = [psutil.Process(page.proc.pid), *psutil.Process(page.proc.pid).children(recursive=True)]
    listening = [c.laddr for p in procs for c in p.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
    assert listening and all(a.ip == "127.0.0.1" for a in listening), listening


def test_the_printed_token_sets_a_strict_cookie_and_is_dropped_from_the_address(world: tuple[Path, Page, str]) -> None:
    _home, page, _pid = world
    code, h, _ = req(page, "GET", f"/cost?days=7&token={page.token}")
    assert code == 303 and h["location"] == "/cost?days=7"
    cookie = h["set-cookie"].lower()
    assert f"{guard.cookie_name(page.port)}={page.token}".lower() in cookie
    assert "httponly" in cookie and "samesite=strict" in cookie
    assert req(page, "GET", "/cost", cookie=page.token)[0] == 200


@pytest.mark.parametrize("path", ["/", "/review", "/cost", "/api/version", "/memory?scope=global&file=x.md"])
def test_without_the_token_nothing_is_served(world: tuple[Path, Page, str], path: str) -> None:
    _home, page, _pid = world
    for cookie in (None, "", "wrong", page.token[:-1]):
        code, _h, body = req(page, "GET", path, cookie=cookie)
        assert code == 403 and "memd ui" in body and "<main" not in body
    code, _h, _ = req(page, "GET", f"{path}{'&' if '?' in path else '?'}token=guess")
    assert code == 403


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.1:1", "localhost", "[::1]:{port}",
                                  "127.0.0.1.nip.io:{port}"])  # fmt: skip
def test_dns_rebinding_fails_on_the_host_header(world: tuple[Path, Page, str], host: str) -> None:
    """A rebinding page reaches 127.0.0.1 under its own name: the Host header says so; even the token is no help."""
    _home, page, _pid = world
    h = host.format(port=page.port)
    for path in ("/", f"/?token={page.token}", "/api/version"):
        code, _hd, body = req(page, "GET", path, host=h, cookie=page.token)
        assert code == 403 and "127.0.0.1" in body, (h, path)
    assert req(page, "GET", "/", host=f"localhost:{page.port}", cookie=page.token)[0] == 200


def test_a_cross_site_form_post_fails_and_changes_nothing(world: tuple[Path, Page, str]) -> None:
    home, page, pid = world
    before = waiting(home)
    assert pid in before
    for origin in ("http://evil.example", "null", f"http://evil.example:{page.port}", f"https://127.0.0.1:{page.port}", None):
        token = csrf_of(page)
        code, _h, body = req(page, "POST", "/action/reject", cookie=page.token, origin=origin,
                             body={"csrf": token, "id": pid, "back": "/review"})  # fmt: skip
        assert code == 403 and "Origin" in body, origin
    assert waiting(home) == before


def test_every_write_needs_a_write_token_of_a_page_used_once(world: tuple[Path, Page, str]) -> None:
    home, page, pid = world
    before = waiting(home)
    origin = f"http://127.0.0.1:{page.port}"
    for token in (None, "", "forged", page.token):
        body = {"id": pid, "back": "/review", **({"csrf": token} if token is not None else {})}
        code, _h, text = req(page, "POST", "/action/reject", cookie=page.token, origin=origin, body=body)
        assert code == 403 and "write token" in text, token
    good = csrf_of(page)
    # the right page token, but no cookie: refused before the token is even looked at
    assert req(page, "POST", "/action/reject", origin=origin, body={"csrf": good, "id": pid})[0] == 403
    assert waiting(home) == before
    # GET never changes anything
    assert req(page, "GET", f"/action/reject?csrf={good}&id={pid}", cookie=page.token)[0] == 405
    assert waiting(home) == before


def test_nothing_of_the_home_is_served_beyond_the_pages(world: tuple[Path, Page, str]) -> None:
    home, page, _pid = world
    secret_marker = "provider"  # settings.json's text
    assert secret_marker in (home / "settings.json").read_text()
    for path in ("/settings.json", "/memd/state.sqlite", "/static/settings.json", "/../settings.json",
                 "/projects/-work-shop/s-first.jsonl", "/memory/../../settings.json", "/%2e%2e/settings.json"):  # fmt: skip
        code, _h, body = req(page, "GET", path, cookie=page.token)
        assert code == 404 and secret_marker not in body, path
    for query in ({"scope": "global", "file": "../settings.json"}, {"scope": "project:..", "file": "settings.json"},
                  {"scope": "project:-work-shop/../..", "file": "settings.json"}, {"scope": "session:a:b", "file": "x.md"},
                  {"scope": "global", "file": "/etc/passwd"}):  # fmt: skip
        code, _h, body = req(page, "GET", "/memory?" + urlencode(query), cookie=page.token)
        assert code == 404 and '"provider"' not in body and "root:" not in body, query


def test_an_open_redirect_is_not_offered(world: tuple[Path, Page, str]) -> None:
    assert guard.safe_back("//evil.example/x") == "/" and guard.safe_back("https://evil.example") == "/"
    assert guard.safe_back("/review?x=1") == "/review?x=1" and guard.safe_back("/\\evil") == "/"


def test_the_page_itself_can_write(tmp_path: Path) -> None:
    """The control: cookie, Origin and a fresh page token together reject the proposal."""
    home = tmp_path / "home"
    pid = str(build(home, today())["proposal"])
    with served(home) as page:
        assert pid in waiting(home)
        code, h, _ = req(page, "POST", "/action/reject", cookie=page.token, origin=f"http://localhost:{page.port}",
                         body={"csrf": csrf_of(page), "id": pid, "back": "/review"})  # fmt: skip
        assert code == 303 and h["location"].startswith("/review?done=rejected"), h
        assert pid not in waiting(home)

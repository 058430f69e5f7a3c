"""Who may use the page: the decisions, apart from the server (`memd.ui.app` asks them per request).

- The server listens on 127.0.0.1 only (`memd.ui.serve`).
- A random secret, printed by `memd ui` in the URL (`?token=…`, as Jupyter does): a request that
  carries it gets it as a cookie (HttpOnly, SameSite=Strict, named for the port) and is redirected
  to the same page without it; every other request needs the cookie.
- `Host` must be `127.0.0.1:<port>` or `localhost:<port>`: a DNS-rebinding page, whose requests
  carry its own host name, is refused before anything else.
- A write (POST) needs an `Origin` of the page itself (a cross-site form post carries its own) and
  a write token the server issued with a page it rendered (`WriteTokens`), used once.

Pure but for the secrets' randomness; tokens are compared in constant time.
"""

from __future__ import annotations

import hmac
import secrets
import threading
from collections import OrderedDict

WRITE_TOKENS_KEPT = 1024


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def cookie_name(port: int) -> str:
    """Cookies are not told apart by port: two pages on two ports must not share one."""
    return f"memd_ui_{port}"


def host_ok(host: str | None, port: int) -> bool:
    return (host or "").lower() in (f"127.0.0.1:{port}", f"localhost:{port}")


def origin_ok(origin: str | None, port: int) -> bool:
    """A write's Origin is the page's own; a request without one (no browser sends a form post
    without it) is refused too."""
    return (origin or "").lower() in (f"http://127.0.0.1:{port}", f"http://localhost:{port}")


def secret_ok(given: str | None, secret: str) -> bool:
    return bool(given) and hmac.compare_digest(str(given).encode(), secret.encode())


def safe_back(path: str | None) -> str:
    """Where a form returns to: a path of this page, never another site (`//evil`, `https:`)."""
    p = path or "/"
    if not p.startswith("/") or p.startswith("//") or "\\" in p or any(ord(c) < 32 for c in p):
        return "/"
    return p


class WriteTokens:
    """Per-page write tokens: issued with each page rendered, good for one write, the oldest forgotten
    past `WRITE_TOKENS_KEPT` (a page left open that long is reloaded before it writes)."""

    def __init__(self, kept: int = WRITE_TOKENS_KEPT) -> None:
        self._live: OrderedDict[str, None] = OrderedDict()
        self._kept = kept
        self._lock = threading.Lock()

    def issue(self) -> str:
        t = secrets.token_urlsafe(24)
        with self._lock:
            self._live[t] = None
            while len(self._live) > self._kept:
                self._live.popitem(last=False)
        return t

    def use(self, token: str | None) -> bool:
        if not token:
            return False
        with self._lock:
            for t in self._live:
                if hmac.compare_digest(t.encode(), str(token).encode()):
                    del self._live[t]
                    return True
        return False

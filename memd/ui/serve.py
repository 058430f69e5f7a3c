"""Serving the page: a socket on 127.0.0.1 (never another address), uvicorn on it, the URL printed.

The socket is bound here, before uvicorn starts, so the port (random unless asked) is known for
the Host check and the URL. Uvicorn's access log is off: the first request's URL carries the
secret. Ctrl-C (or SIGTERM) stops the server.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import webbrowser
from collections.abc import Callable, Mapping
from datetime import datetime

import uvicorn

from memd.tree import Home
from memd.ui.app import UI, application
from memd.ui.guard import new_secret

LOOPBACK = "127.0.0.1"


def bind(port: int) -> socket.socket:
    """A listening socket on the loopback address only; port 0 picks a free one."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((LOOPBACK, port))
    sock.listen(64)
    sock.set_inheritable(True)
    return sock


def graphical(env: Mapping[str, str], platform: str) -> bool:
    """Whether a browser can open a window. Without one, `webbrowser` would start a text browser
    (lynx, w3m) in the terminal that runs the server: the address is printed instead."""
    return platform in ("darwin", "win32") or bool(env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"))


def serve(home: Home, *, port: int, open_browser: bool, clock: Callable[[], datetime],
          announce: Callable[[str], None]) -> None:  # fmt: skip
    """Serve until interrupted. `announce` gets the URL (with its token) before the first request."""
    sock = bind(port)
    port = sock.getsockname()[1]
    ui = UI(home, port, new_secret(), clock)
    url = f"http://{LOOPBACK}:{port}/?token={ui.secret}"
    config = uvicorn.Config(application(ui), log_level="warning", access_log=False, lifespan="off",
                            server_header=False, date_header=False, timeout_graceful_shutdown=5)  # fmt: skip
    server = uvicorn.Server(config)
    announce(url)
    if open_browser and graphical(os.environ, sys.platform):
        threading.Timer(0.5, webbrowser.open, (url,)).start()
    server.run(sockets=[sock])

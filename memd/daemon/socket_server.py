"""What the daemon's Unix sockets share: a socket in the home's private memd directory, one thread a
connection, a bounded number at once (the hook socket, memd/daemon/hook_server.py; the nearest-memories
socket of the `memd[semantic]` extra, memd/daemon/nearest_server.py).

Invariants: a socket memd did not make is never removed (anything else in its place: a warning and no
server); the socket is made 0600 in the 0700 memd directory, so only the user reaches it, even in the
moment before its chmod; at most `max_clients` connections are served at once (more are closed at once:
their clients fall back); `stop` removes the socket file only when it is still a socket.
"""

from __future__ import annotations

import os
import socket
import stat
import threading
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from memd.fsutil import ensure_private_dir


class SocketServer(ABC):
    """The listening half of a daemon socket; a subclass answers one connection in `_serve_one`.
    `name` prefixes the log events (`<name>.not_served`)."""

    def __init__(self, path: Path | str, log: Any, *, name: str, max_clients: int) -> None:
        self.path = Path(path)
        self.log = log
        self.name = name
        self._listener: socket.socket | None = None
        self._slots = threading.BoundedSemaphore(max_clients)
        self._max_clients = max_clients
        self._stopped = threading.Event()

    def _clear_stale(self) -> bool:
        """Remove a socket a previous daemon left (the daemon lock says it is not serving); refuse anything else."""
        try:
            mode = os.lstat(self.path).st_mode
        except FileNotFoundError:
            return True
        if not stat.S_ISSOCK(mode):
            self.log.warning(f"{self.name}.not_served", path=str(self.path),
                             reason="something else is in the socket's place")  # fmt: skip
            return False
        self.path.unlink()
        return True

    def _listen(self) -> socket.socket | None:
        """The listening socket, or None (said in one warning)."""
        if not self._clear_stale():
            return None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # Not under a umask of our own: the umask is the process's, and jobs create files meanwhile. The memd
            # directory is 0700, so nobody else reaches the socket in the moment before its chmod.
            ensure_private_dir(self.path.parent)
            sock.bind(str(self.path))
            os.chmod(self.path, 0o600)
            sock.listen(self._max_clients)
        except OSError as exc:  # a path over the 107 bytes a socket's name may have, a read-only disk
            sock.close()
            self.log.warning(f"{self.name}.not_served", path=str(self.path), reason=str(exc))
            return None
        return sock

    def _accept_loop(self, listener: socket.socket) -> None:
        """Serve connections until `_close`: each on a daemon thread of its own, while a slot is free."""
        self._listener = listener
        while not self._stopped.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                break  # closed by stop()
            if not self._slots.acquire(blocking=False):
                conn.close()
                continue
            threading.Thread(target=self._serve_one, args=(conn,), name=f"memd-{self.name}-client", daemon=True).start()

    @abstractmethod
    def _serve_one(self, conn: socket.socket) -> None:
        """Answer one connection, on its own thread; release `self._slots` when done, whatever happens
        (`_accept_loop` took the slot)."""

    def _close(self) -> None:
        """Stop accepting, close the socket and remove its file (ours: made by `_listen`)."""
        self._stopped.set()
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
            try:
                if stat.S_ISSOCK(os.lstat(self.path).st_mode):
                    self.path.unlink()
            except OSError:
                pass


__all__ = ["SocketServer"]

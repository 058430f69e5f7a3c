"""What the daemon's Unix sockets share: a socket in the home's private memd directory, one thread a
connection at a time (kept for the next one), a bounded number at once (the hook socket,
memd/daemon/hook_server.py; the nearest-memories socket of the `memd[semantic]` extra,
memd/daemon/nearest_server.py).

Invariants: a socket memd did not make is never removed (anything else in its place: a warning and no
server); the socket is made 0600 in the 0700 memd directory, so only the user reaches it, even in the
moment before its chmod; at most `max_clients` connections are served at once (more are closed at once:
their clients fall back); `stop` removes the socket file only when it is still a socket.
"""

from __future__ import annotations

import os
import queue
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
        self._handoff: queue.SimpleQueue[socket.socket | None] = queue.SimpleQueue()  # accepted, for `_work`
        self._idle = 0  # `_work` threads free for the next connection, less the connections not taken yet
        self._threads = 0  # `_work` threads made
        self._idle_lock = threading.Lock()

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
        """Serve connections until `_close`: each on a daemon thread of its own while a slot is free, a thread
        that served one before and waits for the next (`_work`) when there is one. A new thread waited 0.3 ms
        (p50) to 2.8 ms (p95) for its first run on a busy machine; one woken from its wait, 0.03 / 0.3 ms."""
        self._listener = listener
        while not self._stopped.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                break  # closed by stop()
            if not self._slots.acquire(blocking=False):
                conn.close()
                continue
            with self._idle_lock:
                late = self._stopped.is_set()  # `_close` told the waiting threads to end: none would take it
                if not late:
                    self._idle -= 1  # a waiting thread is this connection's
                spawn = not late and self._idle < 0 and self._threads < self._max_clients
                if spawn:  # none: a new one (with all threads there, one has served its last and comes back)
                    self._idle += 1
                    self._threads += 1
            if late:  # closed at once: its client falls back now, not at its deadline
                conn.close()
                self._slots.release()
                break
            self._handoff.put(conn)
            if spawn:
                threading.Thread(target=self._work, name=f"memd-{self.name}-client", daemon=True).start()

    def _work(self) -> None:
        """Serve the connections `_accept_loop` hands over, one at a time, until `_close`. Invariants: `_idle` is
        the threads waiting here (or about to) less the connections handed over and not taken yet; a thread is
        made only when none is free, and never more than `max_clients` (with a slot taken for the new connection,
        one of them has released its own and is about to wait here)."""
        while True:
            conn = self._handoff.get()
            if conn is None:
                return
            try:
                self._serve_one(conn)
            except Exception:  # `_serve_one` says what went wrong; this thread serves the next one
                pass
            with self._idle_lock:
                if self._stopped.is_set() and self._idle >= 0:  # none handed over waits for this thread
                    return
                self._idle += 1

    @abstractmethod
    def _serve_one(self, conn: socket.socket) -> None:
        """Answer one connection, on its own thread; release `self._slots` when done, whatever happens
        (`_accept_loop` took the slot)."""

    def _close(self) -> None:
        """Stop accepting, close the socket and remove its file (ours: made by `_listen`); the threads waiting
        for a connection end, and a connection handed over before waits for the thread that comes back for it
        (every connection accepted is served, or closed at once)."""
        with self._idle_lock:
            self._stopped.set()
            for _ in range(max(0, self._idle)):
                self._handoff.put(None)
            self._idle = min(0, self._idle)
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

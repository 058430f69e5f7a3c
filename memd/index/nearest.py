"""Asking the daemon for the memories nearest a query in meaning, and fusing them with bm25 (issue 25, point 3).

With the optional `memd[semantic]` extra the running daemon embeds queries (memd/daemon/nearest_server.py)
and answers over a private unix socket, `<home>/memd/nearest.sock` (0600, in the 0700 memd directory). One
connection carries one request and one answer, each a line of JSON:

    → {"q": "<query>", "project": "<project key>" | null, "k": 20}       (at most MAX_REQUEST bytes)
    ← {"model": "<model id>", "hits": [["<file>", <cosine>], ...]}      best first, or {"error": "..."}

`ask` is the client: it imports nothing heavy (no numpy, no model: the hooks call it), never raises, and
gives up at its deadline — no socket, a daemon down, slow or hung, an answer it cannot read: `[]`, and
search and recall answer by keywords alone, as they do without the extra.

`fuse` joins the two rankings by reciprocal rank (k = 60), under one rule that keeps a question with no
right answer unanswered: the dense ranking re-orders and adds to a keyword answer but never makes an empty
one non-empty (its similarity does not tell a no-answer query from an answered one: bench/RESULTS.md),
and it adds only memories at least `DENSE_FLOOR` similar.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite3

    from memd.index.search import Hit

SOCKET_NAME = "nearest.sock"
MAX_REQUEST = 8192  # bytes of the request line; the server refuses more
MAX_ANSWER = 65536
MAX_QUERY_CHARS = 2000  # a longer query is cut before it is sent (e5 reads 512 tokens)
DENSE_K = 20  # nearest memories asked for
RRF_K = 60
DENSE_FLOOR = 0.82  # a memory less similar than this takes no part (tuned on the set's tuning part: bench/RESULTS.md)
HOOK_WAIT_S = 0.25  # the recall hook waits this long at most for the daemon (within its budget)
CLI_WAIT_S = 1.0  # `memd search` and `memd recall` from the shell

Nearest = list[tuple[str, float]]


def socket_path(memd_dir: Path | str) -> Path:
    return Path(memd_dir) / SOCKET_NAME


def encode_request(query: str, project_key: str | None, k: int = DENSE_K) -> bytes:
    import json  # noqa: PLC0415 - start-up

    return json.dumps({"q": query[:MAX_QUERY_CHARS], "project": project_key, "k": k}, ensure_ascii=False).encode() + b"\n"


def decode_answer(raw: bytes) -> Nearest:
    """The hits of an answer line; anything malformed is no hit at all."""
    import json  # noqa: PLC0415 - start-up

    try:
        obj = json.loads(raw)
    except ValueError:
        return []
    hits = obj.get("hits") if isinstance(obj, dict) else None
    if not isinstance(hits, list):
        return []
    out: Nearest = []
    for h in hits:
        if (isinstance(h, list) and len(h) == 2 and isinstance(h[0], str)
                and isinstance(h[1], (int, float)) and not isinstance(h[1], bool)):  # fmt: skip
            out.append((h[0], float(h[1])))
    return out


def ask(
    path: Path | str,
    query: str,
    project_key: str | None,
    *,
    deadline: float,
    monotonic: Callable[[], float] = time.monotonic,
) -> Nearest:
    """The daemon's nearest memories for `query` (file, cosine), or [] by `deadline` (on `monotonic`'s clock)."""
    if deadline - monotonic() <= 0.005 or not os.path.exists(path):
        return []
    import socket  # noqa: PLC0415 - start-up: only when the daemon serves

    request = encode_request(query, project_key)
    if len(request) > MAX_REQUEST:  # a query of many multi-byte characters
        return []
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(max(0.001, deadline - monotonic()))
            sock.connect(str(path))
            sock.sendall(request)
            buf = b""
            while not buf.endswith(b"\n"):
                left = deadline - monotonic()
                if left <= 0:
                    return []
                sock.settimeout(left)
                chunk = sock.recv(MAX_ANSWER)
                if not chunk:
                    break
                buf += chunk
                if len(buf) > MAX_ANSWER:
                    return []
    except OSError:  # absent, refused, timed out, reset
        return []
    return decode_answer(buf)


def fuse(keyword: Sequence[str], nearest: Sequence[tuple[str, float]], limit: int,
         floor: float = DENSE_FLOOR) -> list[str]:  # fmt: skip
    """Files in the fused order: reciprocal-rank fusion of the keyword ranking and the dense one.

    Pure. Empty when `keyword` is empty (the no-answer rule above); dense hits under `floor` take no part.
    A file in both rankings gains from both; ties keep the keyword order.
    """
    if not keyword:
        return []
    score: dict[str, float] = {}
    for rank, f in enumerate(keyword):
        score[f] = score.get(f, 0.0) + 1.0 / (RRF_K + rank)
    for rank, (f, sim) in enumerate(nearest):
        if sim >= floor:
            score[f] = score.get(f, 0.0) + 1.0 / (RRF_K + rank)
    order = {f: i for i, f in enumerate(keyword)}
    return sorted(score, key=lambda f: (-score[f], order.get(f, len(order))))[:limit]


_HIT_SQL = (
    "SELECT scope, project_key, file, name, description, type, body, mtime FROM memories "
    "WHERE file = ? AND (scope = 'global' OR project_key IS ?)"
)


def fused_hits(conn: sqlite3.Connection, hits: Sequence[Hit], nearest: Sequence[tuple[str, float]],
               project_key: str | None, limit: int) -> list[Hit]:  # fmt: skip
    """`memd search`'s hits fused with the dense ranking (`fuse`). A memory only the dense ranking found is read
    from the search DB (left out when absent or out of scope); its snippet is the start of its body and its
    score 0 (it has no bm25)."""
    if not nearest or not hits:
        return list(hits[:limit])
    from memd.index.search import SNIPPET_TOKENS, Hit  # noqa: PLC0415 - start-up

    by_file = {h.file: h for h in hits}
    out: list[Hit] = []
    for f in fuse([h.file for h in hits], nearest, limit):
        if f in by_file:
            out.append(by_file[f])
        elif (r := conn.execute(_HIT_SQL, (f, project_key)).fetchone()) is not None:
            snippet = " ".join(r[6].split()[:SNIPPET_TOKENS])
            out.append(Hit(r[0], r[1], r[2], r[3], r[4], r[5], snippet, 0.0, float(r[7])))
    return out


__all__ = [
    "CLI_WAIT_S",
    "DENSE_FLOOR",
    "DENSE_K",
    "HOOK_WAIT_S",
    "MAX_QUERY_CHARS",
    "MAX_REQUEST",
    "SOCKET_NAME",
    "Nearest",
    "ask",
    "decode_answer",
    "encode_request",
    "fuse",
    "fused_hits",
    "socket_path",
]

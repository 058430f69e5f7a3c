"""Full-text search over memories: SQLite FTS5 at `<home>/memd/search.sqlite` (SPEC §6.3).

This module is the read side: `open_readonly`, `query_index`, query parsing
and snippets. memd is the only writer (memd/index/writer.py: `SearchIndex`,
sync; memd/index/schema.py: the schema, opening, damage); agents (the
SearchMemory tool) and `memd search` open the database read-only, and this
module never imports the writer. The database is derived data: it can be
deleted at any time and `refresh_all` rebuilds it from the memory files.

Contract for read-only readers (stable for `PRAGMA user_version` = 3)
---------------------------------------------------------------------

Open with the URI `file:<path>?mode=ro` (see `open_readonly`). The database is in
WAL mode, so a reader never waits for the writer and always sees one committed
state: every sync is a single transaction.

    CREATE TABLE memories (
        id          INTEGER PRIMARY KEY,    -- = memories_fts.rowid
        scope       TEXT NOT NULL,          -- 'global' (the drawer) or 'project'
        project_key TEXT,                   -- SPEC §1.1 key; NULL for 'global'
        file        TEXT NOT NULL UNIQUE,   -- path relative to the home, '/'-separated
        name        TEXT NOT NULL,
        description TEXT NOT NULL,
        type        TEXT NOT NULL,          -- user | feedback | project | reference
        body        TEXT NOT NULL,          -- Markdown body, front matter removed
        mtime       REAL NOT NULL,          -- file mtime, seconds since the epoch
        size        INTEGER NOT NULL        -- file size in bytes
    );
    CREATE VIRTUAL TABLE memories_fts USING fts5(
        name, description, body,
        tokenize = "porter unicode61 remove_diacritics 2 tokenchars '+'");
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        -- 'segmenter' = 'zwsp-v1'
    CREATE TABLE embeddings (               -- empty unless the memd[semantic] extra is installed
        file TEXT, model TEXT,              -- = memories.file; the embedding model's id
        hash TEXT, mtime REAL, size INTEGER,  -- of the text embedded / the file when it was
        vec  BLOB,                          -- 384 float32, little-endian, L2-normalised
        PRIMARY KEY (file, model));

`memories_fts` holds the *segmented* text of name, description and body: in
scripts written without spaces (CJK ideographs, kana, Hangul syllables, Thai,
Lao, Khmer, Myanmar) a U+200B ZERO WIDTH SPACE is inserted between two adjacent
word characters whenever either of them belongs to those scripts (combining
marks stay with their base). A reader must segment its query the same way
(`segment()` below: one regex), then MATCH; rank with
`bm25(memories_fts, 10.0, 5.0, 1.0)` (name, description, body) and show
`snippet(memories_fts, 2, ...)` with U+200B removed. Join `memories` on
`memories.id = memories_fts.rowid` for scope, file and dates. The writer's indexes
(`memories_scope`, and `memories_listing` over every column but the body) only make
reads cheaper: a reader's query works the same with or without them.

Why this design
---------------

* **Tokenizer.** `trigram` (SQLite >= 3.34) cannot match a query term shorter
  than three characters, and most Chinese words are two (记忆, 设计); its bm25
  over trigrams also ranks English poorly. `unicode61` gives word tokens for
  spaced scripts, wrapped in `porter` so a word matches its other forms (schema
  2; `+` is a word character, so `C++` is a token); prefix queries (`deplo*`)
  work natively, but it sees a run
  of Chinese as one giant token. Segmenting those scripts into one token per
  character makes any CJK query (one character or more) a phrase query over
  adjacent characters: 记忆 matches 长期记忆系统的设计 and not 记...忆 apart.
  The segmentation is done in Python because the stdlib `sqlite3` module cannot
  register an FTS5 tokenizer.
* **Content.** `snippet()` re-tokenizes the stored column text, which therefore
  must be the segmented text. An external-content table would need a second,
  segmented copy anyway and must be kept byte-identical to the index to delete
  correctly; a contentless table cannot produce snippets on SQLite < 3.43 and
  needs the old values to delete. So the FTS table keeps its own (segmented)
  copy: memories are small, and deleting by rowid is always correct.
* **Versioning.** `user_version` and `meta.segmenter` are checked on open; on a
  mismatch the writer drops and rebuilds everything (it is a cache).
"""

from __future__ import annotations

import functools
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from memd.logs.lazy import lazy_logger

if TYPE_CHECKING:
    from memd.index.query import ParsedQuery

log = lazy_logger("memd.search")  # structlog on first use: the hook commands never pay for it

SEGMENTER = "zwsp-v1"
ZWSP = "\u200b"
WEIGHTS = (10.0, 5.0, 1.0)  # name, description, body
SNIPPET_TOKENS = 24
BUSY_TIMEOUT_S = 5.0

# Scripts written without spaces between words (plus Hangul, whose words carry
# attached particles): one token per character. Combining marks inside these
# blocks count as part of the script, so a mark never starts a new token.
# Compiled on first use, by text that has a character of those blocks: the class takes milliseconds
# to compile, which a hook answering an English prompt does not pay.
SPACELESS_FIRST = "\u0e00"  # the lowest character of SPACELESS


@functools.cache
def _seg_re() -> re.Pattern[str]:
    from memd.index.query import SPACELESS  # noqa: PLC0415 - start-up: the query parser only when a query is parsed

    return re.compile(rf"(?<=[{SPACELESS}])(?=\w)|(?<=\w)(?=\w)(?=[{SPACELESS}])")


_HL_OPEN, _HL_CLOSE = "\x02", "\x03"


@dataclass(frozen=True)
class Hit:
    """One search result; `score` is -bm25, so higher is better."""

    scope: str
    project_key: str | None
    file: str
    name: str
    description: str
    type: str
    snippet: str
    score: float
    mtime: float


# --------------------------------------------------------------------------- text


def segment(text: str) -> str:
    """Insert U+200B between characters of spaceless scripts (see the module docstring). A text
    below SPACELESS_FIRST has none, and every match needs one: it comes back as it is. ASCII text
    is such text, told in C without a character's comparison (a dream fills thousands of rows)."""
    if text.isascii() or max(text) < SPACELESS_FIRST:
        return text
    return _seg_re().sub(ZWSP, text)


def _clean_snippet(raw: str | None, open_mark: str, close_mark: str) -> str:
    """Join highlights split by segmentation, drop U+200B, flatten whitespace."""
    if not raw:
        return ""
    text = re.sub(f"{_HL_CLOSE}{ZWSP}*{_HL_OPEN}", "", raw)
    text = text.replace(ZWSP, "").replace(_HL_OPEN, open_mark).replace(_HL_CLOSE, close_mark)
    return " ".join(text.split())


# --------------------------------------------------------------------------- reading


def open_readonly(path: Path | str, *, check_same_thread: bool = True) -> sqlite3.Connection:
    """Open the search DB as an agent does: read-only URI, never able to write. `check_same_thread=False`: a
    connection handed from thread to thread, one at a time (the daemon's hook answers keep one).

    Raises `sqlite3.OperationalError` when the database does not exist yet, and
    `sqlite3.DatabaseError` when something other than a regular file is in its place
    (SQLite would block on a FIFO forever).
    """

    try:
        import os  # noqa: PLC0415 - start-up
        mode = os.stat(path).st_mode
    except OSError:
        mode = None  # absent (or unreachable): SQLite's own error says so
    import stat  # noqa: PLC0415 - start-up
    if mode is not None and not stat.S_ISREG(mode):
        from memd.fsutil import kind_of  # noqa: PLC0415 - start-up
        raise sqlite3.DatabaseError(f"{path}: {kind_of(mode)}, not a regular file; memd opens only regular files")
    uri = Path(path).absolute().as_uri() + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, check_same_thread=check_same_thread)
    conn.execute("PRAGMA query_only = 1")
    return conn


_SEARCH_SQL = """
SELECT m.scope, m.project_key, m.file, m.name, m.description, m.type,
       snippet(memories_fts, 2, char(2), char(3), '…', {tokens}),
       bm25(memories_fts, {w0}, {w1}, {w2}) AS rank, m.mtime
FROM memories_fts JOIN memories AS m ON m.id = memories_fts.rowid
WHERE memories_fts MATCH ? {scope_filter}
ORDER BY rank, m.file
LIMIT ?
"""


def _run(
    conn: sqlite3.Connection,
    match: str,
    project_key: str | None,
    limit: int,
    all_scopes: bool,
    marks: tuple[str, str],
) -> list[Hit]:
    scope_filter = "" if all_scopes else "AND (m.scope = 'global' OR m.project_key = ?)"
    sql = _SEARCH_SQL.format(
        tokens=SNIPPET_TOKENS, w0=WEIGHTS[0], w1=WEIGHTS[1], w2=WEIGHTS[2], scope_filter=scope_filter
    )
    params: tuple[object, ...] = (match, limit) if all_scopes else (match, project_key, limit)
    rows = conn.execute(sql, params).fetchall()
    return [
        Hit(
            scope=r[0],
            project_key=r[1],
            file=r[2],
            name=r[3],
            description=r[4],
            type=r[5],
            snippet=_clean_snippet(r[6], *marks),
            score=-float(r[7]),
            mtime=float(r[8]),
        )
        for r in rows
    ]


def parse(query: str) -> ParsedQuery:
    """`query` in memd's search syntax (memd/index/query.py), segmented as the index is."""
    from memd.index.query import parse_query  # noqa: PLC0415 - start-up

    return parse_query(query, segment)


def query_index(
    conn: sqlite3.Connection,
    query: str,
    *,
    project_key: str | None,
    limit: int = 10,
    all_scopes: bool = False,
    marks: tuple[str, str] = ("**", "**"),
) -> list[Hit]:
    """Search the project `project_key` plus the global drawer, best first.

    `project_key=None` searches the drawer only; `all_scopes` every directory. The query is
    memd's syntax (memd/index/query.py: words by their stem, any of them, more of them ranking
    first; `"phrase"`, `pre*`, `-word`, `NOT`, `AND`, `OR`, `name:`), never raw FTS5, so it
    cannot fail: a query with nothing to look for finds nothing (`parse(query).error` says why).
    A plain query that finds nothing is retried with its words of four letters or more as
    prefixes ("deplo" finds "deployment"), which a model writing a natural-language
    SearchMemory query needs.
    """
    if limit <= 0:
        return []
    parsed = parse(query)
    if parsed.error:
        return []
    hits = _run(conn, parsed.match, project_key, limit, all_scopes, marks)
    if not hits and parsed.plain:
        from memd.index.query import STOPWORDS  # noqa: PLC0415 - start-up

        longer = [w for w in parsed.words if len(w) >= 4 and w not in STOPWORDS]
        if longer:
            match = " OR ".join('"' + segment(w) + '"*' for w in longer)
            hits = _run(conn, match, project_key, limit, all_scopes, marks)
    return hits


__all__ = [
    "BUSY_TIMEOUT_S",
    "SEGMENTER",
    "SNIPPET_TOKENS",
    "WEIGHTS",
    "ZWSP",
    "Hit",
    "open_readonly",
    "parse",
    "query_index",
    "segment",
]

"""Recall's candidates (SPEC §7b.1): what the selector may choose from, and what it already showed.

* **Candidates** are front matter only (name, description, type, file, date),
  at most 200, read from the search database memd keeps current (no file is
  opened): the FTS5 hits for the query first, in rank order, then the rest of
  the project's memories and the global drawer, newest first. Files already
  surfaced in the session are left out *before* the cap, so they never take a
  slot, and a session is not shown the same memory twice.
* **Offline** (the `offline` provider) there is no selector: search ranks,
  with a relevance floor so that nothing unrelated pads the answer. The
  query's content words (stopwords and words under three letters left out;
  text in scripts without spaces as character pairs) are searched one by one;
  a word found in more than half of the memories in scope says nothing about
  any of them and is dropped; a memory is recalled only if it holds one of the
  words left, best bm25 rank first. A query with no such word recalls nothing.
* **Surfaced per session**: the files a session was shown, kept in the state
  database's `kv` table, bounded, so recall never repeats itself.

Pure parts (candidate ordering, content words, surfaced-set merging) are plain
functions of their inputs; the rest reads the search and state databases.
`memd.agent.recall` is the entry point and the model's selection.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the recall hook imports this module: only what a call needs is imported, when it is
    from memd.index.search import Hit

MAX_CANDIDATES = 200
MAX_PICKS = 5
SURFACED_KEEP = 1000  # per session; older entries fall off first


@dataclass(frozen=True)
class Candidate:
    """One memory as the selector sees it: front matter and where it lives, no body."""

    file: str  # relative to the home, '/'-separated (the search DB's key)
    name: str
    description: str
    type: str
    scope: str
    project_key: str | None
    mtime: float
    body: str | None = None  # only filled in for the final selection, on request


# --------------------------------------------------------------------------- pure


def candidate_from_hit(hit: Hit) -> Candidate:
    return Candidate(hit.file, hit.name, hit.description, hit.type, hit.scope, hit.project_key, hit.mtime)


def order_candidates(
    hits: Iterable[Candidate],
    rest: Iterable[Candidate],
    surfaced: Collection[str] = (),
    limit: int = MAX_CANDIDATES,
) -> list[Candidate]:
    """Search hits in rank order, then the rest newest first; surfaced files out; at most `limit`.

    `rest` may repeat hits (it is "every memory in scope"): each file appears
    once, at its first place. Ties in age are broken by file so the order is
    the same on every run.
    """
    out: list[Candidate] = []
    seen = set(surfaced)
    by_age = sorted(rest, key=lambda c: (-c.mtime, c.file))
    for cand in (*hits, *by_age):
        if len(out) >= limit:
            break
        if cand.file in seen:
            continue
        seen.add(cand.file)
        out.append(cand)
    return out


def top_hits(hits: Iterable[Candidate], surfaced: Collection[str], limit: int) -> list[Candidate]:
    """The offline selection: the best search hits not surfaced yet."""
    return order_candidates(hits, (), surfaced, limit)


# Words that say nothing about which memory a prompt needs. Lower case; words under
# three letters are dropped anyway, so they are not listed.
STOPWORDS = frozenset((
    "about", "above", "after", "again", "against", "all", "also", "and", "any", "are", "aren", "because", "been",
    "before", "being", "below", "between", "both", "but", "can", "cannot", "could", "did", "didn", "does",
    "doesn", "doing", "don", "down", "during", "each", "few", "for", "from", "further", "had", "hadn", "has",
    "hasn", "have", "haven", "having", "her", "here", "hers", "herself", "him", "himself", "his", "how", "into",
    "isn", "its", "itself", "just", "let", "lets", "more", "most", "mustn", "myself", "nor", "not", "now", "off",
    "once", "only", "other", "our", "ours", "ourselves", "out", "over", "own", "same", "she", "should", "shouldn",
    "some", "such", "than", "that", "the", "their", "theirs", "them", "themselves", "then", "there", "these",
    "they", "this", "those", "through", "too", "under", "until", "very", "was", "wasn", "were", "weren", "what",
    "when", "where", "which", "while", "who", "whom", "why", "will", "with", "won", "would", "wouldn", "you",
    "your", "yours", "yourself", "yourselves", "please", "thanks", "thank", "hey", "hello", "okay", "yes", "yeah",
    "sure", "want", "wants", "need", "needs", "tell", "show", "give", "get", "got", "like", "might", "must",
    "shall", "may", "still", "even", "really", "maybe"
))  # fmt: skip
_WORD = re.compile(r"[^\W_]+")
MAX_TERMS = 24
COMMON_SHARE = 0.5  # a word in more than this share of the memories in scope is not evidence
COMMON_MIN_SCOPE = 4  # ... when the scope holds at least this many memories


def content_terms(query: str, limit: int = MAX_TERMS) -> list[str]:
    """The words of `query` that can tell memories apart, lower case, each once, in order.

    Words of three letters or more that are not stopwords; runs of a spaceless
    script (Chinese, Japanese, Thai...) become overlapping character pairs,
    leaving out pairs with a particle or pronoun (one character alone is kept
    when the run is one character long). At most `limit`.
    """
    out: list[str] = []
    for word in _WORD.findall(query.lower()):
        for piece in _split_spaceless(word):
            if piece not in out:
                out.append(piece)
            if len(out) >= limit:
                return out
    return out


def _split_spaceless(word: str) -> list[str]:
    if word.isascii():  # the common case, without compiling the scripts' character class
        return _spaced_word(word)
    from memd.index.query import run_pairs, spaceless_run  # noqa: PLC0415 - start-up

    pieces: list[str] = []
    pos = 0
    for m in spaceless_run().finditer(word):
        pieces += _spaced_word(word[pos : m.start()])
        pieces += run_pairs(m.group())
        pos = m.end()
    pieces += _spaced_word(word[pos:])
    return pieces


def _spaced_word(word: str) -> list[str]:
    return [word] if len(word) >= 3 and word not in STOPWORDS and not word.isdigit() else []


def fts_term(term: str, prefix: bool = False) -> str:
    """One term as an FTS5 string (a phrase, so AND/OR/NEAR are words), optionally a prefix."""
    from memd.index.search import segment  # noqa: PLC0415 - start-up

    return '"' + segment(term).replace('"', "") + '"' + ("*" if prefix else "")


def telling_terms(doc_freq: dict[str, int], scope_size: int) -> list[str]:
    """The terms found at all, minus those found in most of the scope (they tell nothing apart)."""
    common = scope_size >= COMMON_MIN_SCOPE
    return [t for t, n in doc_freq.items() if n > 0 and not (common and n > COMMON_SHARE * scope_size)]


def surfaced_key(project_key: str, session: str) -> str:
    """The state `kv` key holding the files already surfaced in one session."""
    return f"recall:{project_key}:{session}"


def merge_surfaced(old: Sequence[str], new: Iterable[str], keep: int = SURFACED_KEEP) -> list[str]:
    """`old` plus the new files, each once, oldest first, bounded so one session cannot grow it forever."""
    merged = list(dict.fromkeys([*old, *new]))
    return merged[-keep:]


def decode_surfaced(raw: str | None) -> list[str]:
    """The stored list; anything unreadable is an empty list (it only hides repeats)."""
    if not raw:
        return []
    try:
        value = json.loads(raw)
    except ValueError:
        return []
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


# --------------------------------------------------------------------------- I/O: databases

_ROWS_SQL = (
    "SELECT file, name, description, type, scope, project_key, mtime FROM memories "
    "WHERE scope = 'global' OR project_key = ? ORDER BY mtime DESC, file LIMIT ?"
)


def fetch_candidates(
    search: sqlite3.Connection, query: str, project_key: str, surfaced: Collection[str],
    nearest: Sequence[tuple[str, float]] = (),
) -> tuple[list[Candidate], list[Candidate]]:  # fmt: skip
    """(ordered candidates, search hits) from the search DB, front matter only.

    The recency query is limited to what the cap can use: even if every hit
    and every surfaced file came first in it, 200 others remain. `nearest` (the daemon's
    dense ranking, memd[semantic]) is fused into the hits (`with_nearest`).
    """
    from memd.index.search import query_index  # noqa: PLC0415 - start-up

    hits = [candidate_from_hit(h) for h in query_index(search, query, project_key=project_key, limit=MAX_CANDIDATES)]
    hits = with_nearest(search, hits, nearest, project_key, MAX_CANDIDATES)
    room = MAX_CANDIDATES + len(hits) + len(surfaced)
    rest = [Candidate(*row) for row in search.execute(_ROWS_SQL, (project_key, room))]
    return order_candidates(hits, rest, surfaced), hits


# The project's memories and the drawer's, as the ids of `memories_scope`'s two ranges (the schema's CHECK
# makes `scope` 'global' or 'project', so this is `scope = 'global' OR project_key = ?`, read from the index).
_IN_SCOPE = "SELECT id FROM memories WHERE scope = 'global' OR (scope = 'project' AND project_key = ?)"


@dataclass(frozen=True)
class Scope:
    """One project's memories and the drawer's, as the ranking's SQL reads their ids: `ids` a SELECT of them
    with its `args`, and their number when it is known. `scope_of` reads them from `memories` (SQLite builds
    their list once a statement); the daemon keeps them in a table of its own between answers
    (`memd.agent.hooks.Kept.scope`: the same ids, read in place)."""

    project_key: str
    ids: str
    args: tuple[str, ...]
    size: int | None = None
    # The daemon's: counts already taken on this state of the index (`scope_doc_freq`), a term's in the whole
    # index and in this scope; emptied with the table when the index changes.
    found: dict[str, int] | None = None
    in_scope: dict[str, int] | None = None
    # The daemon's too: each FTS5 phrase's own part of bm25 for its matches in this scope, on this state of the
    # index (`phrase_scores`); `ranked` adds them up instead of scoring every match again.
    scores: dict[str, dict[int, float]] | None = None


def scope_of(project_key: str) -> Scope:
    return Scope(project_key, _IN_SCOPE, (project_key,))


# A term's matches: in the whole index (its doclist, no row read), and in scope. A common word (thousands of
# matches at 20,000 memories) is counted in scope against the scope's ids (`+rowid`: not a constraint the FTS
# table is asked to meet, which would run the query once an id); a join on `memories` looked each match up in
# the wide table instead (5-15 ms a common word). The count stops once it has decided (`scope_doc_freq`).
_DF_ALL_SQL = "SELECT COUNT(*) FROM memories_fts WHERE memories_fts MATCH ?"
_IN_SCOPE_ANY_SQL = (
    "SELECT 1 FROM memories_fts JOIN memories AS m ON m.id = memories_fts.rowid "
    "WHERE memories_fts MATCH ? AND (m.scope = 'global' OR m.project_key = ?) LIMIT 1"
)
_DF_SQL = "SELECT COUNT(*) FROM (SELECT 1 FROM memories_fts WHERE memories_fts MATCH ? AND +rowid IN ({ids}) LIMIT ?)"


def scope_size(search: sqlite3.Connection, scope: Scope) -> int:
    if scope.size is not None:
        return scope.size
    return int(search.execute(f"SELECT COUNT(*) FROM ({scope.ids})", scope.args).fetchone()[0])


def scope_doc_freq(search: sqlite3.Connection, form: str, scope: Scope, size: int) -> int:
    """The memories in `scope` (of `size`) that hold `form` (an FTS5 string), counted as far as `telling_terms`
    needs: 0 when none; else a number that is over `COMMON_SHARE` of `size` exactly when the true one is (it is
    the true one up to one past that share). So `telling_terms` decides on these as on the true counts. A word
    found in at most that share of the whole index is looked for in scope until one is found (a join that stops
    at the first); a more common one is counted against the scope's ids, up to one past the share, without
    reading `memories`. Counts the scope keeps (`Scope.found`, `Scope.in_scope`) are not taken again, nor one its
    kept parts of bm25 give (`Scope.scores`: the true count)."""
    if scope.in_scope is not None and form in scope.in_scope:
        return scope.in_scope[form]
    if scope.scores is not None and form in scope.scores:  # its parts of bm25 are kept: one a match in scope
        n = len(scope.scores[form])
        if scope.in_scope is not None:
            scope.in_scope[form] = n
        return n
    found = scope.found.get(form) if scope.found is not None else None
    if found is None:
        found = int(search.execute(_DF_ALL_SQL, (form,)).fetchone()[0])
        if scope.found is not None:
            scope.found[form] = found
    share = int(COMMON_SHARE * size)  # the most a telling term may have (when the scope is big enough)
    if found == 0:
        n = 0
    elif size < COMMON_MIN_SCOPE or found <= share:  # only "any at all" decides: the count is ≤ found
        n = 1 if search.execute(_IN_SCOPE_ANY_SQL, (form, scope.project_key)).fetchone() else 0
    else:
        n = int(search.execute(_DF_SQL.format(ids=scope.ids), (form, *scope.args, share + 1)).fetchone()[0])
    if scope.in_scope is not None:
        scope.in_scope[form] = n
    return n


# `memd.index.search.query_index`'s ranking (the same bm25 weights and order, memd/index/search.py) on the
# matches in scope only: bm25 is computed for those, the best are read from `memories` by id afterwards (a join
# read every match's row, at 20,000 memories thousands for a prompt with common words), and no snippet.
_BM25 = "bm25(memories_fts, {w0}, {w1}, {w2})"
_TOP_SQL = (
    "SELECT memories_fts.rowid, " + _BM25 + " AS rank FROM memories_fts "
    "WHERE memories_fts MATCH ? AND +memories_fts.rowid IN ({ids}) ORDER BY rank LIMIT ?"
)
_BY_ID_SQL = "SELECT id, file, name, description, type, scope, project_key, mtime FROM memories WHERE id IN ({ids})"
_RANKED_SQL = (  # the whole order in SQL: for ties in rank past what `_TOP_SQL` fetched
    "SELECT m.file, m.name, m.description, m.type, m.scope, m.project_key, m.mtime, " + _BM25 + " AS rank "
    "FROM memories_fts JOIN memories AS m ON m.id = memories_fts.rowid "
    "WHERE memories_fts MATCH ? AND +memories_fts.rowid IN ({ids}) ORDER BY rank, m.file LIMIT ?"
)
TIE_ROOM = 8  # matches fetched past the limit, so that ties in rank at the cut are seen whole


def ranked(search: sqlite3.Connection, query: str, project_key: str, limit: int, scope: Scope | None = None
           ) -> list[Candidate]:  # fmt: skip
    """`query_index(search, query, project_key=project_key, limit=limit)` as candidates: the same memories in
    the same order (rank, then file; tests/agent/test_recall_rows.py holds them equal), without the work on
    matches out of scope, the rows of matches that are not picked, and the snippets. `scope`: the project's
    (`scope_of(project_key)` unless given)."""
    from memd.index.search import WEIGHTS, parse, query_index  # noqa: PLC0415 - start-up

    parsed = parse(query)
    if limit <= 0 or parsed.error:
        return []
    scope = scope or scope_of(project_key)
    summed = ranked_by_parts(search, parsed.match, scope, limit)
    if summed is not None:
        return summed
    fmt = {"w0": WEIGHTS[0], "w1": WEIGHTS[1], "w2": WEIGHTS[2], "ids": scope.ids}
    top = search.execute(_TOP_SQL.format(**fmt), (parsed.match, *scope.args, limit + TIE_ROOM)).fetchall()
    if not top and parsed.plain:  # query_index's retry with prefixes: a plain query only, as there
        return [candidate_from_hit(h) for h in query_index(search, query, project_key=project_key, limit=limit)]
    if len(top) == limit + TIE_ROOM and top[-1][1] == top[min(limit, len(top)) - 1][1]:
        rows = search.execute(_RANKED_SQL.format(**fmt), (parsed.match, *scope.args, limit)).fetchall()
        return [Candidate(*row[:7]) for row in rows]
    # Every match ranked at or above the limit-th is in `top` (the rest rank strictly lower): their order by
    # (rank, file) is the whole order's head.
    rank = dict(top)
    rows = search.execute(_BY_ID_SQL.format(ids=",".join(str(int(i)) for i in rank))).fetchall()
    rows.sort(key=lambda r: (rank[r[0]], r[1]))
    return [Candidate(*row[1:]) for row in rows[:limit]]


# FTS5's bm25 of a query of phrases joined by OR is, for each match, `-(0.0 + s1 + s2 + ...)`: one part a phrase,
# in the query's order, each from that phrase alone (its IDF over the whole index, its weighted count in the row,
# the row's length against the average; 0.0 for a phrase the row lacks). bm25 of the phrase alone is `-(0.0 + s)`.
# So the parts, taken once a phrase, scope and state of the index, give every later query that names the phrase
# the same ranks to the bit (`bm25_adds_up` checks this SQLite adds them so), without scoring thousands of
# matches again for each prompt that names a common word.
_PART_SQL = (
    "SELECT memories_fts.rowid, " + _BM25 + " FROM memories_fts "
    "WHERE memories_fts MATCH ? AND +memories_fts.rowid IN ({ids})"
)
_PHRASE = re.compile(r'"[^"]+"\*?')  # one phrase as `fts_term` writes it: no operator, no column, no group
_ADDS_UP: list[bool] = []  # `bm25_adds_up`'s answer, once a process


def bm25_adds_up() -> bool:
    """Whether this SQLite's bm25 of `"a" OR "b" OR ...` is, to the bit, minus the sum of each phrase's own part in
    the query's order (the parts as bm25 of the phrase alone gives them): asked once a process, of a small table
    in memory whose rows hold the phrases in many counts and lengths. A build that fuses a multiply and an add
    (one rounding instead of two) sums otherwise; then `ranked` ranks in SQL."""
    if not _ADDS_UP:
        _ADDS_UP.append(_check_bm25_parts())
    return _ADDS_UP[0]


def _check_bm25_parts() -> bool:
    import random  # noqa: PLC0415 - start-up: the daemon's answers only

    from memd.index.search import WEIGHTS  # noqa: PLC0415 - start-up

    rng = random.Random(27)
    words = [f"w{i}" for i in range(8)]
    bm25 = _BM25.format(w0=WEIGHTS[0], w1=WEIGHTS[1], w2=WEIGHTS[2])
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE VIRTUAL TABLE memories_fts USING fts5(name, description, body)")
        rows = [tuple(" ".join(rng.choices(words, k=rng.randint(1, n))) for n in (4, 12, 60)) for _ in range(300)]
        conn.executemany("INSERT INTO memories_fts VALUES (?, ?, ?)", rows)
        phrases = ['"w0"', '"w1"', '"w2"', '"w3"', '"w4"*']
        sql = f"SELECT rowid, {bm25} FROM memories_fts WHERE memories_fts MATCH ?"
        whole = dict(conn.execute(sql, (" OR ".join(phrases),)).fetchall())
        total: dict[int, float] = {}
        for phrase in phrases:
            for rowid, rank in conn.execute(sql, (phrase,)):
                total[rowid] = total.get(rowid, 0.0) - rank
        return len(whole) > 200 and whole == {rowid: -s for rowid, s in total.items()}
    except sqlite3.Error:
        return False
    finally:
        conn.close()


def phrase_scores(search: sqlite3.Connection, phrase: str, scope: Scope) -> dict[int, float]:
    """`phrase`'s matches in `scope` (the daemon's: `Scope.scores` set) and its part of each one's bm25, positive
    (higher is better), taken once a state of the index and kept in `scope.scores`."""
    assert scope.scores is not None
    have = scope.scores.get(phrase)
    if have is None:
        from memd.index.search import WEIGHTS  # noqa: PLC0415 - start-up

        sql = _PART_SQL.format(w0=WEIGHTS[0], w1=WEIGHTS[1], w2=WEIGHTS[2], ids=scope.ids)
        have = scope.scores[phrase] = {rowid: -rank for rowid, rank in search.execute(sql, (phrase, *scope.args))}
    return have


def ranked_by_parts(search: sqlite3.Connection, match: str, scope: Scope, limit: int) -> list[Candidate] | None:
    """`ranked`'s answer for the FTS5 query `match`, its ranks added up from its phrases' parts (`phrase_scores`),
    in the daemon (`scope.scores` kept); None when it cannot say: no kept scores, a query that is not distinct
    phrases joined by OR, nothing matched in scope (the SQL's prefix retry), or a SQLite that does not add bm25 up
    so (`bm25_adds_up`). The same memories in the same order as the SQL: rank, then file."""
    phrases = match.split(" OR ")
    if scope.scores is None or len(set(phrases)) != len(phrases) or not all(_PHRASE.fullmatch(p) for p in phrases):
        return None
    if not bm25_adds_up():
        return None
    total: dict[int, float] = {}
    for phrase in phrases:  # in the query's order: the sum is FTS5's to the bit
        for rowid, part in phrase_scores(search, phrase, scope).items():
            total[rowid] = total.get(rowid, 0.0) + part
    if not total:
        return None
    import heapq  # noqa: PLC0415 - start-up

    rank = {rowid: -s for rowid, s in total.items()}
    cut = heapq.nsmallest(limit, rank.values())[-1]
    head = {rowid: r for rowid, r in rank.items() if r <= cut}  # the first `limit` and all that tie with the last
    rows = search.execute(_BY_ID_SQL.format(ids=",".join(str(int(i)) for i in head))).fetchall()
    rows.sort(key=lambda r: (head[r[0]], r[1]))
    return [Candidate(*row[1:]) for row in rows[:limit]]


def offline_pick(
    search: sqlite3.Connection, query: str, project_key: str, surfaced: Collection[str], limit: int = MAX_PICKS,
    nearest: Sequence[tuple[str, float]] = (), scope: Scope | None = None,
) -> list[Candidate]:  # fmt: skip
    """The offline selection: search ranking with a relevance floor (see the module docstring).

    Exact words first; when none of them is found, words of four letters or
    more as prefixes ("frida" finds "Fridays"; words already match by their stem).
    `nearest` (the daemon's dense ranking, memd[semantic]) is fused into what passed the
    floor; it never makes an empty selection non-empty (`memd.index.nearest.fuse`).
    `scope`: the project's (`scope_of(project_key)` unless given: the daemon's kept one).
    """

    terms = content_terms(query)
    if not terms:
        return []
    scope = scope or scope_of(project_key)
    size = scope_size(search, scope)
    for prefix in (False, True):
        forms = {t: fts_term(t, prefix) for t in terms if not prefix or len(t) >= 4}
        df = {form: scope_doc_freq(search, form, scope, size) for form in forms.values()}
        if not any(df.values()):
            continue
        telling = telling_terms(df, size)
        if not telling:
            return []
        picks = ranked(search, " OR ".join(telling), project_key, limit + len(surfaced), scope)
        return top_hits(with_nearest(search, picks, nearest, project_key, limit + len(surfaced)), surfaced, limit)
    return []


_ROW_SQL = (
    "SELECT file, name, description, type, scope, project_key, mtime FROM memories "
    "WHERE file = ? AND (scope = 'global' OR project_key = ?)"
)


def with_nearest(
    search: sqlite3.Connection, hits: Sequence[Candidate], nearest: Sequence[tuple[str, float]], project_key: str,
    limit: int,
) -> list[Candidate]:  # fmt: skip
    """`hits` fused with the dense ranking (`memd.index.nearest.fuse`); a memory only it found is read from
    the search DB (and left out when it is not there, or not in the project or the drawer)."""
    if not nearest or not hits:
        return list(hits)
    from memd.index.nearest import fuse  # noqa: PLC0415 - start-up

    by_file = {c.file: c for c in hits}
    out: list[Candidate] = []
    for f in fuse([c.file for c in hits], nearest, limit):
        if f in by_file:
            out.append(by_file[f])
        elif (row := search.execute(_ROW_SQL, (f, project_key)).fetchone()) is not None:
            out.append(Candidate(*row))
    return out


def with_bodies(search: sqlite3.Connection, picks: Sequence[Candidate]) -> list[Candidate]:
    """The picks with the indexed body attached (the same snapshot as their front matter)."""
    out = []
    for c in picks:
        row = search.execute("SELECT body FROM memories WHERE file = ?", (c.file,)).fetchone()
        out.append(replace(c, body=row[0] if row else None))
    return out


def read_surfaced(state_conn: sqlite3.Connection, project_key: str, session: str | None) -> list[str]:
    if not session:
        return []
    from memd.state import get_kv  # noqa: PLC0415 - start-up
    return decode_surfaced(get_kv(state_conn, surfaced_key(project_key, session)))


def record_surfaced(state_conn: sqlite3.Connection, project_key: str, session: str, files: Iterable[str]) -> None:
    """Add `files` to the session's surfaced set; read-modify-write in one transaction."""

    key = surfaced_key(project_key, session)
    state_conn.execute("BEGIN IMMEDIATE")
    try:
        from memd.state import get_kv  # noqa: PLC0415 - start-up
        old = decode_surfaced(get_kv(state_conn, key))
        from memd.state import set_kv  # noqa: PLC0415 - start-up
        set_kv(state_conn, key, json.dumps(merge_surfaced(old, files), ensure_ascii=False))
        state_conn.execute("COMMIT")
    except BaseException:
        state_conn.execute("ROLLBACK")
        raise

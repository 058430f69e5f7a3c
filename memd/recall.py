"""Recall (SPEC §7b.1): pick at most 5 memories relevant to a query, or nothing, fast.

An agent asks before it answers a user message, so recall sits on the agent's
critical path. Hence the shape, after MewCode's selector:

* **Candidates** are front matter only (name, description, type, file, date),
  at most 200, read from the search database memd keeps current (no file is
  opened): the FTS5 hits for the query first, in rank order, then the rest of
  the project's memories and the global drawer, newest first. Files already
  surfaced in the session are left out *before* the cap, so they never take a
  slot, and a session is not shown the same memory twice.
* **A small model selects**, from a numbered list. Its answer is untrusted:
  `{"selected": [...]}` holding candidate numbers or file names; anything else
  in the list is ignored, duplicates are dropped, at most 5 are kept.
* **8 seconds, then nothing.** One attempt, no retries, with a hard deadline
  over the SDK import, the HTTP call and its parsing. Any failure (no key,
  budget, timeout, HTTP error, malformed answer) returns an empty selection
  and a warning: an agent without recall is only less informed, an agent
  waiting on recall is stuck.
* **Offline** (the `offline` provider) there is no selector: search ranks,
  with a relevance floor so that nothing unrelated pads the answer. The
  query's content words (stopwords and words under three letters left out;
  text in scripts without spaces as character pairs) are searched one by one;
  a word found in more than half of the memories in scope says nothing about
  any of them and is dropped; a memory is recalled only if it holds one of the
  words left, best bm25 rank first. A query with no such word recalls nothing.

Pure parts (candidate ordering, prompt, answer parsing, surfaced-set merging)
are plain functions of their inputs; `recall` is the thin I/O shell, with the
monotonic clock injected.
"""

from __future__ import annotations

import functools
import json
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # the recall hook imports this module: only what a call needs is imported, when it is
    from memd.jobctx import JobContext
    from memd.search import Hit

JOB = "recall"
MAX_CANDIDATES = 200
MAX_PICKS = 5
TIMEOUT_S = 8.0
# Slack between the SDK's own timeout and the hard deadline, so the SDK
# normally fails first and the failed call is recorded like any other.
DEADLINE_GRACE_S = 0.3
MIN_CALL_S = 0.2  # less time than this left: do not start a call at all
MAX_ANSWER_TOKENS = 200
SURFACED_KEEP = 1000  # per session; older entries fall off first
Source = Literal["model", "offline", "none"]

SYSTEM_PROMPT = """\
You select long-term memories for a coding agent. You get the user's current \
message (the query) and a numbered list of memory files, one a line: number, \
type, name, description, file, date.

Choose at most 5 memories that will clearly help the agent act on this query. \
Be selective: sharing a word with the query is not relevance, and choosing none \
is a good answer when none clearly helps. Prefer memories about how the user \
wants work done and decisions that constrain this task.

Answer with one JSON object and nothing else, listing the numbers of your \
choices, most useful first:
{"selected": [3, 17]}
or, when none helps:
{"selected": []}"""


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


@dataclass(frozen=True)
class Recall:
    """What a recall returned and how: `warning` is set when it failed and returned nothing."""

    memories: list[Candidate]
    source: Source
    candidates: int
    warning: str | None = None
    elapsed_s: float = 0.0


class RecallFailed(Exception):
    """Recall cannot produce a selection; the message is one line for the user."""


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
# Characters of spaceless scripts that rarely carry a topic (particles, pronouns, question words).
_CJK_STOP = frozenset("的了是在我你他她它们吗呢吧啊和与就都也还这那有个么怎什请把被给要会能可以为")
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


@functools.cache
def _spaceless_run() -> re.Pattern[str]:
    from memd.search import _SPACELESS  # the one list of scripts written without spaces (its segmenter's)

    return re.compile(f"[{_SPACELESS}]+")


def _split_spaceless(word: str) -> list[str]:
    if word.isascii():  # the common case, without compiling the scripts' character class
        return _spaced_word(word)
    pieces: list[str] = []
    pos = 0
    for m in _spaceless_run().finditer(word):
        pieces += _spaced_word(word[pos : m.start()])
        run = m.group()
        if len(run) == 1:
            pieces += [] if run in _CJK_STOP else [run]
        else:
            pieces += [run[i : i + 2] for i in range(len(run) - 1) if not (set(run[i : i + 2]) & _CJK_STOP)]
        pos = m.end()
    pieces += _spaced_word(word[pos:])
    return pieces


def _spaced_word(word: str) -> list[str]:
    return [word] if len(word) >= 3 and word not in STOPWORDS and not word.isdigit() else []


def fts_term(term: str, prefix: bool = False) -> str:
    """One term as an FTS5 string (a phrase, so AND/OR/NEAR are words), optionally a prefix."""
    from memd.search import segment

    return '"' + segment(term).replace('"', "") + '"' + ("*" if prefix else "")


def telling_terms(doc_freq: dict[str, int], scope_size: int) -> list[str]:
    """The terms found at all, minus those found in most of the scope (they tell nothing apart)."""
    common = scope_size >= COMMON_MIN_SCOPE
    return [t for t, n in doc_freq.items() if n > 0 and not (common and n > COMMON_SHARE * scope_size)]


def _one_line(text: str) -> str:
    return " ".join(text.split())


def candidate_line(number: int, cand: Candidate) -> str:
    day = datetime.fromtimestamp(cand.mtime, UTC).date().isoformat()
    return (
        f"{number}. [{cand.type}] {_one_line(cand.name)} — {_one_line(cand.description)} "
        f"(file: {cand.file}; {day})"
    )


def render_prompt(query: str, candidates: Sequence[Candidate]) -> str:
    """The user message of the selector call; numbers are 1-based positions in `candidates`."""
    lines = [f"Query: {_one_line(query)}", "", f"Memories ({len(candidates)}):"]
    lines += [candidate_line(i, c) for i, c in enumerate(candidates, start=1)]
    return "\n".join(lines)


_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n(.*?)\n?```\s*$", re.DOTALL)


def _json_object(answer: str) -> dict[str, Any] | None:
    """The first JSON object of the answer: the whole text, a fenced block, or one inside prose."""
    text = answer.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            obj, _end = decoder.raw_decode(text, start)
        except ValueError:
            start = text.find("{", start + 1)
            continue
        return obj if isinstance(obj, dict) else None
    return None


def _resolve(item: Any, candidates: Sequence[Candidate], by_file: dict[str, int], by_base: dict[str, int]) -> int | None:
    """The position of one selected item, or None when it names no candidate.

    Numbers are 1-based (as rendered); a string of digits counts as its
    number. Strings otherwise must be a candidate's file, or a bare file name
    that only one candidate has (the same name in the drawer and the project
    is ambiguous, so ignored). Booleans are not numbers here.
    """
    if isinstance(item, bool):
        return None
    if isinstance(item, str) and item.strip().isdigit():
        item = int(item.strip())
    if isinstance(item, int):
        return item - 1 if 1 <= item <= len(candidates) else None
    if isinstance(item, str):
        key = item.strip()
        if key in by_file:
            return by_file[key]
        return by_base.get(key)
    return None


def parse_selection(answer: str, candidates: Sequence[Candidate], limit: int = MAX_PICKS) -> list[Candidate] | None:
    """The candidates a selector answer names, in its order; None when the answer is malformed.

    Malformed means no JSON object with a `selected` list: then the caller
    returns nothing. A well-formed answer naming only unknown items is an
    empty selection, not an error.
    """
    obj = _json_object(answer)
    if obj is None or not isinstance(obj.get("selected"), list):
        return None
    by_file = {c.file: i for i, c in enumerate(candidates)}
    bases: dict[str, list[int]] = {}
    for i, c in enumerate(candidates):
        bases.setdefault(c.file.rsplit("/", 1)[-1], []).append(i)
    by_base = {b: idx[0] for b, idx in bases.items() if len(idx) == 1}
    picked: list[int] = []
    for item in obj["selected"]:
        pos = _resolve(item, candidates, by_file, by_base)
        if pos is not None and pos not in picked:
            picked.append(pos)
        if len(picked) >= min(limit, MAX_PICKS):
            break
    return [candidates[i] for i in picked]


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
    search: sqlite3.Connection, query: str, project_key: str, surfaced: Collection[str]
) -> tuple[list[Candidate], list[Candidate]]:
    """(ordered candidates, search hits) from the search DB, front matter only.

    The recency query is limited to what the cap can use: even if every hit
    and every surfaced file came first in it, 200 others remain.
    """
    from memd.search import query_index

    hits = [candidate_from_hit(h) for h in query_index(search, query, project_key=project_key, limit=MAX_CANDIDATES)]
    room = MAX_CANDIDATES + len(hits) + len(surfaced)
    rest = [Candidate(*row) for row in search.execute(_ROWS_SQL, (project_key, room))]
    return order_candidates(hits, rest, surfaced), hits


_SCOPE_SQL = "SELECT COUNT(*) FROM memories WHERE scope = 'global' OR project_key = ?"
_DF_SQL = (
    "SELECT COUNT(*) FROM memories_fts JOIN memories AS m ON m.id = memories_fts.rowid "
    "WHERE memories_fts MATCH ? AND (m.scope = 'global' OR m.project_key = ?)"
)


def offline_pick(
    search: sqlite3.Connection, query: str, project_key: str, surfaced: Collection[str], limit: int = MAX_PICKS
) -> list[Candidate]:
    """The offline selection: search ranking with a relevance floor (see the module docstring).

    Exact words first; when none of them is found, words of four letters or
    more as prefixes ("friday" finds "Fridays": there is no stemming).
    """
    from memd.search import query_index

    terms = content_terms(query)
    if not terms:
        return []
    scope_size = int(search.execute(_SCOPE_SQL, (project_key,)).fetchone()[0])
    for prefix in (False, True):
        forms = {t: fts_term(t, prefix) for t in terms if not prefix or len(t) >= 4}
        df = {form: int(search.execute(_DF_SQL, (form, project_key)).fetchone()[0]) for form in forms.values()}
        if not any(df.values()):
            continue
        telling = telling_terms(df, scope_size)
        if not telling:
            return []
        hits = query_index(search, " OR ".join(telling), project_key=project_key, limit=limit + len(surfaced))
        return top_hits([candidate_from_hit(h) for h in hits], surfaced, limit)
    return []


def with_bodies(search: sqlite3.Connection, picks: Sequence[Candidate]) -> list[Candidate]:
    """The picks with the indexed body attached (the same snapshot as their front matter)."""
    out = []
    for c in picks:
        row = search.execute("SELECT body FROM memories WHERE file = ?", (c.file,)).fetchone()
        out.append(replace(c, body=row[0] if row else None))
    return out


def read_surfaced(state_conn: sqlite3.Connection, project_key: str, session: str | None) -> list[str]:
    from memd.state import get_kv

    if not session:
        return []
    return decode_surfaced(get_kv(state_conn, surfaced_key(project_key, session)))


def record_surfaced(state_conn: sqlite3.Connection, project_key: str, session: str, files: Iterable[str]) -> None:
    """Add `files` to the session's surfaced set; read-modify-write in one transaction."""
    from memd.state import get_kv, set_kv

    key = surfaced_key(project_key, session)
    state_conn.execute("BEGIN IMMEDIATE")
    try:
        old = decode_surfaced(get_kv(state_conn, key))
        set_kv(state_conn, key, json.dumps(merge_surfaced(old, files), ensure_ascii=False))
        state_conn.execute("COMMIT")
    except BaseException:
        state_conn.execute("ROLLBACK")
        raise


# --------------------------------------------------------------------------- I/O: the model


def call_with_deadline(fn: Callable[[], Any], seconds: float) -> Any:
    """`fn()` on a daemon thread, waited for at most `seconds`.

    The hard bound behind the SDK's timeout (which bounds each network phase,
    not the whole call). On expiry the thread is abandoned: being a daemon
    thread, it never holds up the exit of a one-shot `memd recall`.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    worker = threading.Thread(target=target, name="memd-recall", daemon=True)
    worker.start()
    worker.join(max(0.0, seconds))
    if worker.is_alive():
        raise RecallFailed(f"no answer within {TIMEOUT_S:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def ask_model(
    ctx: JobContext,
    query: str,
    candidates: Sequence[Candidate],
    *,
    limit: int,
    deadline: float,
    monotonic: Callable[[], float],
) -> list[Candidate]:
    """One selector call within the deadline; raises RecallFailed or a ModelError.

    The call uses a one-off model layer with the context's configuration but
    no retries and the remaining time as its timeout. Its usage records are
    buffered and written from this thread, since the state connection belongs
    to it and the call runs on another.
    """
    from memd.jobctx import record_call
    from memd.llm import LLM

    base = ctx.llm
    ready = base.available()  # key, provider and today's budget, on this thread
    if not ready:
        raise RecallFailed(ready.why)
    import anthropic  # noqa: F401 - the ~2 s import counts against the deadline, not after it

    remaining = deadline - monotonic()
    if remaining < MIN_CALL_S:
        raise RecallFailed(f"no time left for the model within {TIMEOUT_S:g} s")
    usage: list[dict[str, Any]] = []
    llm = LLM(replace(base.config, max_retries=0, timeout_s=remaining), usage_sink=usage.append)
    prompt = render_prompt(query, candidates)
    try:
        completion = call_with_deadline(
            lambda: llm.complete(
                job=JOB, tier="small", system=SYSTEM_PROMPT, user=prompt, max_tokens=MAX_ANSWER_TOKENS,
                timeout_s=remaining,
            ),
            remaining + DEADLINE_GRACE_S,
        )
    finally:
        llm.close()  # also cuts short an abandoned call still running on its thread
        for rec in usage:
            record_call(ctx, rec)
    picks = parse_selection(completion.text, candidates, limit)
    if picks is None:
        raise RecallFailed('malformed selector answer (expected {"selected": [numbers]})')
    return picks


# --------------------------------------------------------------------------- the whole


def recall(
    ctx: JobContext,
    search: sqlite3.Connection,
    query: str,
    *,
    project_key: str,
    session: str | None = None,
    limit: int = MAX_PICKS,
    bodies: bool = False,
    provider: str | None = None,
    monotonic: Callable[[], float] = time.monotonic,
) -> Recall:
    """At most `limit` (≤ 5) memories for `query` in the project and the global drawer.

    `ctx` is a `JobContext` (its state connection records the surfaced set
    and model usage; its logger says how it went); `search` a read-only
    connection to the search DB. `provider` ("offline" or not) is the model
    layer's unless given: the hooks pass the settings' answer, so an offline
    recall never builds the model layer. Never raises for a model failure:
    the result is empty with a `warning`, logged as `recall.failed`.
    """
    started = monotonic()
    deadline = started + TIMEOUT_S
    limit = max(1, min(limit, MAX_PICKS))
    surfaced = read_surfaced(ctx.conn, project_key, session)
    offline = (provider or ctx.llm.provider) == "offline"
    source: Source = "offline" if offline else "model"
    warning: str | None = None
    picks: list[Candidate] = []
    if offline:
        picks = offline_pick(search, query, project_key, surfaced, limit)
        n_candidates = len(picks)
        source = "offline" if picks else "none"
    else:
        from memd.llmtypes import ModelError

        candidates, _hits = fetch_candidates(search, query, project_key, surfaced)
        n_candidates = len(candidates)
        if not candidates:
            source = "none"
        else:
            try:
                picks = ask_model(ctx, query, candidates, limit=limit, deadline=deadline, monotonic=monotonic)
            except (RecallFailed, ModelError) as exc:
                warning = f"recall returned nothing: {exc}"
                source = "none"
    elapsed = monotonic() - started
    if warning:
        ctx.log.warning("recall.failed", project_key=project_key, session=session, candidates=n_candidates,
                        error=warning, elapsed_ms=int(elapsed * 1000))  # fmt: skip
    if picks and session:
        _record_quietly(ctx, project_key, session, [p.file for p in picks])
    if bodies and picks:
        picks = with_bodies(search, picks)
    ctx.log.info("recall.finished", project_key=project_key, session=session, source=source,
                 candidates=n_candidates, picked=len(picks), elapsed_ms=int(elapsed * 1000))  # fmt: skip
    return Recall(picks, source, n_candidates, warning, elapsed)


def _record_quietly(ctx: JobContext, project_key: str, session: str, files: list[str]) -> None:
    """Recording is best effort: a busy state DB must not turn a good selection into nothing."""
    try:
        record_surfaced(ctx.conn, project_key, session, files)
    except sqlite3.Error as exc:
        ctx.log.warning("recall.unrecorded", project_key=project_key, session=session, error=str(exc))

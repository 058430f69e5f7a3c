"""Recall (SPEC §7b.1): pick at most 5 memories relevant to a query, or nothing, fast.

An agent asks before it answers a user message, so recall sits on the agent's
critical path. Hence the shape, after MewCode's selector:

* **Candidates** are front matter only, at most 200, search hits first, files
  already surfaced in the session left out (`memd.agent.candidates`).
* **A small model selects**, from a numbered list. Its answer is untrusted:
  `{"selected": [...]}` holding candidate numbers or file names; anything else
  in the list is ignored, duplicates are dropped, at most 5 are kept.
* **A short deadline, then the keyword ranking.** One attempt, no retries,
  with a hard deadline over the SDK import, the HTTP call and its parsing: the
  hook's is `HOOK_BUDGET_S` counted from the process's start (the user's
  prompt waits on it), the shell command's `TIMEOUT_S`. Any failure (no key,
  budget, timeout, HTTP error, malformed answer) gives the offline selection
  below and a warning: an agent is better served by keywords than by nothing,
  and an agent waiting on recall is stuck.
* **Offline** (the `offline` provider) there is no selector: search ranks,
  with a relevance floor so that nothing unrelated pads the answer
  (`memd.agent.candidates.offline_pick`).

Pure parts (prompt, answer parsing; candidate ordering and surfaced-set
merging in `memd.agent.candidates`) are plain functions of their inputs;
`recall` is the thin I/O shell, with the monotonic clock injected.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from memd.agent.candidates import (
    MAX_PICKS,
    Candidate,
    Scope,
    fetch_candidates,
    offline_pick,
    read_surfaced,
    record_surfaced,
    with_bodies,
)

if TYPE_CHECKING:  # the recall hook imports this module: only what a call needs is imported, when it is
    from memd.job.context import JobContext

JOB = "recall"
TIMEOUT_S = 8.0  # `memd recall` from the shell
HOOK_BUDGET_S = 1.5  # the UserPromptSubmit hook with a model, from the process's start to its answer (memd.recallBudgetMs)
FALLBACK_RESERVE_S = 0.6  # of the deadline, kept for the keyword ranking, the answer and the exit (a busy machine stretches them)
# Slack between the SDK's own timeout and the hard deadline, so the SDK
# normally fails first and the failed call is recorded like any other.
DEADLINE_GRACE_S = 0.3
MIN_CALL_S = 0.2  # less time than this left: do not start a call at all
MAX_ANSWER_TOKENS = 200
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
        raise RecallFailed(f"no answer within {seconds:.2g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


_MODEL_CALLED = [False]  # this process asked the model since the last `forget_model_calls` (the hook's exit)


def forget_model_calls() -> None:
    """Before a hook's recall: only a call made for this prompt makes `leave_if_a_call_was_cut` exit (a
    process that ran other recalls before, a test's, goes on)."""
    _MODEL_CALLED[0] = False


def leave_if_a_call_was_cut(code: int) -> None:
    """Exit now, with `code`, when a model call was made (cut at its deadline or not).

    A cut call's thread is a daemon, but the interpreter's exit still waits for an import it is in
    the middle of (the SDK's import takes seconds on a busy machine); and after a call the SDK
    was cut short in (the client closed under it), the interpreter's finalisation took another
    0.5 s in 6 of 20 runs (1.76-1.98 s in all, past the 1.5 s budget). The agent reads a hook's answer
    only when the process ends: the user's prompt would wait for it. The answer is written and
    flushed by then, and the state database's writes are committed, so nothing is lost.
    """
    called = _MODEL_CALLED[0] or any(t.name == "memd-recall" and t.is_alive() for t in threading.enumerate())
    if called:
        import os  # noqa: PLC0415 - start-up
        import sys  # noqa: PLC0415 - start-up

        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


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

    base = ctx.llm
    ready = base.available()  # key, provider and today's budget, on this thread
    if not ready:
        raise RecallFailed(ready.why)
    remaining = deadline - monotonic()
    if remaining < MIN_CALL_S:
        raise RecallFailed("no time left for the model")
    usage: list[dict[str, Any]] = []
    prompt = render_prompt(query, candidates)
    _MODEL_CALLED[0] = True
    box: dict[str, Any] = {}

    def call() -> Any:
        # The SDK's import (up to seconds on a busy machine) runs here, inside the deadline.
        from memd.llm.client import LLM  # noqa: PLC0415 - start-up
        left = max(MIN_CALL_S, deadline - monotonic())
        box["llm"] = llm = LLM(replace(base.config, max_retries=0, timeout_s=left), usage_sink=usage.append)
        return llm.complete(job=JOB, tier="small", system=SYSTEM_PROMPT, user=prompt, max_tokens=MAX_ANSWER_TOKENS,
                            timeout_s=left)  # fmt: skip

    try:
        completion = call_with_deadline(call, remaining + DEADLINE_GRACE_S)
    finally:
        if "llm" in box:
            # Closing also cuts short an abandoned call, but waits for the SDK's import if the call
            # is still in it (the client's lock): so close on a thread of its own, never waited for.
            closer = threading.Thread(target=box["llm"].close, name="memd-recall", daemon=True)
            closer.start()
            closer.join(0.05)
        from memd.job.context import record_call  # noqa: PLC0415 - start-up
        for rec in list(usage):
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
    deadline: float | None = None,
    nearest: Sequence[tuple[str, float]] = (),
    scope: Scope | None = None,
) -> Recall:
    """At most `limit` (≤ 5) memories for `query` in the project and the global drawer.

    `ctx` is a `JobContext` (its state connection records the surfaced set
    and model usage; its logger says how it went); `search` a read-only
    connection to the search DB. `provider` ("offline" or not) is the model
    layer's unless given: the hooks pass the settings' answer, so an offline
    recall never builds the model layer. `deadline` (on `monotonic`'s clock)
    is when the whole answer is due; the model gets it less
    `FALLBACK_RESERVE_S` (default: `TIMEOUT_S` from now). `nearest` is the daemon's dense
    ranking for the query (memd[semantic]: `ask_nearest`), fused with the keyword one; `scope` the keyword
    ranking's project scope (`memd.agent.candidates.Scope`: the daemon's kept one). Never raises for a
    model failure: the offline selection answers, with a `warning`, logged as
    `recall.failed`.
    """
    started = monotonic()
    model_deadline = (deadline - FALLBACK_RESERVE_S) if deadline is not None else started + TIMEOUT_S
    limit = max(1, min(limit, MAX_PICKS))
    surfaced = read_surfaced(ctx.conn, project_key, session)
    offline = (provider or ctx.llm.provider) == "offline"
    source: Source = "offline" if offline else "model"
    warning: str | None = None
    picks: list[Candidate] = []
    if offline:
        picks = offline_pick(search, query, project_key, surfaced, limit, nearest, scope)
        n_candidates = len(picks)
        source = "offline" if picks else "none"
    else:
        candidates, _hits = fetch_candidates(search, query, project_key, surfaced, nearest)
        n_candidates = len(candidates)
        if not candidates:
            source = "none"
        else:
            from memd.llm.types import ModelError  # noqa: PLC0415 - start-up
            try:
                picks = ask_model(ctx, query, candidates, limit=limit, deadline=model_deadline, monotonic=monotonic)
            except (RecallFailed, ModelError) as exc:
                picks = offline_pick(search, query, project_key, surfaced, limit, nearest, scope)
                source = "offline" if picks else "none"
                warning = f"the model gave no selection ({exc}); the keyword ranking answered"
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


def ask_nearest(memd_dir: Any, query: str, project_key: str, *, wait: float, deadline: float | None = None,
                monotonic: Callable[[], float] = time.monotonic) -> list[tuple[str, float]]:  # fmt: skip
    """The daemon's nearest memories for `query` (memd[semantic]), waited for at most `wait` seconds and, with a
    `deadline` (the hook's budget), never past the part of it recall keeps for the keyword ranking and the answer.
    [] when the daemon does not serve them (no extra, down, slow): recall answers by keywords, as without it."""
    from memd.index.nearest import ask, socket_path  # noqa: PLC0415 - start-up

    due = monotonic() + wait
    if deadline is not None:
        due = min(due, deadline - FALLBACK_RESERVE_S)
    return ask(socket_path(memd_dir), query, project_key, deadline=due, monotonic=monotonic)


def _record_quietly(ctx: JobContext, project_key: str, session: str, files: list[str]) -> None:
    """Recording is best effort: a busy state DB must not turn a good selection into nothing. In the daemon's
    answer to a hook (`ctx.deferred`) it is kept until the hook has taken the answer (memd.agent.hooks)."""
    if ctx.deferred is not None:
        ctx.deferred.append(lambda conn: record_surfaced(conn, project_key, session, files))
        return
    try:
        record_surfaced(ctx.conn, project_key, session, files)
    except sqlite3.Error as exc:
        ctx.log.warning("recall.unrecorded", project_key=project_key, session=session, error=str(exc))

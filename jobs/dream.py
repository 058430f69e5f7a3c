"""Dream: background consolidation of one memory scope, that can be undone (SPEC §5).

Once enough has accumulated — `minHours` since the scope's last consolidation
**and** `minSessions` sessions touched since — a strong model (or the offline
provider) reads every memory of the scope, its MEMORY.md and what the sessions
since were about, and proposes operations: merge several memories into one,
rewrite one (relative dates made absolute, contradictions resolved: the newer
word wins), delete a stale one. The answer is validated like extraction's
(`memd.opsvalidate`, plus this module's own checks for merges), then applied to
a staging copy of the directory which is swapped in atomically, after a
snapshot went to the history (`memd.history`), so `memd undo` can take it back.

Decisions worth knowing (each is tested):

* **Baseline of a scope never consolidated**: the mtime of its oldest memory
  file. Hours and sessions are both counted from when the scope began to
  accumulate; a scope without memory files is never due (nothing to consolidate).
* **Sessions that count**: main transcripts (no sub-agents) with at least one
  human turn whose last record is after the baseline; for the global drawer,
  sessions of every project, for a project only its own. memd's own model calls
  go straight to the Messages API and leave no transcript, so they never count.
  Counted from one SQL query over the ledger (plus a prefix filter on the
  timestamp), so a due-check over 10,000 sessions costs milliseconds.
* **Last consolidation is durable** in the cursors table (job "dream", target
  `str(target)`): `{"last": iso, "run": id}`. It advances after a run that
  changed the scope and after a run that found nothing to change.
* **Refusals**: a plan deleting (deletes + merge sources not kept) more than
  `memd.dreamMaxDeleteShare` of the memories, or every memory of one type, is
  refused unless forced; a plan that would leave the scope empty is refused even
  when forced. A refused run (or an unusable model answer) is `failed` with the
  reason, changes nothing, does not advance the last consolidation, and records
  `failed_at`: the scope is retried after `RETRY_HOURS` (capped by minHours),
  not at every due-check, since each try costs a model call.
* **Hand edits**: a memory whose mtime is newer than the last consolidation and
  that memd did not write (memd writes `metadata.source: memd` and an `updated`
  time within `MEMD_WRITE_SLACK_S` of the mtime) is the user's word. The
  offline provider never touches it; a model operation may change it only by
  naming it and giving a reason. A never-consolidated scope counts every file
  memd did not write as hand-made. A hand edit *during* the run (the directory's
  signature changed between planning and the swap) defers the run, unapplied.
* **The offline provider** merges exact and near duplicates (same type,
  difflib ratio ≥ 0.85 over the normalised words of description and body; the
  newest file wins), turns relative dates into absolute ones from each file's
  date (English and the common Chinese words; text in code spans is left
  alone), and rebuilds MEMORY.md. What it writes says `provider: offline`.
"""

from __future__ import annotations

import difflib
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from memd.clock import iso, parse_iso
from typing import TYPE_CHECKING

from memd.jobctx import Deferred, JobContext, RunResult, Target, get_cursor, set_cursor
from memd.locks import Scope

if TYPE_CHECKING:  # imported where used: `memd status` imports this module and must start fast
    from memd.history import ScopeRef
    from memd.memories import Memory

NAME = "dream"
TRIGGER = "minHours since a scope's last consolidation and minSessions sessions touched since (both)"
NEEDS_MODEL = True

SIMILARITY = 0.85
RETRY_HOURS = 6.0
MEMD_WRITE_SLACK_S = 120.0
MAX_MERGE_SOURCES = 50
MAX_OUTPUT_TOKENS = 16_000
# What the model is shown: every memory in full up to a budget; past it, a
# memory's head only (and it cannot be changed by this run). ~140k tokens of
# memories + index + sessions + 16k of answer stay inside a 200k-token context.
BODY_MAX_CHARS = 6_000
MEMORIES_BUDGET_CHARS = 560_000
INDEX_MAX_CHARS = 12_000
SESSIONS_MAX = 30
SESSION_NOTE_CHARS = 700
FIRST_REQUEST_SCAN_BYTES = 512 * 1024

DREAM_SYSTEM = """You consolidate the long-term memory of a coding agent (a "dream"). Each memory is a Markdown \
file with a name, a one-line description, a type and a body. Types: user (who the user is, their preferences), \
feedback (the user's guidance on the way of working, with why), project (decisions and constraints of the \
project not readable from the code), reference (pointers to outside resources).

You get every memory of one scope with its file date, the scope's MEMORY.md index, and what the sessions since \
the last consolidation were about. Make the memory smaller and more accurate without losing durable information:
- merge memories that say the same thing, or are parts of one topic, into one more general memory;
- resolve contradictions: the newer word wins (file dates, sessions);
- rewrite a memory to turn relative dates ("today", "last week", "next Monday") into absolute dates, using that \
memory's file date, or to make it tighter and clearer;
- delete what is stale or superseded, and say why;
- keep descriptions to one line; bodies say what, why and how to apply.
Memories marked "edited by hand" hold the user's own words: keep them unless they are clearly superseded, and \
give a reason for any change to one. Never invent facts, never store secrets, never delete most memories. If \
nothing needs to change, answer with no operations.

Answer only with JSON:
{"operations": [
 {"op": "merge", "sources": ["<existing name>", "<existing name>"], "name": "...", "description": "...", \
"type": "user|feedback|project|reference", "body": "...", "reason": "..."},
 {"op": "update", "name": "<existing name>", "description": "...", "type": "...", "body": "...", "reason": "..."},
 {"op": "delete", "name": "<existing name>", "reason": "..."}
]}
A merge result may keep the name of one of its sources."""


# =========================================================================== targets and due-ness


def scopes(target: Target) -> list[Scope]:
    """A dream writes one memory directory, so it locks exactly that scope, for the whole run."""
    return [Scope.global_()] if target.kind == "global" else [Scope.project(target.key or "")]


def targets(ctx: JobContext) -> list[Target]:
    from memd.tree import list_memory_dirs

    return [Target("global") if s == "global" else Target("project", k) for s, k, _p in list_memory_dirs(ctx.home)]


def scope_ref(target: Target) -> ScopeRef:
    from memd.history import ScopeRef

    if target.kind == "global":
        return ScopeRef("global")
    if target.kind == "project" and target.key:
        return ScopeRef("project", target.key)
    raise ValueError(f"dream works on a memory scope, not {target}")


def dream_due(
    hours_since: float | None,
    sessions_since: int,
    min_hours: float,
    min_sessions: int,
    enabled: bool,
    hours_since_failure: float | None = None,
) -> tuple[bool, str]:
    """Pure: both thresholds must hold (§5); `hours_since` None means nothing to consolidate yet.

    A run that failed or was refused since the last consolidation waits
    `min(RETRY_HOURS, min_hours)` before the next try.
    """
    if not enabled:
        return False, "dream disabled"
    if hours_since is None:
        return False, "no memories to consolidate"
    if hours_since < min_hours:
        return False, f"{hours_since:.1f}/{min_hours:g} hours since the last consolidation"
    if sessions_since < min_sessions:
        return False, f"{sessions_since}/{min_sessions} sessions since the last consolidation"
    wait = min(RETRY_HOURS, float(min_hours))
    if hours_since_failure is not None and hours_since_failure < wait:
        return False, f"last try failed {hours_since_failure:.1f} h ago; retried after {wait:g} h"
    return True, f"{hours_since:.1f} hours and {sessions_since} sessions since the last consolidation"


@dataclass(frozen=True)
class Baseline:
    """Where a scope's counting starts, and whether it is a real consolidation."""

    at: datetime | None
    consolidated: bool
    failed_at: datetime | None = None
    run: str | None = None


def _cursor(ctx: JobContext, target: Target) -> dict[str, Any]:
    value = get_cursor(ctx.conn, NAME, str(target))
    return value if isinstance(value, dict) else {}


def _when(value: Any) -> datetime | None:
    return parse_iso(value) if isinstance(value, str) else None


def oldest_memory_mtime(directory: Path) -> float | None:
    """The mtime of the oldest memory file (stat only, no parsing): a never-dreamed scope's baseline."""
    import os

    oldest: float | None = None
    try:
        with os.scandir(directory) as it:
            for e in it:
                if e.name == "MEMORY.md" or e.name.startswith(".") or not e.name.endswith(".md"):
                    continue
                if not e.is_file(follow_symlinks=False):
                    continue
                t = e.stat(follow_symlinks=False).st_mtime
                oldest = t if oldest is None else min(oldest, t)
    except OSError:
        return None
    return oldest


def baseline_of(ctx: JobContext, target: Target) -> Baseline:
    cur = _cursor(ctx, target)
    last = _when(cur.get("last"))
    failed = _when(cur.get("failed_at"))
    if failed is not None and last is not None and failed <= last:
        failed = None
    run_id = cur.get("run") if isinstance(cur.get("run"), str) else None
    if last is not None:
        return Baseline(last, True, failed, run_id)
    oldest = oldest_memory_mtime(scope_ref(target).memory_dir(ctx.home))
    at = None if oldest is None else datetime.fromtimestamp(oldest, UTC)
    return Baseline(at, False, failed, run_id)


def _hours(now: datetime, then: datetime | None) -> float | None:
    return None if then is None else max(0.0, (now - then).total_seconds() / 3600)


def _epoch(ts: Any) -> float | None:
    if isinstance(ts, str):
        dt = parse_iso(ts)
        if dt is not None:
            return dt.timestamp()
    try:
        x = float(ts)
    except (TypeError, ValueError):
        return None
    return x / 1000 if x > 1e11 else x  # epoch milliseconds


_SESSIONS_SINCE = (
    "SELECT key, last_ts FROM sessions WHERE is_subagent=0 AND human_turns>0 AND last_ts IS NOT NULL "
    "AND (last_ts >= ? OR last_ts NOT LIKE '____-__-__T%Z')"
)


def sessions_since(conn: Any, baselines: dict[Target, datetime]) -> dict[Target, int]:
    """Sessions touched after each target's baseline, from one query.

    The SQL prefix test (`last_ts >= <baseline to the second>`) returns a
    superset for ISO timestamps ending in Z; other forms are always returned;
    the exact comparison is done on parsed times. Rows are few unless a
    baseline is old, and even 10,000 rows take milliseconds.
    """
    if not baselines:
        return {}
    lo = min(baselines.values())
    out = {t: 0 for t in baselines}
    glob = [(t, b.timestamp()) for t, b in baselines.items() if t.kind == "global"]
    proj = {t.key: (t, b.timestamp()) for t, b in baselines.items() if t.kind == "project"}
    cur = conn.cursor()
    cur.row_factory = None
    for key, ts in cur.execute(_SESSIONS_SINCE, (iso(lo)[:19],)):
        x = _epoch(ts)
        if x is None:
            continue
        for t, b in glob:
            if x > b:
                out[t] += 1
        p = proj.get(key)
        if p is not None and x > p[1]:
            out[p[0]] += 1
    return out


@dataclass(frozen=True)
class Thresholds:
    enabled: bool
    min_hours: float
    min_sessions: int

    @classmethod
    def of(cls, settings: Any) -> Thresholds:
        enabled = bool(settings.get("memory.enabled")) and bool(settings.get("memory.dream.enabled"))
        return cls(enabled, float(settings.get("memory.dream.minHours")), int(settings.get("memory.dream.minSessions")))


def due_decisions(ctx: JobContext, tgts: Sequence[Target]) -> dict[Target, tuple[bool, str]]:
    """Gather the facts for each target (cheap first: a scope short of hours needs no session count)."""
    th = Thresholds.of(ctx.settings)
    if not th.enabled:
        return {t: (False, "dream disabled") for t in tgts}
    now = ctx.now()
    bases = {t: baseline_of(ctx, t) for t in tgts}
    ready = {t: b.at for t, b in bases.items() if b.at is not None and (_hours(now, b.at) or 0.0) >= th.min_hours}
    counts = sessions_since(ctx.conn, {t: at for t, at in ready.items() if at is not None})
    return {
        t: dream_due(_hours(now, b.at), counts.get(t, 0), th.min_hours, th.min_sessions, True, _hours(now, b.failed_at))
        for t, b in bases.items()
    }


def due(ctx: JobContext, only: Target | None = None) -> list[Target]:
    if not Thresholds.of(ctx.settings).enabled:
        return []
    tgts = [only] if only is not None else targets(ctx)
    return [t for t, (ok, _why) in due_decisions(ctx, tgts).items() if ok]


def recover(home: Any, logger: Any = None) -> list[dict[str, Any]]:
    """Finish or roll back swaps a crash interrupted, in every scope (the daemon calls this at start-up)."""
    from memd.history import recover as recover_all

    return recover_all(home, logger=logger)


# =========================================================================== relative dates (pure)

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_PREPOSITIONS = frozenset(
    "on by until till since before after from of for through to at during in within than as".split()
)
_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.DOTALL)
_EN_DATES = re.compile(
    r"\b(?:(?P<dby>the day before yesterday)|(?P<dat>the day after tomorrow)"
    r"|(?P<ago>(?P<agon>\d{1,3}) days? ago)|(?P<inn>in (?P<innn>\d{1,3}) days?)"
    r"|(?P<rel>(?P<relw>last|next|this) (?P<unit>week|month|" + "|".join(_WEEKDAYS) + r"))"
    r"|(?P<word>today|tonight|yesterday|tomorrow))\b(?P<poss>'s)?",
    re.IGNORECASE,
)
_ZH_DATES = re.compile(r"大前天|前天|昨天|今天|今日|明天|后天|上周|上星期|下周|下星期|上个月|下个月")
_ZH_DAY = {"大前天": -3, "前天": -2, "昨天": -1, "今天": 0, "今日": 0, "明天": 1, "后天": 2}
_ZH_WEEK = {"上周": -7, "上星期": -7, "下周": 7, "下星期": 7}
_ZH_MONTH = {"上个月": -1, "下个月": 1}
_PREV_WORD = re.compile(r"([A-Za-z]+)\W*$")


def _monday(d: date) -> date:
    return d - timedelta(days=d.weekday())


def _month(d: date, shift: int) -> str:
    y, m = divmod(d.year * 12 + d.month - 1 + shift, 12)
    return f"{y:04d}-{m + 1:02d}"


def _weekday(d: date, which: str, wd: int) -> date:
    """`last`: most recent strictly before; `next`: first strictly after; `this`: in d's week."""
    if which == "last":
        return d - timedelta(days=(d.weekday() - wd - 1) % 7 + 1)
    if which == "next":
        return d + timedelta(days=(wd - d.weekday() - 1) % 7 + 1)
    return _monday(d) + timedelta(days=wd)


def _en_phrase(m: re.Match[str], d: date) -> tuple[str, str]:
    """(absolute phrase, preposition to put before it when none is there)."""
    g = m.groupdict()
    if g["dby"]:
        return (d - timedelta(days=2)).isoformat(), "on"
    if g["dat"]:
        return (d + timedelta(days=2)).isoformat(), "on"
    if g["ago"]:
        return (d - timedelta(days=int(g["agon"]))).isoformat(), "on"
    if g["inn"]:
        return (d + timedelta(days=int(g["innn"]))).isoformat(), "on"
    if g["rel"]:
        which, unit = g["relw"].lower(), g["unit"].lower()
        if unit == "week":
            shift = {"last": -7, "next": 7, "this": 0}[which]
            return f"the week of {_monday(d + timedelta(days=shift)).isoformat()}", "in"
        if unit == "month":
            return _month(d, {"last": -1, "next": 1, "this": 0}[which]), "in"
        wd = _WEEKDAYS.index(unit)
        return f"{unit.capitalize()} {_weekday(d, which, wd).isoformat()}", "on"
    word = g["word"].lower()
    if word == "tonight":
        return f"the evening of {d.isoformat()}", "on"
    return (d + timedelta(days={"yesterday": -1, "today": 0, "tomorrow": 1}[word])).isoformat(), "on"


def _absolutize_prose(text: str, d: date) -> tuple[str, int]:
    count = 0

    def en(m: re.Match[str]) -> str:
        nonlocal count
        count += 1
        phrase, prep = _en_phrase(m, d)
        if m.group("inn"):
            prep = "on"
        before = _PREV_WORD.search(text[max(0, m.start() - 24) : m.start()])
        has_prep = before is not None and before.group(1).lower() in _PREPOSITIONS
        if m.group("poss"):
            out = phrase + "'s"
        elif has_prep and not m.group("inn"):
            out = phrase
        else:
            out = f"{prep} {phrase}"
        return out[0].upper() + out[1:] if m.group(0)[0].isupper() else out

    def zh(m: re.Match[str]) -> str:
        nonlocal count
        count += 1
        w = m.group(0)
        if w in _ZH_DAY:
            return (d + timedelta(days=_ZH_DAY[w])).isoformat()
        if w in _ZH_WEEK:
            return f"{_monday(d + timedelta(days=_ZH_WEEK[w])).isoformat()} 那一周"
        return _month(d, _ZH_MONTH[w])

    text = _EN_DATES.sub(en, text)
    return _ZH_DATES.sub(zh, text), count


def absolutize(text: str, d: date) -> tuple[str, int]:
    """Relative dates in `text` made absolute as seen from day `d`; code spans are left alone.

    Returns the new text and how many expressions were replaced. "next Monday"
    is the first Monday after `d`; "last week" is the week (from Monday) before
    `d`'s; words already after a preposition get none added ("until tomorrow"
    → "until 2026-12-01", "We ship tomorrow" → "We ship on 2026-12-01").
    """
    parts: list[str] = []
    total = 0
    pos = 0
    for m in _CODE.finditer(text):
        seg, n = _absolutize_prose(text[pos : m.start()], d)
        parts += [seg, m.group(0)]
        total += n
        pos = m.end()
    seg, n = _absolutize_prose(text[pos:], d)
    parts.append(seg)
    return "".join(parts), total + n


# =========================================================================== near duplicates (pure)

_TOKEN = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff]|[^\W_]+")


def tokens(text: str) -> list[str]:
    """Normalised words (NFKC, case-folded, punctuation dropped); each CJK character is a word."""
    return _TOKEN.findall(unicodedata.normalize("NFKC", text).casefold())


def similarity(a: Sequence[str], b: Sequence[str]) -> float:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def _candidates(docs: list[list[str]], threshold: float) -> dict[int, set[int]]:
    """Pairs (i, j<i) that *may* reach `threshold`: an exact prefix filter, so no pair is missed.

    ratio = 2M/(la+lb) ≥ r with M ≤ lb gives M ≥ r·la/(2−r): two documents that
    similar share at least that many (word, occurrence) elements, so, with the
    elements of every document ordered by global rarity, they share one among
    the first la − ⌈r·la/(2−r)⌉ + 1 of each. This keeps 1,000 memories far from
    the half-million comparisons of a naive scan.
    """
    elements = []
    for toks in docs:
        seen: Counter[str] = Counter()
        els = []
        for t in toks:
            els.append((t, seen[t]))
            seen[t] += 1
        elements.append(els)
    freq: Counter[tuple[str, int]] = Counter(e for els in elements for e in els)
    index: dict[tuple[str, int], list[int]] = {}
    out: dict[int, set[int]] = {}
    for i, els in enumerate(elements):
        n = len(els)
        need = max(1, math.ceil(threshold * n / (2 - threshold) - 1e-9))
        prefix = sorted(els, key=lambda e: (freq[e], e))[: max(0, n - need + 1)]
        for e in prefix:
            for j in index.get(e, ()):
                lj = len(elements[j])
                if 2 * min(n, lj) >= threshold * (n + lj):
                    out.setdefault(i, set()).add(j)
            index.setdefault(e, []).append(i)
    return out


def _alike(a: list[str], bag_a: Counter[str], b: list[str], bag_b: Counter[str], threshold: float) -> bool:
    """ratio ≤ 2·(multiset overlap)/(la+lb): a cheap exact bound first, then the quadratic ratio."""
    shared = sum(min(n, bag_b[t]) for t, n in bag_a.items() if t in bag_b)
    return 2 * shared >= threshold * (len(a) + len(b)) and similarity(a, b) >= threshold


def near_duplicate_groups(memories: Sequence[Memory], threshold: float = SIMILARITY) -> list[list[Memory]]:
    """Groups of memories of one type whose description+body are near duplicates, newest first.

    Greedy and anchored: each memory (newest first) joins the first group whose
    newest member it resembles, so a chain a≈b≈c never merges a with a c it
    does not resemble.
    """
    groups: list[list[Memory]] = []
    by_type: dict[str, list[Memory]] = {}
    for m in memories:
        by_type.setdefault(m.type, []).append(m)
    for same in by_type.values():
        order = sorted(same, key=lambda m: (-m.mtime, m.path.name))
        docs = [tokens(f"{m.description}\n{m.body}") for m in order]
        bags = [Counter(d) for d in docs]
        cands = _candidates(docs, threshold)
        members: dict[int, list[int]] = {}
        for i in range(len(order)):
            home = next((k for k in sorted(cands.get(i, ())) if k in members and
                         _alike(docs[k], bags[k], docs[i], bags[i], threshold)), None)  # fmt: skip
            if home is None:
                members[i] = [i]
            else:
                members[home].append(i)
        groups += [[order[j] for j in g] for g in members.values() if len(g) > 1]
    return groups


# =========================================================================== operations (pure)


@dataclass(frozen=True)
class DreamOp:
    """One validated change to the scope, in file terms.

    `files` are the existing files it consumes (the update or delete target,
    the merge sources); `result` the file it writes (None for a delete).
    """

    op: str  # "add" | "update" | "delete" | "merge"
    name: str
    description: str = ""
    type: str | None = None
    body: str = ""
    reason: str = ""
    files: tuple[str, ...] = ()
    result: str | None = None

    def touches(self) -> set[str]:
        return set(self.files) | ({self.result} if self.result else set())


@dataclass
class Plan:
    ops: list[DreamOp] = field(default_factory=list)
    rejected: list[tuple[int, str]] = field(default_factory=list)
    error: str | None = None
    model: str | None = None
    input_tokens: int = 0


def mem_date(m: Memory) -> date:
    return datetime.fromtimestamp(m.mtime, UTC).date()


def written_by_memd(m: Memory) -> bool:
    """memd's own writes carry `source: memd` and an `updated` time matching the file's mtime."""
    if m.metadata.get("source") != "memd":
        return False
    upd = m.metadata.get("updated")
    when = upd if isinstance(upd, datetime) else _when(str(upd)) if upd is not None else None
    if when is None:
        return False
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return m.mtime <= when.timestamp() + MEMD_WRITE_SLACK_S


def hand_edited(memories: Iterable[Memory], last: datetime | None) -> set[str]:
    """File names edited by hand since the last consolidation (all non-memd files if there was none)."""
    cut = float("-inf") if last is None else last.timestamp()
    return {m.path.name for m in memories if m.mtime > cut and not written_by_memd(m)}


def offline_plan(memories: Sequence[Memory], protected: set[str], threshold: float = SIMILARITY) -> list[DreamOp]:
    """The offline provider: merge near duplicates (newest wins), make relative dates absolute."""
    free = [m for m in memories if m.path.name not in protected]
    ops: list[DreamOp] = []
    grouped: set[str] = set()
    for group in near_duplicate_groups(free, threshold):
        keeper = group[0]
        d = mem_date(keeper)
        desc, _ = absolutize(keeper.description, d)
        body, _ = absolutize(keeper.body, d)
        files = tuple(m.path.name for m in group)
        grouped.update(files)
        reason = (f"near-duplicates (similarity ≥ {threshold:g}) of one {keeper.type} memory; "
                  f"the newest, {keeper.path.name}, is kept")  # fmt: skip
        ops.append(DreamOp("merge", keeper.name, desc, keeper.type, body, reason, files, keeper.path.name))
    for m in free:
        if m.path.name in grouped:
            continue
        d = mem_date(m)
        desc, n1 = absolutize(m.description, d)
        body, n2 = absolutize(m.body, d)
        if n1 + n2:
            reason = f"{n1 + n2} relative date(s) made absolute from the file date {d.isoformat()}"
            ops.append(DreamOp("update", m.name, desc, m.type, body, reason, (m.path.name,), m.path.name))
    return ops


class _Lookup:
    """Existing memories by name (case-insensitive), file name and file stem."""

    def __init__(self, memories: Sequence[Memory]) -> None:
        self.by_name: dict[str, Memory] = {}
        self.by_file: dict[str, Memory] = {}
        for m in memories:  # names first: a file stem never shadows another memory's name
            self.by_name.setdefault(m.name.casefold(), m)
            self.by_file[m.path.name] = m
        for m in memories:
            self.by_name.setdefault(m.path.stem.casefold(), m)

    def find(self, text: Any) -> Memory | None:
        if not isinstance(text, str):
            return None
        t = " ".join(text.split())
        return self.by_file.get(t) or self.by_name.get(t.casefold()) or self.by_name.get(t.removesuffix(".md").casefold())


@dataclass(frozen=True)
class Rules:
    """What this run allows: its scope and directory, and which files need care."""

    scope: str
    directory: Path
    protected: frozenset[str] = frozenset()
    unshown: frozenset[str] = frozenset()
    taken: frozenset[str] = frozenset()  # every entry of the directory (unparseable files included)
    max_sources: int = MAX_MERGE_SOURCES


def dream_caps() -> Any:
    from memd.opsvalidate import Caps

    return Caps(max_operations=200, max_body_bytes=16 * 1024)


def _validate_plain(raw: dict[str, Any], rules: Rules, caps: Any) -> Any:
    """One add/update/delete through `memd.opsvalidate`; the Operation or a reason."""
    from memd.opsvalidate import validate_operations

    accepted, rejected = validate_operations({"operations": [raw]}, allowed_scopes=(rules.scope,), caps=caps)
    return accepted[0] if accepted else rejected[0][1]


def _new_file(slug: str, rules: Rules) -> str | None:
    """`<slug>.md` if it is a confined, free file name in the scope directory."""
    from memd.opsvalidate import UnsafePath, confine

    try:
        path = confine(rules.directory, slug)
    except UnsafePath:
        return None
    return None if path.name in rules.taken else path.name


def _merge_op(raw: dict[str, Any], look: _Lookup, rules: Rules, caps: Any) -> DreamOp | str:
    sources = raw.get("sources")
    if not isinstance(sources, list) or not 2 <= len(sources) <= rules.max_sources:
        return f"merge needs a list of 2 to {rules.max_sources} source names"
    found = []
    for s in sources:
        m = look.find(s)
        if m is None:
            return f"merge source {str(s)[:80]!r} is not a memory of this scope"
        found.append(m)
    files = tuple(m.path.name for m in found)
    if len(set(files)) != len(files):
        return "merge lists one source twice"
    result = {k: raw.get(k) for k in ("name", "description", "type", "body", "reason")}
    op = _validate_plain({**result, "op": "add", "scope": rules.scope}, rules, caps)
    if isinstance(op, str):
        return f"merge result: {op}"
    same = look.find(op.name)
    if same is not None and same.path.name in files:
        target = same.path.name
    elif same is not None:
        return f"merge result {op.name!r} is an existing memory that is not among the sources"
    else:
        new = _new_file(op.slug, rules)
        if new is None:
            return f"merge result file {op.slug}.md is taken or unsafe"
        target = new
    return DreamOp("merge", op.name, op.description, op.type, op.body, op.reason, files, target)


def _plain_op(raw: dict[str, Any], look: _Lookup, rules: Rules, caps: Any) -> DreamOp | str:
    op = _validate_plain(raw, rules, caps)
    if isinstance(op, str):
        return op
    existing = look.find(op.name)
    if op.op == "add":
        if existing is not None:
            return f"add of {op.name!r}, which exists (use update)"
        new = _new_file(op.slug, rules)
        return f"file {op.slug}.md is taken or unsafe" if new is None else DreamOp(
            "add", op.name, op.description, op.type, op.body, op.reason, (), new)  # fmt: skip
    if existing is None:
        return f"{op.op} of {op.name!r}, which is not a memory of this scope"
    f = existing.path.name
    if op.op == "delete":
        return DreamOp("delete", existing.name, reason=op.reason, files=(f,))
    if (op.name, op.description, op.type, op.body.strip()) == (existing.name, existing.description, existing.type, existing.body.strip()):
        return "update changes nothing"
    return DreamOp("update", op.name, op.description, op.type, op.body, op.reason, (f,), f)


def _check_files(op: DreamOp, rules: Rules, touched: dict[str, int], existing: set[str]) -> str | None:
    for f in sorted(op.touches()):
        if f in touched:
            return f"{f} is already changed by operation {touched[f]}"
    for f in sorted(op.files):
        if f in rules.unshown:
            return f"{f} was not shown to the model in full; it cannot be changed by this run"
        if f in rules.protected and not op.reason:
            return f"{f} was edited by hand since the last consolidation; changing it needs a reason"
    if op.result and op.result in rules.protected and op.result in existing and not op.reason:
        return f"{op.result} was edited by hand since the last consolidation; changing it needs a reason"
    return None


def validate_dream(data: Any, memories: Sequence[Memory], rules: Rules, caps: Any = None) -> tuple[list[DreamOp], list[tuple[int, str]]]:
    """A dream model's answer as accepted operations and (index, reason) rejections.

    add/update/delete go through `memd.opsvalidate` (names, types, sizes,
    secrets); a merge's sources must be memories of the scope and its result
    is validated like an add. Beyond that: an operation must name an existing
    memory (except add), no file is changed by two operations, memories the
    model was not shown in full are not changed, and hand-edited ones only
    with a reason. Raises `ModelOutputError` when there is no operations list.
    """
    from memd.opsvalidate import ModelOutputError

    caps = caps or dream_caps()
    if not isinstance(data, dict) or not isinstance(data.get("operations"), list):
        raise ModelOutputError('model output has no "operations" list')
    look = _Lookup(memories)
    existing = {m.path.name for m in memories}
    accepted: list[DreamOp] = []
    rejected: list[tuple[int, str]] = []
    touched: dict[str, int] = {}
    for i, raw in enumerate(data["operations"]):
        if i >= caps.max_operations:
            rejected.append((i, f"over the cap of {caps.max_operations} operations"))
            continue
        if not isinstance(raw, dict):
            rejected.append((i, f"operation is a JSON {type(raw).__name__}, not an object"))
            continue
        raw = {**raw, "scope": raw.get("scope", rules.scope)}
        op_word = raw.get("op")
        kind = op_word.strip().lower() if isinstance(op_word, str) else None
        got = _merge_op(raw, look, rules, caps) if kind == "merge" else _plain_op(raw, look, rules, caps)
        why = got if isinstance(got, str) else _check_files(got, rules, touched, existing)
        if why is not None:
            rejected.append((i, why))
            continue
        assert isinstance(got, DreamOp)
        for f in got.touches():
            touched[f] = i
        accepted.append(got)
    return accepted, rejected


def guard(memories: Sequence[Memory], ops: Sequence[DreamOp], *, max_share: float, force: bool) -> str | None:
    """Why a plan is refused, or None. Pure.

    Deleted = deletes plus merge sources that are not the merge's result file.
    A plan leaving the scope empty is refused even when forced.
    """
    n = len(memories)
    final = {m.path.name: m.type for m in memories}
    removed: set[str] = set()
    for op in ops:
        for f in op.files:
            if f != op.result:
                removed.add(f)
                final.pop(f, None)
        if op.result:
            final[op.result] = op.type or ""
    if n and not final:
        return f"would delete all {n} memories of the scope (refused even with --force)"
    if force or not n:
        return None
    share = len(removed) / n
    if share > max_share:
        return (f"would delete {len(removed)} of {n} memories ({share:.0%} > memd.dreamMaxDeleteShare "
                f"{max_share:.0%}); run with --force to apply anyway")  # fmt: skip
    lost = sorted({m.type for m in memories} - set(final.values()))
    if lost:
        return f"would delete every {'/'.join(lost)} memory of the scope; run with --force to apply anyway"
    return None


# =========================================================================== the prompt (pure)


@dataclass(frozen=True)
class SessionNote:
    """What one session since the last consolidation was about."""

    when: str
    key: str
    title: str
    text: str


def build_prompt(
    label: str,
    today: date,
    index_text: str | None,
    memories: Sequence[Memory],
    protected: set[str],
    notes: Sequence[SessionNote],
) -> tuple[str, set[str]]:
    """The user prompt, and the files whose full text it does not show (they may not be changed)."""
    parts = [f"Today is {today.isoformat()}. The scope to consolidate: {label}."]
    idx = (index_text or "(no MEMORY.md)").strip()
    if len(idx) > INDEX_MAX_CHARS:
        idx = idx[:INDEX_MAX_CHARS] + "\n[… index cut …]"
    parts.append(f"## MEMORY.md\n\n{idx}")
    unshown: set[str] = set()
    blocks: list[str] = []
    left = MEMORIES_BUDGET_CHARS
    for m in sorted(memories, key=lambda m: (m.type, m.name.casefold())):
        flags = " · edited by hand since the last consolidation" if m.path.name in protected else ""
        head = f"### {m.name}\nfile: {m.path.name} · type: {m.type} · dated {mem_date(m).isoformat()}{flags}\n" \
               f"description: {m.description}"  # fmt: skip
        body = m.body.strip()
        if len(body) > BODY_MAX_CHARS or left < len(head) + len(body):
            unshown.add(m.path.name)
            shown = body[: max(0, min(BODY_MAX_CHARS, left - len(head)))]
            body = f"{shown}\n[… body not shown in full: this memory cannot be changed in this run …]"
        block = f"{head}\n\n{body}"
        left -= len(block)
        blocks.append(block)
    parts.append(f"## Memories ({len(memories)})\n\n" + "\n\n".join(blocks))
    if notes:
        lines = [f"- {n.when} · {n.title}" + (f" ({n.key})" if n.key else "") + (f"\n  {n.text}" if n.text else "")
                 for n in notes]  # fmt: skip
        parts.append(f"## Sessions since the last consolidation ({len(notes)}, newest first)\n\n" + "\n".join(lines))
    else:
        parts.append("## Sessions since the last consolidation\n\n(none recorded)")
    return "\n\n".join(parts), unshown


def _one_line(text: str, limit: int) -> str:
    s = " ".join(text.split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def summary_note(text: str) -> tuple[str, str]:
    """(title, excerpt) of a summary.md: its `# ` title and the start of its sections."""
    title = ""
    rest: list[str] = []
    for line in text.splitlines():
        if not title and line.startswith("# "):
            title = line[2:].strip()
        elif line.startswith("<!--"):
            continue
        else:
            rest.append(line)
    return _one_line(title or "(untitled)", 120), _one_line(" ".join(rest), SESSION_NOTE_CHARS)


# =========================================================================== I/O helpers


def _session_notes(ctx: JobContext, ref: ScopeRef, since: datetime | None) -> list[SessionNote]:
    """Titles and summaries of the sessions since `since` (newest first), else their first request."""
    q = ("SELECT key, session_id, path, format, last_ts, safe_offset FROM sessions "
         "WHERE is_subagent=0 AND human_turns>0 AND last_ts IS NOT NULL")  # fmt: skip
    args: list[Any] = []
    if ref.kind == "project":
        q += " AND key=?"
        args.append(ref.key)
    if since is not None:
        q += " AND (last_ts >= ? OR last_ts NOT LIKE '____-__-__T%Z')"
        args.append(iso(since)[:19])
    cut = since.timestamp() if since is not None else float("-inf")
    rows = [(x, r) for r in ctx.conn.execute(q, args) if (x := _epoch(r["last_ts"])) is not None and x > cut]
    rows.sort(key=lambda p: -p[0])
    notes = []
    for x, r in rows[:SESSIONS_MAX]:
        title, text = _note_of(ctx, r)
        when = datetime.fromtimestamp(x, UTC).date().isoformat()
        notes.append(SessionNote(when, r["key"] if ref.kind == "global" else "", title, text))
    return notes


def _note_of(ctx: JobContext, row: Any) -> tuple[str, str]:
    from memd.spans import read_span

    path = ctx.home.summary_file(row["key"], row["session_id"])
    try:
        if path.is_file() and not path.is_symlink():
            with open(path, "rb") as fh:
                return summary_note(fh.read(64 * 1024).decode("utf-8", "replace"))
        span = read_span(row["path"], 0, min(int(row["safe_offset"] or 0), FIRST_REQUEST_SCAN_BYTES), row["format"])
    except OSError:
        return "(unreadable session)", ""
    first = next((p.text for p in span.pieces if p.kind == "human"), "")
    return "(no summary yet)", _one_line(f"first request: {first}", SESSION_NOTE_CHARS) if first else ""


def _read_index(directory: Path) -> str | None:
    p = directory / "MEMORY.md"
    try:
        if p.is_file() and not p.is_symlink():
            return p.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return None


def _label(ref: ScopeRef) -> str:
    return "the global drawer (cross-project memories)" if ref.kind == "global" else f"the memory of project {ref.key}"


def _model_plan(ctx: JobContext, ref: ScopeRef, memories: list[Memory], rules: Rules, base: Baseline) -> Plan:
    from memd.llm import ModelCallFailed
    from memd.opsvalidate import ModelOutputError, parse_model_json

    directory = ref.memory_dir(ctx.home)
    notes = _session_notes(ctx, ref, base.at)
    user, unshown = build_prompt(_label(ref), ctx.now().date(), _read_index(directory), memories, set(rules.protected), notes)
    rules = replace(rules, unshown=frozenset(unshown))
    try:
        reply = ctx.llm.complete(job=NAME, tier="strong", system=DREAM_SYSTEM, user=user, max_tokens=MAX_OUTPUT_TOKENS)
    except ModelCallFailed as exc:
        return Plan(error=f"model call failed: {exc}")
    plan = Plan(model=reply.model, input_tokens=reply.input_tokens + reply.cache_read_tokens + reply.cache_write_tokens)
    try:
        data = parse_model_json(reply.text)
        plan.ops, plan.rejected = validate_dream(data, memories, rules)
    except ModelOutputError as exc:
        cut = " (the answer was cut off at max_tokens)" if reply.stop_reason == "max_tokens" else ""
        plan.error = f"model answer refused: {exc.reason}{cut}"
    return plan


# =========================================================================== applying


@dataclass(frozen=True)
class Rendered:
    """One operation with the text of the file it writes (None for a delete) and that text's metadata."""

    op: DreamOp
    text: str | None
    meta: dict[str, Any] = field(default_factory=dict)


def render_ops(ops: Sequence[DreamOp], by_file: dict[str, Memory], *, provider: str, now_iso: str) -> tuple[list[Rendered], list[tuple[DreamOp, str]]]:
    """Each op rendered as memd writes memories, and the ops that cannot be rendered (with why)."""
    from memd.memories import render_memory

    out: list[Rendered] = []
    bad: list[tuple[DreamOp, str]] = []
    for op in ops:
        if op.op == "delete":
            out.append(Rendered(op, None))
            continue
        base = by_file.get(op.result or "")
        meta = dict(base.metadata) if base is not None else {}
        meta.update({"source": "memd", "provider": provider, "updated": now_iso})
        if op.op == "merge":
            meta["merged_from"] = [by_file[f].name for f in op.files]
        try:
            out.append(Rendered(op, render_memory(op.name, op.description, op.type or "", op.body, meta), meta))
        except ValueError as exc:
            bad.append((op, str(exc)))
    return out, bad


def _safe_child(directory: Path, file: str) -> Path:
    """A file name of this directory (from scandir or a confined slug): never a path."""
    if "/" in file or "\\" in file or file.startswith(".") or not file.endswith(".md") or file == "MEMORY.md":
        raise ValueError(f"not a memory file name: {file!r}")
    return directory / file


def _write_fresh(path: Path, text: str) -> None:
    """A new inode at `path`, never a write through the hard link staging holds there.

    No fsync and no rename: nobody reads the staging directory, and `history.seal`
    fsyncs every file written here in one batch before the journal names it.
    """
    import os

    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        view = memoryview(text.encode("utf-8"))
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def apply_to_staging(staging: Path, rendered: Sequence[Rendered], by_file: dict[str, Memory]) -> tuple[dict[str, list[dict[str, Any]]], list[Path]]:
    """Write the plan into the staging directory; returns what changed (for run.json) and the files written."""
    changes: dict[str, list[dict[str, Any]]] = {"added": [], "merged": [], "rewritten": [], "deleted": []}
    written: list[Path] = []
    for r in rendered:
        op = r.op
        if r.text is not None and op.result:
            path = _safe_child(staging, op.result)
            _write_fresh(path, r.text)
            written.append(path)
        for f in op.files:
            if f != op.result:
                _safe_child(staging, f).unlink(missing_ok=True)
        if op.op == "delete":
            changes["deleted"].append({"name": op.name, "file": op.files[0], "reason": op.reason})
        elif op.op == "merge":
            changes["merged"].append({
                "sources": [{"name": by_file[f].name, "file": f} for f in op.files],
                "result": {"name": op.name, "file": op.result}, "reason": op.reason,
            })  # fmt: skip
        elif op.op == "update":
            changes["rewritten"].append({"name": op.name, "file": op.result, "reason": op.reason})
        else:
            changes["added"].append({"name": op.name, "file": op.result, "reason": op.reason})
    return changes, written


def final_memories(memories: Sequence[Memory], rendered: Sequence[Rendered], directory: Path) -> list[Memory]:
    """The scope's memories after the plan, placed in `directory`, without rescanning or reparsing:
    unchanged ones as scanned (their files are hard links, so mtimes hold), plus what was
    rendered, as `parse_memory` would read it back (mtime 0 until `_stamp` reads the file)."""
    from memd.memories import Memory

    gone: set[str] = set()
    new: dict[str, Memory] = {}
    scope, key = memories[0].scope, memories[0].project_key
    for r in rendered:
        gone.update(r.op.files)
        if r.text is not None and r.op.result:
            gone.add(r.op.result)
            extra = {k: v for k, v in r.meta.items() if k != "type"}
            new[r.op.result] = Memory(
                directory / r.op.result, " ".join(r.op.name.split()), " ".join(r.op.description.split()),
                (r.op.type or "").strip().lower(), r.op.body.strip("\r\n").rstrip(), 0.0,
                len(r.text.encode("utf-8")), scope, key, extra,
            )  # fmt: skip
    keep = [replace(m, path=directory / m.path.name) for m in memories if m.path.name not in gone]
    return keep + list(new.values())


def _stamp(memories: list[Memory]) -> list[Memory]:
    """Fill in mtime and size of the files this run wrote, as a scan would see them."""
    out = []
    for m in memories:
        if m.mtime == 0.0:
            try:
                st = m.path.stat()
            except OSError:
                continue
            m = replace(m, mtime=st.st_mtime, size=st.st_size)
        out.append(m)
    return out


def refresh_known(ctx: JobContext, ref: ScopeRef, memories: list[Memory]) -> None:
    """The views `indexer.refresh_dir` keeps (MEMORY.md, the drawer render, search rows),
    from the memories this run already knows instead of a rescan.

    Why not `memwrite.refresh`: it parses every file's YAML again, about half a
    second for 1,000 memories, which alone is a quarter of the run's budget; the
    run knows the new directory exactly (it just built it). The renders and the
    search sync are the same public functions `refresh_dir` uses.
    """
    from memd.index import render_drawer, render_memory_index
    from memd.indexer import write_if_changed
    from memd.search import SearchIndex

    s = ctx.settings
    directory = ref.memory_dir(ctx.home)
    if s.get("memory.indexConsolidation.enabled"):
        write_if_changed(directory / "MEMORY.md", render_memory_index(memories).text)
    if ref.kind == "global" and s.get("memory.global.enabled"):
        drawer = render_drawer(memories, max_bytes=int(s.get("memory.global.maxBytes")), today=ctx.now().date(), tz=UTC)
        write_if_changed(ctx.home.drawer_render, drawer.text)
    with SearchIndex.for_home(ctx.home) as db:
        db.sync({(ref.kind, ref.key): memories})


# =========================================================================== the run


def _note_failure(ctx: JobContext, target: Target, reason: str) -> None:
    """Keep the last consolidation; remember the failure so due() backs off (each try costs a call)."""
    cur = _cursor(ctx, target)
    cur.update({"failed_at": iso(ctx.now()), "failure": reason[:300]})
    set_cursor(ctx.conn, NAME, str(target), cur, iso(ctx.now()))


def _advance(ctx: JobContext, target: Target, run_id: str | None) -> None:
    """The cursor rule: called once the swap (or the decision that nothing changes) is durable."""
    set_cursor(ctx.conn, NAME, str(target), {"last": iso(ctx.now()), "run": run_id}, iso(ctx.now()))


def _provider(ctx: JobContext) -> str:
    """What the model layer resolved (the key may come from the environment or the key file);
    without a key the run waits instead of failing."""
    provider = str(ctx.llm.provider)
    if provider == "anthropic":
        avail = ctx.llm.available()
        if not avail and avail.reason == "no-key":
            raise Deferred(avail.why)
    return provider


def _counts(changes: dict[str, list[Any]]) -> dict[str, int]:
    return {k: len(v) for k, v in changes.items()}


class _Snapshot:
    """The history snapshot, copied in a thread while the model thinks.

    Why: the copy is I/O and the model call a network wait, so overlapping them
    takes the copy off the run's critical path. Not beside the YAML scan or the
    offline plan: CPU-bound Python in one thread and many short syscalls in the
    other convoy on the GIL and slow both. It stays consistent: the directory's
    signature is taken before the scan and checked again just before the swap,
    so a snapshot of a directory that changed meanwhile is never used. A run
    that ends without a change discards it (it has no run.json yet, so
    recovery would too). Never started, `wait` takes it in the caller's thread.
    """

    def __init__(self, home: Any, ref: ScopeRef, run_id: str) -> None:
        self.home, self.ref, self.run_id = home, ref, run_id
        self.entry: Path | None = None
        self.error: BaseException | None = None
        self.kept = False
        self._thread: Any = None
        self._copied = False

    def start(self) -> None:
        """Copy in a background thread (from now until `wait`)."""
        import threading

        if self._thread is None and not self._copied:
            self._thread = threading.Thread(target=self._copy, name=f"dream-snapshot-{self.run_id}", daemon=True)
            self._thread.start()

    def _copy(self) -> None:
        from memd import history

        self._copied = True
        try:
            self.entry = history.snapshot(self.home, self.ref, self.run_id)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the run's thread by wait()
            self.error = exc

    def settle(self) -> None:
        """Let the copy finish (or fail) before anyone cleans up around it."""
        if self._thread is not None:
            self._thread.join()

    def wait(self) -> Path:
        """The snapshot's history entry, copied now if no thread was started."""
        self.settle()
        if not self._copied:
            self._copy()
        if self.error is not None:
            raise self.error
        assert self.entry is not None
        return self.entry

    def discard(self) -> None:
        import shutil

        from memd import history

        self.settle()
        if not self.kept:
            shutil.rmtree(history.history_root(self.home, self.ref) / self.run_id, ignore_errors=True)


def run(ctx: JobContext, target: Target, force: bool) -> RunResult:
    from memd import history

    ref = scope_ref(target)
    history.recover_scope(ctx.home, ref, ctx.log)
    directory = ref.memory_dir(ctx.home)
    if directory.is_symlink():
        return RunResult("skipped", f"{directory} is a symlink; dream only rewrites real directories")
    base = baseline_of(ctx, target)
    if not force:
        ok, why = due_decisions(ctx, [target])[target]
        if not ok:
            return RunResult("skipped", f"not due: {why}")
    provider = _provider(ctx)
    if not directory.is_dir():
        return RunResult("skipped", "no memories to consolidate")
    sig0 = history.signature(directory)
    snap = _Snapshot(ctx.home, ref, history.new_run_id(ctx.now()))
    try:
        return _plan_and_apply(ctx, target, ref, base, provider, sig0, snap, force)
    finally:
        snap.discard()


def _plan_and_apply(ctx: JobContext, target: Target, ref: ScopeRef, base: Baseline, provider: str,
                    sig0: dict[str, Any], snap: _Snapshot, force: bool) -> RunResult:  # fmt: skip
    from memd.memories import scan_dir

    directory = ref.memory_dir(ctx.home)
    scan = scan_dir(directory, ref.kind, ref.key)
    if not scan.memories:
        return RunResult("skipped", "no memories to consolidate")
    protected = hand_edited(scan.memories, base.at if base.consolidated else None)
    rules = Rules(ref.kind, directory, frozenset(protected), taken=frozenset(sig0))
    if provider == "offline":
        plan = Plan(ops=offline_plan(scan.memories, protected))
    else:
        snap.start()
        plan = _model_plan(ctx, ref, scan.memories, rules, base)
    details: dict[str, Any] = {"provider": provider, "memories": len(scan.memories), "proposed": len(plan.ops),
                               "rejected": len(plan.rejected)}  # fmt: skip
    for idx, reason in plan.rejected:
        ctx.log.warning("operation.rejected", index=idx, reason=reason)
    if plan.error:
        _note_failure(ctx, target, plan.error)
        return RunResult("failed", plan.error, details)
    refused = guard(scan.memories, plan.ops, max_share=float(ctx.settings.get("memd.dreamMaxDeleteShare")), force=force)
    if refused:
        ctx.log.warning("dream.refused", scope=str(ref), reason=refused, operations=len(plan.ops))
        _note_failure(ctx, target, refused)
        return RunResult("failed", f"refused: {refused}", details)
    return _apply(ctx, target, ref, scan.memories, plan, sig0, snap, provider, force, details)


def _apply(ctx: JobContext, target: Target, ref: ScopeRef, memories: list[Memory], plan: Plan, sig0: dict[str, Any],
           snap: _Snapshot, provider: str, force: bool, details: dict[str, Any]) -> RunResult:  # fmt: skip
    from memd import history, memwrite

    now_iso = iso(ctx.now())
    by_file = {m.path.name: m for m in memories}
    rendered, bad = render_ops(plan.ops, by_file, provider=provider, now_iso=now_iso)
    for op, why in bad:
        ctx.log.warning("operation.rejected", memory=op.name, reason=why)
    touched = {(ref.kind, ref.key)}
    if not rendered:
        memwrite.refresh(ctx, touched)  # type: ignore[arg-type]
        _advance(ctx, target, None)
        return RunResult("ok", "nothing to change", details)
    run_id = snap.run_id
    try:
        changes, final = _commit(ctx, ref, memories, rendered, by_file, sig0, snap, provider, force, plan)
    except history.SpecialFile as exc:
        return RunResult("failed", str(exc), details)
    refresh_known(ctx, ref, _stamp(final))
    _advance(ctx, target, run_id)
    history.prune(ctx.home, ref, int(ctx.settings.get("memd.historyKeep")))
    counts = _counts(changes)
    ctx.log.info("dream.applied", scope=str(ref), run=run_id, **counts)
    summary = ", ".join(f"{n} {k}" for k, n in counts.items() if n) or "no change"
    return RunResult("ok", f"run {run_id}: {summary}", {**details, **counts, "run": run_id})


def _commit(ctx: JobContext, ref: ScopeRef, memories: list[Memory], rendered: list[Rendered],
            by_file: dict[str, Memory], sig0: dict[str, Any], snap: _Snapshot, provider: str, force: bool,
            plan: Plan) -> tuple[dict[str, list[dict[str, Any]]], list[Memory]]:  # fmt: skip
    """Snapshot (done already if the model call hid it), stage, check nothing moved under us,
    record, swap. Any failure rolls back."""
    from memd import history
    from memd.index import render_memory_index
    from memd.indexer import write_if_changed

    directory = ref.memory_dir(ctx.home)
    run_id = snap.run_id
    try:
        entry = snap.wait()
        staged = history.stage(ctx.home, ref, run_id, source=directory, link=True)
        staging = staged.path
        changes, written = apply_to_staging(staging, rendered, by_file)
        staged.copied.files.extend(written)
        final = final_memories(memories, rendered, directory)
        if ctx.settings.get("memory.indexConsolidation.enabled"):
            write_if_changed(staging / "MEMORY.md", render_memory_index(final).text)
        history.seal(staged)
        if history.signature(directory) != sig0:
            raise Deferred("the memory directory changed during the run (a hand edit?); the dream is retried later")
        info = {
            "run": run_id, "scope": str(ref), "kind": "dream", "time": iso(ctx.now()), "provider": provider,
            "model": plan.model, "forced": force, "memories_before": len(memories), "memories_after": len(final),
            "changes": changes, "rejected": [{"index": i, "reason": r} for i, r in plan.rejected],
            "input_tokens": plan.input_tokens,
        }  # fmt: skip
        history.write_run_info(entry, info)
        snap.kept = True
        history.swap_in(ctx.home, ref, run_id, staging)
    except BaseException:
        snap.settle()
        history.recover_scope(ctx.home, ref, ctx.log)
        raise
    return changes, final

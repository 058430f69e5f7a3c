"""Where a memory came from (`memd why`, `memd show`): its sources read back from the transcripts.

A memory's `metadata.sources` is a list of `{"session": str, "uuids": [str],
"offsets": [int], "ts": str}` (see `memwrite.merge_sources`): the user records
that led to it, by `uuid` in Claude Code / deepcode transcripts, or for a
transcript without uuids (MewCode) by the byte offset where the record's line
ends (just past its newline; extraction records it for every record). An entry written by `memd remember` has
`"via": "memd remember"` and no session.

The transcript is found by session id: the ledger's `sessions` row first (its
path, or its key when the home moved), else every project directory. Only the
user's own lines are shown, and always redacted: a transcript may hold a secret
that memd kept out of the memory. A merged memory (dream's merge, metadata
`merged_from`) is explained by the memories it was made of, read from the dream
run's snapshot in the history, each with its own sources.

Read-only: nothing here writes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from memd.memory.file import Memory
from memd.tree import Home, Place

MAX_LINE_CHARS = 2000
MAX_DEPTH = 3
_SESSION_ID = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


def sources_of(m: Memory) -> list[dict[str, Any]]:
    raw = m.metadata.get("sources")
    return [s for s in raw if isinstance(s, dict)] if isinstance(raw, list) else []


def merged_from(m: Memory) -> list[str]:
    raw = m.metadata.get("merged_from")
    return [str(x) for x in raw if isinstance(x, (str, int))] if isinstance(raw, list) else []


def find_transcript(home: Home, session_id: str) -> Path | None:
    """The main transcript of a session, by id."""

    if not _SESSION_ID.match(session_id) or session_id in (".", ".."):
        return None
    keys: list[str] = []
    if home.state_db.exists():
        import sqlite3  # noqa: PLC0415 - start-up

        from memd import state  # noqa: PLC0415 - start-up
        try:
            conn = state.connect(home.state_db, readonly=True)
        except (state.StateError, sqlite3.Error):  # a damaged or older ledger: fall back to the tree
            conn = None
        if conn is not None:
            try:
                rows = conn.execute("SELECT key, path FROM sessions WHERE session_id=? AND is_subagent=0",
                                    (session_id,)).fetchall()  # fmt: skip
            except sqlite3.Error:
                rows = []
            finally:
                conn.close()
            for r in rows:
                p = Path(r["path"])
                if p.is_file() and not p.is_symlink():
                    return p
                keys.append(str(r["key"]))
    from memd.discovery import list_project_keys, session_file  # noqa: PLC0415 - start-up
    for key in [*keys, *list_project_keys(home)]:
        try:
            sf = session_file(home, key, session_id)
        except OSError:
            sf = None
        if sf is not None:
            return sf.path
    return None


def _user_text(rec: dict[str, Any]) -> str | None:
    """The user's own words in a record, or None when the record is not a user's line."""

    if rec.get("type") != "user" or rec.get("isMeta") is True or rec.get("isCompactSummary") is True:
        return None
    msg = rec.get("message")
    content = msg.get("content") if isinstance(msg, dict) else rec.get("content")
    if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
        return None
    from memd.transcripts.formats import text_of  # noqa: PLC0415 - start-up
    text = text_of(content).strip()
    if not text or text.startswith(("<command-", "<local-command-")):
        return None
    return text


def read_records(path: Path, uuids: Iterable[str], offsets: Iterable[int]) -> tuple[list[dict[str, Any]], int]:
    """The user lines of `path` named by uuid or by the offset where their line ends, in file order,
    redacted; and how many named records are not a user's line (the agent's, a tool result).

    Extraction records both for one record (the uuid when it has one, the offset always), so a
    line counts once whichever names it."""

    want_u = {u for u in uuids if isinstance(u, str)}
    want_o = {o for o in offsets if isinstance(o, int) and not isinstance(o, bool)}
    found: list[dict[str, Any]] = []
    other = 0
    left = expected(want_u, want_o)

    import orjson  # noqa: PLC0415 - start-up: orjson only where JSON is read (the hooks skip it)

    from memd.redact.redactor import redact  # noqa: PLC0415 - start-up
    from memd.transcripts.lines import read_lines  # noqa: PLC0415 - start-up
    for line in read_lines(path, 0, 1):
        if not line.data:
            continue
        hit_o = line.end in want_o
        if not hit_o and not want_u:
            continue
        try:
            rec = orjson.loads(line.data)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(rec, dict):
            continue
        uuid = rec.get("uuid")
        hit_u = isinstance(uuid, str) and uuid in want_u
        if not (hit_u or hit_o):
            continue
        left -= 1
        text = _user_text(rec)
        if text is None:
            other += 1
        else:
            clipped = text if len(text) <= MAX_LINE_CHARS else text[: MAX_LINE_CHARS - 1] + "…"
            ts = rec.get("timestamp")
            found.append({"uuid": uuid if isinstance(uuid, str) else None, "offset": line.end,
                          "ts": None if ts is None else str(ts), "text": redact(clipped)})  # fmt: skip
        if left <= 0:
            break
    return found, other


def expected(uuids: set[str], offsets: set[int]) -> int:
    """How many records a source names: every one has an offset; older entries may have only uuids."""
    return max(len(uuids), len(offsets))


def explain_source(home: Home, src: dict[str, Any]) -> dict[str, Any]:
    """One `metadata.sources` entry with the lines it names."""
    session = str(src.get("session") or "")
    uuids = src.get("uuids") if isinstance(src.get("uuids"), list) else []
    offsets = src.get("offsets") if isinstance(src.get("offsets"), list) else []
    out: dict[str, Any] = {"session": session or None, "ts": src.get("ts"), "via": src.get("via"),
                           "transcript": None, "lines": [], "not_user_lines": 0, "problem": None}  # fmt: skip
    if not session:
        if not src.get("via"):
            out["problem"] = "no session recorded"
        return out
    path = find_transcript(home, session)
    if path is None:
        out["problem"] = f"the transcript of session {session} is gone"
        return out
    out["transcript"] = _rel(home, path)
    if not uuids and not offsets:
        out["problem"] = "no message ids recorded for this session"
        return out
    try:
        lines, other = read_records(path, uuids or [], offsets or [])
    except OSError as exc:
        out["problem"] = f"cannot read {path}: {exc.strerror or exc}"
        return out
    out["lines"], out["not_user_lines"] = lines, other
    named = expected({u for u in uuids or [] if isinstance(u, str)},
                     {o for o in offsets or [] if isinstance(o, int) and not isinstance(o, bool)})  # fmt: skip
    missing = named - len(lines) - other
    if missing > 0:
        out["problem"] = f"{missing} of the recorded messages are no longer in the transcript"
    return out


def _rel(home: Home, path: Path) -> str:
    try:
        return str(path.relative_to(home.root))
    except ValueError:
        return str(path)


class Kept(NamedTuple):
    """A merged memory's copy in the history: where it was kept, its bytes, its mtime then."""

    path: Path
    data: bytes
    mtime: float


def _merge_inputs(home: Home, m: Memory, names: list[str]) -> list[tuple[str, str, Kept | None, str | None]]:
    """The memories merged into `m`: (name, file, their copy kept in the history, the run).

    A dream run that merged into `m` keeps them in its snapshot; a dream accepted in review
    mode is a write run, whose before-images hold the files it deleted or rewrote."""

    place = Place.memory(None if m.scope == "global" else m.project_key)
    from memd.history.runs import list_runs  # noqa: PLC0415 - start-up
    runs = list(reversed(list_runs(home, place)))
    from memd.history import kept  # noqa: PLC0415 - start-up
    for run in runs:
        changes = run.get("changes")
        merged = changes.get("merged") if run.get("kind") == "dream" and isinstance(changes, dict) else None
        for item in merged if isinstance(merged, list) else []:
            result = item.get("result") if isinstance(item, dict) else None
            if not isinstance(result, dict) or (result.get("name") != m.name and result.get("file") != m.path.name):
                continue
            inputs: list[tuple[str, str, Kept | None, str | None]] = []
            for src in item.get("sources") or []:
                if not isinstance(src, dict):
                    continue
                file = str(src.get("file") or "")
                got = kept.read_file(Path(run["path"]), file) if file.endswith(".md") and "/" not in file else None
                snap = None if got is None else Kept(Path(run["path"]) / file, got[0], got[1] / 1e9)
                inputs.append((str(src.get("name") or file), file, snap, str(run.get("run"))))
            return inputs
    found: dict[str, tuple[str, str, Kept | None, str | None]] = {}
    from memd.history.writes import BEFORE_DIR  # noqa: PLC0415 - start-up
    from memd.memory.file import MemoryParseError, parse_memory  # noqa: PLC0415 - start-up
    for run in runs:
        ch = run.get("changes")
        if run.get("kind") != "write" or not isinstance(ch, dict):
            continue
        for file in [*(ch.get("deleted") or []), *(ch.get("updated") or [])]:
            before = Path(run["path"]) / BEFORE_DIR / str(file)
            if "/" in str(file) or not before.is_file() or before.is_symlink():
                continue
            try:
                data = before.read_bytes()
                name = parse_memory(before, data).name
                copy = Kept(before, data, before.stat().st_mtime)
            except (OSError, MemoryParseError):
                continue
            if name in names and name not in found:
                found[name] = (name, str(file), copy, str(run.get("run")))
        if len(found) == len(names):
            break
    return list(found.values())


def explain(home: Home, m: Memory, now: datetime, depth: int = 0) -> dict[str, Any]:
    """What `memd why` prints, as data (its `--json`)."""

    out: dict[str, Any] = {
        "name": m.name, "file": _rel(home, m.path), "scope": m.scope, "project_key": m.project_key,
        "type": m.type, "description": m.description, "age_seconds": max(0, int(now.timestamp() - m.mtime)),
        "session": m.metadata.get("session") or None, "provider": m.metadata.get("provider"),
        "sources": [explain_source(home, s) for s in sources_of(m)], "merged_from": [],
    }  # fmt: skip
    names = merged_from(m)
    if not names:
        return out
    inputs = _merge_inputs(home, m, names) if depth < MAX_DEPTH else []
    by_name = {n: (f, p, r) for n, f, p, r in inputs}
    from memd.memory.file import MemoryParseError, parse_memory  # noqa: PLC0415 - start-up
    for name in names:
        file, snap, run_id = by_name.get(name, ("", None, None))
        entry: dict[str, Any] = {"name": name, "file": file or None, "run": run_id, "memory": None, "problem": None}
        if snap is None:
            entry["problem"] = "no copy of it in the history (pruned, or merged before memd kept history)"
        else:
            try:
                inner = parse_memory(snap.path, snap.data, mtime=snap.mtime, scope=m.scope, project_key=m.project_key)
                entry["memory"] = explain(home, inner, now, depth + 1)
                entry["memory"]["file"] = f"history {run_id}: {file}"
            except (OSError, MemoryParseError) as exc:
                entry["problem"] = f"its copy in the history cannot be read ({exc})"
        out["merged_from"].append(entry)
    return out


def age_text(seconds: int) -> str:
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86400:
        return f"{seconds // 3600} h"
    days = seconds // 86400
    return f"{days} day" + ("" if days == 1 else "s")


def render(data: dict[str, Any], indent: str = "") -> list[str]:
    """`memd why` as text lines."""
    where = "global drawer" if data["scope"] == "global" else f"project {data['project_key']}"
    lines = [f"{indent}{data['name']}  ({data['type']}, {where}, {data['file']}, {age_text(data['age_seconds'])} old)"]
    lines.append(f"{indent}  {data['description']}")
    if not data["sources"] and not data["merged_from"]:
        legacy = f" (written for session {data['session']}, no message ids kept)" if data.get("session") else ""
        lines.append(f"{indent}  no recorded sources{legacy}")
    for s in data["sources"]:
        if s.get("via"):
            lines.append(f"{indent}  via {s['via']}" + (f" at {s['ts']}" if s.get("ts") else ""))
            continue
        head = f"{indent}  session {s['session']}" + (f" ({s['ts']})" if s.get("ts") else "")
        if s.get("transcript"):
            head += f" — {s['transcript']}"
        lines.append(head)
        for ln in s["lines"]:
            text = ln["text"].replace("\n", f"\n{indent}      ")
            lines.append(f"{indent}    [{ln['ts'] or '?'}] user: {text}")
        if s.get("not_user_lines"):
            lines.append(f"{indent}    ({s['not_user_lines']} more recorded message(s) are not the user's own lines)")
        if s.get("problem"):
            lines.append(f"{indent}    ({s['problem']})")
    if data["merged_from"]:
        lines.append(f"{indent}  merged from {len(data['merged_from'])} memories:")
        for e in data["merged_from"]:
            if e.get("memory"):
                lines.extend(render(e["memory"], indent + "    "))
            else:
                lines.append(f"{indent}    {e['name']} ({e['problem']})")
    return lines

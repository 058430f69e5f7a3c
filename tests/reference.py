"""An independent count of a transcript's facts, straight from the raw lines.

Written apart from memd.transcripts.formats on purpose (whole-file reads, stdlib json,
no shared helpers) so that agreement between the two means something.

Pending tool calls follow the same rule as memd (a call no longer waits once a
later human turn or a later, different assistant response exists) but are found
the other way round: not by a state machine clearing a set as records arrive,
but afterwards, by looking forward from each unanswered call over the whole file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PAUSE = {"/pause-memory", "/memory-pause", "/toggle-memory"}


def _lines(path: Path) -> list[Any]:
    raw = path.read_bytes()
    complete = raw[: raw.rfind(b"\n") + 1] if b"\n" in raw else b""
    out = []
    for line in complete.split(b"\n"):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except ValueError:
            out.append(None)
    return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str))
    return ""


def _result_len(c: Any) -> int:
    if isinstance(c, str):
        return len(c)
    if isinstance(c, list):
        return sum(len(b["text"]) for b in c if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str))
    return 0


def _tool_len(b: dict[str, Any]) -> int:
    return len(b.get("name") or "") + len(json.dumps(b.get("input"), separators=(",", ":"), ensure_ascii=False))


def claude_counts(main: Path, subs: list[Path] = ()) -> dict[str, Any]:
    recs = _lines(main)
    good = [r for r in recs if isinstance(r, dict)]
    human = 0
    turn_ids: list[Any] = []
    tool_ids: set[str] = set()
    calls: list[tuple[str, int, Any]] = []  # (id, position, message id) of every tool_use
    moved_on: list[tuple[int, Any, bool]] = []  # (position, message id, is a human turn)
    answered: set[str] = set()
    chars = 0
    compactions = 0
    paused = False
    for pos, r in enumerate(good):
        t = r.get("type")
        if t == "system" and r.get("subtype") == "compact_boundary":
            compactions += 1
        if t not in ("user", "assistant") or r.get("isSidechain") is True:
            continue
        msg = r.get("message") or {}
        content = msg.get("content")
        if t == "assistant":
            mid = msg.get("id")
            if not turn_ids or mid is None or turn_ids[-1] != mid:
                turn_ids.append(mid)
            moved_on.append((pos, mid or None, False))
            if isinstance(content, str):
                chars += len(content)
            for b in content if isinstance(content, list) else []:
                if b.get("type") == "text":
                    chars += len(b.get("text") or "")
                elif b.get("type") == "tool_use":
                    chars += _tool_len(b)
                    if b["id"] not in tool_ids:  # a call is its first appearance
                        calls.append((b["id"], pos, mid or None))
                    tool_ids.add(b["id"])
            continue
        if r.get("isCompactSummary") is True:
            continue
        results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"] if isinstance(content, list) else []
        for b in results:
            answered.add(b.get("tool_use_id"))
            chars += _result_len(b.get("content"))
        text = _text(content)
        chars += len(text)
        if results or r.get("isMeta") is True:
            continue
        s = text.strip()
        if "<command-name>" in s:
            name = s.split("<command-name>", 1)[1].split("</command-name>", 1)[0].strip()
            if name in PAUSE:
                paused = not paused
            continue
        if s in PAUSE:
            paused = not paused
            continue
        if s.startswith("<command-") or s.startswith("<local-command-") or not s:
            continue
        human += 1
        moved_on.append((pos, None, True))
    usage: dict[str, tuple[int, tuple[int, ...]]] = {}
    anon = [0, 0, 0, 0]

    def take(msg: dict[str, Any], prio: int) -> None:
        u = msg.get("usage")
        if not isinstance(u, dict):
            return
        vals = tuple(u.get(k) or 0 for k in ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
        mid = msg.get("id")
        if not mid:
            if prio:
                for i in range(4):
                    anon[i] += vals[i]
            return
        if mid in usage and usage[mid][0] > prio:
            return
        usage[mid] = (prio, vals)

    for path in [main, *subs]:
        for r in _lines(path):
            if not isinstance(r, dict):
                continue
            if r.get("type") == "assistant" and isinstance(r.get("message"), dict):
                take(r["message"], 1)
            d = r.get("data")
            if r.get("type") == "progress" and isinstance(d, dict) and d.get("type") == "agent_progress":
                inner = d.get("message") or {}
                if inner.get("type") == "assistant" and isinstance(inner.get("message"), dict):
                    take(inner["message"], 0)
    totals = [sum(v[1][i] for v in usage.values()) + anon[i] for i in range(4)]
    return {
        "records": len(good),
        "bad_lines": len(recs) - len(good),
        "human_turns": human,
        "assistant_turns": len(turn_ids),
        "tool_calls": len(tool_ids),
        "tool_calls_pending": len(_still_waiting(calls, answered, moved_on)),
        "tokens": (chars + 3) // 4,
        "usage": dict(zip(("input", "output", "cache_creation", "cache_read"), totals)),
        "compactions": compactions,
        "paused": paused,
    }


def _still_waiting(calls: list[tuple[str, int, Any]], answered: set[str], moved_on: list[tuple[int, Any, bool]]) -> set[str]:
    """Unanswered calls after which nothing moved the conversation on: no human turn, and no
    assistant record of another response (parallel calls share their response's message id)."""
    waiting = set()
    for tid, pos, mid in calls:
        if tid in answered:
            continue
        later = [(m, human) for p, m, human in moved_on if p > pos]
        if not any(human or mid is None or m is None or m != mid for m, human in later):
            waiting.add(tid)
    return waiting

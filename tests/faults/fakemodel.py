"""A fake model server for the fault tests: the real `tests.fakeapi` server with a responder.

Rules of `tests/fakeapi.py --script` answer one fixed reply per rule; a crash loop
needs answers that depend on the whole span a job happens to send (a span may
hold several durable statements, or none), so this process answers from what
the request holds:

* the gate ("memory gate" in the system prompt): "yes" when the conversation
  holds a marker `FACT-G-nnnn` / `FACT-P-nnnn`, else "no";
* extraction: one `add` operation per marker in the *new conversation* part of
  the prompt (the indexes and bodies above it are ignored), global scope for
  `G`, project scope for `P`; every body ends with `[end FACT-…]` so a
  truncated file is recognisable;
* the session summary: a complete summary in the fixed sections.

Each answer waits a random 0…`--max-delay` seconds, so kills land mid-call.

    python -m tests.faults.fakemodel --port-file F [--record R] [--max-delay S] [--seed N]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from tests.fakeapi import FakeAnthropic, Reply, _write_port, request_system_text, request_user_text, text

MARKER = re.compile(r"\bFACT-([GP])-(\d{4})\b")
GATE_HINT = "memory gate"
EXTRACT_HINT = "You maintain the long-term memory"
SUMMARY_HINT = "rolling summary"
NEW_CONVERSATION = "## New conversation"


def markers(text_: str) -> list[tuple[str, str]]:
    """(scope letter, number) of every marker, in order of first appearance."""
    seen: dict[tuple[str, str], None] = {}
    for m in MARKER.finditer(text_):
        seen.setdefault((m.group(1), m.group(2)), None)
    return list(seen)


def memory_name(scope: str, number: str) -> str:
    return f"fact-{scope.lower()}-{number}"


def operation(scope: str, number: str) -> dict[str, Any]:
    marker = f"FACT-{scope}-{number}"
    return {
        "op": "add",
        "scope": "global" if scope == "G" else "project",
        "name": memory_name(scope, number),
        "description": f"durable statement {marker} made by the user",
        "type": "feedback" if scope == "G" else "project",
        "body": f"The user stated {marker}. **Why:** they said so explicitly.\n\n[end {marker}]",
        "reason": "explicit durable statement",
    }


SUMMARY = """# Fault-test session

## Current state and next steps
Working through the scripted turns; next: more of them.

## Task as specified
Append turns and let memd keep up.

## Important files and functions
- `app.py`

## Usual commands
- `make test`

## Errors and corrections
(none yet)

## Learnings
(none yet)

## Key results
(none yet)

## Worklog
- {n} messages summarised
"""


def answer(body: dict[str, Any]) -> tuple[str, Reply] | None:
    system = request_system_text(body)
    user = request_user_text(body)
    if GATE_HINT in system:
        return "gate", text("yes" if markers(user) else "no")
    if EXTRACT_HINT in system:
        convo = user.split(NEW_CONVERSATION, 1)[1] if NEW_CONVERSATION in user else ""
        return "extract", text(json.dumps({"operations": [operation(s, n) for s, n in markers(convo)]}))
    if SUMMARY_HINT in system:
        return "summary", text(SUMMARY.format(n=user.count("\n")))
    return None


def make_server(max_delay: float, seed: int | None, record: Path | None, events: Path | None = None) -> FakeAnthropic:
    """`events`, if given, gets one JSON line per answer: its kind and the wall-clock time it is sent,
    so a test can aim a kill at the moment a job acts on an answer (writes memories, a summary)."""
    rng = random.Random(seed)
    lock = threading.Lock()

    def responder(body: dict[str, Any]) -> Reply | None:
        got = answer(body)
        if got is None:
            return None
        kind, reply = got
        with lock:
            wait = rng.uniform(0.0, max_delay)
            if events is not None:
                with open(events, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps({"kind": kind, "at": time.time() + wait}) + "\n")
        return replace(reply, delay=wait)

    fake = FakeAnthropic(responder=responder, record_path=record)
    # Killed daemons drop their connections mid-request: that is the point, not news.
    fake._server.handle_error = lambda *_a: None  # type: ignore[method-assign]
    return fake


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--port-file", type=Path, required=True)
    p.add_argument("--record", type=Path)
    p.add_argument("--max-delay", type=float, default=0.0)
    p.add_argument("--seed", type=int)
    p.add_argument("--events", type=Path)
    args = p.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with make_server(args.max_delay, args.seed, args.record, args.events) as fake:
        _write_port(args.port_file, fake.port)
        while not stop.wait(0.2):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

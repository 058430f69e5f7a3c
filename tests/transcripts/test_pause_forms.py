"""One pause (issue 22 point 2, SPEC §3.4, §3.4a): the ledger's fold and the spans that extraction
and the summary read decide the pause from the same parser, in every form the agents write.

The record forms are the ones the real binaries write (Claude Code 2.1.332, checked by
tests/e2e/agents/test_pause_e2e.py; 2.1.112's "Unknown command"; MewCode's plain line).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from memd import state
from memd.discovery import discover_sessions
from memd.ledger import pause
from memd.ledger import store as ledger
from memd.ledger.sessions import counts, list_sessions
from memd.transcripts.formats import PauseWord, pause_word
from memd.transcripts.spans import read_span
from memd.tree import Home

NOW = "2026-12-01T10:00:00.000Z"
SECRET = "We decided to use Postgres 16 for billing."


def user(text: str, uuid: str, parent: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"type": "user", "uuid": uuid, "parentUuid": parent, "sessionId": "s1", "timestamp": NOW,
            "message": {"role": "user", "content": text}, **extra}  # fmt: skip


def local_command(content: str, uuid: str, parent: str | None = None) -> dict[str, Any]:
    """Claude Code 2.1.332's record of a slash command typed in a session."""
    return {"type": "system", "subtype": "local_command", "content": content, "level": "info", "isMeta": False,
            "uuid": uuid, "parentUuid": parent, "sessionId": "s1", "timestamp": NOW}  # fmt: skip


def stdout_child(command: str, uuid: str, parent: str) -> dict[str, Any]:
    text = f"<local-command-stdout>{command} isn't available in this environment.</local-command-stdout>"
    return local_command(text, uuid, parent)


def mew(text: str) -> dict[str, Any]:
    return {"type": "user", "content": text, "timestamp": NOW}


# (records that say the pause, as the agent wrote them; format)
FORMS: dict[str, tuple[list[dict[str, Any]], str]] = {
    "2.1.332 command + stdout child": (
        [local_command("/pause-memory", "p1", "a0"), stdout_child("/pause-memory", "p2", "p1")], "claude"),
    "2.1.332 command with text": (
        [local_command(f"/pause-memory {SECRET}", "p1", "a0"), stdout_child("/pause-memory", "p2", "p1")], "claude"),
    "defined command (<command-name>)": (
        [user("<command-message>pause-memory</command-message>\n<command-name>/pause-memory</command-name>\n"
              f"<command-args>{SECRET}</command-args>", "p1", "a0"),
         user("memd memory is now paused for this session.\n\nARGUMENTS: " + SECRET, "p2", "p1", isMeta=True)],
        "claude"),
    "2.1.112 unknown command": ([user("Unknown command: /pause-memory", "p1", "a0")], "claude"),
    "unknown command in stdout": (
        [user("<local-command-stdout>Unknown command: /memory-pause</local-command-stdout>", "p1", "a0")], "claude"),
    "alias /toggle-memory": ([local_command("/toggle-memory", "p1", "a0")], "claude"),
    "MewCode plain line": ([mew("/pause-memory")], "mewcode"),
    "MewCode line with text": ([mew(f"/memory-pause {SECRET}")], "mewcode"),
}  # fmt: skip


def _before(fmt: str) -> list[dict[str, Any]]:
    if fmt == "mewcode":
        return [mew("hello there"), {"type": "assistant", "content": "Hi.", "timestamp": NOW}]
    return [user("hello there", "u0"),
            {"type": "assistant", "uuid": "a0", "parentUuid": "u0", "sessionId": "s1", "timestamp": NOW,
             "message": {"id": "m0", "role": "assistant", "content": [{"type": "text", "text": "Hi."}]}}]  # fmt: skip


def _after(text: str, fmt: str, uuid: str, parent: str | None) -> dict[str, Any]:
    return mew(text) if fmt == "mewcode" else user(text, uuid, parent)


def _home(tmp_path: Path, records: list[dict[str, Any]]) -> Path:
    d = tmp_path / "h" / "projects" / "-repo"
    d.mkdir(parents=True, exist_ok=True)
    path = d / "s1.jsonl"
    with open(path, "a") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")
    return path


def _ingest(tmp_path: Path) -> sqlite3.Connection:
    home = Home(tmp_path / "h")
    conn = state.connect(home.state_db)
    for sf in discover_sessions(home):
        ledger.ingest(conn, sf, NOW)
    return conn


def _spans(path: Path) -> tuple[list[str], bool]:
    """What extraction and the summary keep (human texts), and the state they end in."""
    span = read_span(path, 0, path.stat().st_size)
    kept, paused = pause.unpaused(span.pieces, False)
    return [p.text for p in kept if p.kind == "human"], paused


def _ledger_paused(conn: sqlite3.Connection) -> bool:
    return bool(list_sessions(conn)[0]["paused"])


# ------------------------------------------------------------------ the parser alone


@pytest.mark.parametrize(("text", "word"), [
    ("/pause-memory", PauseWord("/pause-memory")),
    (f"/pause-memory {SECRET}", PauseWord("/pause-memory")),
    ("  /memory-pause\n", PauseWord("/memory-pause")),
    ("/toggle-memory", PauseWord("/toggle-memory")),
    ("/resume-memory", PauseWord("/resume-memory")),
    ("<command-message>pause-memory</command-message>\n<command-name>/pause-memory</command-name>",
     PauseWord("/pause-memory")),
    ("<command-name>resume-memory</command-name>", PauseWord("/resume-memory")),
    ("Unknown command: /pause-memory", PauseWord("/pause-memory", echo=True)),
    ("<local-command-stdout>Unknown command: /toggle-memory</local-command-stdout>", PauseWord("/toggle-memory", echo=True)),
    ("<local-command-stdout>/pause-memory isn't available in this environment.</local-command-stdout>", None),
    ("Please do not /pause-memory yet", None),
    ("/pause-memoryx", None),
    ("/clear", None),
    ("Unknown command: /clear", None),
    ("", None),
])  # fmt: skip
def test_pause_word_reads_every_form(text: str, word: PauseWord | None) -> None:
    assert pause_word(text) == word


# ------------------------------------------------------------------ every reader agrees


@pytest.mark.parametrize("form", list(FORMS))
def test_ledger_and_spans_agree_nothing_after_the_pause_is_kept(tmp_path: Path, form: str) -> None:
    said, fmt = FORMS[form]
    last = said[-1].get("uuid")
    path = _home(tmp_path, [*_before(fmt), *said, _after("We decided to use ruff for linting.", fmt, "u9", last)])
    conn = _ingest(tmp_path)
    humans, paused = _spans(path)
    assert paused and _ledger_paused(conn), form
    assert counts(conn)["paused"] == 1
    assert humans == ["hello there"], form  # neither the statement after it nor the text the command swallowed
    assert not any(SECRET in p.text for p in read_span(path, 0, path.stat().st_size).pieces if p.kind != "command")
    assert list_sessions(conn)[0]["human_turns"] == 2  # the command record is no turn; the statement is


@pytest.mark.parametrize("form", list(FORMS))
def test_resume_memory_resumes_for_every_reader(tmp_path: Path, form: str) -> None:
    said, fmt = FORMS[form]
    resume = mew("/resume-memory") if fmt == "mewcode" else local_command("/resume-memory", "r1", "u9")
    path = _home(tmp_path, [*_before(fmt), *said, _after("Paused words.", fmt, "u9", said[-1].get("uuid")),
                            resume, _after("We decided to require two reviews.", fmt, "u10", "r1")])  # fmt: skip
    conn = _ingest(tmp_path)
    humans, paused = _spans(path)
    assert not paused and not _ledger_paused(conn)
    assert humans == ["hello there", "We decided to require two reviews."]


def test_resume_twice_never_pauses_and_toggle_toggles(tmp_path: Path) -> None:
    path = _home(tmp_path, [*_before("claude"), local_command("/resume-memory", "r1", "a0"),
                            local_command("/resume-memory", "r2", "r1"), user("kept one", "u1", "r2")])  # fmt: skip
    conn = _ingest(tmp_path)
    assert _spans(path) == (["hello there", "kept one"], False) and not _ledger_paused(conn)
    _home(tmp_path, [local_command("/toggle-memory", "t1", "u1"), user("dropped", "u2", "t1"),
                     local_command("/toggle-memory", "t2", "u2"), user("kept two", "u3", "t2")])  # fmt: skip
    conn = _ingest(tmp_path)
    assert _spans(path) == (["hello there", "kept one", "kept two"], False) and not _ledger_paused(conn)


def test_an_echo_answering_its_command_is_one_word(tmp_path: Path) -> None:
    path = _home(tmp_path, [*_before("claude"), user("<command-name>/pause-memory</command-name>", "c1", "a0"),
                            user("<local-command-stdout>Unknown command: /pause-memory</local-command-stdout>",
                                 "c2", "c1"), user("dropped", "u1", "c2")])  # fmt: skip
    conn = _ingest(tmp_path)
    assert _spans(path) == (["hello there"], True) and _ledger_paused(conn)


def test_an_echo_split_from_its_command_by_a_cursor_is_still_one_word(tmp_path: Path) -> None:
    """Extraction reads in spans between cursors: the state it carries knows the last command."""
    path = _home(tmp_path, [*_before("claude"), local_command("/pause-memory", "c1", "a0")])
    cut = path.stat().st_size
    _home(tmp_path, [user("Unknown command: /pause-memory", "c2", "c1"), user("dropped", "u1", "c2")])
    st = pause.Follow()
    first = pause.follow(read_span(path, 0, cut).pieces, st)
    second = pause.follow(read_span(path, cut, path.stat().st_size).pieces, st)
    assert [p.text for p in first + second if p.kind == "human"] == ["hello there"] and st.paused


# ------------------------------------------------------------------ the CLI's word: the later one wins


def test_a_resume_in_the_transcript_after_memd_pause_wins(tmp_path: Path) -> None:
    path = _home(tmp_path, _before("claude"))
    conn = _ingest(tmp_path)
    assert pause.say(conn, None, "s1", True, NOW) == 1
    assert _ledger_paused(conn) and counts(conn)["paused"] == 1
    _home(tmp_path, [local_command("/resume-memory", "r1", "a0"), user("We decided to use uv.", "u1", "r1")])
    conn = _ingest(tmp_path)
    assert not _ledger_paused(conn) and counts(conn)["paused"] == 0
    words = pause.words(conn, "-repo", "s1", 0)
    span = read_span(path, 0, path.stat().st_size)
    kept, paused = pause.unpaused(span.pieces, False, words)
    assert not paused and "We decided to use uv." in [p.text for p in kept]


def test_memd_resume_after_a_transcript_pause_wins_and_a_later_toggle_flips_it(tmp_path: Path) -> None:
    _home(tmp_path, [*_before("claude"), local_command("/pause-memory", "p1", "a0")])
    conn = _ingest(tmp_path)
    assert _ledger_paused(conn)
    pause.say(conn, None, "s1", False, NOW)
    assert not _ledger_paused(conn)
    _home(tmp_path, [local_command("/toggle-memory", "t1", "p1")])
    conn = _ingest(tmp_path)
    assert _ledger_paused(conn) and counts(conn)["paused"] == 1

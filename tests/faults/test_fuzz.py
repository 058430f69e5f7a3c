"""Fuzzing (hypothesis) through memd's real code paths.

* transcripts → `ledger.ingest` (whole, and again in random pieces), then the
  extraction and summary jobs (offline provider) on what was ingested;
* memory files → `memories.scan_dir` and `indexer.refresh_dir`;
* settings.json text → `settings.parse_text` / `settings.load`;
* model answers → the extraction job against the fake Messages API with the real
  anthropic client (`parse_model_json`, `validate_operations`, `memwrite.apply`).

The properties: nothing raises past the documented boundary (ingest and scans
return problems, settings return warnings, a job returns an outcome — a failed
outcome only for an answer refused as a whole, never a traceback); no file is
written outside the home; every refusal is one clear line; and a few specific
ones per target (ingest in pieces equals ingest at once, scans never modify a
file, MEMORY.md lists exactly the memories that parse).

Counts of inputs tried and refusals go to the suite's report (see conftest.py).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import jobs.extract as extract
import jobs.summary as summary
from memd import settings as st_mod
from memd import state
from memd.discovery import discover_sessions
from memd.index.refresh import refresh_dir
from memd.index.render import INDEX_END_PREFIX, INDEX_HEADER, index_line, linked_files
from memd.job.runner import run_job
from memd.ledger import store as ledger
from memd.ledger.sessions import session_json
from memd.memory.scan import scan_dir
from memd.tree import Home, Place
from tests.fakeapi import FakeAnthropic, request_system_text, text
from tests.faults.kit import RecordingLog, one_line, snapshot, view_problems, walk
from tests.jobkit import context, ingest, make_settings, write_session

EXAMPLES = int(os.environ.get("MEMD_FAULTS_EXAMPLES", "100"))


def fuzz(share: float = 1.0) -> settings:
    """Hypothesis settings: `share` of MEMD_FAULTS_EXAMPLES examples (the suite's time budget)."""
    return settings(max_examples=max(1, int(EXAMPLES * share)), deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.large_base_example, HealthCheck.function_scoped_fixture])  # fmt: skip
COUNTS: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _report(fault_report: Counter[str]) -> Iterator[None]:
    COUNTS.clear()
    yield
    fault_report.update(COUNTS)


@contextmanager
def sandbox() -> Iterator[tuple[Path, Path]]:
    """(parent, home): a fresh home inside a parent that also holds files memd must not touch."""

    parent = Path(tempfile.mkdtemp(prefix="memd-fuzz-"))
    try:
        home = parent / "home"
        (home / "projects").mkdir(parents=True)
        outside = parent / "outside"
        outside.mkdir()
        (outside / "victim.md").write_text("---\nname: victim\ndescription: outside the home\ntype: user\n---\nkeep me\n")
        (parent / ".bashrc").write_text("# not memd's\n")
        before = snapshot(parent, skip=home)
        yield parent, home
        assert snapshot(parent, skip=home) == before, "something was written outside the home"
    finally:
        shutil.rmtree(parent, ignore_errors=True)


# --------------------------------------------------------------------------- JSON-ish values

KEYS = ["type", "message", "content", "role", "id", "usage", "text", "tool_use_id", "isSidechain", "isMeta",
        "isCompactSummary", "subtype", "data", "uuid", "parentUuid", "sessionId", "timestamp", "name", "input",
        "input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens",
        "compactMetadata", "agentId", "is_error", "summary", "keep"]  # fmt: skip
TYPES = ["user", "assistant", "system", "progress", "summary", "file-history-snapshot", "queue-operation",
         "tool_use", "tool_result", "text", "thinking", "image", "agent_progress", "compact_boundary",
         "system_prompt", "compression"]  # fmt: skip
BIG = [2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64 + 5, -(2**63), 10**30]
any_text = st.text(alphabet=st.characters(blacklist_categories=()), max_size=12)  # surrogates and controls too
scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5000), st.sampled_from(BIG),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30), any_text,
                    st.sampled_from(TYPES + ["/pause-memory", "<command-name>/pause-memory</command-name>"]))  # fmt: skip
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=4), inner, max_size=5),
    max_leaves=20,
)


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(strategy, json_values)


blocks = st.fixed_dictionaries(
    {"type": _maybe(st.sampled_from(["text", "tool_use", "tool_result", "thinking", "image"]))},
    optional={"text": _maybe(st.text(max_size=60)), "id": _maybe(st.sampled_from(["t1", "t2", "t3"])),
              "name": _maybe(st.sampled_from(["Bash", "Read"])), "input": json_values,
              "tool_use_id": _maybe(st.sampled_from(["t1", "t2", "t3"])), "content": json_values},
)  # fmt: skip
usage = st.fixed_dictionaries({}, optional={k: _maybe(st.integers(0, 10**6)) for k in
                                             ("input_tokens", "output_tokens", "cache_read_input_tokens",
                                              "cache_creation_input_tokens")})  # fmt: skip
claude_records = st.fixed_dictionaries(
    {"type": _maybe(st.sampled_from(TYPES))},
    optional={
        "message": _maybe(st.fixed_dictionaries({}, optional={
            "role": _maybe(st.sampled_from(["user", "assistant"])), "id": _maybe(st.sampled_from(["m1", "m2", "m3"])),
            "content": st.one_of(st.text(max_size=80), st.lists(blocks, max_size=4), json_values), "usage": _maybe(usage)})),
        "uuid": _maybe(st.text(max_size=8)), "sessionId": _maybe(st.text(max_size=8)),
        "timestamp": _maybe(st.sampled_from(["2026-11-29T10:00:00Z", "2026-11-29T10:00:01Z"])),
        "isSidechain": _maybe(st.booleans()), "isMeta": _maybe(st.booleans()), "isCompactSummary": _maybe(st.booleans()),
        "subtype": _maybe(st.sampled_from(["compact_boundary", "init"])), "agentId": _maybe(st.text(max_size=4)),
        "data": _maybe(st.fixed_dictionaries({"type": _maybe(st.just("agent_progress")), "message": json_values})),
    },
)  # fmt: skip
mewcode_records = st.fixed_dictionaries(
    {"type": _maybe(st.sampled_from(["system_prompt", "user", "assistant", "tool_result", "compression", "compact_boundary"]))},
    optional={"content": st.one_of(st.text(max_size=80), st.lists(blocks, max_size=3), json_values),
              "timestamp": _maybe(st.text(max_size=20)), "tool_use_id": _maybe(st.sampled_from(["t1", "t2"])),
              "is_error": _maybe(st.booleans())},
)  # fmt: skip


def _nested(depth: int, kind: str) -> bytes:
    if kind == "list":
        return b"[" * depth + b"]" * depth
    return b'{"type":"user","message":' + b'{"a":' * depth + b"1" + b"}" * depth + b"}"


def _dump(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, allow_nan=True).encode("utf-8", "surrogatepass")


transcript_lines = st.one_of(
    claude_records.map(_dump),
    mewcode_records.map(_dump),
    json_values.map(_dump),
    st.binary(max_size=60).map(lambda b: b.replace(b"\n", b" ")),  # non-UTF-8, NULs, garbage
    claude_records.map(_dump).flatmap(lambda b: st.integers(0, max(0, len(b) - 1)).map(lambda i: b[:i])),  # cut JSON
    st.tuples(st.integers(1, 4000), st.sampled_from(["list", "dict"])).map(lambda t: _nested(*t)),
    st.integers(50_000, 400_000).map(lambda n: b'{"type":"user","message":{"role":"user","content":"' + b"x" * n + b'"}}'),
    st.just(b""), st.just(b"   \t"),
)


# --------------------------------------------------------------------------- 1. transcripts


def _ingest(home: Path, problems: list[Any]) -> dict[str, Any]:
    h = Home(home)
    conn = state.connect(h.state_db)
    try:
        for sf in discover_sessions(h):
            problems.extend(ledger.ingest(conn, sf, "2026-11-30T00:00:00.000Z").problems)
        return {r["session_id"]: {k: v for k, v in session_json(r).items() if k != "path"} for r in ledger.session_rows(conn)}
    finally:
        conn.close()


# Regressions the fuzzer found: each one used to raise out of ingest, so the session
# could never be read past that line again.
@example(lines=[b'{"type": []}'], tail=False, cuts=[])
@example(lines=[b'{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":[1]}]}}'],
         tail=False, cuts=[])  # fmt: skip
@example(lines=[b'{"type":"tool_result","tool_use_id":{"a":1},"content":"x"}'], tail=False, cuts=[])
@example(lines=[b'{"type":"assistant","message":{"id":"m1","usage":{"input_tokens":9223372036854775807}}}',
                b'{"type":"assistant","message":{"id":"m2","usage":{"input_tokens":9223372036854775807}}}'],
         tail=False, cuts=[0.5])  # fmt: skip
@fuzz(1.0)
@given(lines=st.lists(transcript_lines, min_size=1, max_size=25), tail=st.booleans(),
       cuts=st.lists(st.floats(0, 1), max_size=4))  # fmt: skip
@pytest.mark.slow
def test_fuzzed_transcripts_are_ingested_the_same_whole_or_in_pieces_and_jobs_survive_them(
    lines: list[bytes], tail: bool, cuts: list[float]
) -> None:
    data = b"\n".join(lines) + (b"" if tail else b"\n")
    COUNTS["fuzz: transcripts tried"] += 1
    COUNTS["fuzz: transcript lines tried"] += len(lines)
    with sandbox() as (_p, whole), sandbox() as (_q, pieces):
        rel = "projects/-fuzz/s1.jsonl"
        (whole / rel).parent.mkdir(parents=True)
        (whole / rel).write_bytes(data)
        problems: list[Any] = []
        once = _ingest(whole, problems)
        (pieces / rel).parent.mkdir(parents=True)
        (pieces / rel).touch()
        at = 0
        for c in sorted(cuts) + [1.0]:
            end = int(len(data) * c)
            if end > at:
                with open(pieces / rel, "ab") as fh:
                    fh.write(data[at:end])
                at = end
                _ingest(pieces, [])
        assert _ingest(pieces, []) == once
        for p in problems:
            assert one_line(p.reason), p
        COUNTS["fuzz: transcript lines refused (unparseable, counted and logged)"] += sum(
            r["bad_lines"] for r in once.values())
        # The jobs read spans of what was ingested: they must end in an outcome, never a traceback.
        ctx = context(whole, make_settings(memory={"sessionMemory": {"minInitTokens": 1}}))
        ctx.log = RecordingLog()
        try:
            for sid in once:
                for job in (extract, summary):
                    r = run_job(ctx, job, Place("session", "-fuzz", sid), force=True)
                    assert r.outcome in ("ok", "skipped", "failed"), r
                    assert not [x for x in ctx.log.records if "traceback" in x], (job.NAME, r)
                    assert r.outcome != "failed" or one_line(r.reason), r
                    COUNTS[f"fuzz: {job.NAME} job runs on fuzzed transcripts"] += 1
        finally:
            ctx.conn.close()


# --------------------------------------------------------------------------- 2. memory files

file_names = st.one_of(
    st.from_regex(r"[a-z][a-z0-9-]{0,15}\.md", fullmatch=True),
    st.sampled_from(["MEMORY.md", ".hidden.md", "#x.md", "a.md~", "b.md.tmp", "c.md.swp", "d.txt", "Ünïcødé.md",
                     "数据.md", "with space.md", "x" * 200 + ".md", "-.md"]),
    st.text(alphabet=st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1, max_size=20).map(lambda s: s + ".md"),
)  # fmt: skip
fm_values = st.one_of(st.text(max_size=40), st.sampled_from(["", "null", "~", "[1, 2]", "{a: 1}", "2024", "true",
                                                              "'unterminated", "!!python/object:os.system ls",
                                                              "&a [*a]", "*nope", "|\n  block"]))  # fmt: skip


def _memory_text(name: str, desc: str, kind: str, body: str, layout: int) -> str:
    if layout == 0:
        return f"---\nname: {name}\ndescription: {desc}\nmetadata:\n  type: {kind}\n---\n\n{body}\n"
    if layout == 1:
        return f"---\nname: {name}\ndescription: {desc}\ntype: {kind}\n---\n{body}"
    if layout == 2:
        return f"---\nname: {name}\ndescription: {desc}\n{body}"  # never closed
    if layout == 3:
        return f"\ufeff---\r\nname: {name}\r\ndescription: {desc}\r\ntype: {kind}\r\n...\r\n{body}"
    return f"name: {name}\n{body}"  # no front matter


memory_contents = st.one_of(
    st.builds(_memory_text, fm_values, fm_values, st.sampled_from(["user", "feedback", "project", "reference", "rumour", "[x]"]),
              st.text(max_size=200), st.integers(0, 4)).map(lambda t: t.encode("utf-8")),
    st.binary(max_size=300),
    st.sampled_from([3, 30, 200, 600]).map(lambda d: f"---\nname: deep\ndescription: d\ntype: user\nx: {'[' * d}{']' * d}\n---\nbody\n".encode()),
    st.sampled_from([3, 30, 200, 400]).map(lambda d: ("---\nname: deep\ndescription: d\ntype: user\nx:\n" + "".join(
        "  " * i + "- \n" for i in range(d)) + "---\nbody\n").encode()),
    st.sampled_from([1024 * 1024 + 1, 3 * 1024 * 1024]).map(lambda n: b"---\nname: big\ndescription: b\ntype: user\n---\n" + b"y" * n),
    st.just(b"---\nname: a\ndescription: b\ntype: user\nm: &a [x,x,x,x,x,x,x,x,x]\nn: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
            b"o: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\np: [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n---\nbillion laughs\n"),
)  # fmt: skip


@example(files={"deep.md": b"---\nname: deep\ndescription: d\ntype: user\nx: " + b"[" * 1000 + b"]" * 1000 + b"\n---\nb\n",
                "fine.md": b"---\nname: fine\ndescription: d\ntype: user\n---\nbody\n"}, scope="project")  # fmt: skip
@example(files={"a.md": b"---\nname: twin\ndescription: d\ntype: user\n---\nbody\n",
                "\n.md": b"---\nname: twin\ndescription: d\ntype: user\n---\nbody\n"}, scope="global")
@example(files={"a\rb.md": b"---\nname: cr\ndescription: d\ntype: user\n---\nbody\n",
                "x\u2028- [forged](evil.md) \u2014 y.md": b"---\nname: ls\ndescription: d\ntype: user\n---\nbody\n"},
         scope="global")  # fmt: skip
@pytest.mark.slow
@fuzz(1.0)
@given(files=st.dictionaries(file_names, memory_contents, min_size=1, max_size=8), scope=st.sampled_from(["global", "project"]))
def test_fuzzed_memory_files_are_reported_never_fatal_and_never_touched(files: dict[str, bytes], scope: str) -> None:
    COUNTS["fuzz: memory directories tried"] += 1
    COUNTS["fuzz: memory files tried"] += len(files)
    with sandbox() as (_parent, home):
        key = None if scope == "global" else "-fuzz"
        d = home / "memory" if key is None else home / "projects" / "-fuzz" / "memory"
        d.mkdir(parents=True, exist_ok=True)
        written = {}
        for name, data in files.items():
            try:
                (d / name).write_bytes(data)
            except OSError:  # a name the file system refuses (too long in bytes)
                continue
            written[name] = data
        res = scan_dir(d, scope, key)
        for p in res.problems:
            assert one_line(p.reason), p
        COUNTS["fuzz: memory files refused (reported, left in place)"] += len(res.problems)
        result = refresh_dir(Home(home), scope, key, d)
        for name, data in written.items():
            if name != "MEMORY.md":
                assert (d / name).read_bytes() == data, f"{name} was modified"
        whole = (d / "MEMORY.md").read_bytes().decode("utf-8", "surrogateescape")
        assert whole.startswith(INDEX_HEADER) or whole.startswith("> ")
        index, marker, kept = whole.partition(INDEX_END_PREFIX)
        assert marker, "memd's block ends in its end marker"
        if "MEMORY.md" in written:  # a MEMORY.md of someone else's: every line of it kept (§14)
            given = written["MEMORY.md"].decode("utf-8", "surrogateescape")
            assert all(line in kept for line in given.split("\n") if line and INDEX_HEADER not in line)
        # One line per memory (§2.3): no line break of any kind inside a line, whatever the file names hold.
        broken = [ln for ln in index.split("\n") if ln and ln.splitlines() != [ln]]
        assert not broken, broken
        lines = [ln for ln in index.split("\n") if ln.startswith("- ")]
        linked = linked_files(kept.split("\n")[1:])  # a memory a kept line links to gets no second line
        mine = [m for m in res.memories if m.path.name not in linked]
        assert len(lines) == len(mine)
        assert sorted(lines) == sorted(index_line(m) for m in mine)
        assert result.memories == len(res.memories)


# --------------------------------------------------------------------------- 3. settings.json

SETTING_KEYS = ["memory", "memd", "enabled", "extractEveryTurns", "sessionMemory", "minInitTokens", "minUpdateTokens",
                "toolCallsBetween", "dream", "minHours", "minSessions", "global", "maxBytes", "indexConsolidation",
                "provider", "smallModel", "strongModel", "baseUrl", "timeoutSeconds", "maxRetries",
                "dailyTokenBudget", "pollSeconds", "forcePolling", "reconcileSeconds", "lockTimeoutSeconds",
                "logLevel", "historyKeep", "dreamMaxDeleteShare"]  # fmt: skip
setting_values = st.recursive(
    st.one_of(scalars, st.sampled_from(["auto", "offline", "anthropic", "debug"])),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(SETTING_KEYS), inner, max_size=6),
    max_leaves=30,
)


def _jsonc(value: Any, comments: bool, trailing: bool) -> str:
    text = json.dumps(value, indent=1, ensure_ascii=False, allow_nan=True)
    if trailing:
        text = text.replace("\n}", ",\n}").replace("\n]", ",\n]")
    if comments:
        text = "// memd settings\n" + text.replace("\n", " // c\n", 3) + "\n/* end */"
    return text


settings_texts = st.one_of(
    st.builds(_jsonc, st.dictionaries(st.sampled_from(["memory", "memd", "permissions"]), setting_values, max_size=3),
              st.booleans(), st.booleans()),
    st.lists(st.sampled_from(list('{}[]":,/*\n 0123456789.-+eE') + ["true", "false", "null", '"memory"', '"memd"',
                                                                     "Infinity", "NaN", "'", "\\", "//", "/*"]),
             max_size=60).map("".join),
    st.text(max_size=80),
    any_text,
    st.integers(1, 5000).map(lambda d: '{"memory": ' + "[" * d + "]" * d + "}"),
    st.integers(1, 5000).map(lambda d: '{"memd": ' + '{"a": ' * d + "1" + "}" * d + "}"),
)


@example(text='{"memory": ' + "[" * 200 + "]" * 200 + "}", raw=b"[" * 3000)
@fuzz(3.0)
@given(text=settings_texts, raw=st.binary(max_size=40))
def test_fuzzed_settings_fall_back_field_by_field_with_one_line_warnings(text: str, raw: bytes) -> None:
    COUNTS["fuzz: settings texts tried"] += 2
    for s in (st_mod.parse_text(text), _load_bytes(raw)):
        for w in s.warnings:
            assert one_line(w), w
        COUNTS["fuzz: settings fields refused (fell back, with a warning)"] += len(s.warnings)
        for fields, section in ((st_mod.MEMORY_FIELDS, "memory"), (st_mod.MEMD_FIELDS, "memd")):
            for dotted, kind, _default in fields:
                value = s.get(f"{section}.{dotted}")
                assert st_mod.check_value(kind, value) is None, (dotted, value)


def _load_bytes(raw: bytes) -> Any:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "settings.json"
        p.write_bytes(raw)
        return st_mod.load(p)


# --------------------------------------------------------------------------- 4. model answers

op_names = st.one_of(
    st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True),
    st.sampled_from(["../../.bashrc", "/etc/passwd", "..", ".", "~/.ssh/authorized_keys", "a/../../b", "MEMORY", "memory",
                     "x\x00y", "..\\..\\win.ini", "name\nwith newline", " ", "", "数据管道", "a" * 300, "../outside/victim",
                     "/tmp", "%2e%2e%2fetc", "C:\\Windows", "\u202eevil", "MEMORY.md"]),
    st.text(max_size=40), any_text, st.integers(), st.none(), st.lists(st.integers(), max_size=2), st.booleans(),
)  # fmt: skip
op_text = st.one_of(st.text(max_size=120), any_text, st.sampled_from(["", " ", "\x00", "a\x00b", "line\nbreak"]),
                    st.integers(), st.none(), st.lists(st.text(max_size=3), max_size=2),
                    st.sampled_from([8 * 1024 + 1, 300_000, 2_000_000]).map(lambda n: "z" * n),
                    st.just("key sk-" + "ant-api03-" + "Q7" * 20 + "x here"))  # fmt: skip
valid_operations = st.fixed_dictionaries(
    {"op": st.sampled_from(["add", "update", "delete"]), "scope": st.sampled_from(["global", "project"]),
     "name": st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True),
     "description": st.from_regex(r"[A-Za-z][A-Za-z0-9 ,.é数]{0,60}", fullmatch=True),
     "type": st.sampled_from(["user", "feedback", "project", "reference"]),
     "body": st.text(min_size=1, max_size=300).filter(lambda t: t.strip() != "")},
)  # fmt: skip


def _mutated(op: dict[str, Any], field: str, value: Any, mutate: bool) -> dict[str, Any]:
    return {**op, field: value} if mutate else op


# A sound operation with, half the time, one field made hostile.
near_valid_operations = st.builds(_mutated, valid_operations, st.sampled_from(["name", "description", "body", "scope", "type", "op"]),
                                  st.one_of(op_names, op_text), st.booleans())  # fmt: skip
random_operations = st.fixed_dictionaries(
    {},
    optional={"op": _maybe(st.sampled_from(["add", "update", "delete", "ADD ", "remove"])),
              "scope": _maybe(st.sampled_from(["global", "project", "Global", "../global", "/", "session"])),
              "name": op_names, "description": op_text, "type": _maybe(st.sampled_from(["user", "feedback", "project", "reference", "rumour"])),
              "body": op_text, "reason": op_text, "path": op_names},
)  # fmt: skip


def _answer(kind: int, ops: list[Any], junk: str, depth: int) -> str:
    doc = {"operations": ops}
    if kind == 0:
        return json.dumps(doc)
    if kind == 1:
        return f"Here you go:\n```json\n{json.dumps(doc, indent=1)}\n```\nDone."
    if kind == 2:
        return json.dumps(doc) + "\n" + json.dumps(doc)
    if kind == 3:
        return json.dumps(ops)
    if kind == 4:
        return junk
    if kind == 5:
        return '{"operations": ' + "[" * depth + "]" * depth + "}"
    if kind == 6:
        return json.dumps({"operations": ops[0] if ops else None})
    return json.dumps(doc, ensure_ascii=False)


operations = st.one_of(near_valid_operations, random_operations)
answers = st.builds(_answer, st.sampled_from([0, 0, 0, 7, 1, 2, 3, 4, 5, 6]), st.lists(operations, min_size=1, max_size=6), st.text(max_size=200), st.integers(1, 50_000))


@pytest.fixture(scope="module")
def fake_api() -> Iterator[Any]:
    with FakeAnthropic() as api:
        yield api


DURABLE = [("user", "Please always remember: we deploy the billing service only on Tuesdays, because of on-call."),
           ("assistant", "Understood.")]  # fmt: skip


@example(answer='{"operations": null}')
@example(answer=json.dumps({"operations": [
    {"op": "add", "scope": "project", "name": "kept-one", "description": "d", "type": "user", "body": "fine"},
    {"op": "add", "scope": "project", "name": "lone-surrogate", "description": "d", "type": "user", "body": "b \ud800"},
    {"op": "add", "scope": "global", "name": "x\udcff-y", "description": "d \udfff", "type": "user", "body": "b"}]}))
@pytest.mark.slow
@fuzz(0.8)
@given(answer=answers)
def test_fuzzed_model_answers_never_escape_the_tree_and_every_refusal_is_one_line(fake_api: Any, answer: str) -> None:
    def responder(body: dict[str, Any]) -> Any:
        return text("yes") if "memory gate" in request_system_text(body) else text(answer)

    fake_api.responder = responder
    COUNTS["fuzz: model answers tried"] += 1
    with sandbox() as (_parent, home):
        write_session(home / "projects" / "-fuzz" / "s1.jsonl", DURABLE)
        ingest(home)
        ctx = context(home, make_settings(), fake_url=fake_api.base_url)
        ctx.log = log = RecordingLog()
        try:
            r = run_job(ctx, extract, Place("session", "-fuzz", "s1"))
        finally:
            ctx.conn.close()
        assert not [x for x in log.records if "traceback" in x], r
        assert r.outcome in ("ok", "failed"), r
        if r.outcome == "failed":
            assert one_line(r.reason) and r.reason.startswith("extraction answer refused"), r.reason
            COUNTS["fuzz: model answers refused as a whole (job failed with a one-line reason)"] += 1
        else:
            COUNTS["fuzz: model operations refused one by one"] += r.details.get("rejected", 0) if r.details.get("gate") == "yes" else 0
            COUNTS["fuzz: model operations applied"] += sum(v for k, v in r.details.get("applied", {}).items()
                                                            if k in ("added", "updated", "deleted"))  # fmt: skip
        for rec in log.records:
            if rec["event"] in ("operation.rejected", "operation.refused"):
                assert one_line(rec.get("reason")), rec
        assert view_problems(home, end_marker=False) == []
        allowed = ("memd/", "memory/", "projects/-fuzz/s1.jsonl", "projects/-fuzz/memory/")
        for p in walk(home):
            rel = p.relative_to(home).as_posix()
            if p.is_file():
                assert rel == "memory.md" or rel.startswith(allowed), rel

"""The typed fold (msgspec structs over the fields memd reads) against the generic one (orjson,
then the same fold on a normalised copy): every line must count alike whichever way it goes."""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memd.transcripts import records
from memd.transcripts.fold import Folder
from memd.transcripts.tally import Tally, UsageBook
from tests.conftest import corpus_sessions, require_corpus

ODD = [None, True, False, 0, -1, 2**63, 2**64 + 5, -(2**63) - 1, 10**30, 1.5, -0.0, 1e300, "", "x", "\U0001f600é", [], {},
       [1, "a"], {"a": [1]}, "toolu_1", "m1", "assistant", "user", "system", "text", "tool_use", "tool_result", "progress",
       "agent_progress", "/pause-memory", "<command-name>/pause-memory</command-name>", [{"type": "text"}],
       [{"type": "text", "text": None}, {"type": "text", "text": "hi"}], [{"type": "tool_result", "tool_use_id": "toolu_1"}],
       [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"x": 2**64 + 5, "y": 1.0, "z": -0.0, "w": 1e-7}}],
       {"input_tokens": 2**41, "output_tokens": True, "cache_read_input_tokens": 3.0}]  # fmt: skip


def _corpus() -> list[Any]:
    require_corpus()
    out = []
    for p in corpus_sessions():
        out += [json.loads(x) for x in p.read_bytes().split(b"\n") if x.strip() and len(x) < 20_000]
    return out


CORPUS: list[Any] = []


@pytest.fixture(scope="module", autouse=True)
def _load() -> Iterator[None]:
    CORPUS[:] = _corpus()
    yield


def _paths(v: Any, pre: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield pre
    if isinstance(v, dict):
        for k, x in v.items():
            yield from _paths(x, (*pre, k))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from _paths(x, (*pre, i))


@st.composite
def mutated_lines(draw: st.DrawFn) -> bytes:
    """A real record with up to three values replaced by odd ones (or removed), written compact or not."""
    rec = json.loads(json.dumps(CORPUS[draw(st.integers(0, len(CORPUS) - 1))]))
    for _ in range(draw(st.integers(0, 3))):
        path = draw(st.sampled_from(list(_paths(rec))))
        if not path:
            continue
        parent = rec
        for k in path[:-1]:
            parent = parent[k]
        if isinstance(parent, dict) and draw(st.booleans()):
            parent.pop(path[-1], None)
        else:
            parent[path[-1]] = copy.deepcopy(draw(st.sampled_from(ODD)))
    compact = draw(st.booleans())
    return json.dumps(rec, separators=(",", ":") if compact else (", ", ": "), ensure_ascii=draw(st.booleans())).encode()


def _fold(lines: list[bytes], generic: bool) -> tuple[dict[str, Any], list[int], dict[str, Any], int, int]:
    t, u = Tally(), UsageBook()
    f = Folder(t, u, lambda _tid: False, True, "claude")  # as known from an earlier read: typed from line one
    saved = records.RECORD
    if generic:
        class Refuse:
            def decode(self, _data: bytes) -> Any:
                raise msgspec.DecodeError("forced")

        records.RECORD = Refuse()  # type: ignore[assignment]
    try:
        bad: list[tuple[int, str]] = []
        parsed = f.fold([x + b"\n" for x in lines], 0, bad)
    finally:
        records.RECORD = saved
    f.finish(sum(len(x) + 1 for x in lines))
    return vars(t), u.total, dict(u.entries), parsed, len(bad)


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.lists(mutated_lines(), min_size=1, max_size=12))
def test_typed_and_generic_folds_count_alike(lines: list[bytes]) -> None:
    assert _fold(lines, generic=False) == _fold(lines, generic=True)


def test_the_corpus_goes_the_typed_way() -> None:
    """Real lines decode typed (only `system` and `cost-state` records are read from orjson's dict)."""
    for p in corpus_sessions():
        for line in p.read_bytes().split(b"\n"):
            if line.strip():
                assert records.RECORD.decode(line).type is not None


@pytest.mark.parametrize("line", [
    b'{"type":"user","uuid":"x","zzz":' + b"[" * 1100 + b"]" * 1100 + b"}",  # deeper than orjson reads
    b'{"type":"user","uuid":"x","zzz":"\\ud800"}',  # a lone surrogate
    b'{"type":"user","uuid":"x"} {"type":"user"}',  # two values on a line
])  # fmt: skip
def test_lines_orjson_refuses_stay_bad(line: bytes) -> None:
    assert _fold([line], generic=False)[4] == 1


def test_bytes_not_utf8_count_only_where_memd_never_reads() -> None:
    """msgspec skips an unread field without judging its bytes (checking them would be a second pass
    over the line); every string the fold reads is checked, and such a line stays bad."""
    unread = b'{"type":"user","uuid":"x","zzz":"caf\xe9","message":{"content":"hi"}}'
    read = b'{"type":"user","uuid":"x","message":{"content":"caf\xe9"}}'
    tally, _total, _entries, parsed, bad = _fold([unread, read], generic=False)
    assert (parsed, bad) == (1, 1)
    assert tally["records"] == 1 and tally["human_turns"] == 1 and tally["conv_chars"] == 2


def test_odd_types_never_crash_the_fold() -> None:
    lines = [b'{"type":"user","uuid":"a","message":{"content":"hi"}}', b'{"type":[],"uuid":"b"}',
             b'{"type":"system","subtype":{"a":1}}', b'{"type":{"t":1},"message":{"content":[{"type":[1]}]}}']  # fmt: skip
    tally = _fold(lines, generic=False)[0]
    assert tally["records"] == 4 and tally["unknown_types"] == {"[]": 1, "system/{'a': 1}": 1, "{'t': 1}": 1}


def test_nesting_orjson_refuses_stays_bad_under_a_raised_recursion_limit() -> None:
    """msgspec reads as deep as the interpreter lets it (hypothesis, for one, raises the limit);
    orjson stops at 1024 levels."""

    deep = b'{"type":"user","uuid":"x","zzz":' + b"[" * 1100 + b"]" * 1100 + b"}"
    fine = b'{"type":"user","uuid":"x","zzz":' + b"[" * 900 + b"]" * 900 + b"}"
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(10_000)
    try:
        assert records.msgspec_reads_too_deep()  # what the guard is for
        assert _fold([deep, fine], generic=False)[3:] == (1, 1)
    finally:
        sys.setrecursionlimit(limit)

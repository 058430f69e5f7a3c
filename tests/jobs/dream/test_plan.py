"""Validating a model's operations, the guard, hand-edit detection (pure)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from jobs.dream.plan import DreamOp, Rules, guard, hand_edited, validate_dream
from memd.clock import iso
from memd.memory.answer import ModelOutputError
from memd.memory.file import Memory
from tests.fakeapi import (
    op_absolute_path,
    op_path_traversal,
)
from tests.jobs.dream.helpers import (
    mem,
)

# ----------------------------------------------------------------------------- validation and guardrails (pure)


def _rules(tmp_path: Path, memories: list[Memory], **kw: Any) -> Rules:
    return Rules("project", tmp_path, taken=frozenset(m.path.name for m in memories), **kw)


def test_validation_refuses_paths_unknown_sources_and_collisions(tmp_path: Path) -> None:
    ms = [mem("alpha", "project", "a", "A"), mem("beta", "project", "b", "B"), mem("gamma", "user", "g", "G")]
    ops = [
        op_path_traversal(),  # add named ../../.bashrc
        op_absolute_path(),  # add named /etc/passwd
        {"op": "delete", "name": "../alpha.md", "reason": "x"},
        {"op": "merge", "sources": ["alpha", "../../etc/passwd"], "name": "ab", "description": "d", "type": "project", "body": "b"},
        {"op": "merge", "sources": ["alpha"], "name": "ab", "description": "d", "type": "project", "body": "b"},
        {"op": "merge", "sources": ["alpha", "beta"], "name": "gamma", "description": "d", "type": "project", "body": "b"},
        {"op": "merge", "sources": ["alpha", "beta"], "name": "/abs/x", "description": "d", "type": "project", "body": "b"},
        {"op": "update", "name": "nope", "description": "d", "type": "project", "body": "b"},
        {"op": "delete", "name": "beta", "scope": "global", "reason": "wrong scope"},
        {"op": "merge", "sources": ["alpha", "BETA"], "name": "alpha", "description": "both", "type": "project", "body": "A+B", "reason": "same"},
        {"op": "delete", "name": "beta", "reason": "already merged"},
        {"op": "delete", "name": "gamma.md", "reason": "stale"},
        {"op": "add", "name": "MEMORY", "description": "d", "type": "project", "body": "b"},
    ]
    accepted, rejected = validate_dream({"operations": ops}, ms, _rules(tmp_path, ms))
    assert [(o.op, o.files, o.result) for o in accepted] == [
        ("merge", ("alpha.md", "beta.md"), "alpha.md"), ("delete", ("gamma.md",), None),
        ("add", (), accepted[-1].result),
    ]  # fmt: skip
    assert accepted[-1].result != "MEMORY.md" and str(accepted[-1].result).endswith(".md")
    reasons = dict(rejected)
    assert "path" in reasons[0] and "path" in reasons[1] and "path" in reasons[2]
    assert "not a memory of this scope" in reasons[3] and "2 to" in reasons[4]
    assert "not among the sources" in reasons[5] and "merge result" in reasons[6]
    assert "not a memory" in reasons[7] and "scope" in reasons[8] and "already changed by operation 9" in reasons[10]
    with pytest.raises(ModelOutputError):
        validate_dream({"ops": []}, ms, _rules(tmp_path, ms))


def test_validation_protects_hand_edits_and_unshown_memories(tmp_path: Path) -> None:
    ms = [mem("mine", "user", "u", "U"), mem("big", "project", "p", "P"), mem("free", "project", "f", "F")]
    rules = _rules(tmp_path, ms, protected=frozenset({"mine.md"}), unshown=frozenset({"big.md"}))
    ops = [{"op": "delete", "name": "mine"}, {"op": "delete", "name": "big", "reason": "r"},
           {"op": "update", "name": "mine", "description": "u2", "type": "user", "body": "U2", "reason": "user said so in s3"},
           {"op": "update", "name": "free", "description": "f", "type": "project", "body": "F"}]  # fmt: skip
    accepted, rejected = validate_dream({"operations": ops}, ms, rules)
    assert [o.name for o in accepted] == ["mine"]
    reasons = dict(rejected)
    assert "edited by hand" in reasons[0] and "not shown" in reasons[1] and "changes nothing" in reasons[3]


GUARD = [
    # deletes (file names), merges (sources, result), force, refused fragment
    (["a"], [], False, None),
    (["a", "b"], [], False, None),  # 2/5 = 40%
    (["a", "b", "c"], [], False, "3 of 5"),
    ([], [(("a", "b", "c", "d"), "a")], False, "3 of 5"),  # merge sources not kept count as deletes
    ([], [(("a", "b", "c", "d"), "new")], True, None),
    (["u"], [], False, "every user memory"),
    (["u"], [], True, None),
    (["a", "b", "c", "d", "u"], [], True, "all 5 memories"),  # even forced
]


@pytest.mark.parametrize("deletes,merges,force,refused", GUARD)
def test_guard_table(deletes: list[str], merges: list[Any], force: bool, refused: str | None) -> None:
    ms = [mem(n, "user" if n == "u" else "project", n, n) for n in "abcdu"]
    ops = [DreamOp("delete", n, files=(f"{n}.md",)) for n in deletes]
    ops += [DreamOp("merge", r, "d", "project", "b", "", tuple(f"{s}.md" for s in src), f"{r}.md") for src, r in merges]
    why = guard(ms, ops, max_share=0.5, force=force)
    assert (why is None) if refused is None else (why is not None and refused in why), why


def test_hand_edit_detection() -> None:
    last = datetime(2026, 11, 1, tzinfo=UTC)
    t = last.timestamp()
    memd_meta = {"source": "memd", "updated": iso(datetime.fromtimestamp(t + 100, UTC))}
    ms = [
        mem("memd-written", "user", "d", "b", t + 100, memd_meta),
        mem("memd-then-hand", "user", "d", "b", t + 5000, memd_meta),
        mem("hand-new", "user", "d", "b", t + 10),
        mem("hand-old", "user", "d", "b", t - 10),
    ]
    assert hand_edited(ms, last) == {"memd-then-hand.md", "hand-new.md"}
    assert hand_edited(ms, None) == {"memd-then-hand.md", "hand-new.md", "hand-old.md"}

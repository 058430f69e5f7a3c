"""Look-alike memory names (issue 23): control, bidi and zero-width characters refused; width folded before
names are compared."""

from __future__ import annotations

from pathlib import Path

import pytest

from memd.memory.change import Change
from memd.memory.check import InvalidMemory, check_names
from memd.memory.file import render_memory, write_memory
from memd.memory.names import fold_name, hidden_char
from memd.memory.operations import validate_operations
from memd.memory.scan import scan_dir
from memd.tree import Home


def _add(name: str) -> tuple[list, list]:
    return validate_operations({"operations": [{"op": "add", "scope": "global", "name": name, "description": "d",
                                                "type": "user", "body": "b", "reason": "r"}]})  # fmt: skip


@pytest.mark.parametrize("name", ["keep\u200bme", "keep\u202eme", "keep\u2066me", "keep\ufeffme", "keep\u00adme",
                                  "keep\u200dme"])  # fmt: skip
def test_a_name_with_an_invisible_or_bidi_character_is_refused(name: str) -> None:
    accepted, rejected = _add(name)
    assert not accepted and "invisible or bidi" in rejected[0][1]
    assert hidden_char(name)


def test_ordinary_names_in_any_script_pass() -> None:
    for name in ("keep me", "Straße", "数据库", "café au lait", "עברית", "می\u200cخواهم", "क्\u200dष"):
        accepted, rejected = _add(name)
        assert accepted and not rejected, name
        assert hidden_char(name) is None


def test_width_and_case_are_folded_before_names_are_compared(tmp_path: Path) -> None:
    assert fold_name("ＭＥＭＯＲＹ") == fold_name("memory") == fold_name("Memory")
    d = tmp_path / "memory"
    d.mkdir()
    write_memory(d, "memory-notes", render_memory("memory", "the first", "user", "one", {}))
    write_memory(d, "fullwidth", render_memory("ＭＥＭＯＲＹ", "the look-alike", "user", "two", {}))
    res = scan_dir(d)
    assert [p.reason for p in res.problems if "duplicate name" in p.reason], res.problems
    home = Home(tmp_path)
    (tmp_path / "memory").rename(tmp_path / "m2")
    home.global_memory.mkdir(parents=True, exist_ok=True)
    write_memory(home.global_memory, "tabs", render_memory("tabs", "tabs", "user", "Use tabs.", {}))
    edit = Change("global", None, "other.md", "add", "ｔａｂｓ", render_memory("ｔａｂｓ", "look-alike", "user", "x", {}),
                  None)  # fmt: skip
    with pytest.raises(InvalidMemory, match=r"already used by tabs\.md"):
        check_names(home, [edit])

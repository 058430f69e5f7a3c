"""Typed settings: frozen dataclasses built from the one field table, read by attribute everywhere."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from memd import settings as st

REPO = Path(__file__).resolve().parents[1]
DOTTED_READ = re.compile(r"""\.get\(\s*["'](memory|memd)\.""")


def _attr_path(dotted: str) -> list[str]:
    return ["global_" if p == "global" else re.sub(r"(?<!^)([A-Z])", lambda m: "_" + m.group(1).lower(), p)
            for p in dotted.split(".")]  # fmt: skip


def _typed_value(s: st.Settings, section: str, dotted: str) -> object:
    node: object = getattr(s, section)
    for part in _attr_path(dotted):
        node = getattr(node, part)
    return node


@pytest.mark.parametrize("section,fields", [("memory", st.MEMORY_FIELDS), ("memd", st.MEMD_FIELDS)])
def test_every_field_of_the_table_is_a_typed_attribute_with_its_default(section: str, fields: list) -> None:
    s = st.defaults()
    for dotted, _kind, default in fields:
        assert _typed_value(s, section, dotted) == default == s.get(f"{section}.{dotted}"), dotted


def test_a_parsed_file_reads_the_same_by_attribute_and_by_path() -> None:
    s = st.parse_text(json.dumps({"memory": {"dream": {"minHours": 3}, "global": {"maxBytes": 100}, "readOnly": True},
                                  "memd": {"sync": {"everyMinutes": 7}, "logLevel": "debug"}}))  # fmt: skip
    assert not s.warnings
    assert s.memory.dream.min_hours == 3 and s.memory.global_.max_bytes == 100 and s.memory.read_only is True
    assert s.memd.sync.every_minutes == 7 and s.memd.log_level == "debug"
    assert s.as_dict()["memory"]["dream"]["minHours"] == 3


def test_settings_are_frozen() -> None:
    s = st.defaults()
    with pytest.raises(AttributeError):
        s.memd.provider = "anthropic"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.refused = "no"  # type: ignore[misc]


def test_the_typed_classes_mirror_the_field_tables() -> None:
    st._check_mirror(st.Memory, st.MEMORY_FIELDS)
    st._check_mirror(st.Memd, st.MEMD_FIELDS)


def test_a_class_that_does_not_mirror_its_table_is_refused() -> None:
    with pytest.raises(AssertionError, match="minSessions"):
        st._check_mirror(st.Dream, [("enabled", "bool", True), ("minHours", "int:1..10", 1)])


def test_no_dotted_setting_read_outside_the_loader() -> None:
    offenders = []
    for p in [*(REPO / "memd").rglob("*.py"), *(REPO / "jobs").rglob("*.py")]:
        if p == REPO / "memd" / "settings.py":
            continue
        for n, line in enumerate(p.read_text().splitlines(), 1):
            if DOTTED_READ.search(line):
                offenders.append(f"{p.relative_to(REPO)}:{n}: {line.strip()}")
    assert not offenders, "\n".join(offenders)

"""The front-matter fast path (`memd.memory.frontmatter.simple_front`) reads exactly what YAML reads,
or declines: a corpus of odd front matters, every one compared with `yaml.load` (CSafeLoader)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from memd.memory.file import parse_memory, render_memory
from memd.memory.frontmatter import simple_front

LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

VALUES = ["plain words", "'quoted'", "'it''s'", "'a' b'", "yes", "Yes", "no", "on", "OFF", "null", "Null", "~", "",
          "true", "y", "n", "nan", ".nan", ".inf", "1", "0x1f", "1_000", "1:20", "2026-01-02", "'2026-01-02'",
          "2026-01-02T03:04:05Z", "a: b", "a:b", "a #c", "a#c", "a:", "a ", " a", "a\tb", "\"dq\"", "[a, b]", "{a: 1}",
          "&anchor a", "*ref", "!tag a", "|", ">", "@a", "`a", "%a", "-a", "- a", "?a", "a,b", "a[b]", "a{b}",
          "Ｃafé", "日本語", "a\u2028b", "a\x85b", "a\ufeffb", "a\u00a0b", "é", "'\u2028'", "'a\\nb'", "a'b", "it's",
          "http://x.y/z", "a -b", "a - b", "a|b", "<<", "=", "Ä ö", "'  spaced  '", "'#'", "a\r"]  # fmt: skip
KEYS = ["name", "description", "type", "metadata", "source", "x-y", "_k", "yes", "on", "null", "1", "a b", "k:", "'q'", "é"]


def _yaml(head: str) -> Any:
    try:
        return ("ok", yaml.load(head, Loader=LOADER))
    except yaml.YAMLError:
        return ("error", None)


def _check(head: str) -> None:
    fast = simple_front(head)
    if fast is not None:
        kind, data = _yaml(head)
        assert kind == "ok" and data == fast and list(data) == list(fast), (head, fast, data)
        for k, v in data.items():
            assert type(v) is type(fast[k]) and (not isinstance(v, dict) or list(v) == list(fast[k])), head


def test_every_value_and_key_alone_and_nested() -> None:
    for v in VALUES:
        _check(f"name: {v}\n")
        _check(f"name: n\nmetadata:\n  type: {v}\n")
        _check(f"metadata:\n    type: {v}\n")
    for k in KEYS:
        _check(f"{k}: v\n")
        _check(f"m:\n  {k}: v\n")
        _check(f"{k}:\n  a: b\n")


def test_structures_yaml_reads_otherwise() -> None:
    heads = [
        "name: a\nname: b\n", "m:\n  a: b\n  a: c\n", "m:\n", "m:\nn: a\n", "name: a\n\ndescription: b\n",
        "# c\nname: a\n", "name: a # c\n", "name: a\n  continued\n", "m:\n  a: b\n   c: d\n", "m:\n - a\n",
        "m:\n- a\n", "name: a\r\n", "---\nname: a\n", "name: a\n...\n", "%YAML 1.1\n---\nname: a\n", "", "\n",
        "name: a\n\n", " name: a\n", "m:\n  a:\n    b: c\n", "m: {}\n", "m: []\n", "? a\n: b\n", "name: 'a\n  b'\n",
        "name: >\n  folded\n", "name: !!str 1\n", "name:\ta\n", "name :a\n", "name:a\n",
    ]  # fmt: skip
    for h in heads:
        _check(h)


def test_memd_s_own_renders_take_the_fast_path_and_parse_the_same() -> None:
    meta = {"source": "memd", "provider": "offline", "updated": "2026-01-01T00:00:00Z", "session": "s-1"}
    for name, desc in itertools.product(["deploy-window", "Ｃafé", "yes", "1234"], ["Deploys on Tuesdays", "it's: odd", "no"]):
        text = render_memory(name, desc, "project", "body", meta)
        head = text.split("---\n")[1]
        _check(head)
        m = parse_memory(Path("/m/x.md"), text)
        assert (m.name, m.description, m.metadata) == (name, desc, meta)
    assert simple_front(render_memory("a", "b", "user", "x", meta).split("---\n")[1]) is not None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["", "  ", "    ", " "]), st.sampled_from(KEYS),
                          st.sampled_from([": ", ":", " : "]), st.sampled_from(VALUES)), min_size=1, max_size=6))
def test_random_lines_agree_with_yaml(lines: list[tuple[str, str, str, str]]) -> None:
    _check("".join(f"{i}{k}{s}{v}\n" for i, k, s, v in lines))

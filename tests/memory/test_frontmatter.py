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
from memd.memory.frontmatter import simple_dump, simple_front

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


# --------------------------------------------------------------------------- writing: simple_dump


def _pyyaml_dump(front: dict[str, Any]) -> str:
    """What memd wrote before `simple_dump`: PyYAML's Python emitter with memd's dumper and options."""
    from memd.memory.file import _dumper  # noqa: PLC0415 - the dumper render_memory falls back to

    return str(yaml.dump(front, Dumper=_dumper(), sort_keys=False, allow_unicode=True, default_flow_style=False,
                         width=1 << 30))  # fmt: skip


def _check_dump(front: dict[str, Any]) -> bool:
    """`simple_dump` gives PyYAML's bytes or declines; what it gives reads back as `front` (both loaders)."""
    try:
        want: str | None = _pyyaml_dump(front)
    except yaml.YAMLError:
        want = None  # the safe dumper refuses it (a str subclass): so must simple_dump
    got = simple_dump(front)
    if got is None:
        return False
    assert got == want, (front, got, want)
    assert yaml.load(got, Loader=LOADER) == front and yaml.load(got, Loader=yaml.SafeLoader) == front, got
    return True


STAMPS = ["2026-12-01T12:00:00.000Z", "2026-12-01T12:00:00Z", "2026-12-01", "2026-12-01T12:00:00+02:00",
          "2026-1-01", "2026-12-01T12:00", "2026-12-01 12:00:00", "٢٠٢٦-12-01", "2026-12-01T12:00:00.5-01:00"]  # fmt: skip
# Python strings (not YAML source): VALUES as text, the timestamps, and the characters PyYAML treats specially.
TEXTS = [*VALUES, *STAMPS, "a\nb", "a\r\nb", "\ufeff", "\U0001f600 a", "a\U0001f600", "a\x7f", "a\u200bb", "a  b",
         "a: ", "a :b", "a\\b", "A-Z", "x" * 200, "Deploys on Tuesdays.", "topic-0001", "it's here"]  # fmt: skip


def test_dump_every_text_as_a_value_a_nested_value_and_an_item() -> None:
    took = 0
    for v in TEXTS:
        took += _check_dump({"name": v})
        took += _check_dump({"name": "n", "metadata": {"type": v}})
        took += _check_dump({"name": "n", "metadata": {"merged_from": ["a", v]}})
    for k in [*KEYS, "k" * 99, "k" * 100, "k" * 122, "k" * 123, "True", "~", "<<"]:
        took += _check_dump({k: "v"})
        took += _check_dump({"m": {k: "v"}})
    assert took > 50  # most of memd's own shapes are taken, not declined


def test_dump_declines_what_it_does_not_write_itself() -> None:
    class Text(str):
        pass

    shared = ["a"]
    for front in [{}, {"m": {}}, {"m": {"l": []}}, {"m": {"l": shared, "k": shared}}, {"m": {"a": {"b": "c"}}},
                  {"n": 1}, {"n": None}, {"n": True}, {"m": {"l": ["a", 1]}}, {"n": Text("a")}, {1: "a"},
                  {"m": {"l": [["a"]]}}, {"l": ["a"]}, {"m": {"s": [{"a": "b"}]}}]:  # fmt: skip
        assert simple_dump(front) is None, front  # type: ignore[arg-type]
        if front:
            _check_dump(front)  # type: ignore[arg-type]


_ALPHABET = st.sampled_from("aZé日 :#'-_,[]{}&*!|>?%@`\"\t\n\x85\u2028\ufeff\U0001f600.0189T+~")
_TEXT = st.one_of(st.text(_ALPHABET, max_size=12), st.sampled_from(TEXTS))
_KEY_TEXT = st.one_of(st.sampled_from([*KEYS, "merged_from", "updated"]), st.text(_ALPHABET, min_size=1, max_size=6))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_KEY_TEXT, st.one_of(
    _TEXT, st.dictionaries(_KEY_TEXT, st.one_of(_TEXT, st.lists(_TEXT, max_size=3)), max_size=4)), min_size=1, max_size=4))
def test_dump_gives_pyyaml_s_bytes_or_declines(front: dict[str, Any]) -> None:
    _check_dump(front)


# Word-led texts and plain keys: mostly inside the subset, so the emitter's choices are what is compared.
_WORDY = st.builds(str.__add__, st.sampled_from("aZéЖ日"), st.text(st.sampled_from("az09 .,-'!?():#/[]{}&*|>%@`\"é日\U0001f600\t"), max_size=15))
_WORDY_VALUE = st.one_of(_WORDY, st.sampled_from(STAMPS))
_PLAIN_KEY = st.from_regex(r"[a-z_][a-z0-9_-]{0,8}", fullmatch=True)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_PLAIN_KEY, st.one_of(_WORDY_VALUE, st.dictionaries(
    _PLAIN_KEY, st.one_of(_WORDY_VALUE, st.lists(_WORDY_VALUE, min_size=1, max_size=3)), min_size=1, max_size=4)),
    min_size=1, max_size=4))
def test_dump_of_word_led_fronts_gives_pyyaml_s_bytes_or_declines(front: dict[str, Any]) -> None:
    _check_dump(front)


def test_memd_s_own_renders_take_the_own_emitter() -> None:
    """A dream's merge and rewrite (source, provider, updated, merged_from) never reach PyYAML's emitter."""
    meta = {"source": "memd", "provider": "offline", "updated": "2026-12-01T12:00:00.000Z", "merged_from": ["a-1", "b"]}
    front = {"name": "deploy window", "description": "Deploys on Tuesdays.", "metadata": {"type": "project", **meta}}
    assert _check_dump(front)
    text = render_memory("deploy window", "Deploys on Tuesdays.", "project", "body", meta)
    assert text == f"---\n{_pyyaml_dump(front)}---\n\nbody\n"


def test_render_leaves_yaml_unimported_for_memd_s_own_front_matter() -> None:
    """PyYAML (its import and its Python emitter) stays out of a render of memd's usual front matter."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    code = ("import sys; from memd.memory.file import render_memory; "
            "render_memory('n', 'd', 'user', 'b', {'updated': '2026-12-01T12:00:00.000Z', 'merged_from': ['x']}); "
            "print('yaml' in sys.modules)")  # fmt: skip
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "False", r.stdout + r.stderr

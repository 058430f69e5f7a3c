"""Model output is untrusted: parsing, slugs, confinement and operation validation."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd.memory.answer import Caps, ModelOutputError, parse_model_json
from memd.memory.names import InvalidName, UnsafePath, confine, slugify
from memd.memory.operations import Operation, validate_operations
from tests.fakeapi import (
    FAKE_SECRET,
    op,
    op_absolute_path,
    op_huge_body,
    op_path_traversal,
    op_secret_body,
    op_unknown_type,
    ops_text,
)

SLUG = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?")


def validate(*ops: dict[str, Any], **kw: Any) -> tuple[list[Operation], list[tuple[int, str]]]:
    return validate_operations({"operations": list(ops)}, **kw)


# --- parse_model_json ------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"operations": []}',
        '  \ufeff{"operations": []}\n',
        '```json\n{"operations": []}\n```',
        '```\n{"operations": []}\n```',
        'Here is what I found:\n```json\n{"operations": []}\n```\nLet me know.',
        'Sure! {"operations": []} That is all.',
        'I considered {braces} in prose, then: {"operations": []}',
    ],
)
def test_parse_accepts_one_object_in_fences_or_prose(text: str) -> None:
    assert parse_model_json(text) == {"operations": []}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("   \n", "empty"),
        ("no json here", "no JSON object"),
        ('[{"op": "add"}]', "list, not an object"),
        ('{"a": 1} and also {"b": 2}', "2 JSON objects"),
        ('```json\n{"a": 1}\n```\n```json\n{"b": 2}\n```', "2 JSON objects"),
        ('{"operations": [{"op": "add", "name": "cut off', "no JSON object"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ],
)
def test_parse_refuses_with_a_one_line_reason(text: str, reason: str) -> None:
    with pytest.raises(ModelOutputError) as err:
        parse_model_json(text)
    assert reason in err.value.reason
    assert "\n" not in str(err.value)
    assert err.value.exit_code == 4


def test_parse_refuses_an_enormous_answer() -> None:
    with pytest.raises(ModelOutputError, match="over"):
        parse_model_json('{"a": "' + "x" * 17_000_000 + '"}')


@settings(max_examples=100)
@given(
    obj=st.dictionaries(st.text(max_size=10), st.integers() | st.text(max_size=20), max_size=5),
    before=st.text(alphabet=st.characters(blacklist_characters="{}`"), max_size=40),
    after=st.text(alphabet=st.characters(blacklist_characters="{}`"), max_size=40),
)
def test_parse_finds_the_object_whatever_prose_surrounds_it(obj: dict[str, Any], before: str, after: str) -> None:
    assert parse_model_json(f"{before}\n{json.dumps(obj)}\n{after}") == obj


# --- slugify ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("prefers-tabs", "prefers-tabs"),
        ("Prefers Tabs!", "prefers-tabs"),
        ("  use   uv -- not pip  ", "use-uv-not-pip"),
        ("Café crème", "cafe-creme"),
        ("ﬁle naming", "file-naming"),
        ("v2.0 release", "v2-0-release"),
    ],
)
def test_slugify_plain_and_transliterated(name: str, slug: str) -> None:
    assert slugify(name) == slug


def test_slugify_hashes_names_without_ascii_letters() -> None:
    slug = slugify("用户偏好")
    assert re.fullmatch(r"m-[0-9a-f]{8}", slug)
    assert slug == slugify("用户偏好")  # stable across calls and runs
    assert slug != slugify("项目约束")


def test_slugify_keeps_mixed_names_apart() -> None:
    a, b = slugify("偏好 tabs"), slugify("讨厌 tabs")
    assert a.startswith("tabs-") and b.startswith("tabs-") and a != b


def test_slugify_caps_length_and_keeps_long_names_apart() -> None:
    a, b = slugify("x" * 100 + "a"), slugify("x" * 100 + "b")
    assert len(a) <= 64 and len(b) <= 64 and a != b
    assert SLUG.fullmatch(a)


def test_slugify_steers_clear_of_the_index_file() -> None:
    assert slugify("Memory").startswith("memory-")


@pytest.mark.parametrize("name", ["", "   ", "!!!", "---", "🙂"])
def test_slugify_refuses_names_without_letters(name: str) -> None:
    with pytest.raises(InvalidName):
        slugify(name)


@settings(max_examples=300)
@given(st.text(max_size=120))
def test_slugify_is_always_a_confinable_slug(name: str) -> None:
    try:
        slug = slugify(name)
    except InvalidName:
        return
    assert SLUG.fullmatch(slug) and len(slug) <= 64
    assert confine(Path("/tmp/memd-x"), slug) == Path("/tmp/memd-x") / f"{slug}.md"


# --- confine ---------------------------------------------------------------------------


def test_confine_returns_the_file_in_the_directory(tmp_path: Path) -> None:
    assert confine(tmp_path, "prefers-tabs") == tmp_path / "prefers-tabs.md"


@pytest.mark.parametrize("slug", ["../x", "a/b", "", "-a", "A", ".hidden", "a.md", "memory", "x" * 65, "a\x00b"])
def test_confine_refuses_what_is_not_a_slug(tmp_path: Path, slug: str) -> None:
    with pytest.raises(UnsafePath):
        confine(tmp_path, slug)


def test_confine_refuses_a_symlink_leading_out(tmp_path: Path) -> None:
    memdir = tmp_path / "memory"
    outside = tmp_path / "outside"
    memdir.mkdir()
    outside.mkdir()
    os.symlink(outside / "bashrc", memdir / "evil.md")
    with pytest.raises(UnsafePath, match="outside"):
        confine(memdir, "evil")
    assert confine(memdir, "fine") == memdir / "fine.md"


def test_confine_accepts_a_directory_reached_through_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    os.symlink(real, link)
    assert confine(link, "a") == link / "a.md"


# --- validate_operations ------------------------------------------------------------------


def test_valid_add_update_delete_are_accepted() -> None:
    accepted, rejected = validate(
        op(),
        op(op="update", scope="global", name="Uses Vim", type="user", description="d", body="b"),
        {"op": "delete", "scope": "project", "name": "old-thing"},
    )
    assert rejected == []
    assert [(o.op, o.scope, o.slug) for o in accepted] == [
        ("add", "project", "prefers-tabs"),
        ("update", "global", "uses-vim"),
        ("delete", "project", "old-thing"),
    ]
    first = accepted[0]
    assert first.type == "feedback" and first.reason == "the user corrected the agent" and first.redacted == ()
    assert accepted[2].type is None and accepted[2].body == ""


def test_enumerations_forgive_case_and_space() -> None:
    accepted, rejected = validate(op(op=" Add", scope="PROJECT", type="Feedback "))
    assert rejected == [] and (accepted[0].op, accepted[0].scope, accepted[0].type) == ("add", "project", "feedback")


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (op_path_traversal(), "looks like a path"),
        (op_absolute_path(), "looks like a path"),
        (op(name="~/.ssh/config"), "looks like a path"),
        (op(name="..hidden"), "looks like a path"),
        (op(name="a\\b"), "looks like a path"),
        (op(name="nul\x00byte"), "control characters"),
        (op(name="two\nlines"), "control characters"),
        (op(name="x" * 201), "name over 200"),
        (op(name="!!!"), "no letters or digits"),
        (op(name=f"key {FAKE_SECRET}"), "name contains a secret"),
        (op(name=None), "without a name"),
        (op(name=42), "without a name"),
        ({"op": "delete", "scope": "global"}, "delete without a name"),
        (op(op="rename"), "unknown op"),
        (op(op=None), "unknown op"),
        (op(scope="system"), "unknown scope"),
        (op_unknown_type(), "unknown type"),
        (op(type=None), "unknown type"),
        (op(description=""), "empty description"),
        (op(description=None), "empty description"),
        (op(description="d" * 301), "description over 300"),
        (op(body="  "), "empty body"),
        (op(body=["not", "text"]), "empty body"),
        (op(body="a\x00b"), "NUL"),
        (op_huge_body(), "body over 8192 bytes"),
        ("add prefers-tabs", "not an object"),
    ],
)
def test_bad_operation_is_rejected_and_the_rest_accepted(bad: Any, reason: str) -> None:
    accepted, rejected = validate(op(name="first"), bad, op(name="last"))
    assert [o.name for o in accepted] == ["first", "last"]
    assert len(rejected) == 1
    index, why = rejected[0]
    assert index == 1
    assert reason in why
    assert "\n" not in why and len(why) < 200


def test_rejection_reasons_never_quote_a_secret() -> None:
    _, rejected = validate(op(name=f"../{FAKE_SECRET}"), op(op=FAKE_SECRET))
    assert len(rejected) == 2
    assert all(FAKE_SECRET not in why for _, why in rejected)


def test_scope_outside_allowed_scopes_is_rejected() -> None:
    accepted, rejected = validate(op(scope="global", name="a"), op(scope="project", name="b"), allowed_scopes=("global",))
    assert [o.name for o in accepted] == ["a"]
    assert rejected == [(1, "scope 'project' is not allowed here")]


def test_secret_in_body_is_redacted_and_accepted() -> None:
    accepted, rejected = validate(op_secret_body(), op(name="env", description=f"uses {FAKE_SECRET}"))
    assert rejected == []
    for operation in accepted:
        assert FAKE_SECRET not in operation.body and FAKE_SECRET not in operation.description
        assert operation.redacted == ("anthropic",)
    assert "[REDACTED:anthropic]" in accepted[0].body


def test_description_becomes_one_line() -> None:
    accepted, _ = validate(op(description="first line\n  second\tline"))
    assert accepted[0].description == "first line second line"


def test_body_cap_is_in_bytes_and_configurable() -> None:
    exact = "é" * 4096  # 8192 bytes
    accepted, rejected = validate(op(body=exact), op(name="over", body=exact + "x"))
    assert [o.name for o in accepted] == ["prefers-tabs"]
    assert rejected[0][0] == 1 and "body over 8192 bytes" in rejected[0][1]
    accepted, rejected = validate(op(body="x" * 100), caps=Caps(max_body_bytes=50))
    assert accepted == [] and "body over 50 bytes" in rejected[0][1]


def test_operations_past_the_cap_are_rejected() -> None:
    ops = [op(name=f"memory {i}") for i in range(55)]
    accepted, rejected = validate(*ops)
    assert len(accepted) == 50
    assert [i for i, _ in rejected] == list(range(50, 55))
    assert all("cap of 50" in why for _, why in rejected)


def test_second_operation_on_the_same_memory_is_rejected() -> None:
    accepted, rejected = validate(op(name="Prefers Tabs"), {"op": "delete", "scope": "project", "name": "prefers-tabs"})
    assert [o.op for o in accepted] == ["add"]
    assert rejected[0][0] == 1 and "same memory as operation 0" in rejected[0][1]
    accepted, rejected = validate(op(scope="global"), op(scope="project"))
    assert len(accepted) == 2 and rejected == []


@pytest.mark.parametrize("data", [[], "x", None, {}, {"operations": None}, {"operations": {"op": "add"}}])
def test_answer_without_an_operations_list_is_a_model_output_error(data: Any) -> None:
    with pytest.raises(ModelOutputError):
        validate_operations(data)


def test_fenced_answer_with_prose_goes_all_the_way_through() -> None:
    text = ops_text(op(), op_path_traversal(), op_huge_body(), op_secret_body(), op_unknown_type(), fenced=True,
                    prose="I found these durable facts:")  # fmt: skip
    accepted, rejected = validate_operations(parse_model_json(text))
    assert [o.slug for o in accepted] == ["prefers-tabs", "deploy-key"]
    assert [i for i, _ in rejected] == [1, 2, 4]


def test_operations_are_frozen() -> None:
    accepted, _ = validate(op())
    with pytest.raises(AttributeError):
        accepted[0].slug = "../x"  # type: ignore[misc]

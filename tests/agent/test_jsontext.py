"""Byte-preserving JSON edits (memd.agent.jsontext): what is spliced in comes out again, byte for byte,
in any layout a JSON writer produces; the rest of the text is never touched."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd.agent import jsontext

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.text(max_size=8),
                    st.floats(allow_nan=False, allow_infinity=False))  # fmt: skip
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                      max_leaves=12)  # fmt: skip
layouts = st.sampled_from([dict(indent=2), dict(indent=4), dict(indent="\t"), dict(separators=(",", ":")),
                           dict(), dict(indent=2, crlf=True)])  # fmt: skip


def _dump(obj: Any, layout: dict[str, Any]) -> str:
    layout = dict(layout)
    crlf = layout.pop("crlf", False)
    text = json.dumps(obj, ensure_ascii=False, **layout)
    return text.replace("\n", "\r\n") if crlf else text


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=6), values, max_size=4), layouts, values)
def test_insert_then_remove_gives_back_the_text(obj: dict[str, Any], layout: dict[str, Any], value: Any) -> None:
    text = _dump(obj, layout) + "\n"
    key = "memd-owned"
    root = jsontext.top(text)
    added = jsontext.insert_member(text, root, key, value)
    assert json.loads(added) == {**obj, key: value}
    assert added.startswith(text[: root.start + 1])
    back = jsontext.remove_member(added, jsontext.top(added), key)
    assert back == text


@settings(max_examples=200, deadline=None)
@given(st.lists(values, max_size=4), layouts, values)
def test_append_then_remove_item_gives_back_the_text(items: list[Any], layout: dict[str, Any], value: Any) -> None:
    text = _dump({"a": items}, layout)
    arr = jsontext.member(text, jsontext.top(text), "a")
    assert arr is not None
    added = jsontext.append_item(text, arr.value, value)
    assert json.loads(added) == {"a": [*items, value]}
    arr = jsontext.member(added, jsontext.top(added), "a")
    assert arr is not None
    assert jsontext.remove_item(added, arr.value, len(items)) == text


@pytest.mark.parametrize("text", ['{"a": 1e400}', '{"a": NaN}', '{"a": 1,}', '{"a": 1} // x', "{'a': 1}"])
def test_not_strict_json_is_refused(text: str) -> None:
    with pytest.raises(jsontext.JSONTextError):
        jsontext.top(text)


def test_same_keeps_duplicates_and_number_spellings_apart() -> None:
    assert jsontext.same('{"a": 1E5, "a": 2}', '{\n  "a": 1E5,\n  "a": 2\n}')
    assert not jsontext.same('{"a": 1E5}', '{"a": 100000.0}')
    assert not jsontext.same('{"a": 1, "a": 2}', '{"a": 2}')

"""`memd.output.echo` writes a text line as `click.echo` does (the click-free commands print through it, the
click commands through click): the same bytes on the same kinds of stream, click itself the reference."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from typing import Any

import click
import pytest

from memd.output import echo

LINES = ["plain", "é and — and 中", "\x1b[31mred\x1b[0m and \x1b[1mbold", ""]


def _streams() -> dict[str, Callable[[], tuple[Any, Callable[[], bytes]]]]:
    """Kinds of stdout, each made fresh: (stream, its bytes so far)."""

    def wrapper(encoding: str, errors: str | None) -> tuple[Any, Callable[[], bytes]]:
        raw = io.BytesIO()
        text = io.TextIOWrapper(raw, encoding=encoding, errors=errors, write_through=True)
        return text, lambda: (text.flush(), raw.getvalue())[1]

    def string() -> tuple[Any, Callable[[], bytes]]:
        s = io.StringIO()
        return s, lambda: s.getvalue().encode("utf-8", "surrogateescape")

    def binary() -> tuple[Any, Callable[[], bytes]]:
        b = io.BytesIO()
        return b, b.getvalue

    return {
        "utf-8": lambda: wrapper("utf-8", "strict"),
        "ascii": lambda: wrapper("ascii", "strict"),
        "ascii, backslashreplace": lambda: wrapper("ascii", "backslashreplace"),
        "latin-1, replace": lambda: wrapper("latin-1", "replace"),
        "a StringIO": string,
        "a byte stream": binary,
    }


@pytest.mark.parametrize("kind", sorted(_streams()))
@pytest.mark.parametrize("err", [False, True])
def test_echo_writes_what_click_echo_writes(kind: str, err: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    got: list[bytes] = []
    for write in (lambda line: echo(line, err=err), lambda line: click.echo(line, err=err)):
        stream, value = _streams()[kind]()
        monkeypatch.setattr(sys, "stderr" if err else "stdout", stream)
        outcome = []
        for line in LINES:
            try:
                write(line)
                outcome.append("ok")
            except Exception as exc:  # the same failure on both sides counts as the same answer
                outcome.append(type(exc).__name__)
        got.append(value() + repr(outcome).encode())
    assert got[0] == got[1]
    assert b"\x1b" not in got[0]  # not a terminal: the sequences stripped


def test_no_stream_no_output(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdout", None)
    monkeypatch.setattr(sys, "stderr", None)
    echo("nowhere")
    echo("nowhere", err=True)
    click.echo("nowhere")  # the reference does nothing either

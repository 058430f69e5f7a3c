"""What a command writes on stdout and stderr: one code for the click commands (`memd.cli`) and the
click-free ones (`memd.__main__`), so the bytes do not depend on which parsed the command line — the
`--json` document (`json_out`) and a line as `click.echo` writes it (`echo`, without importing click).
Imports nothing beyond `io` and `sys` (loaded at every start) at the top (orjson when a document is written)."""

from __future__ import annotations

import io
import sys
from typing import Any


def json_out(data: Any) -> None:
    """`data` as indented JSON on stdout: orjson's UTF-8 bytes written as they are where stdout has
    a byte layer (a 16 MB listing is not decoded and encoded again), else as text."""
    import orjson  # noqa: PLC0415 - start-up: only when a document is written

    try:
        out = orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
    except TypeError as exc:
        if "surrogates" not in str(exc):
            raise
        # A file name whose bytes are not UTF-8 (the OS's surrogate escapes): JSON with `\udcNN` escapes,
        # which a JSON reader takes back as the same text (orjson refuses to write them).
        import json  # noqa: PLC0415 - rare

        out = (json.dumps(data, indent=2, ensure_ascii=True) + "\n").encode()
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:
        sys.stdout.write(out.decode())
        return
    sys.stdout.flush()  # what was written as text before goes first
    buffer.write(out)
    buffer.flush()


def echo(message: str, *, err: bool = False) -> None:
    """`click.echo(message, err=err)` for a text message, without click (tests/cli/test_run_now_entry.py
    runs both): nothing when the stream is missing (its descriptor closed at start); a stream whose
    encoding is ASCII (a C locale) written through a UTF-8 writer with replacement over its bytes, as
    click mends a misconfigured stream; ANSI escape sequences stripped unless the stream is a terminal;
    the message and a newline in one write, then a flush."""
    stream = sys.stderr if err else sys.stdout
    if stream is None:
        return
    stream = _text_writer(stream)
    out = message + "\n"
    if not _isatty(stream):
        import re  # noqa: PLC0415 - start-up: a line to a pipe or a file

        out = re.sub(r"\033\[[0-?]*[ -/]*[@-~]", "", out)  # click's `_ansi_re`
    stream.write(out)
    stream.flush()


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except Exception:
        return False


_writers: dict[int, tuple[Any, Any]] = {}  # id(stream) -> (stream, its UTF-8 writer): one a stream, as click keeps


def _text_writer(stream: Any) -> Any:
    """`stream`, or for one whose encoding is ASCII (or missing) a UTF-8 writer (errors replaced) over its
    byte layer that never closes it (click's `_force_correct_text_writer`); `stream` when it has none."""
    import codecs  # noqa: PLC0415 - start-up: a line written

    encoding = getattr(stream, "encoding", None) or "ascii"
    try:
        misconfigured = codecs.lookup(encoding).name == "ascii"
    except LookupError:
        misconfigured = False
    buffer = getattr(stream, "buffer", None)
    if not misconfigured or buffer is None:
        return stream
    kept = _writers.get(id(stream))
    if kept is None or kept[0] is not stream:
        kept = (stream, _KeptWriter(buffer, encoding="utf-8", errors="replace", line_buffering=True))
        _writers[id(stream)] = kept
    return kept[1]


class _KeptWriter(io.TextIOWrapper):
    """A text writer over a byte stream it does not own: detached, not closed, when collected."""

    def __del__(self) -> None:
        try:
            self.detach()
        except Exception:
            pass


__all__ = ["echo", "json_out"]

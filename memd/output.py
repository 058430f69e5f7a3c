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


_writers: Any = None  # stream -> its UTF-8 writer, weakly keyed (click's cache of its stream fix-ups)


def _text_writer(stream: Any) -> Any:
    """What click writes a text line to for `stream` (its `_force_correct_text_writer`): the stream itself
    when it has an encoding that is not ASCII and an `errors` setting; else a UTF-8 writer with errors
    replaced over its byte layer (or over the stream, when it is a byte stream), made once a stream and
    never closing it; else, with no byte layer to write to, the stream as it is."""
    if _is_binary_writer(stream, False):
        binary = stream
    else:
        encoding = getattr(stream, "encoding", None)
        if encoding is not None and getattr(stream, "errors", None) is not None and not _is_ascii(encoding):
            return stream
        buffer = getattr(stream, "buffer", None)
        binary = buffer if buffer is not None and _is_binary_writer(buffer, True) else None
        if binary is None:
            return stream
    global _writers
    if _writers is None:
        import weakref  # noqa: PLC0415 - start-up: only for a misconfigured stream

        _writers = weakref.WeakKeyDictionary()
    try:
        writer = _writers.get(stream)
    except Exception:  # not weakly referable, or unhashable: made again each time, as click does
        writer = None
    if writer is None:
        writer = _KeptWriter(binary, encoding="utf-8", errors="replace", line_buffering=True)
        try:
            _writers[stream] = writer
        except Exception:
            pass
    return writer


def _is_ascii(encoding: str) -> bool:
    import codecs  # noqa: PLC0415 - start-up: a line written

    try:
        return codecs.lookup(encoding).name == "ascii"
    except LookupError:
        return False


def _is_binary_writer(stream: Any, default: bool) -> bool:
    """Whether `stream` takes bytes: click's test, an empty write of each kind."""
    try:
        stream.write(b"")
    except Exception:
        try:
            stream.write("")
            return False
        except Exception:
            pass
        return default
    return True


class _KeptWriter(io.TextIOWrapper):
    """A text writer over a byte stream it does not own: detached, not closed, when collected."""

    def __del__(self) -> None:
        try:
            self.detach()
        except Exception:
            pass


__all__ = ["echo", "json_out"]

"""What a command writes: one code for the click commands (`memd.cli`) and the click-free ones
(`memd.__main__`), so the bytes do not depend on which parsed the command line — aligned text tables
(`render`), the `--json` document (`json_out`), a line as `click.echo` writes it (`echo`, without importing
click) and the one-line answer to an expected failure (`error_answer`). Imports nothing beyond `io` and `sys`
(loaded at every start) at the top.

Tables: every command that prints rows (`status`, `list`, `sessions`, `history`, …) goes through `render`,
so a long name widens its column instead of pushing the next one out of line. Pure: text in, lines out.
Widths count display cells (a CJK character takes two), so columns stay aligned for names in any script.
"""

from __future__ import annotations

import io
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence


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


def _text_writer(stream: Any) -> Any:
    """What click writes a text line to for `stream` (its `_force_correct_text_writer`): the stream itself
    when it has an encoding that is not ASCII and an `errors` setting; else a UTF-8 writer with errors
    replaced over its byte layer (or over the stream, when it is a byte stream), which never closes it (a
    line and a flush each: the same bytes as click's kept wrapper); else, with no byte layer to write to,
    the stream as it is."""
    if _is_binary_writer(stream, False):
        return _KeptWriter(stream, encoding="utf-8", errors="replace", line_buffering=True)
    encoding = getattr(stream, "encoding", None)
    if encoding is not None and getattr(stream, "errors", None) is not None and not _is_ascii(encoding):
        return stream
    buffer = getattr(stream, "buffer", None)
    if buffer is None or not _is_binary_writer(buffer, True):
        return stream
    return _KeptWriter(buffer, encoding="utf-8", errors="replace", line_buffering=True)


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


def error_answer(exc: BaseException) -> tuple[str, int] | None:
    """The line and exit code an expected failure ends a command with (`memd.cli.handles_errors` and the
    click-free commands alike): a `MemdError`'s message and its code, a database another process holds
    locked as busy (75); None for anything else, a bug that keeps its traceback."""
    from memd.errors import BusyError, MemdError  # noqa: PLC0415 - start-up: only when a command fails

    if isinstance(exc, MemdError):
        return f"memd: {exc}", exc.exit_code
    if type(exc).__name__ == "OperationalError" and ("locked" in str(exc) or "busy" in str(exc)):  # sqlite3's
        return f"memd: a memd database is locked by another process ({exc}); try again", BusyError.exit_code
    return None


# --- tables -----------------------------------------------------------------------------------------------

GAP = "  "


def cell_width(text: str) -> int:
    """Terminal cells `text` takes: wide East Asian characters two, combining marks none."""
    if text.isascii():
        return len(text)
    import unicodedata  # noqa: PLC0415 - start-up: only for text beyond ASCII

    width = 0
    for ch in text:
        if unicodedata.combining(ch):
            continue
        width += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return width


def _pad(text: str, width: int, right: bool) -> str:
    fill = " " * max(0, width - cell_width(text))
    return fill + text if right else text + fill


def render(headers: Sequence[str], rows: Iterable[Sequence[object]], right: Iterable[int] = ()) -> list[str]:
    """`headers` and `rows` as lines, each column as wide as its widest cell (header included).

    Columns whose index is in `right` are right-aligned (numbers, so they line up under their
    header). The last column is not padded, so no line ends in spaces. `None` prints as "-".
    """
    body = [["-" if c is None else str(c).replace("\n", " ") for c in r] for r in rows]
    ncols = len(headers)
    widths = [cell_width(h) for h in headers]
    for r in body:
        for i, c in enumerate(r[:ncols]):
            widths[i] = max(widths[i], cell_width(c))
    rset = set(right)
    out = []
    for r in [list(headers), *body]:
        cells = [_pad(c, widths[i], i in rset) if i < ncols - 1 or i in rset else c for i, c in enumerate(r[:ncols])]
        out.append(GAP.join(cells).rstrip())
    return out


__all__ = ["GAP", "cell_width", "echo", "error_answer", "json_out", "render"]

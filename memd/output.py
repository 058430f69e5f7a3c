"""What a command writes on stdout for `--json`: one code for the click commands (`memd.cli`) and the
click-free ones (`memd.__main__`), so a document's bytes do not depend on which parsed the command line.
Imports nothing at the top (orjson when a document is written)."""

from __future__ import annotations

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


__all__ = ["json_out"]

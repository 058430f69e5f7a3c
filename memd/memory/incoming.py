"""Whether a file that arrives from elsewhere (a sync's remote, an import's tar) may become a memory here.

Pure: bytes and a file name in, a one-line reason out (None: it may). The checks are those of
any memd write: a memory file name with no hidden character, at most `MAX_INCOMING_BYTES`, UTF-8
text without NUL bytes, front matter memd parses (name, description, type), a name without a
control, bidi or zero-width character, and no secret the redaction rules know. The caller keeps
a refused file aside where no agent reads it (`memd.git.quarantine`), never in live memory.
"""

from __future__ import annotations

from pathlib import Path

from memd.memory.file import MemoryParseError, parse_memory
from memd.memory.names import hidden_char, is_tracked_name

MAX_INCOMING_BYTES = 1024 * 1024  # the memory repository's cap on a file (`memd.git.layout.MAX_FILE_BYTES`)


def vet(name: str, data: bytes) -> str | None:
    """Why `data` may not become memory file `name` (one line), or None when it may."""
    if not is_tracked_name(name):
        return "not a memory file name"
    if hidden := hidden_char(name):
        return f"the file name holds an invisible or bidi character ({hidden})"
    if len(data) > MAX_INCOMING_BYTES:
        return f"larger than {MAX_INCOMING_BYTES // (1024 * 1024)} MB"
    if b"\0" in data:
        return "binary (NUL bytes)"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8 text"
    try:
        m = parse_memory(Path(name), text)
    except MemoryParseError as exc:
        return exc.reason
    if hidden := hidden_char(m.name):
        return f"the memory's name holds an invisible or bidi character ({hidden})"
    from memd.redact.redactor import find_secrets  # noqa: PLC0415 - start-up

    found = sorted({rule for rule, _span in find_secrets(text)})
    if found:
        return "holds what looks like a secret (" + ", ".join(found) + ")"
    return None

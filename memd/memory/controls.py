"""Terminal control characters in what memories hold, and taking them out.

Its own module so that the commands printing memories (`memd list`, `show`, `search`) strip them
without importing the operations' validator (its secret patterns compile at import).
"""

from __future__ import annotations

import re

__all__ = ["strip_controls"]

_STRIPPED = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0, DEL and C1 but newline and tab


def strip_controls(text: str) -> str:
    """`text` without C0 and C1 control characters (newline and tab stay).

    A model's answer can carry terminal control sequences (`ESC ] 0 ; title BEL` sets a
    terminal's title; others move the cursor or hide text): stripped from every description,
    body and reason at validation, and again when `memd list`/`show`/`search` print (a file
    written by hand, or before this rule, may still hold them).
    """
    return _STRIPPED.sub("", text) if _STRIPPED.search(text) else text

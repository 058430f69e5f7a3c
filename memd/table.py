"""Aligned text tables for the terminal: column widths computed from what the cells hold.

Every command that prints rows (`status`, `list`, `sessions`, `history`, …) goes through
`render`, so a long name widens its column instead of pushing the next one out of line.
Pure: text in, lines out. Widths count display cells (a CJK character takes two), so
columns stay aligned for names in any script.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence

GAP = "  "


def cell_width(text: str) -> int:
    """Terminal cells `text` takes: wide East Asian characters two, combining marks none."""
    if text.isascii():
        return len(text)
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

"""The cyclic garbage collector paused around work that makes many objects and no reference cycles.

A first scan's fold and an offline dream allocate tens of thousands of lists, tuples and records that
live until the work ends; every few hundred allocations the collector walks the young objects and finds
nothing (about 2 % of a first scan's instructions; 60–90 ms of a dream at 5,000 memories). Paused,
reference counting still frees everything; a cycle made meanwhile is collected by the first pass after.
Callers say why their work qualifies. Invariant: the collector is put back as it was, whatever happens.

The switch is the process's, and the daemon's jobs pause it from several threads at once (an offline
dream, a ledger scan, the index check's stats): the pauses are counted under a lock, the first one
turns the collector off and the last one turns it back on (when it was on before the first). Each
pause keeping its own "was it on?" would let one that began in another's last moment read "off"
and, ending last, leave the collector off for the daemon's life.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_LOCK = threading.Lock()
_open = [0, False]  # pauses open now; whether the collector was on when the first of them began


@contextmanager
def paused() -> Iterator[None]:
    """The collector off for the block, then on again once no pause is open, if it was on before the first."""
    with _LOCK:
        if not _open[0]:
            _open[1] = gc.isenabled()
            gc.disable()
        _open[0] += 1
    try:
        yield
    finally:
        with _LOCK:
            _open[0] -= 1
            if not _open[0] and _open[1]:
                gc.enable()

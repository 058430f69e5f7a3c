"""How much of a scope one change from elsewhere may delete: dream's whole-scope limit, shared.

Dream refuses a plan deleting more than `memd.dreamMaxDeleteShare` of a scope (`jobs.dream.plan.guard`).
The same limit holds for what memd does not plan itself: a remote commit a sync brings in, an
extraction answer. One deletion is an ordinary `forget` and always passes; several that empty the
scope, or more than the share of it (three or more), are refused with one line. Pure.
"""

from __future__ import annotations

MIN_REFUSED = 3  # below this, a share is too coarse to judge (2 of 3 is 67 %)


def too_many_deleted(present: int, deleted: int, max_share: float) -> str | None:
    """Why deleting `deleted` of `present` memories at once is refused (one line), or None."""
    if deleted < 2 or present <= 0:
        return None
    if deleted >= present:
        return f"would delete all {present} memories of the scope at once"
    share = deleted / present
    if deleted >= MIN_REFUSED and share > max_share:
        return f"would delete {deleted} of {present} memories ({share:.0%} > memd.dreamMaxDeleteShare {max_share:.0%})"
    return None

"""History runs by the names a user types (`memd undo RUN`): a run id or a unique prefix of one."""

from __future__ import annotations

from memd.history.runs import list_runs
from memd.ledger.lookup import one_of
from memd.tree import Home


def resolve_run(home: Home, text: str) -> str:
    """The run id `text` names: the id, or a unique prefix of one (else a usage error naming it)."""
    return one_of("run", text, sorted({str(r["run"]) for r in list_runs(home) if str(r["run"]).startswith(text)}),
                  "memd history")  # fmt: skip

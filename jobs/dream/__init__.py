"""Dream: background consolidation of one memory scope, that can be undone (SPEC §5).

Once enough has accumulated — `minHours` since the scope's last consolidation
**and** `minSessions` sessions touched since — a strong model (or the offline
provider) reads every memory of the scope, its MEMORY.md and what the sessions
since were about, and proposes operations: merge several memories into one,
rewrite one (relative dates made absolute, contradictions resolved: the newer
word wins), delete a stale one. The answer is validated like extraction's
(`memd.memory.operations`, plus this module's own checks for merges), then applied to
a staging copy of the directory which is swapped in atomically, after a
snapshot went to the history (`memd.history.snapshots`), so `memd undo` can take it back.

Decisions worth knowing (each is tested):

* **Baseline of a scope never consolidated**: the mtime of its oldest memory
  file. Hours and sessions are both counted from when the scope began to
  accumulate; a scope without memory files is never due (nothing to consolidate).
* **Sessions that count**: main transcripts (no sub-agents) with at least one
  human turn whose last record is after the baseline; for the global drawer,
  sessions of every project, for a project only its own. memd's own model calls
  go straight to the Messages API and leave no transcript, so they never count.
  Counted from one SQL query over the ledger (plus a prefix filter on the
  timestamp), so a due-check over 10,000 sessions costs milliseconds.
* **Last consolidation is durable** in the cursors table (job "dream", target
  `str(target)`): `{"last": iso, "run": id}`. It advances after a run that
  changed the scope and after a run that found nothing to change.
* **Refusals**: a plan deleting (deletes + merge sources not kept) more than
  `memd.dreamMaxDeleteShare` of the memories, or every memory of one type, is
  refused unless forced; a plan that would leave the scope empty is refused even
  when forced. A refused run (or an unusable model answer) is `failed` with the
  reason, changes nothing, does not advance the last consolidation, and records
  `failed_at`: the scope is retried after `RETRY_HOURS` (capped by minHours),
  not at every due-check, since each try costs a model call.
* **Hand edits**: a memory whose mtime is newer than the last consolidation and
  that memd did not write (memd writes `metadata.source: memd` and an `updated`
  time within `MEMD_WRITE_SLACK_S` of the mtime) is the user's word. The
  offline provider never touches it; a model operation may change it only by
  naming it and giving a reason. A never-consolidated scope counts every file
  memd did not write as hand-made. A hand edit *during* the run (the directory's
  signature changed between planning and the swap) defers the run, unapplied.
* **Locks: decide under no lock, call the model outside it, apply under the
  scope lock with a re-check** (issue 16). A model call may take its whole
  `timeoutSeconds` (times the retries); holding the scope's lock through it made
  every extraction, `memd remember` and index run of the scope wait for the
  model. So the runner holds only the scope's *dream lock* for the run
  (`eligibility.DreamLock`: its own lock file, taken by dreams alone), which
  keeps "two dreams of one scope never both apply" (the second waits, then
  finds the scope no longer due) without blocking anyone else. The plan is
  made without the memory lock — reading is safe, every write to a memory
  directory is atomic — from a scan whose stat of every entry, each taken
  before its read, is the directory's signature `sig0`; the history snapshot is copied meanwhile. Then the scope's own lock
  is taken (`eligibility.scope_lock`, bounded by `memd.lockTimeoutSeconds`)
  and the signature compared with `sig0`: unchanged, the plan is applied
  (staged, snapshotted, swapped) under that lock; changed — another writer came
  first — the run is `deferred` ("memory changed while the model answered;
  will retry") with nothing written and the last consolidation not advanced,
  so the next due-check plans again from what is there now. The scope lock is
  also taken briefly at the start, to finish a swap a crash interrupted before
  anything is read. Order: dream lock, then scope lock; nothing holding a
  scope lock waits for a dream lock, so no deadlock.
* **The offline provider** merges exact and near duplicates (same type,
  difflib ratio ≥ 0.85 over the normalised words of description and body; the
  newest file wins), turns relative dates into absolute ones from each file's
  date (English and the common Chinese words; text in code spans is left
  alone), and rebuilds MEMORY.md. What it writes says `provider: offline`.

The package, by module: `eligibility` (targets, due-ness, baselines,
thresholds), `dates` (relative dates made absolute), `duplicates` (near
duplicates), `plan` (operations, the offline plan, validation, the guard),
`prompt` (what the model is asked), `apply` (render, stage, snapshot, swap) and
`runner` (the run itself). This module is the job's contract with the daemon
and nothing else.
"""

from __future__ import annotations

from jobs.dream.eligibility import NAME, due, scopes, targets
from jobs.dream.runner import run

__all__ = ["NAME", "NEEDS_MODEL", "TARGET_KINDS", "TRIGGER", "due", "run", "scopes", "targets"]

TRIGGER = "minHours since a scope's last consolidation and minSessions sessions touched since (both)"
NEEDS_MODEL = True
TARGET_KINDS: tuple[str, ...] = ("project", "global")


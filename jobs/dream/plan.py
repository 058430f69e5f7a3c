"""Operations: what a dream may change, the offline provider's plan, validating a model's, the guard. Pure.

The checks that need `memd.memory.operations` import it where they run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.dream.dates import absolutize, without_dates
from jobs.dream.duplicates import SIMILARITY, near_duplicate_groups
from memd.clock import parse_iso

if TYPE_CHECKING:
    from memd.memory.file import Memory

MEMD_WRITE_SLACK_S = 120.0
MAX_MERGE_SOURCES = 50


@dataclass(frozen=True)
class DreamOp:
    """One validated change to the scope, in file terms.

    `files` are the existing files it consumes (the update or delete target,
    the merge sources); `result` the file it writes (None for a delete).
    """

    op: str  # "add" | "update" | "delete" | "merge"
    name: str
    description: str = ""
    type: str | None = None
    body: str = ""
    reason: str = ""
    files: tuple[str, ...] = ()
    result: str | None = None

    def touches(self) -> set[str]:
        return set(self.files) | ({self.result} if self.result else set())


@dataclass
class Plan:
    """A dream's checked answer: the operations kept, those rejected and why, and its cost."""

    ops: list[DreamOp] = field(default_factory=list)
    rejected: list[tuple[int, str]] = field(default_factory=list)
    error: str | None = None
    model: str | None = None
    input_tokens: int = 0


def mem_date(m: Memory) -> date:
    return datetime.fromtimestamp(m.mtime, UTC).date()


def written_by_memd(m: Memory) -> bool:
    """memd's own writes carry `source: memd` and an `updated` time matching the file's mtime."""
    if m.metadata.get("source") != "memd":
        return False
    upd = m.metadata.get("updated")
    when = upd if isinstance(upd, datetime) else parse_iso(str(upd)) if upd is not None else None
    if when is None:
        return False
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return m.mtime <= when.timestamp() + MEMD_WRITE_SLACK_S


def hand_edited(memories: Iterable[Memory], last: datetime | None) -> set[str]:
    """File names edited by hand since the last consolidation (all non-memd files if there was none)."""
    cut = float("-inf") if last is None else last.timestamp()
    return {m.path.name for m in memories if m.mtime > cut and not written_by_memd(m)}


def offline_plan(memories: Sequence[Memory], protected: set[str], threshold: float = SIMILARITY) -> list[DreamOp]:
    """The offline provider: merge near duplicates (newest wins), make relative dates absolute."""
    free = [m for m in memories if m.path.name not in protected]
    ops: list[DreamOp] = []
    grouped: set[str] = set()
    for group in near_duplicate_groups(free, threshold):
        keeper = group[0]
        d = mem_date(keeper)
        desc, _ = absolutize(keeper.description, d)
        body, _ = absolutize(keeper.body, d)
        files = tuple(m.path.name for m in group)
        grouped.update(files)
        reason = (f"near-duplicates (similarity ≥ {threshold:g}) of one {keeper.type} memory; "
                  f"the newest, {keeper.path.name}, is kept")  # fmt: skip
        ops.append(DreamOp("merge", keeper.name, desc, keeper.type, body, reason, files, keeper.path.name))
    for m in free:
        if m.path.name in grouped or (without_dates(m.description) and without_dates(m.body)):
            continue
        d = mem_date(m)
        desc, n1 = absolutize(m.description, d)
        body, n2 = absolutize(m.body, d)
        if n1 + n2:
            reason = f"{n1 + n2} relative date(s) made absolute from the file date {d.isoformat()}"
            ops.append(DreamOp("update", m.name, desc, m.type, body, reason, (m.path.name,), m.path.name))
    return ops


class _Lookup:
    """Existing memories by name (case-insensitive), file name and file stem."""

    def __init__(self, memories: Sequence[Memory]) -> None:
        self.by_name: dict[str, Memory] = {}
        self.by_file: dict[str, Memory] = {}
        for m in memories:  # names first: a file stem never shadows another memory's name
            self.by_name.setdefault(m.name.casefold(), m)
            self.by_file[m.path.name] = m
        for m in memories:
            self.by_name.setdefault(m.path.stem.casefold(), m)

    def find(self, text: Any) -> Memory | None:
        if not isinstance(text, str):
            return None
        t = " ".join(text.split())
        return self.by_file.get(t) or self.by_name.get(t.casefold()) or self.by_name.get(t.removesuffix(".md").casefold())


@dataclass(frozen=True)
class Rules:
    """What this run allows: its scope and directory, and which files need care."""

    scope: str
    directory: Path
    protected: frozenset[str] = frozenset()
    unshown: frozenset[str] = frozenset()
    taken: frozenset[str] = frozenset()  # every entry of the directory (unparseable files included)
    max_sources: int = MAX_MERGE_SOURCES


def dream_caps() -> Any:
    from memd.memory.answer import Caps  # noqa: PLC0415 - start-up
    return Caps(max_operations=200, max_body_bytes=16 * 1024)


def _validate_plain(raw: dict[str, Any], rules: Rules, caps: Any) -> Any:
    """One add/update/delete through `memd.memory.operations`; the Operation or a reason."""
    from memd.memory.operations import validate_operations  # noqa: PLC0415 - start-up

    accepted, rejected = validate_operations({"operations": [raw]}, allowed_scopes=(rules.scope,), caps=caps)
    return accepted[0] if accepted else rejected[0][1]


def _new_file(slug: str, rules: Rules) -> str | None:
    """`<slug>.md` if it is a confined, free file name in the scope directory."""
    from memd.memory.names import UnsafePath, confine  # noqa: PLC0415 - start-up

    try:
        path = confine(rules.directory, slug)
    except UnsafePath:
        return None
    return None if path.name in rules.taken else path.name


def _merge_op(raw: dict[str, Any], look: _Lookup, rules: Rules, caps: Any) -> DreamOp | str:
    sources = raw.get("sources")
    if not isinstance(sources, list) or not 2 <= len(sources) <= rules.max_sources:
        return f"merge needs a list of 2 to {rules.max_sources} source names"
    found = []
    for s in sources:
        m = look.find(s)
        if m is None:
            return f"merge source {str(s)[:80]!r} is not a memory of this scope"
        found.append(m)
    files = tuple(m.path.name for m in found)
    if len(set(files)) != len(files):
        return "merge lists one source twice"
    result = {k: raw.get(k) for k in ("name", "description", "type", "body", "reason")}
    op = _validate_plain({**result, "op": "add", "scope": rules.scope}, rules, caps)
    if isinstance(op, str):
        return f"merge result: {op}"
    same = look.find(op.name)
    if same is not None and same.path.name in files:
        target = same.path.name
    elif same is not None:
        return f"merge result {op.name!r} is an existing memory that is not among the sources"
    else:
        new = _new_file(op.slug, rules)
        if new is None:
            return f"merge result file {op.slug}.md is taken or unsafe"
        target = new
    return DreamOp("merge", op.name, op.description, op.type, op.body, op.reason, files, target)


def _plain_op(raw: dict[str, Any], look: _Lookup, rules: Rules, caps: Any) -> DreamOp | str:
    op = _validate_plain(raw, rules, caps)
    if isinstance(op, str):
        return op
    existing = look.find(op.name)
    if op.op == "add":
        if existing is not None:
            return f"add of {op.name!r}, which exists (use update)"
        new = _new_file(op.slug, rules)
        return f"file {op.slug}.md is taken or unsafe" if new is None else DreamOp(
            "add", op.name, op.description, op.type, op.body, op.reason, (), new)  # fmt: skip
    if existing is None:
        return f"{op.op} of {op.name!r}, which is not a memory of this scope"
    f = existing.path.name
    if op.op == "delete":
        return DreamOp("delete", existing.name, reason=op.reason, files=(f,))
    if (op.name, op.description, op.type, op.body.strip()) == (existing.name, existing.description, existing.type, existing.body.strip()):
        return "update changes nothing"
    return DreamOp("update", op.name, op.description, op.type, op.body, op.reason, (f,), f)


def _check_files(op: DreamOp, rules: Rules, touched: dict[str, int], existing: set[str]) -> str | None:
    for f in sorted(op.touches()):
        if f in touched:
            return f"{f} is already changed by operation {touched[f]}"
    for f in sorted(op.files):
        if f in rules.unshown:
            return f"{f} was not shown to the model in full; it cannot be changed by this run"
        if f in rules.protected and not op.reason:
            return f"{f} was edited by hand since the last consolidation; changing it needs a reason"
    if op.result and op.result in rules.protected and op.result in existing and not op.reason:
        return f"{op.result} was edited by hand since the last consolidation; changing it needs a reason"
    return None


def validate_dream(data: Any, memories: Sequence[Memory], rules: Rules, caps: Any = None) -> tuple[list[DreamOp], list[tuple[int, str]]]:
    """A dream model's answer as accepted operations and (index, reason) rejections.

    add/update/delete go through `memd.memory.operations` (names, types, sizes,
    secrets); a merge's sources must be memories of the scope and its result
    is validated like an add. Beyond that: an operation must name an existing
    memory (except add), no file is changed by two operations, memories the
    model was not shown in full are not changed, and hand-edited ones only
    with a reason. Raises `ModelOutputError` when there is no operations list.
    """

    caps = caps or dream_caps()
    if not isinstance(data, dict) or not isinstance(data.get("operations"), list):
        from memd.memory.answer import ModelOutputError  # noqa: PLC0415 - start-up
        raise ModelOutputError('model output has no "operations" list')
    look = _Lookup(memories)
    existing = {m.path.name for m in memories}
    accepted: list[DreamOp] = []
    rejected: list[tuple[int, str]] = []
    touched: dict[str, int] = {}
    for i, raw in enumerate(data["operations"]):
        if i >= caps.max_operations:
            rejected.append((i, f"over the cap of {caps.max_operations} operations"))
            continue
        if not isinstance(raw, dict):
            rejected.append((i, f"operation is a JSON {type(raw).__name__}, not an object"))
            continue
        raw = {**raw, "scope": raw.get("scope", rules.scope)}
        op_word = raw.get("op")
        kind = op_word.strip().lower() if isinstance(op_word, str) else None
        got = _merge_op(raw, look, rules, caps) if kind == "merge" else _plain_op(raw, look, rules, caps)
        why = got if isinstance(got, str) else _check_files(got, rules, touched, existing)
        if why is not None:
            rejected.append((i, why))
            continue
        assert isinstance(got, DreamOp)
        for f in got.touches():
            touched[f] = i
        accepted.append(got)
    return accepted, rejected


def guard(memories: Sequence[Memory], ops: Sequence[DreamOp], *, max_share: float, force: bool) -> str | None:
    """Why a plan is refused, or None. Pure.

    Deleted = deletes plus merge sources that are not the merge's result file.
    A plan leaving the scope empty is refused even when forced.
    """
    n = len(memories)
    final = {m.path.name: m.type for m in memories}
    removed: set[str] = set()
    for op in ops:
        for f in op.files:
            if f != op.result:
                removed.add(f)
                final.pop(f, None)
        if op.result:
            final[op.result] = op.type or ""
    if n and not final:
        return f"would delete all {n} memories of the scope (refused even with --force)"
    if force or not n:
        return None
    share = len(removed) / n
    if share > max_share:
        return (f"would delete {len(removed)} of {n} memories ({share:.0%} > memd.dreamMaxDeleteShare "
                f"{max_share:.0%}); run with --force to apply anyway")  # fmt: skip
    lost = sorted({m.type for m in memories} - set(final.values()))
    if lost:
        return f"would delete every {'/'.join(lost)} memory of the scope; run with --force to apply anyway"
    return None

"""The user's own writes: `memd remember`, `memd edit`, `memd forget` (issue 13, SPEC §12).

Each goes through the one write path (`memd.write.apply`) under the scope's lock, so
it is validated, written atomically, indexed, and recorded in the history: `memd
undo` takes it back byte for byte. They are the user's explicit word, so review
mode does not hold them back (the user is the reviewer); read-only refuses them.

`remember` redacts the text **before** anything is derived from it: the name, the
file name, the description, `MEMORY.md` and the search rows only ever see the
redacted text. Offline (or when the model's answer is unusable), the offline
extraction rules type, name and scope it (`memd.memory.classify`); with a model,
the small model proposes type, scope, name and description, and its JSON answer
is validated like any model output (`memd.memory.operations`). The body is the text as
said (redacted); options given on the command line always win.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memd.clock import iso
from memd.errors import MemdError, UsageError
from memd.job.context import JobContext
from memd.llm import types as llmtypes
from memd.locks import acquire
from memd.memory import readonly
from memd.memory.answer import ModelOutputError, parse_model_json
from memd.memory.change import Change
from memd.memory.classify import classify, name_for, scope_of
from memd.memory.file import Memory
from memd.memory.names import fold_name
from memd.memory.operations import Operation, validate_operations
from memd.memory.scan import scan_dir
from memd.redact.redactor import find_secrets, redact
from memd.tree import Home, Place
from memd.write import apply as memwrite

DESCRIPTION_MAX = 150
_PLACEHOLDER = re.compile(r"\[REDACTED:[^\]]*\]")
_FIRST_SENTENCE = re.compile(r"(?<=[.!?。！？])\s+|\n+")

REMEMBER_SYSTEM = """You file one statement that a user asked their coding agent to remember long-term.
Answer with one JSON object and nothing else:
{"type": "user" | "feedback" | "project" | "reference",
 "scope": "global" | "project",
 "name": "a short kebab-case name, 2 to 5 words",
 "description": "one line under 150 characters saying what to remember"}
Types: user = who the user is, their role, expertise, preferences; feedback = how the agent should work
(corrections, rules; the user's way of working); project = a decision or constraint of the current project
that the code does not show; reference = a pointer to an outside resource (URL, board, ticket, docs).
Scope: global for the user's preferences and ways of working that hold in every project;
project for what belongs to the current project only."""


@dataclass
class Decision:
    """What `remember` will write, and how it was decided."""

    op: Any  # opsvalidate.Operation
    key: str  # the project key (also when the memory goes to the drawer)
    provider: str  # "offline" | "anthropic"
    notes: list[str] = field(default_factory=list)


def _clean(text: str) -> str:
    """Redacted text without its placeholders: what a name may be built from."""
    return " ".join(_PLACEHOLDER.sub(" ", text).split())


def _description(redacted: str) -> str:
    first = next((s.strip() for s in _FIRST_SENTENCE.split(redacted) if s.strip()), redacted.strip())
    first = " ".join(first.split())
    return first if len(first) <= DESCRIPTION_MAX else first[: DESCRIPTION_MAX - 1].rstrip() + "…"


def offline_fields(redacted: str, scope: str | None) -> dict[str, str]:
    """Type, scope, name and description by the offline extraction rules."""

    clean = _clean(redacted)
    got = classify(clean)
    mtype = got[1] if got else ("project" if scope == "project" else "user")
    return {"type": mtype, "scope": scope_of(mtype, clean), "name": name_for(clean) if clean else "note",
            "description": _description(redacted)}  # fmt: skip


def _model_fields(ctx: JobContext, redacted: str) -> dict[str, Any]:
    """The small model's proposal; raises on anything unusable (the caller falls back)."""

    reply = ctx.llm.complete(job="remember", tier="small", system=REMEMBER_SYSTEM, user=redacted, max_tokens=300)
    data = parse_model_json(reply.text)
    fields = {k: data.get(k) for k in ("type", "scope", "name", "description")}
    if not all(isinstance(v, str) and v.strip() for v in fields.values()):
        raise ModelOutputError("the answer lacks type, scope, name or description")
    return fields


def decide(ctx: JobContext, text: str, *, scope: str | None, key: str, mtype: str | None,
           name: str | None) -> Decision:  # fmt: skip
    """The operation `remember` writes. `scope` is "global", "project" or None (let the rules or model say)."""

    said = text.strip()
    if not said:
        raise UsageError("nothing to remember: the text is empty")
    if name is not None and find_secrets(name):
        raise UsageError("--name holds a secret; choose another name")
    redacted = redact(said)
    fields = offline_fields(redacted, scope)
    provider, notes = "offline", []
    if ctx.settings.refused:
        notes.append(f"no model call ({ctx.settings.refused}); filed by the offline rules")
    elif getattr(ctx.llm, "provider", "offline") != "offline":
        try:
            proposed = _model_fields(ctx, redacted)
            check = {"op": "add", "body": redacted, **proposed}
            accepted, rejected = validate_operations({"operations": [check]})
            if rejected:
                raise ModelOutputError(rejected[0][1])
            fields = {"type": accepted[0].type or fields["type"], "scope": accepted[0].scope,
                      "name": accepted[0].name, "description": accepted[0].description}  # fmt: skip
            provider = "anthropic"
        except (llmtypes.ModelUnavailable, llmtypes.BudgetExceeded) as exc:
            notes.append(f"no model call ({exc}); filed by the offline rules")
        except (llmtypes.ModelError, ModelOutputError) as exc:
            notes.append(f"the model's answer was not usable ({exc}); filed by the offline rules")
    if mtype is not None:
        fields["type"] = mtype
    if scope is not None:
        fields["scope"] = scope
    if name is not None:
        fields["name"] = name
    raw = {"op": "add", "scope": fields["scope"], "name": fields["name"], "description": fields["description"],
           "type": fields["type"], "body": redacted}  # fmt: skip
    accepted, rejected = validate_operations({"operations": [raw]})
    if rejected:
        raise UsageError(f"cannot remember that: {rejected[0][1]}")
    return Decision(accepted[0], key, provider, notes)


def _lock_timeout(ctx: JobContext) -> float:
    return max(60.0, float(ctx.settings.memd.lock_timeout_seconds))


def remember(ctx: JobContext, d: Decision, *, on_wait: Any = None) -> tuple[Any, Path | None]:
    """Write the decided memory; (Applied, its path). An existing memory of that name is never
    overwritten: the same text again is a no-op, another text is refused."""

    op = d.op
    pkey = None if op.scope == "global" else d.key
    place = Place.memory(pkey)
    directory = place.memory_dir(ctx.home)
    source = {"session": "", "uuids": [], "offsets": [], "ts": iso(ctx.now()), "via": "memd remember"}
    with acquire(ctx.home, [place], timeout=_lock_timeout(ctx), on_wait=on_wait):
        for m in scan_dir(directory, op.scope, pkey).memories:
            if fold_name(m.name) == fold_name(op.name) or m.path.stem.lower() == op.slug:
                if m.body.strip() == op.body.strip():
                    out = memwrite.Applied(unchanged=[f"{op.scope}:{op.slug}"])
                    return out, m.path
                raise UsageError(f"a memory named {m.name!r} already exists ({_rel(ctx.home, m.path)}); "
                                 f"give another --name, or change it with `memd edit {m.name}`")  # fmt: skip
        applied = memwrite.apply(ctx, d.key, [op], provider=d.provider, session_id="", job="remember",
                                 reason=f"memd remember: {op.name}", sources=[source], review=False)  # fmt: skip
    _raise_refused(applied, readonly)
    return applied, directory / f"{op.slug}.md"


def _raise_refused(applied: Any, readonly: Any) -> None:
    if applied.refused:
        label, why = applied.refused[0]
        if why.startswith("read-only"):
            raise readonly.ReadOnlyError(f"{label}: {why}")
        raise MemdError(f"{label}: {why}")


def find_memory(home: Home, name: str, key: str, scope: str | None = None) -> Memory:
    """A memory by name, file name or stem: the project's first, then the drawer's (or only `scope`'s)."""

    dirs: list[tuple[str, str | None]] = []
    if scope in (None, "project"):
        dirs.append(("project", key))
    if scope in (None, "global"):
        dirs.append(("global", None))
    for sc, k in dirs:
        directory = Place.memory(k).memory_dir(home)
        if sc == "project" and directory.is_symlink():
            continue
        found = [m for m in scan_dir(directory, sc, k).memories
                 if name in (m.name, m.path.name, m.path.stem) or fold_name(m.name) == fold_name(name)]  # fmt: skip
        if found:
            return found[0]
    where = {"global": "the global drawer", "project": f"project {key}"}.get(scope or "", f"project {key} or the global drawer")
    raise UsageError(f"no memory named {name!r} in {where} (see `memd list`)")


def forget(ctx: JobContext, m: Memory, *, on_wait: Any = None) -> Any:
    """Delete one memory through the write path (so `memd undo` brings it back)."""

    place = Place.memory(m.project_key if m.scope == "project" else None)
    op = Operation("delete", m.scope, m.name, m.path.stem, "", None, "", "memd forget")
    with acquire(ctx.home, [place], timeout=_lock_timeout(ctx), on_wait=on_wait):
        applied = memwrite.apply(ctx, m.project_key or "", [op], provider="user", session_id="", job="forget",
                                 reason=f"memd forget {m.name}", review=False)  # fmt: skip
    _raise_refused(applied, readonly)
    if not applied.deleted:
        raise MemdError(f"{_rel(ctx.home, m.path)} was already gone")
    return applied


def save_edit(ctx: JobContext, m: Memory, base: str | None, text: str, *, on_wait: Any = None) -> Any:
    """Replace a memory with the user's edited text, exactly, if it still holds `base`."""

    memwrite.check_text(text, m.path.name)
    place = Place.memory(m.project_key if m.scope == "project" else None)
    change = Change(m.scope, m.project_key if m.scope == "project" else None, m.path.name, "update",
                             m.name, text, base, f"{m.scope}:{m.path.stem}")  # fmt: skip
    with acquire(ctx.home, [place], timeout=_lock_timeout(ctx), on_wait=on_wait):
        return memwrite.apply_changes(ctx, [change], job="edit", reason=f"memd edit {m.name}", provider="user")


def _rel(home: Home, path: Path) -> str:
    try:
        return str(path.relative_to(home.root))
    except ValueError:
        return str(path)


# --------------------------------------------------------------------------- the editor


def editor_command() -> list[str]:
    """$VISUAL, else $EDITOR, else vi — split like a shell would."""
    raw = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    try:
        parts = shlex.split(raw)
    except ValueError as exc:
        raise UsageError(f"cannot parse $EDITOR {raw!r}: {exc}") from None
    if not parts:
        raise UsageError("$EDITOR is empty")
    return parts


def edit_copy(text: str, file_name: str) -> tuple[str, Path]:
    """Open a private copy of `text` named `file_name` in the user's editor; (the text saved, the copy).

    The copy stays on disk (in a private temporary directory) until the caller removes it, so
    an edit memd refuses is never lost. An editor that fails leaves nothing changed.
    """
    tmpdir = Path(tempfile.mkdtemp(prefix="memd-edit-"))
    os.chmod(tmpdir, 0o700)
    path = tmpdir / file_name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    try:
        rc = subprocess.run([*editor_command(), str(path)], check=False).returncode
    except OSError as exc:
        raise MemdError(f"cannot run the editor ({exc}); nothing changed") from None
    if rc != 0:
        raise MemdError(f"the editor exited with {rc}; nothing changed (your copy: {path})")
    try:
        return path.read_text(encoding="utf-8"), path
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not valid UTF-8; nothing changed") from None
    except OSError as exc:
        raise MemdError(f"cannot read the edited copy {path}: {exc.strerror or exc}") from None


def discard_copy(path: Path) -> None:
    shutil.rmtree(path.parent, ignore_errors=True)

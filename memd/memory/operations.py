"""Validation of model-proposed memory operations: model output is untrusted input.

An extraction or dream model answers with JSON:

    {"operations": [{"op": "add"|"update"|"delete", "scope": "global"|"project",
                     "name": str, "description": str,
                     "type": "user"|"feedback"|"project"|"reference",
                     "body": str, "reason": str?}]}

Whatever it says, nothing here lets it write outside a memory directory, plant
a secret in a memory, or flood the tree: names become slugs confined to their
directory, sizes are capped, enumerations are closed. One bad operation is
rejected with its index and a one-line reason; the others still apply, so a
single hallucinated path does not cost the whole extraction.

Secrets: a body or description holding one is *redacted and accepted* — the
memory around the secret is usually worth keeping ("deploys use the key in
CI"), and `[REDACTED:rule]` says what was there. A *name* holding one is
rejected: names become file names and index lines, where a placeholder would
make a meaningless memory; so is a name with a token-shaped run (`token_like`),
which is how a secret looks once slugged (`ghp-…`) or when no detector knows it.

Finding the JSON in a model's answer (`parse_model_json`), the error for an
answer unusable as a whole (`ModelOutputError`) and the size caps (`Caps`) are in
memd/memory/answer.py.

Everything here is pure: no files are read or written (`confine` resolves
paths, which follows symlinks already on disk, and nothing more).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from memd.memory.answer import Caps, ModelOutputError
from memd.memory.controls import strip_controls
from memd.memory.names import InvalidName, _path_like, hidden_char, slugify, token_like
from memd.redact.redactor import find_secrets, redact

__all__ = [
    "OPS",
    "SCOPES",
    "TYPES",
    "Operation",
    "log_rejections",
    "strip_controls",
    "validate_operations",
]

OPS = ("add", "update", "delete")
SCOPES = ("global", "project")
TYPES = ("user", "feedback", "project", "reference")

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # C0, DEL and C1: a name holding one is rejected






@dataclass(frozen=True)
class Operation:
    """One validated operation, ready for the writer.

    `name` is the model's name, cleaned (one line); `slug` its file stem. For a
    delete, `type` is None and `description` and `body` are empty. `redacted`
    names the redaction rules that fired on the description or body.
    """

    op: str
    scope: str
    name: str
    slug: str
    description: str
    type: str | None
    body: str
    reason: str
    redacted: tuple[str, ...] = ()


# --- names ----------------------------------------------------------------------------








# --- operations -----------------------------------------------------------------------


def validate_operations(
    data: Any,
    *,
    allowed_scopes: Collection[str] = SCOPES,
    caps: Caps | None = None,
) -> tuple[list[Operation], list[tuple[int, str]]]:
    """Split a model's operations into accepted ones and (index, one-line reason) rejections.

    Raises ModelOutputError only when the answer as a whole has no
    `operations` list; everything else is judged one operation at a time.
    Operations past `caps.max_operations` are rejected (a runaway answer
    applies its first operations only); a second operation on the same
    memory is rejected (the model contradicts itself; the first stands).
    """
    caps = caps or Caps()
    if not isinstance(data, dict):
        raise ModelOutputError(f"model output is a JSON {type(data).__name__}, not an object")
    ops = data.get("operations")
    if not isinstance(ops, list):
        raise ModelOutputError("model output has no \"operations\" list")
    accepted: list[Operation] = []
    rejected: list[tuple[int, str]] = []
    seen: dict[tuple[str, str], int] = {}
    for index, raw in enumerate(ops):
        if index >= caps.max_operations:
            rejected.append((index, f"over the cap of {caps.max_operations} operations"))
            continue
        result = _validate_one(raw, allowed_scopes, caps)
        if isinstance(result, str):
            rejected.append((index, result))
            continue
        target = (result.scope, result.slug)
        if target in seen:
            rejected.append((index, f"same memory as operation {seen[target]} ({result.scope}:{result.slug})"))
            continue
        seen[target] = index
        accepted.append(result)
    return accepted, rejected


def _validate_one(raw: Any, allowed_scopes: Collection[str], caps: Caps) -> Operation | str:
    """An Operation, or the one-line reason it is rejected."""
    if not isinstance(raw, dict):
        return f"operation is a JSON {type(raw).__name__}, not an object"
    op = _word(raw.get("op"))
    if op not in OPS:
        return f"unknown op {_show(raw.get('op'))}"
    scope = _word(raw.get("scope"))
    if scope not in SCOPES:
        return f"unknown scope {_show(raw.get('scope'))}"
    if scope not in allowed_scopes:
        return f"scope {scope!r} is not allowed here"
    name = _check_name(raw.get("name"), op, caps)
    if not isinstance(name, tuple):
        return name
    name_text, slug = name
    said = raw.get("reason")
    reason = _one_line(strip_controls(said if isinstance(said, str) else ""))
    reason = redact(reason)[: caps.max_reason].encode("utf-8", "replace").decode("utf-8")
    if op == "delete":
        return Operation(op, scope, name_text, slug, "", None, "", reason)
    mtype = _word(raw.get("type"))
    if mtype not in TYPES:
        return f"unknown type {_show(raw.get('type'))}"
    description = _check_description(raw.get("description"), caps)
    if not isinstance(description, tuple):
        return description
    body = _check_body(raw.get("body"), caps)
    if not isinstance(body, tuple):
        return body
    rules = tuple(sorted(set(description[1]) | set(body[1])))
    return Operation(op, scope, name_text, slug, description[0], mtype, body[0], reason, rules)


def _check_name(raw: Any, op: str, caps: Caps) -> tuple[str, str] | str:
    if not isinstance(raw, str) or not raw.strip():
        return f"{op} without a name"
    if "\x00" in raw or _CONTROL.search(raw.strip()):
        return "name contains control characters"
    if hidden := hidden_char(raw.strip()):
        return f"name contains an invisible or bidi character ({hidden})"
    if not _encodable(raw):
        return "name is not valid Unicode (a lone surrogate)"
    name = " ".join(raw.split())
    if _path_like(name):
        return f"name {_show(name)} looks like a path"
    if len(name) > caps.max_name:
        return f"name over {caps.max_name} characters"
    if find_secrets(name) or token_like(name):
        return "name contains a secret"
    try:
        slug = slugify(name)
    except InvalidName as exc:
        return f"name {_show(name)}: {exc}"
    return name, slug






def _check_description(raw: Any, caps: Caps) -> tuple[str, tuple[str, ...]] | str:
    """One line (MEMORY.md holds it on one), non-empty, capped, redacted."""
    if not isinstance(raw, str) or not raw.strip():
        return "empty description"
    if not _encodable(raw):
        return "description is not valid Unicode (a lone surrogate)"
    text = _one_line(strip_controls(raw))
    if not text:
        return "empty description"
    if len(text) > caps.max_description:
        return f"description over {caps.max_description} characters ({len(text)})"
    return _redacted(text)


def _check_body(raw: Any, caps: Caps) -> tuple[str, tuple[str, ...]] | str:
    """Non-empty, no NUL, capped before and after redaction, redacted."""
    if not isinstance(raw, str) or not raw.strip():
        return "empty body"
    if "\x00" in raw:
        return "body contains a NUL character"
    if not _encodable(raw):
        return "body is not valid Unicode (a lone surrogate)"
    size = len(raw.encode("utf-8", "surrogatepass"))
    if size > caps.max_body_bytes:
        return f"body over {caps.max_body_bytes} bytes ({size})"
    clean = strip_controls(raw).strip()
    if not clean:
        return "empty body"
    text, rules = _redacted(clean)
    if len(text.encode("utf-8", "surrogatepass")) > caps.max_body_bytes:
        return f"body over {caps.max_body_bytes} bytes once redacted"
    return text, rules


def _encodable(text: str) -> bool:
    """JSON escapes can smuggle lone surrogates into a str; such text cannot be written as UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _redacted(text: str) -> tuple[str, tuple[str, ...]]:
    found = find_secrets(text)
    if not found:
        return text, ()
    return redact(text), tuple(sorted({rule for rule, _ in found}))


def _word(value: Any) -> str | None:
    """An enumeration value, forgiving case and surrounding space ("Feedback ")."""
    return value.strip().lower() if isinstance(value, str) else None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _show(value: Any) -> str:
    """A value for a rejection reason (which is logged): repr'd, redacted, short."""
    text = redact(repr(value)[:4096])
    return text if len(text) <= 60 else text[:59] + "…"


def log_rejections(log: Any, event: str, items: list[tuple[Any, str]], *, key: str = "index", examples: int = 10) -> None:
    """Log refused operations: one `event` warning each, up to `examples` of them; more than that
    is one summary warning instead (`<event>` + `_summary`), with the count, the reasons by
    frequency (at most five) and the first three as examples.

    A runaway answer of 10,000 operations wrote 9,950 warning lines for one run (issue 16).
    """
    if len(items) <= examples:
        for what, reason in items:
            log.warning(event, **{key: what}, reason=reason)
        return
    counts: dict[str, int] = {}
    for _what, reason in items:
        counts[reason] = counts.get(reason, 0) + 1
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:5]
    log.warning(f"{event}_summary", count=len(items), reasons=[{"reason": r, "count": n} for r, n in top],
                examples=[{key: what, "reason": reason} for what, reason in items[:3]])  # fmt: skip

"""Memory files: Markdown with YAML front matter (SPEC §2): parse, render, write, delete.

A memory directory is shared with the user, who may edit, add or break files by
hand at any time (§1.2). Parsing a file memd cannot use raises `MemoryParseError`
with one line naming the reason; nothing here moves or deletes a file it cannot
parse. Reading a whole directory (symlinks, oversized files, duplicate names) is
`memd.memory.scan.scan_dir`.

Writing goes through `fsutil.atomic_write` (§1.3): a reader sees the old or the
new file, never half of one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from memd.fsutil import atomic_write, ensure_private_dir, fsync_dir
from memd.logs.lazy import lazy_logger
from memd.memory.frontmatter import simple_dump, simple_front
from memd.memory.names import is_candidate_name, memory_path

if TYPE_CHECKING:
    import yaml


@cache
def _yaml() -> Any:
    """PyYAML, imported on first parse or render: `memd list` from the index parses nothing."""
    import yaml  # noqa: PLC0415 - start-up

    return yaml


@cache
def _safe_loader() -> Any:
    """libyaml's safe loader parses front matter ~10x faster than the pure-Python one; same safety."""
    y = _yaml()
    return getattr(y, "CSafeLoader", y.SafeLoader)

log = lazy_logger("memd.memories")  # structlog on first use: the hook commands never pay for it

TYPES: tuple[str, ...] = ("user", "feedback", "project", "reference")


class MemoryParseError(ValueError):
    """A memory file that cannot be used; `reason` is one line a user can act on."""

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = Path(path)
        self.reason = reason


@dataclass
class Memory:
    """One parsed memory file.

    `metadata` holds every front-matter field besides name, description and
    type (the `metadata:` mapping minus its `type`, plus unknown top-level keys),
    so a rewrite through `render_memory(..., metadata_extra=m.metadata)` keeps them.
    """

    path: Path
    name: str
    description: str
    type: str
    body: str
    mtime: float
    size: int
    scope: str = "global"
    project_key: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- parsing


_CLOSING = re.compile(r"^(?:---|\.\.\.)[ \t]*\r?$", re.MULTILINE)


def _split_front_matter(text: str) -> tuple[str, str]:
    """(yaml, body) of a memory; raises ValueError with a one-line reason.

    Lines are split on "\n" only: `str.splitlines` would also split on U+2028,
    U+0085 and form feeds, which can sit inside a body or a YAML value.
    """
    if text.startswith("\ufeff"):
        text = text[1:]
    first, newline, rest = text.partition("\n")
    if first.rstrip() != "---" or not newline:
        raise ValueError("no front matter (the file must start with a '---' line)")
    closing = _CLOSING.search(rest)
    if closing is None:
        raise ValueError("front matter is not closed (no second '---' line)")
    body = rest[closing.end() :]
    return rest[: closing.start()], body[1:] if body.startswith("\n") else body


def _is_mapping(value: Any) -> TypeGuard[Mapping[Any, Any]]:
    """`isinstance(value, Mapping)`, a plain dict (what YAML and `simple_front` give) without the ABC check."""
    return type(value) is dict or isinstance(value, Mapping)


def _scalar_text(value: Any, field_name: str) -> str:
    """A front-matter field as text. YAML turns `name: 2024` into an int; accept
    numbers as their text, but refuse lists, mappings, booleans and nulls, which
    are almost always a typo a user should see."""
    if isinstance(value, bool) or value is None or not isinstance(value, (str, int, float)):
        raise ValueError(f"{field_name} must be a string, not {type(value).__name__}")
    text = " ".join(str(value).split())
    if not text:
        raise ValueError(f"{field_name} is empty")
    return text


def _memory_type(front: Mapping[str, Any]) -> str:
    """The type from `metadata.type` (memd's form) or top-level `type` (Claude Code's)."""
    meta = front.get("metadata")
    nested = meta.get("type") if _is_mapping(meta) else None
    top = front.get("type")
    if nested is not None and top is not None and str(nested).strip().lower() != str(top).strip().lower():
        raise ValueError(f"conflicting type: top-level {top!r} vs metadata.type {nested!r}")
    raw = nested if nested is not None else top
    if raw is None:
        raise ValueError(f"missing type (one of {', '.join(TYPES)})")
    if not isinstance(raw, str):
        raise ValueError(f"type must be a string, not {type(raw).__name__}")
    kind = raw.strip().lower()
    if kind not in TYPES:
        raise ValueError(f"unknown type {raw!r} (expected one of {', '.join(TYPES)})")
    return kind


def _extra_metadata(front: Mapping[str, Any]) -> dict[str, Any]:
    meta = front.get("metadata")
    extra: dict[str, Any] = {
        k: v for k, v in front.items() if k not in ("name", "description", "type", "metadata")
    }
    if _is_mapping(meta):
        extra.update({str(k): v for k, v in meta.items() if k != "type"})
    elif meta is not None:
        raise ValueError(f"metadata must be a mapping, not {type(meta).__name__}")
    return extra


def _decode(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MemoryParseError(path, f"not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


def _load_yaml(head: str) -> Any:
    """YAML's reading of the front matter; ValueError with a one-line reason when it has none."""
    yaml = _yaml()
    try:
        return yaml.load(head, Loader=_safe_loader())  # a safe loader, libyaml's when present
    except RecursionError:
        raise ValueError("front matter is nested too deeply") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ValueError(f"bad YAML in front matter{where}: {problem}") from None


def parse_memory(
    path: Path | str,
    text: str | bytes,
    *,
    mtime: float = 0.0,
    size: int | None = None,
    scope: str = "global",
    project_key: str | None = None,
) -> Memory:
    """Parse one memory file's content; raises `MemoryParseError(path, reason)`.

    `text` may be bytes so that undecodable files get the same one-line report
    as every other bad file. The body loses leading blank lines and trailing
    whitespace, which `render_memory` puts back in canonical form.
    """
    path = path if isinstance(path, Path) else Path(path)
    raw_size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8", "surrogatepass"))
    if isinstance(text, bytes):
        text = _decode(path, text)
    try:
        head, body = _split_front_matter(text)
        front = simple_front(head)  # memd's own simple front matter without YAML; anything else below
        if front is None:
            front = _load_yaml(head)
        if not _is_mapping(front):
            raise ValueError("front matter is not a YAML mapping")
        if front.get("name") is None:
            raise ValueError("missing name")
        if front.get("description") is None:
            raise ValueError("missing description")
        name = _scalar_text(front["name"], "name")
        description = _scalar_text(front["description"], "description")
        kind = _memory_type(front)
        extra = _extra_metadata(front)
    except ValueError as exc:
        raise MemoryParseError(path, str(exc)) from None
    return Memory(
        path=path,
        name=name,
        description=description,
        type=kind,
        body=body.lstrip("\r\n").rstrip(),
        mtime=mtime,
        size=raw_size if size is None else size,
        scope=scope,
        project_key=project_key,
        metadata=extra,
    )


# --------------------------------------------------------------------------- rendering


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    """Double-quote strings holding YAML line breaks other than "\n": PyYAML
    emits U+0085/U+2028/U+2029 raw in other styles and reads them back as line
    breaks; in double quotes they are escaped."""
    style = '"' if any(c in data for c in "\x85\u2028\u2029") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


@cache
def _dumper() -> Any:
    """The safe dumper memd writes with: block style, no line folding (front matter stays
    greppable and diff-friendly), and `_represent_str`."""

    class _Dumper(_yaml().SafeDumper):  # type: ignore[misc]
        pass

    _Dumper.add_representer(str, _represent_str)
    return _Dumper


def render_memory(
    name: str,
    description: str,
    type: str,  # the SPEC's field name
    body: str,
    metadata_extra: Mapping[str, Any] | None = None,
) -> str:
    """The canonical text of a memory: memd always writes `metadata.type` (§2.2).

    Name and description are collapsed to one line each, because MEMORY.md
    shows them on one line and a newline there would break the index.
    """
    kind = type.strip().lower()
    if kind not in TYPES:
        raise ValueError(f"unknown type {type!r} (expected one of {', '.join(TYPES)})")
    one_name = " ".join(name.split())
    one_desc = " ".join(description.split())
    if not one_name or not one_desc:
        raise ValueError("name and description must not be empty")
    metadata: dict[str, Any] = {"type": kind}
    for k, v in (metadata_extra or {}).items():
        if k != "type":
            metadata[str(k)] = v
    front = {"name": one_name, "description": one_desc, "metadata": metadata}
    # memd's usual front matter without PyYAML's Python emitter: the same bytes, or None
    # (tests/memory/test_frontmatter.py), and it reads back as `front` by construction.
    head = simple_dump(front)
    if head is None:
        head = _dump_yaml(front)
    body = body.strip("\r\n").rstrip()
    return f"---\n{head}---\n\n{body}\n" if body else f"---\n{head}---\n"


def _dump_yaml(front: dict[str, Any]) -> str:
    """`front` by PyYAML, with memd's options, read back before it is used."""
    yaml = _yaml()
    head: str = yaml.dump(
        front, Dumper=_dumper(), sort_keys=False, allow_unicode=True, default_flow_style=False, width=1 << 30
    )
    # memd never writes a file it would read back differently: a last guard
    # against emitter corner cases beyond the ones `_represent_str` handles.
    back = simple_front(head)  # memd's own subset reads back without YAML (exactly as YAML would, or None)
    if (back if back is not None else yaml.load(head, Loader=_safe_loader())) != front:  # read back as a parse reads
        raise ValueError("front matter does not survive a YAML round trip; check metadata keys")
    return head


# --------------------------------------------------------------------------- writing






def write_memory(directory: Path | str, slug: str, text: str) -> Path:
    """Atomically write a memory file (0600) into `directory` (created 0700)."""
    path = memory_path(directory, slug)
    ensure_private_dir(path.parent)
    atomic_write(path, text)
    log.info("memory.written", path=str(path), bytes=len(text.encode("utf-8")))
    return path


def delete_memory(path: Path | str) -> bool:
    """Remove one memory file; False if it was already gone.

    Only `.md` memory files: the index and anything else are refused, so a bad
    path from a model cannot delete what is not a memory. A symlink is removed
    as a link; its target is never touched.
    """
    path = Path(path)
    if not is_candidate_name(path.name):
        raise ValueError(f"{path}: not a memory file")
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    fsync_dir(path.parent)
    log.info("memory.deleted", path=str(path))
    return True

"""Where a memory file's name comes from and where it may live: the one home of the naming rules.

Every writer and reader of memory directories asks this module whether a name is a
memory file, turns a model's or user's words into a file name, and confines a name to
its directory. Invariants: a memory file name is one path component, ends in `.md`,
is not `MEMORY.md`, does not start with a dot, and fits in 255 bytes.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from pathlib import Path

from memd.redact.shapes import has_token

INDEX_NAME = "MEMORY.md"
SUFFIX = ".md"
# The largest memory file read whole (`memd.memory.scan`; a larger one is a problem, left in place). Here, with
# the names, because the nothing-changed check digests it without loading the scan (`memd.index.refresh`).
DEFAULT_MAX_FILE_BYTES = 1024 * 1024
# File names are capped in bytes, not characters: CJK names take 3 bytes a
# character and most file systems stop at 255 bytes.
_SAFE_SLUG = re.compile(r"^[^\W_][\w.-]*$")
# Editor and tool droppings that are never memories (vim swap, emacs lock and
# backup, our own atomic_write temporaries which start with a dot anyway).
_TEMP_SUFFIXES = (".tmp", ".swp", ".swo", ".swx", "~", ".bak", ".orig", ".part")
SLUG_MAX = 64
# MEMORY.md is the index: on a case-insensitive file system (macOS) memory.md is the same file.
RESERVED_SLUGS = frozenset({"memory"})
_SLUG_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?")
_NOT_SLUG = re.compile(r"[^a-z0-9]+")


def is_candidate_name(name: str) -> bool:
    """Only visible `.md` files other than the index (nor an editor's temporary) can be memories:
    what every reader and writer of a memory directory counts as a memory file."""
    if name == INDEX_NAME or name.startswith((".", "#")) or name.endswith(_TEMP_SUFFIXES):
        return False
    return name.endswith(SUFFIX)


def candidate_names(names: Iterable[str]) -> list[str]:
    """The names `is_candidate_name` accepts, in their order: the same rule without a call a name,
    for a directory's listing of tens of thousands (the index check, `memd list`). A listing whose
    every name is a candidate (but MEMORY.md) is recognised on the names joined by NUL, which no
    file name holds, in C; any other goes name by name. (A `.md` name cannot end in a temporary's
    suffix.)"""
    names = list(names)
    joined = "\0" + "\0".join(names) + "\0"
    if joined.count(".md\0") == len(names) and "\0." not in joined and "\0#" not in joined:
        if "\0MEMORY.md\0" in joined:
            names.remove(INDEX_NAME)
        return names
    return [n for n in names if n.endswith(SUFFIX) and n != INDEX_NAME and not n.startswith((".", "#"))
            and not n.endswith(_TEMP_SUFFIXES)]  # fmt: skip


def memory_path(directory: Path | str, slug: str) -> Path:
    """The file of `slug` in `directory`; refuses anything that could leave it.

    Model output is untrusted (DESIGN): a slug with a separator, a leading dot
    or `..` would let it write outside the memory directory or hide a file.
    """
    stem = slug[: -len(SUFFIX)] if slug.endswith(SUFFIX) else slug
    if not _SAFE_SLUG.match(stem) or ".." in stem or len(stem.encode("utf-8")) > 200:
        raise ValueError(f"unsafe memory slug {slug!r}")
    name = stem + SUFFIX
    if name == INDEX_NAME:
        raise ValueError(f"{INDEX_NAME} is the index, not a memory")
    return Path(directory) / name


class InvalidName(ValueError):
    """A memory name that yields no usable file name."""


class UnsafePath(ValueError):
    """A path that would leave its memory directory."""


def slugify(name: str) -> str:
    """A safe file stem for a memory name: [a-z0-9-], at most 64 characters, never empty.

    Accents are transliterated (é → e). Letters with no ASCII form (Chinese,
    ß) are replaced by a hash of the whole name, appended to whatever ASCII
    remains (`m-<8 hex>` when nothing does), so two different non-Latin
    names never share a file. Names truncated to fit, and the reserved
    `memory` (MEMORY.md on a case-insensitive disk), get the hash too.
    """
    if not isinstance(name, str) or not name.strip():
        raise InvalidName("empty name")
    decomposed = unicodedata.normalize("NFKD", name)
    ascii_text = decomposed.encode("ascii", "ignore").decode("ascii")
    slug = _NOT_SLUG.sub("-", ascii_text.lower()).strip("-")
    lost = any(ch.isalnum() and not ch.isascii() for ch in decomposed)
    import hashlib  # noqa: PLC0415 - start-up: the SessionStart hook imports this module, never hashes

    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    if not slug:
        if not lost:
            raise InvalidName("name has no letters or digits")
        return f"m-{digest}"
    if lost or slug in RESERVED_SLUGS:
        slug = f"{slug}-{digest}"
    if len(slug) > SLUG_MAX:
        slug = f"{slug[: SLUG_MAX - 9].rstrip('-')}-{digest}"
    return slug


def _path_like(name: str) -> bool:
    """Separators, parent references, home references: a name is never a path."""
    return "/" in name or "\\" in name or ".." in name or name.startswith("~")


def confine(directory: Path, slug: str) -> Path:
    """`directory/<slug>.md`, after proving it cannot lead outside `directory`.

    The slug must be a slug (no separators, no dots); the resolved path (a
    symlink already planted there is followed) must be a direct child of the
    resolved directory. Raises UnsafePath otherwise — never an `assert`, which
    `python -O` would strip.
    """
    if not isinstance(slug, str) or not _SLUG_RE.fullmatch(slug):
        raise UnsafePath(f"{str(slug)[:80]!r} is not a memory slug")
    if slug in RESERVED_SLUGS:
        raise UnsafePath(f"{slug!r} is reserved (MEMORY.md)")
    base = Path(directory)
    path = base / f"{slug}.md"
    if path.resolve().parent != base.resolve():
        raise UnsafePath(f"{path}: resolves outside {base}")
    return path
def token_like(text: str) -> bool:
    """Whether `text` holds a run shaped like a key or token rather than a word (`memd.redact.shapes`).

    Names become file names, index lines and search rows; a secret the detectors miss (an unknown
    format, or a known one already turned into a slug: `ghp-…`, lower-cased) must not get there
    either, and no real name needs such a run."""
    return has_token(text)


def is_tracked_name(name: str) -> bool:
    """A memory file the git repository tracks: a candidate that is one clean path component."""
    return is_candidate_name(name) and "\n" not in name and "/" not in name


def child(directory: Path, file: str) -> Path:
    """`directory/file` for a memory file name (from a scan or a confined slug): never a path, never the index."""
    if (not isinstance(file, str) or "/" in file or "\\" in file or "\x00" in file or file.startswith(".")
            or not file.endswith(".md") or file == "MEMORY.md" or len(file.encode("utf-8", "surrogatepass")) > 255):
        raise ValueError(f"not a memory file name: {file!r}")
    return directory / file


# Characters that make two names look alike or reorder what a terminal shows: C0/C1 controls, the bidi
# embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069, LRM/RLM/ALM), zero-width ones
# (U+200B–U+200D, U+2060, U+FEFF) and the soft hyphen. None belongs in a memory's name.
_HIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")


def hidden_char(name: str) -> str | None:
    """The first control, bidi or zero-width character of `name` as `U+XXXX`, or None.

    A name holding one reads like another name (`keep\u200bme` beside `keep me`) or shows reordered;
    memd refuses it wherever a name comes in (a model's answer, an edit, a synced or imported file)."""
    for m in _HIDDEN.finditer(name):
        i = m.start()
        if m.group() in _JOINERS and 0 < i < len(name) - 1 and _script_letter(name[i - 1]) and _script_letter(name[i + 1]):
            continue  # ZWNJ/ZWJ inside a word of a script that needs them (Persian `می‌خواهم`, Indic conjuncts)
        return f"U+{ord(m.group()):04X}"
    return None


_JOINERS = "\u200c\u200d"


def _script_letter(c: str) -> bool:
    """A letter or combining mark of a non-Latin script: where a zero-width joiner or non-joiner shapes words."""
    return not c.isascii() and (c.isalpha() or unicodedata.category(c).startswith("M"))


def fold_name(name: str) -> str:
    """What two names are compared by: width and compatibility forms folded (NFKC: `ＭＥＭＯＲＹ` is
    `MEMORY`), then case (`Straße` is `STRASSE`), runs of white space as one space."""
    return " ".join(unicodedata.normalize("NFKC", name).casefold().split())

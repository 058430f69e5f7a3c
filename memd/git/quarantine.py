"""Incoming files kept aside: what a sync, an import or a first link refused to put in live memory.

A file from elsewhere must pass the checks of any memd write (`memd.memory.incoming.vet`). One
that fails lands here, under `memd/quarantine/<scope>/`, where no agent, hook, index or search
reads it; `quarantine/log.jsonl` says what, from where and why, one line each, and `memd status`
counts them. A file too large to read (over the cap) is not copied at all: its log line names
the object it came as. Nothing here is ever deleted by memd: the user looks, then moves or
deletes by hand.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from memd.fsutil import atomic_write, ensure_private_dir
from memd.logs.lazy import lazy_logger
from memd.tree import Home, Place

log = lazy_logger("memd.gitmem")

DIR = "quarantine"
LOG = "log.jsonl"


def quarantine_dir(home: Home) -> Path:
    return home.memd_dir / DIR


def _scope_dir(place: Place) -> str:
    return "global" if place.is_global else f"project-{place.key}"


def keep_aside(home: Home, place: Place, name: str, data: bytes | None, reason: str, source: str,
               now_iso: str) -> dict[str, str]:  # fmt: skip
    """Keep an incoming file out of live memory: its bytes (when read) under quarantine/, one log line.
    Returns the event (file, reason, source, kept path or the empty string)."""
    root = ensure_private_dir(quarantine_dir(home))
    kept = ""
    safe = "".join(c if c.isprintable() and c not in "/\\" else "_" for c in name).lstrip(".") or "file"
    if data is not None:
        d = ensure_private_dir(root / _scope_dir(place))
        target, n = d / safe, 2
        while target.exists() and target.read_bytes() != data:
            target, n = d / f"{n}-{safe}", n + 1
        atomic_write(target, data)
        kept = str(target)
    ev = {"time": now_iso, "scope": str(place), "file": name, "reason": reason, "source": source, "kept": kept}
    fd = os.open(root / LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(ev, ensure_ascii=True) + "\n")
    log.warning("git.incoming_quarantined", scope=str(place), file=name, reason=reason, source=source, kept=kept)
    return ev


def summary(home: Home) -> dict[str, Any]:
    """For `memd status`: how many incoming files were kept aside, and where. Cheap: one small file read."""
    root = quarantine_dir(home)
    seen: set[tuple[str, str, str]] = set()
    try:
        with open(root / LOG, "rb") as fh:
            for line in fh:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                if isinstance(e, dict):  # the same file kept aside twice (an import repeated) counts once
                    seen.add((str(e.get("scope")), str(e.get("file")), str(e.get("kept") or e.get("reason"))))
    except OSError:
        pass
    return {"count": len(seen), "dir": str(root)}

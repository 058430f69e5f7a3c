"""Where history lives and what a run is: the layout of `memd/history/<scope-name>/<run-id>/`.

The bottom of `memd.history`: `writes`, `snapshots` and `runs` all import this module and
nothing here imports them. A run's `run.json` is written last (`write_run_info`), so an entry
without one is a run cut short, never a completed one.
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
from datetime import datetime
from pathlib import Path
from typing import Any

from memd.fsutil import (
    UnusableFile,
    atomic_write,
    read_regular,
)
from memd.tree import Home, Place

FILES_DIR = "files"
RUN_FILE = "run.json"
SUMS_FILE = "sha256.json"  # the snapshot's hashes until write_run_info puts them in run.json
MAX_JSON_BYTES = 64 << 20  # run.json, modes, journals: memd's own small files; larger is damage
RUN_ID = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{6}$")


def history_root(home: Home, ref: Place) -> Path:
    return home.history_dir / ref.history_name


_PLAIN_KEY = re.compile(r"^[A-Za-z0-9-]{1,200}$")
_KEY_UNSAFE = re.compile(r"[^A-Za-z0-9-]")


def new_run_id(now: datetime) -> str:
    """Sortable by time (history lists and pruning rely on it), unique by a random tail."""
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(3)}"


def write_run_info(entry: Path, info: dict[str, Any], packed: dict[str, str] | None = None) -> None:
    """Complete a history entry. `seq` orders runs of a scope even within one second (run ids
    only have seconds); it is race-free because entries are only written under the scope's lock.
    `packed`: the sums `snapshot` computed as it packed this entry (the pack is not read back)."""
    seqs = [r.get("seq") for r in _runs_in(entry.parent)]
    seq = 1 + max([x for x in seqs if isinstance(x, int)], default=0)
    data = {"seq": seq, **{k: v for k, v in info.items() if k != "seq"}}
    sums = _read_json(entry / SUMS_FILE) if packed is None else packed
    from memd.history.pack import PACK_FILE, Pack  # noqa: PLC0415 - start-up: a packed snapshot's reader only when one is read

    if sums is None and os.path.lexists(entry / PACK_FILE):  # a packed snapshot carries its own sums
        try:
            sums = {e["path"]: e["sha256"] for e in Pack.open(entry / PACK_FILE).files()}
        except (OSError, ValueError):
            sums = None
    if isinstance(sums, dict) and "snapshot_sha256" not in data:
        data["snapshot_sha256"] = sums  # what `undo` checks the snapshot against before restoring it
    try:
        raw = (run_json(data) + "\n").encode("utf-8")
    except UnicodeEncodeError:  # a file name whose bytes are not UTF-8: `\udcNN` escapes, read back as they were
        raw = (json.dumps(data, indent=1, ensure_ascii=True) + "\n").encode("ascii")
    atomic_write(entry / RUN_FILE, raw)


def run_json(data: dict[str, Any]) -> str:
    """`json.dumps(data, indent=1, ensure_ascii=False)`, byte for byte, with the snapshot's sums
    (a flat mapping of text, one pair a file of the scope) joined here: an indent makes `json`
    use its Python encoder, several microseconds a pair, which at thousands of files was most
    of writing run.json."""
    sums = data.get("snapshot_sha256")
    if not (isinstance(sums, dict) and sums and all(type(k) is str and type(v) is str for k, v in sums.items())):
        return json.dumps(data, indent=1, ensure_ascii=False)
    text = json.dumps({**data, "snapshot_sha256": {}}, indent=1, ensure_ascii=False)
    at = '\n "snapshot_sha256": {}'  # top-level keys, and only they, are indented by one space
    from json.encoder import encode_basestring as enc  # noqa: PLC0415 - start-up: the C encoder json uses too

    pairs = ",\n  ".join([f"{enc(k)}: {enc(v)}" for k, v in sums.items()])
    return text.replace(at, f'\n "snapshot_sha256": {{\n  {pairs}\n }}', 1)


def _read_json(path: Path) -> Any:
    """A small JSON file of memd's own, or None when absent, unreadable, not JSON (never a FIFO read)."""
    try:
        return json.loads(read_regular(path, MAX_JSON_BYTES, follow=False).decode("utf-8"))
    except (OSError, ValueError):
        return None


def read_run(entry: Path) -> dict[str, Any] | None:
    try:
        return _run_info(entry)
    except (OSError, ValueError):
        return None


def _run_info(entry: Path) -> dict[str, Any]:
    """An entry's run.json; OSError when there is none, ValueError when it is not a JSON object."""
    try:
        raw = read_regular(entry / RUN_FILE, MAX_JSON_BYTES, follow=False)
    except UnusableFile as exc:
        raise ValueError(str(exc).removeprefix(f"{entry / RUN_FILE}: ")) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ValueError("a symlink") from None
        raise
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError("not UTF-8") from None
    except ValueError as exc:
        raise ValueError(f"not JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ValueError(f"a JSON {type(data).__name__}, not an object")
    return data


def _runs_in(root: Path, *, damaged: bool = False, scope: str | None = None) -> list[dict[str, Any]]:
    """The completed entries of one scope's history, oldest first; with `damaged`, also those whose
    run.json exists but cannot be read (`kind: "damaged"`, with the reason)."""
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    runs, bad = [], []
    for name in names:
        if not RUN_ID.match(name):
            continue
        try:
            info = _run_info(root / name)
        except ValueError as exc:
            if damaged:
                bad.append((name, str(exc)))
            continue
        except OSError:
            continue  # no run.json: a snapshot cut short, swept by recovery
        runs.append({**info, "run": name, "path": str(root / name)})
    runs.sort(key=lambda r: (r["seq"] if isinstance(r.get("seq"), int) else 0, r["run"]))
    if bad:
        where = scope or next((str(r["scope"]) for r in runs if isinstance(r.get("scope"), str)), None) or _scope_of(root.name)
        for name, why in bad:  # in its place by time: before the first run that started later
            at = next((i for i, r in enumerate(runs) if r["run"] > name), len(runs))
            runs.insert(at, {"run": name, "scope": where, "kind": "damaged", "time": _time_of(name),
                             "path": str(root / name),
                             "reason": f"run.json is damaged ({why}); this run cannot be undone"})  # fmt: skip
    return runs


def _scope_of(history_name: str) -> str:
    """The scope a history directory's name spells, when it spells one plainly (else the name)."""
    if history_name == "global":
        return "global"
    if history_name.startswith("project-") and _PLAIN_KEY.match(history_name[len("project-") :]):
        return f"project:{history_name[len('project-') :]}"
    return history_name


def _time_of(run_id: str) -> str:
    """A run id's time (`20261201T070905Z-…`) in the ISO form run.json uses."""
    t = run_id[:16]
    return f"{t[0:4]}-{t[4:6]}-{t[6:8]}T{t[9:11]}:{t[11:13]}:{t[13:15]}Z"

"""The offline rules on issue 21's labelled statements: the tuning part and the held-out part.

    .venv/bin/python bench/bench_offline_21.py [--baseline REV] [--show tune] [--no-write]

Reads tests/data/offline_tune_21.jsonl and tests/data/offline_heldout_21.jsonl (written by
bench/make_offline_labels_21.py; the held-out part was committed before any rule changed and was
never looked at while tuning). Each statement is one human turn given to the offline gate and
extraction (`has_durable`, `find_durable`). Figures: precision and recall of "durable", scope
accuracy (of the durable statements kept, the share whose every memory is in the labelled scope),
type accuracy, and, for statements in Chinese, the share of kept memories written in Chinese
(labels `**为什么：**` / `**怎么用：**`).

`--baseline REV` measures the rules as they were at git revision REV too: the whole tree at REV is
checked out in a temporary worktree and judged in a subprocess (offline.py and the classify rules it
imports, both as they were).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO, write_section

DATA = REPO / "tests" / "data"
PARTS = {"tune": DATA / "offline_tune_21.jsonl", "held-out": DATA / "offline_heldout_21.jsonl",
         "issue 13 set": DATA / "offline_labels.jsonl"}
SECTION_TITLE = "## Offline provider on issue 21's statements (tuned / held out)"
TS = "2026-11-20T10:00:00Z"

# Run inside the tree being judged (cwd), reading the labelled rows from stdin: one JSON line per row.
_JUDGE = """
import json, sys
from jobs.extract.offline import find_durable, has_durable
for line in sys.stdin:
    r = json.loads(line)
    texts = [(r["text"], "TS")]
    kept = bool(has_durable(texts))
    found = find_durable(texts) if kept else []
    print(json.dumps({"id": r["id"], "kept": kept, "scopes": [f.scope for f in found],
                      "types": [f.type for f in found], "bodies": [f.body for f in found]}, ensure_ascii=False))
""".replace("TS", TS)


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def judge(tree: Path, rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each row's outcome under the rules of the tree at `tree`."""
    stdin = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    out = subprocess.run([sys.executable, "-c", _JUDGE], cwd=tree, input=stdin, capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"})  # fmt: skip
    return {o["id"]: o for o in map(json.loads, out.stdout.splitlines())}


def figures(rows: list[dict[str, Any]], got: dict[str, dict[str, Any]]) -> dict[str, Any]:
    kept = [r for r in rows if got[r["id"]]["kept"]]
    tp = [r for r in kept if r["durable"]]
    durable = sum(r["durable"] for r in rows)
    scoped = [r for r in tp if got[r["id"]]["scopes"] and all(s == r["scope"] for s in got[r["id"]]["scopes"])]
    typed = [r for r in tp if got[r["id"]]["types"] and got[r["id"]]["types"][0] in r["types"]]
    zh = [r for r in tp if r.get("lang") == "zh"]
    zh_ok = [r for r in zh if all("**为什么：**" in b for b in got[r["id"]]["bodies"])]
    return {"n": len(rows), "durable": durable, "tp": len(tp), "kept": len(kept),
            "precision": len(tp) / max(1, len(kept)), "recall": len(tp) / max(1, durable),
            "scope": (len(scoped), len(tp)), "type": (len(typed), len(tp)), "zh": (len(zh_ok), len(zh))}  # fmt: skip


def row_of(label: str, f: dict[str, Any]) -> str:
    s, t, z = f["scope"], f["type"], f["zh"]
    return (f"| {label} | {f['n']} ({f['durable']} durable) | {f['precision']:.3f} ({f['tp']}/{f['kept']}) | "
            f"{f['recall']:.3f} ({f['tp']}/{f['durable']}) | {s[0]}/{s[1]} | {t[0]}/{t[1]} | {z[0]}/{z[1]} |")  # fmt: skip


def mistakes(rows: list[dict[str, Any]], got: dict[str, dict[str, Any]]) -> list[str]:
    out = []
    for r in rows:
        o = got[r["id"]]
        if o["kept"] != r["durable"]:
            out.append(f"  {'FP' if o['kept'] else 'FN'} [{r['group']}] {r['text']}")
        elif o["kept"] and not all(s == r["scope"] for s in o["scopes"]):
            out.append(f"  SCOPE want {r['scope']} got {o['scopes']} [{r['group']}] {r['text']}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", help="a git revision whose rules are measured beside the current ones")
    ap.add_argument("--show", choices=["tune"], help="print the current rules' mistakes on the tuning part")
    ap.add_argument("--no-write", action="store_true", help="do not update bench/RESULTS.md")
    ap.add_argument("--tune-only", action="store_true", help="judge the tuning part only (while tuning; no write)")
    args = ap.parse_args(argv)
    parts = {name: load(path) for name, path in PARTS.items() if name != "held-out" or not args.tune_only}
    args.no_write = args.no_write or args.tune_only
    runs: list[tuple[str, Path]] = [("after", REPO)]
    tmp = None
    if args.baseline:
        tmp = Path(tempfile.mkdtemp()) / "tree"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(tmp), args.baseline], check=True)
        runs.insert(0, (f"before ({args.baseline})", tmp))
    table = ["| rules, part | n | precision | recall | right scope (of kept durable) | right type | "
             "Chinese statement → Chinese memory |", "|---|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    verdict = ""
    try:
        for label, tree in runs:
            for part, rows in parts.items():
                got = judge(tree, rows)
                f = figures(rows, got)
                table.append(row_of(f"{label}, {part}", f))
                if label == "after" and part == "held-out":
                    ok = f["precision"] >= 0.9 and f["recall"] >= 0.7 and f["scope"][0] == f["scope"][1]
                    verdict = "meets" if ok else "misses"
                if label == "after" and part == "tune" and args.show:
                    print("\n".join(mistakes(rows, got)) or "  none")
    finally:
        if tmp is not None:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tmp)], check=False)
    n = sum(len(r) for r in parts.values())
    cmd = ".venv/bin/python bench/bench_offline_21.py" + (f" --baseline {args.baseline}" if args.baseline else "")
    text = "\n".join([
        SECTION_TITLE, "",
        f"Command: `{cmd}` (labels: `.venv/bin/python bench/make_offline_labels_21.py`)", "",
        f"{n - len(parts['issue 13 set'])} labelled statements written for issue 21 ({len(parts['tune'])} to tune on, "
        f"{len(parts.get('held-out', []))} "
        "held out), in English and Chinese: \"in this repo we always …\", \"in <project> we …\", \"from now on …\", "
        "\"I prefer …\", corrections, references, requests to remember, and look-alikes that must not be kept "
        "(questions, one-off requests, plans, thanks, status reports, temporary instructions). The held-out part "
        "was written and committed first and never looked at while the rules were tuned. Each statement is one "
        "human turn given to the offline gate and extraction. The issue 13 set (tests/data/offline_labels.jsonl, "
        "all its splits) is judged the same way, to show the rules did not regress on it.", "",
        *table, "",
        f"Goal on the held-out part (precision ≥ 0.9, recall ≥ 0.7, every kept memory in the right scope): "
        f"**{verdict}**.",
    ])  # fmt: skip
    print(text)
    if not args.no_write:
        write_section(SECTION_TITLE, text, REPO / "bench" / "RESULTS.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

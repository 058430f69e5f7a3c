"""Retrieval quality on the labelled coding-memory set (bench/retrieval_data.py), issue 25.

    .venv/bin/python bench/bench_retrieval.py [--tree DIR] [--json]

Builds a home from the set's 502 memories with memd's own writer and indexer (in a temporary
folder), then asks every query as `memd search` does (`query_index`, the project plus the drawer,
top 10) and as offline recall does (`offline_pick`, at most 5, with its relevance floor). Reports
Recall@5 and MRR (first relevant hit; 0 when absent from the top 10) for queries with an answer,
and the no-answer rate (the share of `none` queries answered with nothing) — per part (tuned on /
held out) and per query kind. `--tree DIR` imports memd from another checkout (an export of an
older commit), so two trees are compared on the same set in one run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any


def _setup(tree: Path | None) -> None:
    here = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(here))  # bench.retrieval_data
    if tree is not None:
        sys.path.insert(0, str(tree.resolve()))


def build_home(root: Path) -> tuple[Any, dict[str, str]]:
    """(Home, file → memory id) with every memory of the set written and indexed."""
    from bench.retrieval_data import memories  # noqa: PLC0415 - memd comes from --tree's checkout
    from memd.index.refresh import refresh_all  # noqa: PLC0415 - memd comes from --tree's checkout
    from memd.memory.file import render_memory, write_memory  # noqa: PLC0415 - memd comes from --tree's checkout
    from memd.tree import Home  # noqa: PLC0415 - memd comes from --tree's checkout

    home = Home(root)
    ids: dict[str, str] = {}
    for m in memories():
        d = home.global_memory if m.scope == "global" else home.project_memory(project_key(m.scope))
        path = write_memory(d, m.name, render_memory(m.name, m.description, m.type, m.body))
        ids[path.relative_to(root).as_posix()] = m.id
    refresh_all(home)
    return home, ids


def project_key(project: str) -> str:
    return f"-work-{project}"


def evaluate(home: Any, ids: dict[str, str]) -> dict[str, Any]:
    """Per query: the search ranking's first relevant rank and recall's picks."""
    from bench.retrieval_data import queries  # noqa: PLC0415 - memd comes from --tree's checkout
    from memd.agent.candidates import offline_pick  # noqa: PLC0415 - memd comes from --tree's checkout
    from memd.index.search import open_readonly, query_index  # noqa: PLC0415 - memd comes from --tree's checkout

    conn = open_readonly(home.search_db)
    rows = []
    try:
        for q in queries():
            key = project_key(q.project)
            hits = [ids.get(h.file) for h in query_index(conn, q.text, project_key=key, limit=10)]
            picks = [ids.get(c.file) for c in offline_pick(conn, q.text, key, ())]
            rank = next((i + 1 for i, h in enumerate(hits) if h in q.relevant), None)
            rows.append({"q": q.text, "kind": q.kind, "heldout": q.heldout, "rank": rank, "hits": len(hits),
                         "recall_hit": any(p in q.relevant for p in picks), "picks": len(picks)})  # fmt: skip
    finally:
        conn.close()
    return {"rows": rows}


def summarise(rows: list[dict[str, Any]]) -> dict[str, dict[str, float | int]]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        part = "heldout" if r["heldout"] else "tuned"
        for g in ("all", part, f"{part}:{r['kind']}", f"all:{r['kind']}"):
            groups[g].append(r)
    out: dict[str, dict[str, float | int]] = {}
    for g, rs in groups.items():
        ans = [r for r in rs if r["kind"] != "none"]
        none = [r for r in rs if r["kind"] == "none"]
        s: dict[str, float | int] = {"n": len(rs)}
        if ans:
            s["search_r5"] = sum(1 for r in ans if r["rank"] and r["rank"] <= 5) / len(ans)
            s["search_mrr"] = sum(1 / r["rank"] for r in ans if r["rank"]) / len(ans)
            s["recall_r5"] = sum(1 for r in ans if r["recall_hit"]) / len(ans)
        if none:
            s["search_none"] = sum(1 for r in none if r["hits"] == 0) / len(none)
            s["recall_none"] = sum(1 for r in none if r["picks"] == 0) / len(none)
        out[g] = s
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--tree", type=Path, help="import memd from this checkout instead")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    _setup(args.tree)
    from memd.logs.events import cli_defaults  # noqa: PLC0415 - memd comes from --tree's checkout

    cli_defaults()
    with tempfile.TemporaryDirectory() as tmp:
        home, ids = build_home(Path(tmp) / "home")
        result = evaluate(home, ids)
    summary = summarise(result["rows"])
    if args.json:
        print(json.dumps({"summary": summary, "rows": result["rows"]}))
        return 0
    print(f"{'group':18} {'n':>4} {'search R@5':>10} {'MRR':>6} {'recall R@5':>10} {'none: search':>12} {'recall':>6}")
    for g in sorted(summary, key=lambda k: (k.count(":"), k)):
        s = summary[g]
        cell = lambda k: f"{s[k]:.3f}" if k in s else "—"  # noqa: E731
        print(f"{g:18} {s['n']:>4} {cell('search_r5'):>10} {cell('search_mrr'):>6} {cell('recall_r5'):>10} "
              f"{cell('search_none'):>12} {cell('recall_none'):>6}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The `memd[semantic]` extra as built (issue 25, point 3): search and recall with and without it.

    .venv/bin/pip install -e '.[semantic]'
    .venv/bin/python bench/bench_semantic_fused.py [--home DIR] [--json]

Builds the labelled set's home (bench/retrieval_data.py, with memd's own writer and indexer), embeds
every scope with the index job's own call (`SearchIndex.embed`, timed: the index time per 1,000
memories with embeddings), then asks every query twice, in one run: keyword only (as without the
extra) and with the dense ranking the daemon serves (`DenseRanker.rank`, the daemon's own code, called
in-process: the socket's cost is the hook figure, measured by bench_recall_budget.py) fused by memd's
own code (`fused_hits` for `memd search`, `offline_pick(..., nearest)` for offline recall). Reports
Recall@5, MRR and the no-answer rates per part and kind, before and after. `--home DIR` keeps the built
home there and reuses it (and its vectors) on the next run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_retrieval import build_home, project_key, summarise
from bench.retrieval_data import memories, queries
from memd.agent.candidates import offline_pick
from memd.index.embeddings import DenseRanker, load_model
from memd.index.nearest import DENSE_K, fused_hits
from memd.index.refresh import refresh_all
from memd.index.search import open_readonly, query_index
from memd.index.writer import SearchIndex
from memd.logs.events import cli_defaults
from memd.tree import Home


def embed_all(home: Home) -> tuple[int, float]:
    """(vectors computed, seconds) for every scope of the home, as the index job does it."""
    load_model()
    t = time.monotonic()
    n = 0
    with SearchIndex.for_home(home) as db:
        scopes = db._conn.execute("SELECT DISTINCT scope, project_key FROM memories").fetchall()
        for scope, key in scopes:
            n += db.embed(scope, key).embedded
    return n, time.monotonic() - t


def _has_vectors(home: Home) -> bool:
    import sqlite3  # noqa: PLC0415

    conn = sqlite3.connect(home.search_db)
    try:
        return bool(conn.execute("SELECT count(*) FROM embeddings").fetchone()[0])
    except sqlite3.Error:
        return False
    finally:
        conn.close()


def evaluate(home: Home, ids: dict[str, str], dense: bool) -> list[dict[str, Any]]:
    conn = open_readonly(home.search_db)
    ranker = DenseRanker(home.search_db)
    rows = []
    try:
        for q in queries():
            key = project_key(q.project)
            nearest = ranker.rank(q.text, key, DENSE_K) if dense else []
            hits = [ids.get(h.file) for h in fused_hits(conn, query_index(conn, q.text, project_key=key, limit=10),
                                                        nearest, key, 10)]  # fmt: skip
            picks = [ids.get(c.file) for c in offline_pick(conn, q.text, key, (), nearest=nearest)]
            rank = next((i + 1 for i, h in enumerate(hits) if h in q.relevant), None)
            rows.append({"q": q.text, "kind": q.kind, "heldout": q.heldout, "rank": rank, "hits": len(hits),
                         "recall_hit": any(p in q.relevant for p in picks), "picks": len(picks),
                         "top_sim": nearest[0][1] if nearest else None})  # fmt: skip
    finally:
        conn.close()
        ranker.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--home", type=Path, help="build (or reuse) the home here")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    cli_defaults()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.home or Path(tmp) / "home"
        if args.home and (root / "memd" / "search.sqlite").exists():
            home = Home(root)
            ids = json.loads((root / "ids.json").read_text())
        else:
            home, ids = build_home(root)
            (root / "ids.json").write_text(json.dumps(ids))
        scan_s = 0.0
        if not _has_vectors(home):  # a fresh home: the keyword index alone, from nothing, for the ratio
            for suffix in ("", "-wal", "-shm"):
                Path(f"{home.search_db}{suffix}").unlink(missing_ok=True)
            t = time.monotonic()
            refresh_all(home)
            scan_s = time.monotonic() - t
        n, secs = embed_all(home)
        before = evaluate(home, ids, dense=False)
        t = time.monotonic()
        after = evaluate(home, ids, dense=True)
        per_query = (time.monotonic() - t) / len(after)
    out = {"embedded": n, "embed_s": secs, "keyword_index_s": scan_s, "memories": len(memories()), "per_query_s": per_query,
           "before": summarise(before), "after": summarise(after)}  # fmt: skip
    if args.json:
        print(json.dumps({**out, "rows_before": before, "rows_after": after}))
        return 0
    if n:
        print(f"keyword index from nothing: {scan_s:.1f} s ({scan_s / n * 1000:.1f} s per 1,000); "
              f"then embedded {n} memories in {secs:.1f} s ({secs / n * 1000:.1f} s per 1,000)")
    print(f"search + recall with the dense ranking: {per_query * 1000:.0f} ms a query (embedding included)")
    print("| group | n | search R@5 before → after | MRR | recall R@5 | none: search | none: recall |")
    print("|---|---:|---|---|---|---|---|")
    b, a = out["before"], out["after"]
    for g in sorted(b, key=lambda k: (k.count(":"), k)):
        cell = lambda k: f"{b[g][k]:.3f} → {a[g][k]:.3f}" if k in b[g] else "—"  # noqa: E731
        print(f"| {g} | {b[g]['n']} | {cell('search_r5')} | {cell('search_mrr')} | {cell('recall_r5')} | "
              f"{cell('search_none')} | {cell('recall_none')} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

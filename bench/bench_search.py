"""Issue 6 benchmarks: index rebuild, one-file reindex and search over 10,000 memories,
against ripgrep over the same files (what an agent without memd does).

    .venv/bin/python bench/bench_search.py [--memories 10000] [--projects 20] [--queries 200] [--workdir DIR]

basic-memory, the reference the issue names, needs Python >= 3.12 and cannot run
on this machine (Python 3.11 only), so ripgrep stands in: `rg -l -i -F TERM` and
`rg -c -i -F TERM` over the memory directories, spawned once a query as an
agent's Grep tool does. rg keeps no index, so its "indexing" cost is zero and
every query pays a full scan. All figures come from one run on one machine.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import MEMD, pct
from memd.discovery import list_memory_dirs
from memd.index.refresh import refresh_all, refresh_dir
from memd.index.search import open_readonly, query_index
from memd.index.writer import SearchIndex
from memd.logs.events import cli_defaults
from memd.memory.file import parse_memory, render_memory
from memd.memory.names import INDEX_NAME
from memd.memory.scan import scan_dir
from memd.tree import Home

SEED = 6
TOPICS = [
    "deploy", "release", "kubernetes", "terraform", "docker", "postgres", "migration", "schema", "redis",
    "cache", "queue", "worker", "scheduler", "cron", "logging", "structlog", "metrics", "tracing", "alerting",
    "oncall", "incident", "rollback", "hotfix", "feature", "flag", "review", "lint", "formatter", "tabs",
    "spaces", "typescript", "react", "frontend", "backend", "graphql", "endpoint", "pagination", "auth",
    "oauth", "token", "session", "cookie", "encryption", "secrets", "vault", "permissions", "pytest",
    "fixtures", "benchmark", "profiling", "latency", "throughput", "timeout", "retries", "backoff",
    "idempotency", "webhook", "payments", "invoice", "billing", "pricing", "search", "index", "sqlite",
    "fts5", "tokenizer", "unicode", "locale", "timezone", "calendar", "email", "notification", "mobile",
    "android", "swift", "gradle", "webpack", "vite", "monorepo", "bazel", "makefile", "changelog",
    "semver", "dependency", "upgrade", "python", "rust", "golang", "compiler", "parser", "grammar",
    "accessibility", "design", "figma", "analytics", "privacy", "gdpr", "audit", "compliance", "backup",
]  # fmt: skip
QUALIFIERS = ["policy", "convention", "decision", "constraint", "preference", "runbook", "pitfall", "owner",
              "checklist", "history", "limits", "setup"]  # fmt: skip
PEOPLE = ["the user", "the team lead", "ops", "the security team", "product", "QA"]
DAYS = ["Mondays", "Tuesdays", "Fridays", "weekends", "the first of the month", "release week"]
ZH_TERMS = [
    "部署流程", "数据库迁移", "代码审查", "单元测试", "缓存策略", "日志格式", "用户偏好", "长期记忆", "发布周期",
    "性能优化", "接口设计", "错误处理", "配置文件", "依赖管理", "安全审计", "权限控制", "监控告警", "回滚方案",
    "索引重建", "全文搜索", "消息队列", "定时任务", "前端框架", "后端服务", "文档规范", "命名约定", "分支策略",
    "测试覆盖", "压力测试", "容器编排",
]  # fmt: skip
ZH_SENTENCES = [
    "用户希望{t}保持简单，不要引入新的依赖。",
    "团队决定{t}每周只做一次，避免周五上线。",
    "关于{t}：先写测试，再改代码，原因是历史上出过事故。",
    "{t}的负责人是运维组，有问题先在群里说。",
    "注意{t}和{u}之间的顺序，反过来会导致数据不一致。",
    "我们用Python写{t}的脚本，部署到Kubernetes集群。",
]  # fmt: skip
EN_SENTENCES = [
    "{p} wants {t} changes reviewed by two people before merging.",
    "Never touch {t} on {d}; {u} jobs run then and a clash broke production once.",
    "**Why:** the {t} {q} was agreed after an outage; the old way lost data.",
    "**How to apply:** check the {t} {q} in the wiki before changing {u}.",
    "The {t} service times out after 30 seconds; retries use exponential backoff with jitter.",
    "{p} prefers {t} over {u} for new code, and asks to keep diffs small.",
    "See the {t} board for open tickets; {u} questions go to {p}.",
    "Use the {t} helper in tools/ rather than calling {u} directly.",
]  # fmt: skip
MISSES = ["xylophone", "quixotic", "zeppelin", "marzipan", "fjord", "obsidian", "kumquat", "snorkel", "tundra",
          "walrus"]  # fmt: skip


# --------------------------------------------------------------------------- the corpus


def _memory_text(rng: random.Random, i: int) -> tuple[str, str]:
    """(file stem, file text) of one realistic memory; about one in six is Chinese."""
    t, u = rng.sample(TOPICS, 2)
    q = rng.choice(QUALIFIERS)
    kind = rng.choice(["user", "feedback", "project", "project", "reference"])
    if rng.random() < 0.16:
        zt, zu = rng.sample(ZH_TERMS, 2)
        name = f"{zt}-{q}-{i}"
        description = f"{zt}的{rng.choice(['约定', '决定', '注意事项', '偏好'])}（{t}）"
        body = "".join(rng.choice(ZH_SENTENCES).format(t=zt, u=zu) for _ in range(rng.randint(2, 5)))
    else:
        name = f"{t}-{q}-{i}"
        description = f"{t} {q}: {rng.choice(PEOPLE)} decided how {u} interacts with {t}"
        sentences = [rng.choice(EN_SENTENCES).format(p=rng.choice(PEOPLE), t=t, u=u, q=q, d=rng.choice(DAYS))
                     for _ in range(rng.randint(2, 7))]  # fmt: skip
        body = " ".join(sentences)
    return name, render_memory(name, description, kind, body)


def build_corpus(home: Home, count: int, projects: int, now: float) -> list[tuple[str, str | None, Path]]:
    """`count` memories: a tenth in the global drawer, the rest over `projects` projects, ages up to a year."""
    rng = random.Random(SEED)
    dirs = [home.global_memory] + [home.project_memory(f"-work-proj{p:02d}") for p in range(projects)]
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        d = dirs[0] if i % 10 == 0 else dirs[1 + i % projects]
        stem, text = _memory_text(rng, i)
        path = d / f"{stem}.md"
        path.write_text(text, encoding="utf-8")
        age = rng.random() * 365 * 86_400
        os.utime(path, (now - age, now - age))
    return list_memory_dirs(home)


def query_set(n: int) -> list[tuple[str, str]]:
    """(kind, query) pairs: whole English words, prefixes, Chinese words, misses; single terms
    so that the same term is a fair `rg -F` pattern."""
    rng = random.Random(SEED + 1)
    words = rng.sample(TOPICS, min(len(TOPICS), int(n * 0.45)))
    prefixes = [w[: max(3, len(w) - 3)] for w in rng.sample(TOPICS, int(n * 0.25))]
    zh = [rng.choice(ZH_TERMS)[rng.choice([0, 2]) :][: rng.choice([2, 2, 3, 4])] for _ in range(int(n * 0.25))]
    out = [("word", w) for w in words] + [("prefix", p + "*") for p in prefixes] + [("chinese", z) for z in zh]
    out += [("miss", m) for m in MISSES]
    return out[:n] if len(out) >= n else out


# --------------------------------------------------------------------------- measuring


def clock(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    value = fn()
    return time.perf_counter() - t, value


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def wipe_views(home: Home) -> None:
    """Back to files only: no search DB, no MEMORY.md, no drawer render."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{home.search_db}{suffix}").unlink(missing_ok=True)
    for _scope, _key, d in list_memory_dirs(home):
        (d / INDEX_NAME).unlink(missing_ok=True)
    home.drawer_render.unlink(missing_ok=True)


def bench_rebuild(home: Home, runs: int) -> dict[str, Any]:
    times = []
    for _ in range(runs):
        wipe_views(home)
        secs, results = clock(lambda: refresh_all(home))
        times.append(secs)
    written = sum(1 for r in results.values() if r.index_written)
    scan_s, _ = clock(lambda: [scan_dir(d, s, k) for s, k, d in list_memory_dirs(home)])
    return {"runs": times, "index_files_written": written, "scan_only_s": scan_s,
            "rows": SearchIndex.for_home(home).count()}  # fmt: skip


def _edit(path: Path, n: int) -> None:
    """A realistic hand edit: a new description (so MEMORY.md changes too) and a new body line."""
    text = path.read_text(encoding="utf-8")
    head, _, body = text.partition("\n---\n")
    lines = head.split("\n")
    lines = [f"description: edited {n} — deploys now run on Tuesdays" if ln.startswith("description:") else ln
             for ln in lines]  # fmt: skip
    path.write_text("\n".join(lines) + "\n---\n" + body + f"\nEdit {n}.\n", encoding="utf-8")


def bench_one_file(home: Home, scope: str, key: str | None, directory: Path, runs: int) -> dict[str, Any]:
    """Reindex after one file changed: refresh_dir as the index job calls it (own connection),
    with a reused connection, and the single-file path (read, parse, SearchIndex.sync_one)."""
    target = sorted(p for p in directory.glob("*.md") if p.name != INDEX_NAME)[0]
    files_in_dir = len(list(directory.glob("*.md"))) - 1
    job, reused, one = [], [], []
    idx = SearchIndex.for_home(home)
    try:
        for n in range(runs):
            _edit(target, 3 * n)
            job.append(clock(lambda: refresh_dir(home, scope, key, directory))[0])
            _edit(target, 3 * n + 1)
            reused.append(clock(lambda: refresh_dir(home, scope, key, directory, index=idx))[0])
            _edit(target, 3 * n + 2)

            def single() -> None:
                st = target.stat()
                mem = parse_memory(target, target.read_bytes(), mtime=st.st_mtime, scope=scope, project_key=key)
                idx.sync_one(mem)

            one.append(clock(single)[0])
        refresh_dir(home, scope, key, directory, index=idx)  # leave MEMORY.md current
    finally:
        idx.close()
    return {"files_in_dir": files_in_dir, "job": job, "reused": reused, "sync_one": one}


def bench_memd_search(home: Home, queries: list[tuple[str, str]], key: str, all_scopes: bool) -> dict[str, Any]:
    conn = open_readonly(home.search_db)
    try:
        for _kind, q in queries[:5]:  # open the pages once; the daemon's readers are warm too
            query_index(conn, q, project_key=key, all_scopes=all_scopes)
        times, found = [], 0
        for _kind, q in queries:
            secs, hits = clock(lambda: query_index(conn, q, project_key=key, all_scopes=all_scopes, limit=10))
            times.append(secs)
            found += bool(hits)
    finally:
        conn.close()
    return {"times": times, "queries_with_hits": found}


def bench_rg(queries: list[tuple[str, str]], paths: list[Path], flag: str) -> dict[str, Any]:
    times, found = [], 0
    for _kind, q in queries:
        term = q.rstrip("*")
        cmd = ["rg", flag, "-i", "-F", "--", term, *map(str, paths)]
        secs, r = clock(lambda: subprocess.run(cmd, capture_output=True, text=True))
        assert r.returncode in (0, 1), r.stderr
        times.append(secs)
        found += r.returncode == 0
    return {"times": times, "queries_with_hits": found}


def bench_cli_search(home: Home, queries: list[tuple[str, str]], key: str, n: int) -> list[float]:
    out = []
    for _kind, q in queries[:n]:
        secs, r = clock(lambda: subprocess.run([*MEMD, "--home", str(home.root), "search", q, "--project", key,
                                                "--json"], capture_output=True, text=True))  # fmt: skip
        assert r.returncode == 0, r.stderr
        out.append(secs)
    return out


@contextmanager
def libyaml_front_matter() -> Iterator[None]:
    """A projection, not memd's code: front matter parsed by libyaml's CSafeLoader.

    memd.memory.file calls `yaml.safe_load` (pure Python, about 0.5 ms a file
    here); this measures what the same rebuild costs with the C loader, to
    show where the time goes. Patched for the duration of the block only.
    """
    if not getattr(yaml, "__with_libyaml__", False):
        raise RuntimeError("PyYAML was built without libyaml")
    original = yaml.safe_load
    yaml.safe_load = lambda stream: yaml.load(stream, Loader=yaml.CSafeLoader)  # type: ignore[assignment]
    try:
        yield
    finally:
        yaml.safe_load = original


# --------------------------------------------------------------------------- report


def stats(times: list[float]) -> str:
    return f"p50 {ms(pct(times, 0.5))} ms, p95 {ms(pct(times, 0.95))} ms, max {ms(max(times))} ms"


def report(res: dict[str, Any]) -> None:
    rb = res["rebuild"]
    print(f"corpus: {res['memories']} memories in {res['dirs']} directories, {res['bytes'] / 1e6:.1f} MB; "
          f"{res['queries']} queries; python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}, "
          f"{res['rg_version']}, {os.cpu_count()} CPUs")  # fmt: skip
    print(f"full rebuild (refresh_all from empty, {rb['index_files_written']} MEMORY.md + drawer render): "
          f"runs {', '.join(f'{t:.2f}' for t in rb['runs'])} s; median {sorted(rb['runs'])[len(rb['runs']) // 2]:.2f} s; "
          f"rows {rb['rows']}; scan+parse alone {rb['scan_only_s']:.2f} s")  # fmt: skip
    cy = res["rebuild_libyaml"]
    print(f"  projection with libyaml's CSafeLoader for front matter: runs {', '.join(f'{t:.2f}' for t in cy['runs'])} s; "
          f"scan+parse alone {cy['scan_only_s']:.2f} s; one file in the project dir: refresh_dir "
          f"{stats(res['one_project_libyaml']['job'])}")  # fmt: skip
    for label, one in (("project dir", res["one_project"]), ("global drawer", res["one_global"])):
        print(f"one changed file in a {label} of {one['files_in_dir']} files:")
        print(f"  refresh_dir, own connection (the index job): {stats(one['job'])}")
        print(f"  refresh_dir, reused connection:              {stats(one['reused'])}")
        print(f"  read + parse + SearchIndex.sync_one:         {stats(one['sync_one'])}")
    for label, m, rg_l, rg_c in (
        ("project + drawer", res["memd_scope"], res["rg_l_scope"], res["rg_c_scope"]),
        ("whole tree", res["memd_all"], res["rg_l_all"], res["rg_c_all"]),
    ):
        print(f"search over the {label}: memd query_index {stats(m['times'])} ({m['queries_with_hits']} with hits)")
        for name, r in (("rg -l -i", rg_l), ("rg -c -i", rg_c)):
            ratio50 = pct(m["times"], 0.5) / pct(r["times"], 0.5)
            ratio95 = pct(m["times"], 0.95) / pct(r["times"], 0.95)
            print(f"  {name}: {stats(r['times'])} ({r['queries_with_hits']} with hits); "
                  f"memd/rg p50 {ratio50:.3f}, p95 {ratio95:.3f}")  # fmt: skip
    by_kind: dict[str, list[float]] = {}
    for (kind, _q), t in zip(res["query_list"], res["memd_scope"]["times"]):
        by_kind.setdefault(kind, []).append(t)
    print("memd by query kind (project + drawer): " + "; ".join(
        f"{k} ({len(v)}) p95 {ms(pct(v, 0.95))} ms" for k, v in by_kind.items()))  # fmt: skip
    print(f"`memd search` as a process (first {len(res['cli'])} queries): {stats(res['cli'])}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--memories", type=int, default=10_000)
    ap.add_argument("--projects", type=int, default=20)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3, help="full rebuilds to time")
    ap.add_argument("--edits", type=int, default=20, help="one-file edits to time")
    ap.add_argument("--workdir", type=Path)
    args = ap.parse_args()
    if not shutil.which("rg"):
        sys.exit("ripgrep (rg) is not installed: apt-get install -y ripgrep")
    cli_defaults()  # warnings only: per-directory info lines would time the terminal, not memd
    work = Path(tempfile.mkdtemp(prefix="memd-bench-search-", dir=args.workdir))
    try:
        home = Home(work / "home")
        dirs = build_corpus(home, args.memories, args.projects, datetime.now(UTC).timestamp())
        subprocess.run(["sync"], check=False)
        size = sum(p.stat().st_size for _s, _k, d in dirs for p in d.glob("*.md"))
        for _s, _k, d in dirs:  # warm the page cache for both contenders alike
            for p in d.glob("*.md"):
                p.read_bytes()
        res: dict[str, Any] = {"memories": args.memories, "dirs": len(dirs), "bytes": size}
        res["rg_version"] = subprocess.run(["rg", "--version"], capture_output=True, text=True).stdout.split("\n")[0]
        res["rebuild"] = bench_rebuild(home, args.runs)
        key = "-work-proj05"
        res["one_project"] = bench_one_file(home, "project", key, home.project_memory(key), args.edits)
        res["one_global"] = bench_one_file(home, "global", None, home.global_memory, args.edits)
        with libyaml_front_matter():
            res["rebuild_libyaml"] = bench_rebuild(home, args.runs)
            res["one_project_libyaml"] = bench_one_file(home, "project", key, home.project_memory(key), args.edits)
        queries = query_set(args.queries)
        res["queries"], res["query_list"] = len(queries), queries
        scope_paths = [home.global_memory, home.project_memory(key)]
        all_paths = [d for _s, _k, d in dirs]
        res["memd_scope"] = bench_memd_search(home, queries, key, all_scopes=False)
        res["memd_all"] = bench_memd_search(home, queries, key, all_scopes=True)
        res["rg_l_scope"] = bench_rg(queries, scope_paths, "-l")
        res["rg_c_scope"] = bench_rg(queries, scope_paths, "-c")
        res["rg_l_all"] = bench_rg(queries, all_paths, "-l")
        res["rg_c_all"] = bench_rg(queries, all_paths, "-c")
        res["cli"] = bench_cli_search(home, queries, key, 20)
        report(res)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Writes the issue-21 labelled statements for the offline rules: a held-out part and a tuning part.

    .venv/bin/python bench/make_offline_labels_21.py

- tests/data/offline_heldout_21.jsonl — written FIRST and committed before any rule was changed for
  issue 21; never looked at while the rules were tuned (the figure to trust).
- tests/data/offline_tune_21.jsonl — written after, the set the rules were tuned on.

Each line has the format of tests/data/offline_labels.jsonl (bench/make_offline_labels.py):
{"id", "text", "durable", "scope", "types", "group", "source", "split"} plus "lang" ("en" | "zh").
Statements are as people make them in coding sessions — "in this repo we always …", "from now on …",
"I prefer …", corrections, references, requests to remember, in English and Chinese — and as many
look-alikes that must not be kept: questions, one-off requests, plans, thanks, status reports,
temporary instructions. `scope` (durable only): "global" for a user or feedback memory meant for
every project, "project" for anything about this project or repository (also "in <project name> we
…"), decisions, constraints and references. All "own" (written for this set).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
HELDOUT = DATA / "offline_heldout_21.jsonl"
TUNE = DATA / "offline_tune_21.jsonl"

G, P = "global", "project"
UF, FU, FP, PF, PR, RP = (["user", "feedback"], ["feedback", "user"], ["feedback", "project"],
                          ["project", "feedback"], ["project", "reference"], ["reference", "project"])  # fmt: skip

# (text, scope, types, group)
HELD_DURABLE: list[tuple[str, str, list[str], str]] = [
    ("In this repo we always squash-merge feature branches.", P, FP, "project-rule"),
    ("In this repo we always write migrations as separate PRs.", P, FP, "project-rule"),
    ("In this repo we always pin dependencies to exact versions.", P, FP, "project-rule"),
    ("In this project we never log request bodies because they hold card data.", P, FP, "project-rule"),
    ("From now on, run `make lint` before you commit in this repo.", P, FP, "project-rule"),
    ("Our convention is snake_case for all JSON fields in the API.", P, PF, "project"),
    ("The release branch is named rel-2024q3.", P, PR, "project"),
    ("We deploy to production only from the release branch.", P, PF, "project"),
    ("Going forward, the staging database is staging-db-2, not staging-db-1.", P, PR, "project"),
    ("We switched from Jest to Vitest last month, so don't write new Jest tests.", P, PF, "project"),
    ("The integration tests need Docker running; they talk to a local Postgres on port 5433.", P, PR, "project"),
    ("In hyperion we always use the Result type instead of exceptions for expected errors.", P, FP, "project-rule"),
    ("For kestrel we target Python 3.9, so no match statements.", P, PF, "project"),
    ("This service must stay compatible with the v1 mobile clients.", P, PF, "project"),
    ("Every migration must be reversible in this codebase.", P, PF, "project"),
    ("I prefer small focused commits over big ones.", G, UF, "user"),
    ("I'm a backend engineer, mostly Go and Postgres.", G, UF, "user"),
    ("From now on, answer in short bullet points.", G, FU, "feedback"),
    ("Never add emoji to commit messages.", G, FU, "feedback"),
    ("I prefer pytest fixtures over setUp methods, in every project.", G, UF, "user"),
    ("I like type hints everywhere, even in small scripts.", G, UF, "user"),
    ("Always explain the trade-offs before you propose a big refactor.", G, FU, "feedback"),
    ("Don't use abbreviations like cfg or mgr in variable names.", G, FU, "feedback"),
    ("I'm new to Rust, so explain borrow checker errors in plain words.", G, UF, "user"),
    ("Going forward, please don't run git push without asking me.", G, FU, "feedback"),
    ("I hate long preambles; get to the point.", G, UF, "user"),
    ("Please never reformat files you did not change.", G, FU, "feedback"),
    ("My native language is German, but keep code comments in English.", G, UF, "user"),
    ("I'd rather you ask than guess when a requirement is unclear.", G, UF, "user"),
    ("Whenever you write a shell script, start it with set -euo pipefail.", G, FU, "feedback"),
    ("No, that's wrong: in this repo the config lives in config/app.toml, not settings.py.", P, PR, "correction"),
    ("Actually, we use pnpm here, not npm.", P, PF, "correction"),
    ("Stop adding docstrings to test functions; the names say enough.", G, FU, "correction"),
    ("Don't mock the database in our integration tests; we got burned by that last quarter.", P, FP, "correction"),
    ("Correction: the staging API is at https://staging.api.example.com now, not the old host.", P, RP, "correction"),
    ("Bugs are tracked in Linear, project PAY: https://linear.app/acme/project/pay", P, RP, "reference"),
    ("The on-call runbook is at https://wiki.example.com/oncall/runbook", P, RP, "reference"),
    ("Our design docs live in Notion under Engineering > RFCs.", P, RP, "reference"),
    ("For latency questions look at the Grafana board https://grafana.example.com/d/api-latency", P, RP, "reference"),
    ("The API spec is docs/openapi.yaml; keep it in sync when you change an endpoint.", P, PR, "project"),
    ("Remember that the payments service times out after 30 seconds.", P, PR, "remember"),
    ("Please remember I work on a Mac with an M2 and 16 GB of memory.", G, UF, "remember"),
    ("Keep in mind that the CI runners have no internet access.", P, PR, "remember"),
    ("Note that the legacy billing module is frozen; nobody may change it.", P, PR, "remember"),
    ("For future reference, the test fixtures are regenerated with scripts/gen_fixtures.py.", P, PR, "remember"),
    ("在这个仓库里我们总是用 rebase 合并分支。", P, FP, "zh"),
    ("以后提交信息请用中文写。", G, FU, "zh"),
    ("我更喜欢简短的回答，不要长篇大论。", G, UF, "zh"),
    ("记住：这个项目的测试要用 pytest -n 0 跑。", P, PR, "zh"),
    ("我们决定用 PostgreSQL 而不是 MySQL。", P, PF, "zh"),
    ("永远不要在代码里硬编码密码。", G, FU, "zh"),
    ("我是前端工程师，主要写 TypeScript 和 React。", G, UF, "zh"),
    ("这个项目的文档在 https://docs.example.cn/proj 上。", P, RP, "zh"),
    ("以后写函数都要加类型注解。", G, FU, "zh"),
    ("我们的发布分支叫 release-v2。", P, PR, "zh"),
    ("记住，我习惯用 Vim，不要推荐 VS Code 的插件。", G, UF, "zh"),
    ("在本项目中，所有接口都必须返回统一的错误格式。", P, PF, "zh"),
    ("不要再用 print 调试了，用 logging。", G, FU, "zh"),
    ("我们使用 uv 管理依赖，不要用 pip install。", P, PF, "zh"),
    ("这个服务必须兼容 Python 3.8。", P, PF, "zh"),
]

# (text, group)
HELD_NOT: list[tuple[str, str]] = [
    ("Do we always squash-merge in this repo?", "question"),
    ("What's the release branch called again?", "question"),
    ("Should I prefer pytest fixtures here?", "question"),
    ("Can you check whether the staging database is up?", "question"),
    ("Where do we keep the design docs?", "question"),
    ("Is it true that we never log request bodies?", "question"),
    ("How do I run only the integration tests?", "question"),
    ("Which version of Python does this project target?", "question"),
    ("Why does the linter always complain about this file?", "question"),
    ("Did we decide on pnpm or npm?", "question"),
    ("Rename the variable cfg to config in loader.py.", "task"),
    ("Add a unit test for the empty-cart case.", "task"),
    ("Please run the test suite and tell me what fails.", "task"),
    ("Fix the typo in the README heading.", "task"),
    ("Use the second approach you suggested.", "task"),
    ("Bump the version to 2.3.1 and update the changelog.", "task"),
    ("Write a migration that adds an index on orders.created_at.", "task"),
    ("Delete the unused helper in utils/dates.py.", "task"),
    ("Just this once, skip the slow tests.", "temporary"),
    ("For this PR, don't touch the API layer.", "temporary"),
    ("Next I'll refactor the auth module, then we can look at caching.", "plan"),
    ("Let's start with the parser and do the CLI afterwards.", "plan"),
    ("I'm going to try the Redis approach first.", "plan"),
    ("Tomorrow we will look at the flaky test.", "plan"),
    ("First let me read through the logs.", "plan"),
    ("Thanks, that works perfectly!", "thanks"),
    ("Great, looks good to me.", "thanks"),
    ("Perfect, thank you so much.", "thanks"),
    ("lol that was quick", "thanks"),
    ("ok", "thanks"),
    ("The build is green now.", "status"),
    ("Tests pass locally but fail on CI.", "status"),
    ("It always crashes when I open the settings page.", "status"),
    ("The deploy finished ten minutes ago.", "status"),
    ("I pushed the fix to my branch.", "status"),
    ("The endpoint never returns more than 50 rows, which is odd.", "status"),
    ("I tried the new version and it still times out.", "status"),
    ("For now, comment out the flaky test.", "temporary"),
    ("Currently the staging server is down, so use the mock.", "temporary"),
    ("Today I'm only working on the frontend.", "temporary"),
    ("I always use the staging account for this — don't remember that.", "dont-keep"),
    ("I prefer the first option.", "one-off"),
    ("I like how you structured that function.", "one-off"),
    ("这个项目用的是什么数据库？", "zh"),
    ("帮我把这个函数重命名一下。", "zh"),
    ("谢谢，很好用！", "zh"),
    ("测试现在通过了。", "zh"),
    ("先看一下日志再说。", "zh"),
    ("我们下一步要做什么？", "zh"),
    ("把 README 里的错别字改一下。", "zh"),
    ("这次先跳过慢的测试。", "zh"),
    ("好的，没问题。", "zh"),
    ("为什么这个测试总是失败？", "zh"),
    ("我刚才推送了修复。", "zh"),
    ("明天我们再看这个 bug。", "zh"),
    ("Run the linter on the files I changed.", "task"),
    ("Show me the last three commits.", "task"),
    ("Could you explain what this regex does?", "question"),
    ("Nice, the migration ran without errors.", "status"),
    ("Let's try it with a smaller batch size and see.", "plan"),
]

TUNE_DURABLE: list[tuple[str, str, list[str], str]] = []
TUNE_NOT: list[tuple[str, str]] = []

_CJK = re.compile(r"[\u4e00-\u9fff]")


def rows(durable: list[tuple[str, str, list[str], str]], not_durable: list[tuple[str, str]], split: str,
         prefix: str) -> list[dict[str, object]]:  # fmt: skip
    out: list[dict[str, object]] = []
    for text, scope, types, group in durable:
        out.append({"text": text, "durable": True, "scope": scope, "types": types, "group": group})
    for text, group in not_durable:
        out.append({"text": text, "durable": False, "scope": None, "types": [], "group": group})
    seen: set[str] = set()
    for i, r in enumerate(out):
        assert r["text"] not in seen, r["text"]
        seen.add(str(r["text"]))
        r.update(id=f"{prefix}{i + 1:03d}", source="own", split=split, lang="zh" if _CJK.search(str(r["text"])) else "en")
    keys = ("id", "text", "durable", "scope", "types", "group", "source", "split", "lang")
    return [{k: r[k] for k in keys} for r in out]


def write(path: Path, data: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in data), encoding="utf-8")
    durable = sum(1 for r in data if r["durable"])
    zh = sum(1 for r in data if r["lang"] == "zh")
    print(f"{path}: {len(data)} statements, {durable} durable, {zh} in Chinese")


def main() -> None:
    write(HELDOUT, rows(HELD_DURABLE, HELD_NOT, "heldout21", "h"))
    if TUNE_DURABLE or TUNE_NOT:
        write(TUNE, rows(TUNE_DURABLE, TUNE_NOT, "tune21", "t"))


if __name__ == "__main__":
    main()

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

# Written after the held-out part was committed; the rules were tuned on these.
TUNE_DURABLE: list[tuple[str, str, list[str], str]] = [
    ("In this repo we always use conventional commit prefixes like feat: and fix:.", P, FP, "project-rule"),
    ("In this repo we always run the formatter before committing.", P, FP, "project-rule"),
    ("In this repo we always add a changelog entry for user-facing changes.", P, FP, "project-rule"),
    ("In this repo we never commit generated files.", P, FP, "project-rule"),
    ("In this repository we always keep the public API backwards compatible within a major version.", P, FP,
     "project-rule"),
    ("In this codebase we always wrap database calls in a transaction helper.", P, FP, "project-rule"),
    ("In this project we always use UTC timestamps in the database.", P, FP, "project-rule"),
    ("In spotter we now always use Ecto.Multi for multi-step writes.", P, FP, "project-rule"),
    ("In atlas we always put feature flags in flags.yaml.", P, FP, "project-rule"),
    ("In billing-api we never return raw SQL errors to clients.", P, FP, "project-rule"),
    ("Here we always use tabs in the Makefile and spaces everywhere else.", P, FP, "project-rule"),
    ("For this repo, always run tests with --forked.", P, FP, "project-rule"),
    ("From now on, in this repo, put new scripts under tools/ instead of scripts/.", P, FP, "project-rule"),
    ("From now on use the new logger module in this project, not print.", P, FP, "project-rule"),
    ("We always tag releases with a leading v, like v1.4.0.", P, PF, "project"),
    ("We use trunk-based development with short-lived branches.", P, PF, "project"),
    ("We decided to keep the monolith and not split out the auth service.", P, PF, "project"),
    ("We agreed that every endpoint needs an OpenAPI example.", P, PF, "project"),
    ("Our policy is that hotfixes go through the same review as features.", P, PF, "project"),
    ("We're migrating from REST to gRPC for internal calls.", P, PF, "project"),
    ("The default branch here is develop, not main.", P, PR, "project"),
    ("The staging environment resets every night at 2am UTC.", P, PR, "project"),
    ("The frontend must support Safari 15 and later.", P, PF, "project"),
    ("The mobile app has to work offline for at least a day.", P, PF, "project"),
    ("Builds must stay under ten minutes on CI.", P, PF, "project"),
    ("The nightly job exports orders to the data warehouse.", P, PR, "project"),
    ("The release branch is named rel-2025q1 and is cut every sprint.", P, PR, "project"),
    ("Our main database is Postgres 15 on RDS.", P, PR, "project"),
    ("I prefer early returns over nested ifs.", G, UF, "user"),
    ("I prefer explicit imports over star imports.", G, UF, "user"),
    ("I really like small pure functions.", G, UF, "user"),
    ("I prefer British spelling in docs and comments.", G, UF, "user"),
    ("I'd rather have failing tests than skipped ones.", G, UF, "user"),
    ("I'm a data scientist, so I know pandas well but not web frameworks.", G, UF, "user"),
    ("I'm the only maintainer of most of my projects.", G, UF, "user"),
    ("I mostly work in TypeScript and Python.", G, UF, "user"),
    ("I'm colour-blind, so don't rely on red and green alone in terminal output.", G, UF, "user"),
    ("I dislike one-letter variable names outside of loops.", G, UF, "user"),
    ("From now on, always show me the plan before you edit files.", G, FU, "feedback"),
    ("From now on, don't write summaries at the end of your answers.", G, FU, "feedback"),
    ("Going forward, keep answers under ten lines unless I ask for more.", G, FU, "feedback"),
    ("Always use absolute paths in the commands you suggest.", G, FU, "feedback"),
    ("Never run rm -rf without asking me first.", G, FU, "feedback"),
    ("Never commit secrets, even to a private branch.", G, FU, "feedback"),
    ("Always add a test when you fix a bug.", G, FU, "feedback"),
    ("Don't use print statements for debugging; use a debugger or logging.", G, FU, "feedback"),
    ("Don't add comments that repeat what the code says.", G, FU, "feedback"),
    ("Stop apologising in every answer.", G, FU, "feedback"),
    ("Please stop suggesting Docker for everything.", G, FU, "feedback"),
    ("Whenever you touch SQL, show me the query plan.", G, FU, "feedback"),
    ("By default, write Python 3.11 code.", G, FU, "feedback"),
    ("In every project, use ripgrep rather than grep when you search.", G, FU, "feedback"),
    ("Across all my repos, sign commits with my SSH key.", G, FU, "feedback"),
    ("No, don't catch bare exceptions; catch the specific error.", G, FU, "correction"),
    ("No, that's not how we do it here: we return 422 for validation errors, not 400.", P, PF, "correction"),
    ("Actually the tests live in spec/, not test/, in this project.", P, PR, "correction"),
    ("That's wrong, we don't use Redux anymore; we moved to Zustand.", P, PF, "correction"),
    ("Wrong file: in this repo the routes are in app/router.ts.", P, PR, "correction"),
    ("Don't use mocks for the payment client in our tests; use the sandbox.", P, FP, "correction"),
    ("The sprint board is https://jira.example.com/secure/RapidBoard.jspa?rapidView=42", P, RP, "reference"),
    ("Incidents are written up in the postmortems folder in Confluence.", P, RP, "reference"),
    ("Error tracking is in Sentry: https://sentry.example.com/orgs/acme/projects/web/", P, RP, "reference"),
    ("The style guide we follow is https://google.github.io/styleguide/pyguide.html", P, RP, "reference"),
    ("Feature requests are tracked in GitHub issues with the label enhancement.", P, RP, "reference"),
    ("The architecture doc is docs/architecture.md; read it before big changes.", P, PR, "reference"),
    ("Remember that the auth tokens expire after 15 minutes.", P, PR, "remember"),
    ("Remember that I review PRs only in the morning.", G, UF, "remember"),
    ("Please remember that the vendor API is rate-limited to 100 requests a minute.", P, PR, "remember"),
    ("Keep in mind that the old admin UI still reads from the legacy schema.", P, PR, "remember"),
    ("Note that the search service is owned by another team; we only call it.", P, PR, "remember"),
    ("Remember: I use fish, not bash.", G, UF, "remember"),
    ("Just so you know, the prod database is read-only for engineers.", P, PR, "remember"),
    ("在这个项目里我们总是用 black 格式化代码。", P, FP, "zh"),
    ("在这个仓库里，提交前一定要跑 make test。", P, FP, "zh"),
    ("以后回答尽量简短。", G, FU, "zh"),
    ("以后不要在回答末尾加总结。", G, FU, "zh"),
    ("我喜欢函数式的写法。", G, UF, "zh"),
    ("我习惯用 tmux 和 neovim。", G, UF, "zh"),
    ("我讨厌过度抽象的代码。", G, UF, "zh"),
    ("我是后端工程师，主要用 Java。", G, UF, "zh"),
    ("记住：这个项目的配置文件在 config/prod.yaml。", P, PR, "zh"),
    ("请记住，我们的发布分支叫 rel-main。", P, PR, "zh"),
    ("我们决定不用微服务，继续用单体。", P, PF, "zh"),
    ("我们使用 pnpm 管理前端依赖。", P, PF, "zh"),
    ("不要再用 var 声明变量了。", G, FU, "zh"),
    ("永远不要直接修改生产数据库。", G, FU, "zh"),
    ("总是先写测试再写实现。", G, FU, "zh"),
    ("本项目的接口文档在 https://wiki.example.cn/api 。", P, RP, "zh"),
    ("这个项目必须支持 Windows。", P, PF, "zh"),
    ("这个仓库的 CI 每次都要跑完整的集成测试。", P, PR, "zh"),
    ("记住，我不喜欢在代码里写太多注释。", G, UF, "zh"),
    ("以后在这个项目里新代码都用 TypeScript 写。", P, FP, "zh"),
]

TUNE_NOT: list[tuple[str, str]] = [
    ("Do we always use conventional commits here?", "question"),
    ("What's the default branch in this repo?", "question"),
    ("Where is the style guide?", "question"),
    ("Can you remind me which logger we use?", "question"),
    ("How do I regenerate the fixtures?", "question"),
    ("Is the staging environment reset every night?", "question"),
    ("Should we always wrap database calls in a transaction?", "question"),
    ("Why do the builds take so long lately?", "question"),
    ("What do you prefer, early returns or nested ifs?", "question"),
    ("Any idea why the nightly export failed?", "question"),
    ("Do you remember the name of the release branch?", "question"),
    ("Which tests are flaky right now?", "question"),
    ("Could you look at why the migration fails on CI?", "question"),
    ("Is there a reason we never use transactions in the importer?", "question"),
    ("What's in docs/architecture.md?", "question"),
    ("Add a --dry-run flag to the export command.", "task"),
    ("Move the date helpers into their own module.", "task"),
    ("Rewrite this loop as a list comprehension.", "task"),
    ("Make the error message in the login handler clearer.", "task"),
    ("Update the README with the new install steps.", "task"),
    ("Generate a changelog entry for this release.", "task"),
    ("Split this function into two.", "task"),
    ("Add logging to the retry path.", "task"),
    ("Run the migrations against the local database.", "task"),
    ("Revert the last commit.", "task"),
    ("Open a PR with these changes.", "task"),
    ("Please format this file.", "task"),
    ("Replace the print calls in this script with logging.", "task"),
    ("Write a test for the parser's empty-input case.", "task"),
    ("Go with the simpler version.", "task"),
    ("Use tabs in this file.", "task"),
    ("Let's use Redis for this cache.", "plan"),
    ("I'll handle the frontend part myself later.", "plan"),
    ("We should probably add caching at some point.", "plan"),
    ("Maybe we can split the service next quarter.", "plan"),
    ("After lunch I'll review the PR.", "plan"),
    ("Let me think about the schema a bit more.", "plan"),
    ("The plan is to ship the beta next week.", "plan"),
    ("I'm going to rewrite the importer this afternoon.", "plan"),
    ("Thanks a lot!", "thanks"),
    ("Awesome, that did it.", "thanks"),
    ("cool", "thanks"),
    ("Nice work, thank you.", "thanks"),
    ("Much better now, thanks!", "thanks"),
    ("Sounds good.", "thanks"),
    ("Hmm, interesting.", "thanks"),
    ("The tests are all green.", "status"),
    ("CI failed again on the lint step.", "status"),
    ("The app always freezes after the second login.", "status"),
    ("The export never finishes on big accounts.", "status"),
    ("I merged the branch this morning.", "status"),
    ("Staging is back up.", "status"),
    ("It works on my machine.", "status"),
    ("The error went away after I cleared the cache.", "status"),
    ("My laptop is really slow today.", "status"),
    ("I ran the benchmark and it got 20% faster.", "status"),
    ("For now, hardcode the timeout to 30 seconds.", "temporary"),
    ("This time, skip the changelog.", "temporary"),
    ("In this PR, leave the old endpoint in place.", "temporary"),
    ("Temporarily disable the rate limiter so I can test.", "temporary"),
    ("Until tomorrow, don't deploy anything.", "temporary"),
    ("Right now I only care about the happy path.", "temporary"),
    ("For this task, ignore the mobile layout.", "temporary"),
    ("I prefer this version.", "one-off"),
    ("I like the second one better.", "one-off"),
    ("I prefer yours to mine.", "one-off"),
    ("Don't save this, but my test account password is hunter2.", "dont-keep"),
    ("Forget what I said about the cache.", "dont-keep"),
    ("这个仓库的默认分支是什么？", "zh"),
    ("帮我加一个单元测试。", "zh"),
    ("把这个循环改成列表推导式。", "zh"),
    ("谢谢！", "zh"),
    ("太好了，问题解决了。", "zh"),
    ("构建又失败了。", "zh"),
    ("我今天下午再来看这个。", "zh"),
    ("这次先不用写文档。", "zh"),
    ("现在先把超时写死成 30 秒。", "zh"),
    ("你觉得这两个方案哪个好？", "zh"),
    ("我更喜欢第二个方案。", "zh"),
    ("这个接口为什么总是超时？", "zh"),
    ("先跑一下测试看看。", "zh"),
    ("我们下周再决定吧。", "zh"),
    ("把日志级别调成 debug。", "zh"),
    ("部署已经完成了。", "zh"),
    ("这个 bug 是怎么来的？", "zh"),
    ("不错，继续。", "zh"),
    ("帮我看看这个报错。", "zh"),
    ("我们要不要换成 Go？", "zh"),
]

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

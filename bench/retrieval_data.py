"""A labelled coding-memory retrieval set (issue 25): memories as a coding agent writes them and
queries as people ask them, for `bench/bench_search.py --set coding`.

Hand-written: `TARGETS`, each a memory with the queries that should find it — `direct` (shares the
memory's words), `para` (a paraphrase sharing few or no content words), `typo` (a misspelling),
`zh` (Chinese, for a Chinese memory) — and `NO_ANSWER`, queries that no memory answers (recall
must bring nothing). Generated with a fixed seed: `distractors()`, memories of the same four
projects and the drawer that answer none of the queries, so the set holds over 500 memories.

Held out: every target whose index is a multiple of 4 (and every fourth no-answer query) was put
aside before any tuning on this set; `split()` says which part a query is in. The English and
Chinese are the author's own; nothing comes from a public data set.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["NO_ANSWER", "TARGETS", "Memory", "Query", "distractors", "memories", "queries", "typo"]

PROJECTS = ("shop", "spotter", "atlas", "pixel")


@dataclass(frozen=True)
class Memory:
    id: str
    scope: str  # "global" (the drawer) or a project name
    type: str  # user | feedback | project | reference
    name: str
    description: str
    body: str


@dataclass(frozen=True)
class Query:
    text: str
    kind: str  # direct | para | typo | zh | none
    relevant: tuple[str, ...]
    project: str
    heldout: bool


# (id, scope, type, name, description, body, queries)
T = tuple[str, str, str, str, str, str, tuple[tuple[str, str], ...]]
TARGETS: list[T] = [
    ("tabs", "global", "user", "prefers-tabs", "the user indents code with tabs", "Tabs, never spaces, in every language except YAML.",
     (("direct", "tabs or spaces for indentation"), ("para", "what whitespace style do I like at the start of lines"), ("typo", "indnet with tabbs"))),
    ("terse", "global", "feedback", "terse-answers", "keep answers short; no summaries at the end", "The user said long recaps waste their time. Answer, then stop.",
     (("direct", "should answers end with a summary"), ("para", "how verbose should your replies be"))),
    ("commits", "global", "user", "short-commit-messages", "commit subjects under 50 characters, imperative mood", "Body only when the why is not obvious.",
     (("direct", "commit message length"), ("para", "how should I word the first line when saving work to git"), ("typo", "comit mesage style"))),
    ("pytest", "global", "user", "pytest-over-unittest", "write tests with pytest functions, not unittest classes", "Fixtures over setUp; plain assert statements.",
     (("direct", "pytest or unittest"), ("para", "which python testing framework do I like"))),
    ("noemoji", "global", "feedback", "no-emoji-in-code", "never put emoji in code, comments or commit messages", "The user corrected this twice.",
     (("direct", "emoji in comments"), ("para", "can I use smiley pictographs in source files"))),
    ("darkmode", "global", "user", "editor-neovim", "the user edits in Neovim with LazyVim", "Suggest Neovim keybindings, not VS Code ones.",
     (("direct", "which editor does the user use"), ("para", "vim or vscode shortcuts"))),
    ("askfirst", "global", "feedback", "ask-before-large-refactors", "ask before refactoring more than one module", "A sweeping rename once broke an open branch of theirs.",
     (("direct", "refactor several modules at once"), ("para", "may I restructure lots of files without checking with you"))),
    ("typehints", "global", "user", "type-hints-everywhere", "type hints on every function signature, checked with mypy strict", "No Any unless a third-party API forces it.",
     (("direct", "type hints mypy"), ("para", "should python signatures carry annotations"), ("typo", "tpye hints"))),
    ("british", "global", "user", "british-spelling", "use British spelling in docs (colour, behaviour)", "Code identifiers stay American where libraries use it.",
     (("direct", "british spelling in documentation"), ("para", "colour or color in the README"))),
    ("nopush", "global", "feedback", "never-push-without-asking", "never git push; the user pushes themselves", "Committing locally is fine.",
     (("direct", "may I git push"), ("para", "should you upload my branch to the remote"))),
    ("tz", "global", "user", "timezone-berlin", "the user works in Europe/Berlin time", "Schedule reminders and cron examples in CET/CEST.",
     (("direct", "user's timezone"), ("para", "what hour is it where I live"))),
    ("ripgrep", "global", "user", "use-ripgrep", "search code with rg, never grep -r", "rg respects .gitignore and is faster on this machine.",
     (("direct", "grep or ripgrep"), ("para", "tool for finding text in the repository"))),
    ("shop-db", "shop", "project", "postgres-not-mysql", "shop runs on Postgres 16, chosen for JSONB", "MySQL was dropped in 2024; do not suggest it.",
     (("direct", "which database does shop use"), ("para", "where are orders stored, what engine"), ("typo", "postgress version"))),
    ("shop-deploy", "shop", "project", "deploy-fridays-forbidden", "no deploys to production on Fridays", "Freeze from Friday noon to Monday 9:00; hotfixes need the on-call lead.",
     (("direct", "deploy on friday"), ("para", "can we ship to prod before the weekend"), ("typo", "dpeloy friday"))),
    ("shop-money", "shop", "project", "money-as-integer-cents", "amounts are integer cents, never floats", "Use the Money type in shop/core/money.py; rounding is banker's.",
     (("direct", "store money as cents"), ("para", "how do we represent prices in code"), ("typo", "mony as float"))),
    ("shop-celery", "shop", "project", "celery-for-background-jobs", "background jobs run on Celery with Redis as broker", "Tasks must be idempotent: the broker redelivers on worker loss.",
     (("direct", "celery redis background jobs"), ("para", "what runs asynchronous work off the request path"))),
    ("shop-stripe", "shop", "reference", "stripe-webhooks-doc", "Stripe webhook handling is documented in docs/payments.md", "Signature secret lives in Vault at shop/stripe.",
     (("direct", "stripe webhooks"), ("para", "where is the payment provider callback explained"))),
    ("shop-migr", "shop", "project", "migrations-backward-compatible", "every migration must work with the previous release's code", "Add columns nullable first; drop in the release after.",
     (("direct", "backward compatible migrations"), ("para", "can a schema change break the old version during rollout"))),
    ("shop-lint", "shop", "feedback", "ruff-not-flake8", "lint shop with ruff; flake8 config is dead", "The user removed setup.cfg's flake8 section on purpose.",
     (("direct", "ruff or flake8"), ("para", "which style checker runs on shop"))),
    ("shop-oncall", "shop", "reference", "oncall-rotation", "on-call rotation is in PagerDuty schedule SHOP-PRIMARY", "Escalate to Dana after 30 minutes.",
     (("direct", "who is on call"), ("para", "who do I page when the site is down at night"))),
    ("shop-flags", "shop", "project", "feature-flags-unleash", "feature flags live in Unleash, named shop.<area>.<flag>", "Remove a flag within two releases of full rollout.",
     (("direct", "feature flags unleash"), ("para", "how do we hide unfinished functionality from customers"))),
    ("shop-cache", "shop", "project", "cache-ttl-five-minutes", "catalogue pages are cached for five minutes in Redis", "Invalidate on product save via the signal in catalog/signals.py.",
     (("direct", "catalogue cache ttl"), ("para", "how long do product listings stay stale"))),
    ("shop-email", "shop", "project", "emails-through-postmark", "transactional email goes through Postmark, never SMTP directly", "Templates are in Postmark, referenced by alias.",
     (("direct", "postmark transactional email"), ("para", "how do order confirmations reach customers' inboxes"))),
    ("shop-tests", "shop", "project", "tests-run-in-docker", "shop's tests need `make test`, which starts Postgres in Docker", "Plain pytest fails: no database.",
     (("direct", "how to run shop tests"), ("para", "the test suite cannot connect, what command should I use"))),
    ("shop-api", "shop", "project", "api-versioning-url", "the public API is versioned in the URL (/v2/)", "v1 is frozen; new fields only in v2.",
     (("direct", "api versioning"), ("para", "where do breaking changes to endpoints go"))),
    ("shop-i18n", "shop", "project", "translations-crowdin", "UI strings are translated on Crowdin; never edit .po files by hand", "Sync with `make i18n-pull`.",
     (("direct", "crowdin translations po files"), ("para", "how do we localise the storefront text"))),
    ("sp-ecto", "spotter", "project", "ecto-multi-for-multistep-writes", "in spotter, multi-step writes use Ecto.Multi", "Never chain Repo.insert calls; a failure must roll back everything.",
     (("direct", "ecto multi"), ("para", "how to keep several database inserts atomic in the elixir app"), ("typo", "ecto mutli"))),
    ("sp-credo", "spotter", "project", "credo-strict-in-ci", "CI runs mix credo --strict; warnings fail the build", "Fix the warning, never add inline disables.",
     (("direct", "credo strict ci"), ("para", "why did the pipeline reject my elixir code style"))),
    ("sp-live", "spotter", "project", "liveview-not-react", "spotter's UI is Phoenix LiveView; no React", "The user rejected a React widget in March.",
     (("direct", "liveview or react"), ("para", "which frontend approach does the elixir app use"))),
    ("sp-oban", "spotter", "project", "oban-for-jobs", "background work in spotter uses Oban, queue limits in config/runtime.exs", "Unique jobs for the geocoder.",
     (("direct", "oban jobs queue"), ("para", "what schedules asynchronous tasks in spotter"))),
    ("sp-geo", "spotter", "reference", "geocoding-provider", "geocoding uses the Mapbox API; key in SPOTTER_MAPBOX_TOKEN", "Rate limit is 600 requests a minute.",
     (("direct", "mapbox geocoding"), ("para", "which service turns street addresses into coordinates"))),
    ("sp-release", "spotter", "project", "releases-with-mix-release", "spotter ships as a mix release on Fly.io", "Deploy with `fly deploy`; migrations run via release command.",
     (("direct", "fly.io mix release"), ("para", "where is the elixir app hosted and how do I ship it"))),
    ("sp-format", "spotter", "feedback", "mix-format-before-commit", "run mix format before every commit", "The user reverted an unformatted commit.",
     (("direct", "mix format"), ("para", "tidy the elixir source layout before saving"))),
    ("sp-branch", "spotter", "project", "release-branch-name", "the release branch is named rel-zt0011q", "Cherry-pick fixes there; never merge main into it.",
     (("direct", "release branch name"), ("para", "which git line do hotfixes go onto"))),
    ("sp-tz", "spotter", "project", "store-times-utc", "store every timestamp in UTC; convert only in the view", "utc_datetime_usec in schemas.",
     (("direct", "utc timestamps"), ("para", "what zone do we save dates in"))),
    ("sp-auth", "spotter", "project", "auth-with-phx-gen-auth", "authentication is phx.gen.auth, extended for magic links", "No Guardian, no Pow.",
     (("direct", "phx gen auth magic links"), ("para", "how do users sign in to spotter"))),
    ("at-grpc", "atlas", "project", "grpc-between-services", "atlas services talk gRPC internally, REST only at the edge", "Protos live in atlas/proto; buf generates the stubs.",
     (("direct", "grpc between services"), ("para", "how do the go microservices call each other"))),
    ("at-errors", "atlas", "feedback", "wrap-errors-with-context", "wrap every returned error with fmt.Errorf and %w", "The user wants the call site in every error message.",
     (("direct", "wrap errors fmt.Errorf"), ("para", "how should failures be annotated when passed up in go"))),
    ("at-k8s", "atlas", "project", "kubernetes-helm-charts", "atlas deploys to Kubernetes with Helm charts in deploy/charts", "One chart per service; values per environment.",
     (("direct", "helm charts kubernetes"), ("para", "how do we roll the go services out to the cluster"))),
    ("at-otel", "atlas", "project", "tracing-opentelemetry", "tracing is OpenTelemetry, exported to Tempo", "Every handler starts a span; propagate context.",
     (("direct", "opentelemetry tracing"), ("para", "how do I follow one request across services"))),
    ("at-go", "atlas", "project", "go-version-1-23", "atlas builds with Go 1.23; toolchain pinned in go.mod", "Do not use range-over-func yet in shared packages.",
     (("direct", "go version"), ("para", "which compiler release do we target"))),
    ("at-logs", "atlas", "project", "structured-logging-slog", "log with log/slog, JSON handler, no fmt.Println", "Keys in snake_case.",
     (("direct", "slog structured logging"), ("para", "how should the services print diagnostic output"))),
    ("at-sqlc", "atlas", "project", "sqlc-for-queries", "database access in atlas is generated by sqlc; no ORM", "Queries in db/queries/*.sql.",
     (("direct", "sqlc queries no orm"), ("para", "how do we talk to postgres from go code"))),
    ("at-runbook", "atlas", "reference", "incident-runbook", "the incident runbook is in Notion, page Atlas Incidents", "Start with the status page, then the #atlas-incident channel.",
     (("direct", "incident runbook"), ("para", "what do I do first when production breaks"))),
    ("at-ratelimit", "atlas", "project", "rate-limit-token-bucket", "the gateway rate limits with a token bucket per API key", "100 requests/s burst 200; configured in gateway.yaml.",
     (("direct", "rate limit token bucket"), ("para", "how many calls a second may one customer make"))),
    ("at-cfg", "atlas", "project", "config-from-env", "service config comes from environment variables only, parsed with envconfig", "No config files in containers.",
     (("direct", "config environment variables"), ("para", "where do the services read their settings"))),
    ("px-ts", "pixel", "project", "typescript-strict", "pixel's TypeScript runs in strict mode; no any", "Prefer unknown and narrow.",
     (("direct", "typescript strict any"), ("para", "how loose may the frontend's type checking be"))),
    ("px-state", "pixel", "project", "zustand-not-redux", "pixel keeps client state in Zustand; Redux was removed", "Server state goes through TanStack Query.",
     (("direct", "zustand redux"), ("para", "what library holds the browser-side store"))),
    ("px-css", "pixel", "project", "tailwind-for-styles", "styles are Tailwind utility classes; no CSS modules", "Design tokens in tailwind.config.ts.",
     (("direct", "tailwind css modules"), ("para", "how do we make components look right"))),
    ("px-test", "pixel", "project", "vitest-and-playwright", "unit tests with Vitest, end-to-end with Playwright", "E2E runs against the preview deploy.",
     (("direct", "vitest playwright"), ("para", "how is the web app checked automatically"))),
    ("px-a11y", "pixel", "feedback", "accessibility-labels", "every interactive element needs an accessible label", "The user cares about screen reader users; axe runs in CI.",
     (("direct", "accessibility labels"), ("para", "what do blind visitors need from our buttons"))),
    ("px-figma", "pixel", "reference", "design-in-figma", "designs live in Figma file Pixel UI 2025", "Ask for the frame link before building a screen.",
     (("direct", "figma designs"), ("para", "where are the mockups for new screens"))),
    ("px-pnpm", "pixel", "project", "pnpm-only", "pixel uses pnpm; npm and yarn lockfiles are rejected", "CI checks for package-lock.json.",
     (("direct", "pnpm npm yarn"), ("para", "which package manager installs the frontend dependencies"))),
    ("px-images", "pixel", "project", "images-through-cdn", "images are served through the imgix CDN with width parameters", "Never commit images over 200 KB.",
     (("direct", "imgix cdn images"), ("para", "how do pictures get resized for phones"))),
    ("px-i18n", "pixel", "project", "i18n-with-lingui", "pixel translates with Lingui; message ids are the English text", "Extract with pnpm lingui extract.",
     (("direct", "lingui translations"), ("para", "how do we show the site in german"))),
    ("px-analytics", "pixel", "project", "analytics-plausible", "analytics is Plausible; no Google Analytics", "Privacy was a purchase condition for a customer.",
     (("direct", "plausible analytics"), ("para", "how do we count page visits"))),
    ("zh-review", "global", "feedback", "代码审查先跑测试", "提交代码审查之前必须先跑完整测试", "用户说过：没跑测试就别发 PR。",
     (("zh", "发PR之前要做什么"), ("zh", "代码审查前需要跑测试吗"))),
    ("zh-naming", "global", "user", "变量命名用英文", "变量和函数名一律用英文，注释可以用中文", "拼音命名会被拒绝。",
     (("zh", "变量名可以用拼音吗"), ("zh", "注释用什么语言"))),
    ("zh-docs", "global", "user", "文档写中文", "项目文档用简体中文写", "README 的英文版由社区维护。",
     (("zh", "文档用什么语言写"), ("direct", "documentation language chinese"))),
    ("zh-deploy", "shop", "project", "周五不发布", "shop 项目周五不上线", "周五中午到周一九点冻结发布。",
     (("zh", "周五可以上线吗"), ("zh", "什么时候冻结发布"))),
    ("zh-cache", "atlas", "project", "缓存用Redis集群", "atlas 的缓存使用 Redis 集群，不用本地内存缓存", "多实例部署时本地缓存会不一致。",
     (("zh", "缓存用什么"), ("zh", "可以用本地内存缓存吗"))),
    ("zh-log", "atlas", "feedback", "日志不要打印密码", "日志里绝不能出现密码或令牌", "用户发现过一次泄漏，非常在意。",
     (("zh", "日志能打印令牌吗"), ("zh", "敏感信息写日志"))),
    ("zh-branch", "spotter", "project", "分支命名规范", "分支名用 feature/ 或 fix/ 开头", "后面跟工单号，比如 fix/SP-123。",
     (("zh", "分支怎么命名"), ("zh", "修复分支的前缀"))),
    ("zh-test", "pixel", "project", "组件测试覆盖率", "新组件的测试覆盖率要达到百分之八十", "CI 会检查覆盖率报告。",
     (("zh", "覆盖率要求多少"), ("zh", "新组件需要写测试吗"))),
    ("zh-meeting", "global", "user", "周会时间", "每周一上午十点开周会", "会议前更新任务看板。",
     (("zh", "周会是什么时候"), ("zh", "开会前要准备什么"))),
    ("zh-style", "global", "feedback", "回答要简洁", "回答要简洁，不要重复问题", "用户不喜欢长篇解释。",
     (("zh", "回答应该多长"), ("zh", "要不要详细解释"))),
    ("zh-db", "shop", "project", "数据库迁移要可回滚", "每个数据库迁移都必须能回滚", "上线失败时要能快速恢复。",
     (("zh", "迁移能不能回滚"), ("zh", "上线失败怎么恢复数据库"))),
    ("zh-api", "atlas", "reference", "接口文档地址", "接口文档在内部 wiki 的 Atlas API 页面", "每次改接口都要同步更新。",
     (("zh", "接口文档在哪里"), ("zh", "改了接口要更新什么"))),
    ("ja-review", "pixel", "feedback", "レビューは日本語で", "コードレビューのコメントは日本語で書く", "チームの半分が日本語話者。",
     (("zh", "レビューのコメントは何語"),)),
    ("sec-rotate", "atlas", "project", "rotate-keys-quarterly", "API keys are rotated every quarter by the platform team", "Never hardcode a key; read it from Vault.",
     (("direct", "key rotation"), ("para", "how often do we change our credentials"))),
    ("perf-budget", "pixel", "project", "bundle-size-budget", "the main JS bundle must stay under 180 KB gzipped", "size-limit fails the build above it.",
     (("direct", "bundle size budget"), ("para", "how big may the downloaded script be"))),
    ("docs-adr", "atlas", "reference", "architecture-decision-records", "decisions are recorded as ADRs in docs/adr", "Number them; never edit an accepted ADR, supersede it.",
     (("direct", "architecture decision records"), ("para", "where do we write down why we chose something"))),
    ("ci-cache", "shop", "project", "ci-github-actions", "shop's CI is GitHub Actions; caches keyed on poetry.lock", "Self-hosted runners for the e2e job.",
     (("direct", "github actions ci"), ("para", "what builds and checks every pull request"))),
    ("poetry", "shop", "project", "poetry-for-dependencies", "shop manages Python dependencies with Poetry", "Never pip install into the project venv by hand.",
     (("direct", "poetry dependencies"), ("para", "how do I add a new python library to shop"))),
    ("holiday", "global", "user", "no-work-sundays", "the user does not want reminders or pings on Sundays", "Batch anything non-urgent for Monday.",
     (("direct", "reminders on sunday"), ("para", "can you bother me at the weekend"))),
    ("review-size", "global", "feedback", "small-pull-requests", "keep pull requests under 400 changed lines", "Split larger work into stacked PRs.",
     (("direct", "pull request size"), ("para", "how much code should one change set contain"))),
    ("docstrings", "global", "user", "docstrings-google-style", "docstrings in Google style with Args and Returns", "One-line summary first.",
     (("direct", "google style docstrings"), ("para", "how do I document a python function"))),
    ("spotter-db", "spotter", "project", "postgis-for-geo", "spotter stores locations with PostGIS geography columns", "Distance queries use ST_DWithin with a GiST index.",
     (("direct", "postgis geography"), ("para", "how are map positions saved and queried"))),
]

NO_ANSWER: list[tuple[str, str]] = [
    ("what is the capital of australia", "shop"),
    ("recipe for banana bread", "spotter"),
    ("how do I configure bluetooth headphones on linux", "atlas"),
    ("explain quantum entanglement simply", "pixel"),
    ("best hiking trails near zurich", "shop"),
    ("translate good morning into italian", "spotter"),
    ("who won the world cup in 1998", "atlas"),
    ("how tall is mount kilimanjaro", "pixel"),
    ("what is a good name for a cat", "shop"),
    ("how do I tie a bowline knot", "spotter"),
    ("convert 30 miles to kilometres", "atlas"),
    ("what rhymes with orange", "pixel"),
    ("今天天气怎么样", "shop"),
    ("推荐一部好看的电影", "atlas"),
    ("how do I set up a saltwater aquarium", "spotter"),
    ("ideas for a birthday party", "pixel"),
    ("what is the speed of sound in water", "shop"),
    ("how to grow tomatoes on a balcony", "atlas"),
    ("write a haiku about autumn", "spotter"),
    ("what does a sommelier do", "pixel"),
    ("how many moons does jupiter have", "shop"),
    ("photosynthesis explained", "atlas"),
    ("猫为什么喜欢纸箱", "spotter"),
    ("how to improve my chess openings", "pixel"),
]

_COMPONENTS = ["checkout", "search", "billing", "inventory", "notifications", "reports", "admin panel", "onboarding",
               "profile page", "importer", "exporter", "scheduler", "audit log", "permissions", "uploads", "webhooks",
               "dashboard", "gateway", "ledger", "invoicing"]  # fmt: skip
_FACTS = [
    ("owner-{c}", "{C} is owned by the {team} team", "Ask {team} before changing {c} behaviour."),
    ("{c}-timeout", "{c} calls time out after {n} seconds", "Raised from {m} after load tests in {month}."),
    ("{c}-retries", "{c} retries failed calls {k} times with jitter", "Backoff starts at {n}00 ms."),
    ("{c}-metrics", "{c} exports Prometheus metrics under {c2}_*", "Dashboards in Grafana folder {team}."),
    ("{c}-pagination", "{c} lists paginate with cursors, {n}0 items a page", "Offsets were removed in {month}."),
    ("{c}-limits", "{c} accepts at most {n} MB per request", "Larger payloads go through the bulk endpoint."),
    ("{c}-owner-doc", "{c} design notes are in docs/{c2}.md", "Updated after the {month} review."),
]
_TEAMS = ["platform", "payments", "growth", "core", "data", "mobile", "infra", "identity"]
_MONTHS = ["January", "March", "May", "July", "September", "November"]
_ZH = [("{c}负责人", "{c}模块由{team}组负责", "改动前先联系{team}组。"),
       ("{c}超时设置", "{c}的超时时间是{n}秒", "压测后从{m}秒调整。")]  # fmt: skip
_ZH_C = ["结算", "搜索", "账单", "库存", "通知", "报表", "后台", "注册", "上传", "网关"]


def distractors(seed: int = 25) -> list[Memory]:
    """Memories of the same projects that answer none of the queries (same domain, other facts)."""
    rnd = random.Random(seed)
    out: list[Memory] = []
    for project in PROJECTS:
        for c in _COMPONENTS:
            for tmpl in rnd.sample(_FACTS, 5):
                v = {"c": c, "C": c.capitalize(), "c2": c.replace(" ", "_"), "team": rnd.choice(_TEAMS),
                     "n": rnd.randint(2, 9), "m": rnd.randint(10, 30), "k": rnd.randint(2, 5),
                     "month": rnd.choice(_MONTHS)}  # fmt: skip
                name = tmpl[0].format(**v).replace(" ", "-")
                out.append(Memory(f"d-{project}-{name}", project, "project", name, tmpl[1].format(**v),
                                  tmpl[2].format(**v)))
        for c in rnd.sample(_ZH_C, 6):
            tmpl = rnd.choice(_ZH)
            v = {"c": c, "team": rnd.choice(_TEAMS), "n": rnd.randint(2, 9), "m": rnd.randint(10, 30)}
            out.append(Memory(f"d-{project}-zh-{c}", project, "project", tmpl[0].format(**v), tmpl[1].format(**v),
                              tmpl[2].format(**v)))
    return out


def memories() -> list[Memory]:
    """Every memory of the set: the targets, then the distractors."""
    return [Memory(t[0], t[1], t[2], t[3], t[4], t[5]) for t in TARGETS] + distractors()


def typo(text: str) -> str:
    """`text` with two adjacent letters of its longest word swapped (deterministic)."""
    words = text.split()
    w = max(words, key=len)
    j = len(w) // 2
    return text.replace(w, w[: j - 1] + w[j] + w[j - 1] + w[j + 1 :], 1)


def queries() -> list[Query]:
    """Every query, labelled: what it should find (nothing, for `none`), in which project, which part."""
    out: list[Query] = []
    for i, t in enumerate(TARGETS):
        project = t[1] if t[1] != "global" else PROJECTS[i % len(PROJECTS)]
        for kind, text in t[6]:
            out.append(Query(text, kind, (t[0],), project, heldout=i % 4 == 0))
        direct = [text for kind, text in t[6] if kind == "direct"]
        if direct and i % 3 == 1:  # a slip of the keyboard: two letters swapped in the longest word
            out.append(Query(typo(direct[0]), "typo", (t[0],), project, heldout=i % 4 == 0))
    for i, (text, project) in enumerate(NO_ANSWER):
        out.append(Query(text, "none", (), project, heldout=i % 4 == 0))
    return out

"""Which memories a span may correct: the related-memory lookup behind the extraction prompt.

The prompt shows the full text of the memories this lookup returns; a memory the model changes
without having seen it is refused by the write path (and asked about once more, see
`runner._model_operations`). So the lookup must find the memory a correction is about even when
the words differ: "we switched to poetry" corrects `uses-uv`, "the package manager changed" too.

How it ranks the memories of the project and the drawer (read from their files: the search
database may lag a hand edit by a second, and a scope holds tens to hundreds of memories):

- words: lower-cased, stop words dropped, crudely stemmed ("deploys", "deploying" → "deploy"),
  short technical words kept ("uv", "ci", "k8s" — the old lookup dropped every word of three
  letters or fewer); a word found in a memory's name counts 3, in its description 2, in its body
  1, each weighted by its rarity among these memories (idf);
- kinds: a small table of developer terms, each with the kinds of thing it is (`poetry`, `uv`,
  `pip`: a Python package manager; `webpack`, `vite`: a bundler; `Sentry`, `Rollbar`: an error
  tracker; "package manager", "dependencies": the general kind). A span and a memory that name
  things of the same kind are related even with no word in common — the shape of a correction
  ("X replaced Y") — at a lower weight than a shared word;
- ties go to the newest memory.

Measured on labelled correction spans by bench/bench_related.py (tests/data/corrections.jsonl);
the figures are in bench/RESULTS.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from memd.memory.file import Memory

NAME_WEIGHT, DESCRIPTION_WEIGHT, BODY_WEIGHT = 3.0, 2.0, 1.0
KIND_WEIGHT = 0.6  # a shared kind counts this much of a shared word

_TOKEN = re.compile(r"[a-z0-9][a-z0-9+#]*")
_STOP_WORDS = (
    "a an the and or but to of in on for with that this it is are be was were been we i you our my me your "
    "now no not new old again after all too as at by from so than then any there their they them its it's "
    "has have had do does did done use uses used using can could would should will shall may might must "
    "just also only very really still yet here there what which who when where why how please thanks ok "
    "okay yes hey hi heads up actually anymore longer instead like want need needs get got make made go goes "
    "went moved move switched switch changed change replaced dropped stopped fine after because since "
    "about into over off out same other more less some every each one two"
)
_STOP = frozenset(_STOP_WORDS.split())

# Developer terms and the kinds of thing they name. A term may have several kinds, a specific one
# (python-packages) and a general one (packages): a span naming a kind matches memories naming
# another member of it. Multi-word terms are matched on the normalised text.
KINDS: dict[str, str] = {
    # packaging
    "uv": "python-packages packages", "pip": "python-packages packages", "pipenv": "python-packages packages",
    "poetry": "python-packages packages", "conda": "python-packages packages", "mamba": "python-packages packages",
    "pdm": "python-packages packages", "hatch": "python-packages packages", "rye": "python-packages packages",
    "pip-tools": "python-packages packages", "pipx": "python-packages packages",
    "requirements.txt": "python-packages packages", "pyproject": "python-packages packages",
    "npm": "js-packages packages", "pnpm": "js-packages packages", "yarn": "js-packages packages",
    "bun": "js-packages packages", "package.json": "js-packages packages", "node_modules": "js-packages packages",
    "cargo": "packages", "gem": "packages", "bundler": "packages bundler", "composer": "packages", "maven": "packages",
    "gradle": "packages", "nuget": "packages", "package manager": "packages", "dependency": "packages",
    "dependencies": "packages", "deps": "packages", "lockfile": "packages", "lock file": "packages",
    "library": "packages", "libraries": "packages", "third-party": "packages", "vendor": "packages",
    "vendoring": "packages", "vendored": "packages", "go mod": "packages",
    # code quality
    "black": "formatter", "prettier": "formatter", "gofmt": "formatter", "rustfmt": "formatter",
    "yapf": "formatter", "autopep8": "formatter", "isort": "formatter", "clang-format": "formatter",
    "formatter": "formatter", "formatting": "formatter", "ruff format": "formatter",
    "eslint": "linter", "ruff": "linter formatter", "flake8": "linter", "pylint": "linter",
    "golangci-lint": "linter", "golangci": "linter", "staticcheck": "linter", "revive": "linter",
    "go vet": "linter", "biome": "linter formatter", "tslint": "linter", "rubocop": "linter", "clippy": "linter",
    "shellcheck": "linter", "linter": "linter", "lint": "linter", "linting": "linter",
    "mypy": "typechecker", "pyright": "typechecker", "pyre": "typechecker", "pytype": "typechecker",
    "tsc": "typechecker", "type checking": "typechecker", "type checker": "typechecker",
    "type hints": "typechecker", "typing": "typechecker",
    # tests
    "pytest": "python-tests tests", "unittest": "python-tests tests", "nose": "python-tests tests",
    "xdist": "python-tests tests parallel-tests", "pytest-xdist": "python-tests tests parallel-tests",
    "tox": "python-tests tests", "nox": "python-tests tests", "hypothesis": "python-tests tests",
    "jest": "js-tests tests", "vitest": "js-tests tests", "mocha": "js-tests tests", "jasmine": "js-tests tests",
    "cypress": "js-tests tests", "playwright": "js-tests tests", "testing library": "js-tests tests",
    "test suite": "tests", "tests": "tests", "testing": "tests",
    "golden": "snapshots", "snapshot": "snapshots", "snapshots": "snapshots", "testdata": "snapshots",
    "fixtures": "snapshots",
    # delivery
    "ci": "ci", "github actions": "ci", "workflow": "ci", "workflows": "ci", "gitlab ci": "ci",
    "jenkins": "ci", "circleci": "ci", "travis": "ci", "buildkite": "ci", "drone": "ci",
    "azure pipelines": "ci", "pipeline": "ci", "pipelines": "ci", "build matrix": "ci", "matrix": "ci",
    "github": "forge", "gitlab": "forge ci", "bitbucket": "forge", "gitea": "forge",
    "deploy": "deploys", "deploys": "deploys", "deployment": "deploys", "deployed": "deploys",
    "ship": "deploys releases", "shipping": "deploys releases", "rollout": "deploys", "go live": "deploys",
    "release": "releases deploys", "releases": "releases deploys", "release train": "releases",
    "goreleaser": "releases", "semantic-release": "releases", "release-please": "releases",
    "changesets": "releases", "binaries": "releases", "tag": "releases", "tags": "releases",
    "prod": "environments", "production": "environments", "staging": "environments",
    "pre-prod": "environments", "preprod": "environments", "uat": "environments", "sandbox": "environments",
    "docker": "containers", "podman": "containers", "container": "containers", "containers": "containers",
    "docker compose": "containers", "compose": "containers", "image": "containers registry",
    "images": "containers registry", "ghcr": "registry", "docker hub": "registry", "dockerhub": "registry",
    "ecr": "registry", "gcr": "registry", "quay": "registry", "container registry": "registry",
    "kubernetes": "orchestration", "k8s": "orchestration", "helm": "orchestration", "ecs": "orchestration",
    "nomad": "orchestration", "openshift": "orchestration", "eks": "orchestration", "gke": "orchestration",
    "aks": "orchestration", "fargate": "orchestration", "cloud run": "orchestration", "cluster": "orchestration",
    # data
    "postgres": "database", "postgresql": "database", "mysql": "database", "mariadb": "database",
    "sqlite": "database", "mongodb": "database", "mongo": "database", "dynamodb": "database",
    "cockroachdb": "database", "oracle": "database", "sql server": "database", "mssql": "database",
    "database": "database", "db": "database", "bolt": "database", "boltdb": "database", "bbolt": "database",
    "badger": "database", "leveldb": "database", "rocksdb": "database", "duckdb": "database",
    "redis": "kv-store", "memcached": "kv-store", "valkey": "kv-store", "keydb": "kv-store",
    "cache": "kv-store", "caching": "kv-store",
    "migration": "migrations", "migrations": "migrations", "schema": "migrations", "alembic": "migrations",
    "flyway": "migrations", "liquibase": "migrations",
    "s3": "object-storage", "r2": "object-storage", "gcs": "object-storage", "minio": "object-storage",
    "object storage": "object-storage", "blob storage": "object-storage", "bucket": "object-storage",
    "celery": "task-queue", "rq": "task-queue", "rabbitmq": "task-queue", "kafka": "task-queue",
    "sqs": "task-queue", "sidekiq": "task-queue", "resque": "task-queue", "dramatiq": "task-queue",
    "huey": "task-queue", "task queue": "task-queue", "job queue": "task-queue", "queue": "task-queue",
    "background jobs": "task-queue", "background tasks": "task-queue", "async work": "task-queue",
    "workers": "task-queue",
    # observability
    "logging": "logging", "logs": "logging", "log": "logging", "logger": "logging", "structlog": "logging",
    "loguru": "logging", "zerolog": "logging", "zap": "logging", "logrus": "logging", "slog": "logging",
    "winston": "logging", "pino": "logging", "log4j": "logging", "logback": "logging",
    "sentry": "error-tracking", "rollbar": "error-tracking", "bugsnag": "error-tracking",
    "honeybadger": "error-tracking", "airbrake": "error-tracking", "raygun": "error-tracking",
    "exceptions": "error-tracking", "error tracking": "error-tracking", "crash reports": "error-tracking",
    "grafana": "monitoring", "prometheus": "monitoring", "datadog": "monitoring", "new relic": "monitoring",
    "honeycomb": "monitoring", "dashboards": "monitoring", "metrics": "monitoring",
    "telemetry": "telemetry", "analytics": "telemetry", "usage stats": "telemetry", "usage data": "telemetry",
    "tracking": "telemetry",
    "launchdarkly": "feature-flags", "unleash": "feature-flags", "flagsmith": "feature-flags",
    "growthbook": "feature-flags", "configcat": "feature-flags", "feature flags": "feature-flags",
    "flags": "feature-flags", "toggles": "feature-flags", "feature toggles": "feature-flags",
    # frontend
    "vite": "bundler", "webpack": "bundler", "rollup": "bundler", "esbuild": "bundler", "parcel": "bundler",
    "turbopack": "bundler", "bundled": "bundler", "bundle": "bundler",
    "react": "frontend", "vue": "frontend", "svelte": "frontend", "angular": "frontend", "solid": "frontend",
    "preact": "frontend", "next.js": "frontend", "nextjs": "frontend", "nuxt": "frontend",
    "admin ui": "frontend", "frontend": "frontend", "front-end": "frontend", "back-office": "frontend admin",
    "admin": "admin",
    "django": "web-framework", "flask": "web-framework", "fastapi": "web-framework", "rails": "web-framework",
    "express": "web-framework",
    # work tracking and docs
    "jira": "tracker", "linear": "tracker", "youtrack": "tracker", "trello": "tracker", "asana": "tracker",
    "shortcut": "tracker", "board": "tracker", "tickets": "tracker", "ticket": "tracker", "issues": "tracker",
    "issue tracker": "tracker", "backlog": "tracker",
    "confluence": "wiki", "notion": "wiki", "wiki": "wiki", "runbook": "wiki", "runbooks": "wiki",
    "handbook": "wiki", "google docs": "wiki",
    "mkdocs": "docs-site", "sphinx": "docs-site", "docusaurus": "docs-site", "hugo": "docs-site",
    "jekyll": "docs-site", "github pages": "docs-site", "readthedocs": "docs-site", "gitbook": "docs-site",
    "mdbook": "docs-site", "docs": "docs-site wiki", "documentation": "docs-site wiki",
    "changelog": "changelog", "release notes": "changelog",
    # programs and languages
    "cobra": "cli-framework", "urfave": "cli-framework", "kingpin": "cli-framework", "kong": "cli-framework",
    "pflag": "cli-framework", "click": "cli-framework", "argparse": "cli-framework", "typer": "cli-framework",
    "subcommands": "cli-framework", "commands": "cli-framework",
    "toml": "config-format", "yaml": "config-format", "yml": "config-format", "ini": "config-format",
    "hcl": "config-format", "dotenv": "config-format", "config file": "config-format",
    "settings file": "config-format", "configuration": "config-format",
    "python": "python", "interpreter": "python", "cpython": "python",
    "go": "golang", "golang": "golang", "toolchain": "golang", "go version": "golang", "go.mod": "golang",
    "cgo": "cgo", "cgo_enabled": "cgo", "static binaries": "cgo",
    "brew": "homebrew", "homebrew": "homebrew", "formula": "homebrew", "tap": "homebrew",
    "timeout": "timeouts", "timeouts": "timeouts", "deadline": "timeouts",
    "stripe": "payments", "adyen": "payments", "paypal": "payments", "braintree": "payments",
    "mollie": "payments", "payment provider": "payments",
    # the user's environment
    "vim": "editor", "neovim": "editor", "nvim": "editor", "emacs": "editor", "vscode": "editor",
    "vs code": "editor", "visual studio code": "editor", "intellij": "editor", "pycharm": "editor",
    "goland": "editor", "sublime": "editor", "zed": "editor", "helix": "editor", "editor": "editor",
    "ide": "editor",
    "bash": "shell", "zsh": "shell", "fish": "shell", "powershell": "shell", "nushell": "shell",
    "shell": "shell",
    "macos": "os", "mac": "os", "linux": "os", "ubuntu": "os", "debian": "os", "fedora": "os", "windows": "os",
    "wsl": "os",
    "cet": "timezone", "cest": "timezone", "utc": "timezone", "est": "timezone", "pst": "timezone",
    "eastern time": "timezone", "pacific time": "timezone", "central european time": "timezone",
    "timezone": "timezone", "time zone": "timezone",
    # ways of working
    "british": "spelling", "american": "spelling", "spelling": "spelling",
    "english": "reply-language", "chinese": "reply-language", "german": "reply-language",
    "french": "reply-language", "spanish": "reply-language", "japanese": "reply-language",
    "gpg": "commit-signing", "signing": "commit-signing", "signed": "commit-signing",
    "sign commits": "commit-signing", "signing commits": "commit-signing",
    "co-authored-by": "co-authors", "co-authored": "co-authors", "coauthor": "co-authors",
    "trailers": "co-authors", "trailer": "co-authors",
    "emoji": "emoji", "emojis": "emoji",
    "short": "answer-length", "concise": "answer-length", "brief": "answer-length", "terse": "answer-length",
    "longer": "answer-length", "detailed": "answer-length", "verbose": "answer-length",
    "squash": "merge-strategy", "rebase": "merge-strategy", "merge commits": "merge-strategy",
    "merge commit": "merge-strategy", "squash-merged": "merge-strategy",
    "main": "branch", "master": "branch", "trunk": "branch",
    "review": "review", "reviews": "review", "approval": "review", "approvals": "review",
    "approving": "review", "reviewer": "review", "reviewers": "review",
    "snake_case": "casing", "camelcase": "casing", "camel case": "casing", "snake case": "casing",
    "kebab-case": "casing", "pascalcase": "casing",
    "monday": "weekday", "tuesday": "weekday", "wednesday": "weekday", "thursday": "weekday",
    "friday": "weekday", "fridays": "weekday", "saturday": "weekday", "sunday": "weekday", "weekday": "weekday",
    "weekdays": "weekday", "weekend": "weekday", "weekends": "weekday",
    "cart": "cart", "basket": "cart",
    "billing": "billing", "invoices": "billing", "invoicing": "billing", "invoice": "billing",
    "login": "auth", "logins": "auth", "sign-in": "auth", "signin": "auth", "sessions": "auth",
    "authentication": "auth",
    "pagination": "pagination", "paginated": "pagination", "per page": "pagination",
    "photos": "media", "pictures": "media", "media": "media", "uploads": "media",
    "i18n": "i18n", "translations": "i18n", "gettext": "i18n", "locale": "i18n",
    "rate limit": "rate-limit", "rate limited": "rate-limit", "ratelimit": "rate-limit",
    "throttling": "rate-limit", "attempts": "rate-limit",
    "colour": "colour", "color": "colour", "red": "colour", "green": "colour", "colour-blind": "colour",
    "color-blind": "colour",
    "machine-readable": "output-format", "--json": "output-format", "json output": "output-format",
    "exit code": "exit-codes", "exit codes": "exit-codes",
    "keychain": "secrets-store",
}  # fmt: skip

_PHRASES = sorted((t for t in KINDS if not re.fullmatch(r"[a-z0-9]+", t)), key=len, reverse=True)


def _stem(word: str) -> str:
    """A crude English stem: enough that "deploys", "deploying" and "deploy" meet."""
    for suffix in ("ations", "ation", "ments", "ment", "ings", "ing", "ers", "er", "ies", "ied", "es", "ed", "ly", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)] + ("y" if suffix in ("ies", "ied") else "")
            break
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz":
        word = word[:-1]
    if len(word) > 4 and word.endswith("e"):
        word = word[:-1]
    return word


def _normal(text: str) -> str:
    """Lower case, one space between words, punctuation around words dropped ("uv," → "uv")."""
    words = (t.strip(".,;:!?()[]{}'\"`*") for t in text.lower().split())
    return " ".join(w for w in words if w)


def words(text: str) -> set[str]:
    """The stems of a text's content words."""
    return {_stem(w) for w in _TOKEN.findall(text.lower()) if w not in _STOP and (len(w) > 1 or w.isdigit())}


def kinds(text: str) -> set[str]:
    """The kinds of developer thing a text names."""
    norm = f" {_normal(text)} "
    out: set[str] = set()
    for phrase in _PHRASES:
        if f" {phrase} " in norm:
            out.update(KINDS[phrase].split())
    for w in set(re.findall(r"[a-z0-9][a-z0-9+#]*", norm)):
        if w in KINDS:
            out.update(KINDS[w].split())
    return out


@dataclass
class _Doc:
    """A memory with its fields' weighted stems, for the related-memory search."""

    memory: Memory
    fields: tuple[tuple[float, set[str], set[str]], ...]  # (weight, word stems, kinds) of name, description, body


def _doc(m: Memory) -> _Doc:
    parts = ((NAME_WEIGHT, m.name.replace("-", " ")), (DESCRIPTION_WEIGHT, m.description), (BODY_WEIGHT, m.body))
    return _Doc(m, tuple((w, words(t), kinds(t)) for w, t in parts))


def rank(memories: Iterable[Memory], text: str, limit: int) -> list[Memory]:
    """The `limit` memories most related to `text`, best first; only memories with something in common."""
    docs = [_doc(m) for m in memories]
    if not docs or limit <= 0:
        return []
    q_words, q_kinds = words(text), kinds(text)
    n = len(docs)

    def idf(df: int) -> float:
        return math.log((n + 1) / (df + 0.5))

    df_w: dict[str, int] = {}
    df_k: dict[str, int] = {}
    for d in docs:
        for w in set().union(*(f[1] for f in d.fields)) & q_words:
            df_w[w] = df_w.get(w, 0) + 1
        for k in set().union(*(f[2] for f in d.fields)) & q_kinds:
            df_k[k] = df_k.get(k, 0) + 1
    scored: list[tuple[float, float, str, Memory]] = []
    for d in docs:
        score = 0.0
        for w in q_words:
            best = max((f[0] for f in d.fields if w in f[1]), default=0.0)
            if best:
                score += idf(df_w[w]) * best
        for k in q_kinds:
            best = max((f[0] for f in d.fields if k in f[2]), default=0.0)
            if best:
                score += KIND_WEIGHT * idf(df_k[k]) * best
        if score > 0:
            mtime = d.memory.path.stat().st_mtime if d.memory.path.exists() else 0.0
            scored.append((-score, -mtime, str(d.memory.path), d.memory))
    scored.sort(key=lambda t: t[:3])
    return [t[3] for t in scored[:limit]]

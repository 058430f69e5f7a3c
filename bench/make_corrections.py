"""Writes tests/data/corrections.jsonl: correction spans labelled with the memory they are about.

Issue 13: a correction must reach the memory it corrects even when its words differ ("package
manager" → `uses-uv`). Each line is one of:

- a memory set: {"kind": "pool", "id", "key", "memories": [{"scope", "name", "description", "type",
  "body"}, ...]} — the global drawer and one project's memories as they would sit on disk;
- a case: {"kind": "case", "id", "pool", "text", "target": "<scope>:<name>", "words": "shared" |
  "different", "split": "tuning" | "holdout"} — what the user said in the span, the memory it
  corrects, whether the text shares a content word with that memory's name, description or body
  ("different" cases are the point of the exercise), and whether the lookup was tuned with it.

Three memory sets, each with the same global drawer: a Python web shop (56 memories), a Go
command-line tool (46) and a data pipeline (48). Many memories have a near neighbour, so a lookup
that matches one word finds the wrong one as often as the right one. The "holdout" cases (all of
the data pipeline's, and a few on the drawer) were written after the lookup was frozen and never
used to tune it: the figure to trust.

Re-run to regenerate: `.venv/bin/python bench/make_corrections.py`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "corrections.jsonl"

# (name, type, description, body) — bodies say what, why and how to apply, as extraction writes them.
GLOBAL = [
    ("user-backend-developer", "user", "the user is mostly a backend developer",
     "Mostly backend work in Python and Go. **Why:** said so. **How to apply:** explain frontend details more."),
    ("prefers-short-answers", "user", "keep answers short and direct",
     "Short, direct answers without preambles. **Why:** the user reads on a small screen. **How to apply:** lead with the answer."),
    ("commit-messages-imperative", "feedback", "write commit messages in the imperative mood",
     "Subject lines like 'Add x', not 'Added x'. **Why:** matches git's own messages. **How to apply:** every commit."),
    ("no-coauthor-lines", "feedback", "never add Co-Authored-By lines to commits",
     "No Co-Authored-By trailers. **Why:** the user signs their own work. **How to apply:** strip them from messages."),
    ("ask-before-new-dependencies", "feedback", "ask before adding a dependency",
     "Ask before installing a new package. **Why:** supply-chain review. **How to apply:** propose it first, then wait."),
    ("no-force-push-shared", "feedback", "never force-push shared branches",
     "Never use git push --force on branches others use. **Why:** it lost work once. **How to apply:** use --force-with-lease on your own branches only."),
    ("british-spelling", "feedback", "use British spelling in docs and comments",
     "colour, behaviour, organise. **Why:** the user's house style. **How to apply:** docs, comments, messages."),
    ("editor-neovim", "user", "the user edits in Neovim",
     "Uses Neovim with LSP. **Why:** said so. **How to apply:** give vim-friendly instructions, no GUI steps."),
    ("shell-zsh-macos", "user", "works on macOS with zsh",
     "macOS laptop, zsh shell, Homebrew. **How to apply:** commands for BSD tools and zsh."),
    ("type-hints-python", "feedback", "type hints on every new Python function",
     "All new Python functions get type hints. **Why:** mypy catches bugs early. **How to apply:** annotate arguments and returns."),
    ("explain-why-comments", "feedback", "comments explain why, not what",
     "No comments that restate the code. **Why:** they rot. **How to apply:** only the reason behind non-obvious code."),
    ("show-diff-before-commit", "feedback", "show the diff before committing",
     "Show the full diff and wait before committing. **Why:** the user reviews everything. **How to apply:** always."),
    ("no-emoji", "feedback", "no emojis in commit messages or docs",
     "Plain text only. **Why:** the user finds them noisy. **How to apply:** commit messages, docs, comments."),
    ("colour-blind-output", "user", "user is colour-blind: don't rely on red/green",
     "Red/green distinctions are invisible to the user. **How to apply:** use symbols or words beside colours."),
    ("timezone-cet", "user", "the user is in Berlin (CET)",
     "Works from Berlin, Central European Time. **How to apply:** give times in CET."),
    ("prefers-pytest", "feedback", "write tests with pytest, not unittest",
     "pytest style: plain asserts and fixtures. **Why:** shorter tests. **How to apply:** new tests."),
    ("docker-compose-local", "user", "runs services locally with docker compose",
     "Local services come from docker compose. **How to apply:** suggest compose commands for local setup."),
    ("git-gpg-signing", "feedback", "sign commits with GPG",
     "Every commit is signed (-S). **Why:** the org requires verified commits. **How to apply:** git commit -S."),
    ("english-answers", "feedback", "answer in English even when asked in Chinese",
     "Always answer in English. **Why:** the user shares answers with the team. **How to apply:** whatever language the question."),
    ("no-apologies", "feedback", "don't apologise, just fix",
     "Skip apologies. **Why:** noise. **How to apply:** state the fix."),
]

WEBSHOP = [
    ("uses-uv", "project", "Python dependencies are managed with uv",
     "Run `uv sync`; the lock file is uv.lock. **Why:** faster than pip-tools. **How to apply:** `uv add` for new deps."),
    ("deploy-only-fridays", "project", "deploys happen only on Fridays; migrations a day before",
     "Production deploys only on Fridays; migrations go out the day before the code that needs them. **Why:** ops rota."),
    ("empty-cart-422", "project", "an empty cart is a 422 with a JSON error body",
     "POST /checkout with an empty cart answers 422 and a JSON error. **Why:** the API contract with the mobile app."),
    ("postgres-billing", "project", "billing uses Postgres",
     "The billing service stores invoices in Postgres 16. **Why:** transactions and JSONB."),
    ("two-reviews-migrations", "project", "migrations need two reviews",
     "Every database migration needs two approving reviews. **Why:** a bad migration took the shop down."),
    ("pytest-xdist-parallel", "feedback", "run the test suite with pytest -n auto",
     "Run tests in parallel with pytest-xdist (-n auto). **Why:** the suite takes 9 minutes serially."),
    ("staging-board-linear", "reference", "staging issues go to the Linear OPS board",
     "https://linear.app/webshop/team/OPS — file staging follow-ups there."),
    ("no-direct-commits-main", "feedback", "never commit directly to main; open a PR",
     "All changes go through a pull request, even one-line fixes. **Why:** CI and review gate main."),
    ("json-snake-case", "project", "public API JSON fields are snake_case",
     "Field names in public API responses are snake_case. **Why:** the mobile app's models expect it."),
    ("structlog-logging", "project", "backend logs with structlog in JSON",
     "Use structlog, JSON renderer in production. **How to apply:** log.info('event.name', key=value)."),
    ("ci-github-actions", "project", "CI runs on GitHub Actions",
     "Workflows in .github/workflows/ci.yml run lint, types and tests on every push."),
    ("feature-flags-launchdarkly", "reference", "feature flags live in LaunchDarkly",
     "Flags are managed in LaunchDarkly, project webshop; not in config files."),
    ("redis-sessions", "project", "sessions are stored in Redis",
     "User sessions live in Redis with a 14-day TTL. **Why:** shared between the web nodes."),
    ("react-admin-vite", "project", "the admin frontend is React built with Vite",
     "The admin UI in admin/ is React 18, bundled by Vite. **How to apply:** npm run dev in admin/."),
    ("node-pnpm", "project", "frontend packages are installed with pnpm",
     "The admin and storefront use pnpm workspaces; pnpm-lock.yaml is committed."),
    ("celery-background-jobs", "project", "background jobs run on Celery with RabbitMQ",
     "Emails, exports and imports are Celery tasks on RabbitMQ. **How to apply:** add tasks in shop/tasks.py."),
    ("api-versioning-path", "project", "API versions are in the URL path; v1 is never broken",
     "Routes are /v1/..., /v2/...; v1 stays backwards compatible. **Why:** old app versions in the wild."),
    ("legacy-billing-frozen", "project", "the legacy billing module is frozen: security fixes only",
     "shop/legacy_billing gets no new features. **Why:** it is being replaced by the billing service."),
    ("staging-reset-sunday", "project", "the staging database is wiped every Sunday night",
     "Staging data is reset weekly on Sunday at 23:00. **How to apply:** don't keep test fixtures there."),
    ("sentry-errors", "reference", "errors are reported to Sentry project webshop-api",
     "https://sentry.io/organizations/acme/projects/webshop-api/ collects backend exceptions."),
    ("docker-images-ghcr", "project", "images are pushed to ghcr.io/acme/webshop",
     "CI builds the Docker image and pushes it to the GitHub container registry ghcr.io/acme/webshop."),
    ("python-version-312", "project", "the backend targets Python 3.12",
     "pyproject requires-python >=3.12. **How to apply:** use 3.12 syntax freely."),
    ("black-formatting", "project", "Python code is formatted with black, line length 100",
     "black --line-length 100 runs in pre-commit. **How to apply:** format before committing."),
    ("mypy-strict", "project", "mypy runs in strict mode in CI",
     "mypy --strict on shop/. **Why:** typed code only. **How to apply:** no untyped defs."),
    ("oncall-runbook", "reference", "on-call runbook",
     "https://wiki.acme.dev/webshop/oncall — escalation, dashboards, rollback steps."),
    ("k8s-helm-deploy", "project", "production runs on Kubernetes, deployed with Helm",
     "Helm charts in deploy/helm; the prod cluster is eu-west. **How to apply:** helm upgrade via CI only."),
    ("pci-no-card-logs", "feedback", "never log request bodies: card data (PCI)",
     "Request bodies may hold card numbers. **Why:** PCI DSS scope. **How to apply:** log ids, never bodies."),
    ("squash-merge", "project", "pull requests are squash-merged",
     "One commit per PR on main via squash merge. **Why:** a readable history."),
    ("eslint-airbnb", "project", "frontend lint uses ESLint with the airbnb config",
     "eslint-config-airbnb plus prettier in admin/ and storefront/."),
    ("jest-frontend-tests", "project", "frontend tests use Jest and React Testing Library",
     "Component tests with Jest + RTL in __tests__ folders."),
    ("stripe-payments", "project", "payments go through Stripe",
     "Stripe Checkout and webhooks in shop/payments. **How to apply:** test with Stripe's test keys."),
    ("orders-pagination-50", "project", "order lists are paginated 50 per page",
     "The orders endpoint returns at most 50 rows per page with a cursor. **Why:** the admin table."),
    ("i18n-gettext", "project", "translations use gettext .po files",
     "Strings are wrapped in gettext; .po files in shop/locale. **How to apply:** makemessages after changes."),
    ("s3-media-storage", "project", "product images are stored in S3",
     "Uploads go to the s3 bucket acme-webshop-media via django-storages."),
    ("django-admin-internal", "project", "the Django admin is for internal staff only",
     "/django-admin is behind the VPN. **How to apply:** no customer-facing features there."),
    ("rate-limit-login", "project", "login is rate limited to 5 attempts per minute",
     "django-ratelimit on the login view. **Why:** credential stuffing."),
]

CLITOOL = [
    ("go-table-driven-tests", "feedback", "write table-driven tests in Go",
     "Tests are tables of cases with t.Run. **Why:** easier to review. **How to apply:** new tests."),
    ("golangci-lint", "project", "lint with golangci-lint",
     "golangci-lint run with .golangci.yml (errcheck, govet, revive). **How to apply:** make lint."),
    ("cobra-cli", "project", "commands are built with cobra",
     "Each sub-command is a cobra.Command in cmd/. **How to apply:** add new commands there."),
    ("goreleaser-release", "project", "releases are built with goreleaser on tag push",
     "Pushing a vX.Y.Z tag runs goreleaser, which builds binaries for six platforms."),
    ("min-go-121", "project", "minimum Go version is 1.21",
     "go.mod says go 1.21. **Why:** Debian stable ships it. **How to apply:** no newer language features."),
    ("config-toml", "project", "the config file is TOML at ~/.config/tool/config.toml",
     "Configuration is read from TOML with BurntSushi/toml."),
    ("no-cgo", "project", "builds with CGO_ENABLED=0 for static binaries",
     "No cgo anywhere. **Why:** static binaries for every platform."),
    ("homebrew-tap", "reference", "the Homebrew formula lives in acme/homebrew-tap",
     "https://github.com/acme/homebrew-tap — goreleaser updates it on release."),
    ("errors-wrap", "feedback", "wrap errors with %w and context",
     "fmt.Errorf(\"reading config: %w\", err). **Why:** useful messages. **How to apply:** every returned error."),
    ("issue-tracker-github", "reference", "issues are tracked on GitHub",
     "https://github.com/acme/tool/issues — bugs and feature requests."),
    ("sqlite-cache", "project", "the local cache is SQLite (modernc, pure Go)",
     "modernc.org/sqlite for the cache in ~/.cache/tool. **Why:** no cgo."),
    ("semver-tags", "project", "tags are vX.Y.Z semver",
     "Semantic versioning; breaking changes bump the major."),
    ("zerolog-logging", "project", "logging uses zerolog",
     "github.com/rs/zerolog, console writer in a terminal, JSON otherwise."),
    ("windows-support", "project", "the tool must work on Windows too",
     "No POSIX-only syscalls; paths through filepath. **Why:** a third of the users are on Windows."),
    ("make-targets", "feedback", "use the make targets, not go build directly",
     "make build, make test, make lint. **Why:** they set ldflags and tags."),
    ("docs-mkdocs", "project", "docs are built with mkdocs-material in docs/",
     "mkdocs serve for a preview; published to GitHub Pages."),
    ("vendor-deps", "project", "dependencies are vendored in vendor/",
     "go mod vendor after any dependency change. **Why:** offline builds in the distro."),
    ("testdata-golden", "project", "golden files live in testdata/ and update with -update",
     "go test ./... -update rewrites the golden files; review the diff."),
    ("telemetry-opt-in", "project", "telemetry is opt-in only",
     "No data is sent unless the user runs `tool telemetry enable`. **Why:** privacy promise."),
    ("release-every-two-weeks", "project", "releases go out every other Tuesday",
     "A release train every second Tuesday; hotfixes in between."),
    ("json-output-flag", "project", "every command supports --json",
     "Machine-readable output via --json; its fields are a stable interface."),
    ("exit-codes-table", "project", "exit codes follow the table in the README",
     "0 ok, 1 error, 2 usage, 3 config. **How to apply:** new errors get a row there."),
    ("color-output-nocolor", "project", "coloured output honours NO_COLOR",
     "Colours only on a TTY and never when NO_COLOR is set."),
    ("http-client-timeouts", "feedback", "every HTTP client has a timeout",
     "No http.DefaultClient. **Why:** hung commands. **How to apply:** 30 s default, configurable."),
    ("ci-github-actions-matrix", "project", "CI tests on Linux, macOS and Windows",
     "GitHub Actions matrix over three OSes and two Go versions."),
    ("changelog-keepachangelog", "project", "CHANGELOG.md follows keep-a-changelog",
     "An Unreleased section gets an entry for every user-visible change."),
]

# (pool, text, target) — what the user said, and the memory it corrects.
CASES = [
    ("webshop", "we switched to poetry, uv is gone", "project:uses-uv"),
    ("webshop", "The package manager changed: it's poetry now.", "project:uses-uv"),
    ("webshop", "Heads up, dependencies are handled by pip-tools again, not the fast Rust tool.", "project:uses-uv"),
    ("webshop", "We can ship any weekday now, the weekly freeze rule is gone.", "project:deploy-only-fridays"),
    ("webshop", "Releases to prod happen on Tuesdays and Thursdays from now on.", "project:deploy-only-fridays"),
    ("webshop", "Actually the mobile team wants a 400 for an empty basket, not 422.", "project:empty-cart-422"),
    ("webshop", "Invoices moved to MySQL last sprint.", "project:postgres-billing"),
    ("webshop", "One approval is enough for schema changes now.", "project:two-reviews-migrations"),
    ("webshop", "Run the suite serially again, the parallel workers are flaky.", "project:pytest-xdist-parallel"),
    ("webshop", "The ops tickets moved to Jira.", "project:staging-board-linear"),
    ("webshop", "You can push small fixes straight to trunk now.", "project:no-direct-commits-main"),
    ("webshop", "The public API uses camelCase keys now.", "project:json-snake-case"),
    ("webshop", "We replaced structlog with loguru.", "project:structlog-logging"),
    ("webshop", "The pipelines moved to GitLab.", "project:ci-github-actions"),
    ("webshop", "Toggles are in Unleash now, we dropped the SaaS flag service.", "project:feature-flags-launchdarkly"),
    ("webshop", "Logins are kept in Memcached now.", "project:redis-sessions"),
    ("webshop", "The back-office UI is bundled with webpack again.", "project:react-admin-vite"),
    ("webshop", "We use yarn for the JS packages now.", "project:node-pnpm"),
    ("webshop", "Async work runs on RQ now, the old task queue was removed.", "project:celery-background-jobs"),
    ("webshop", "Version numbers go in an Accept header now, not in the route.", "project:api-versioning-path"),
    ("webshop", "The old invoicing code is open for features again.", "project:legacy-billing-frozen"),
    ("webshop", "Pre-prod is no longer wiped on weekends.", "project:staging-reset-sunday"),
    ("webshop", "Exceptions go to Rollbar now.", "project:sentry-errors"),
    ("webshop", "Containers are published to Docker Hub now.", "project:docker-images-ghcr"),
    ("webshop", "We upgraded the backend interpreter to 3.13.", "project:python-version-312"),
    ("webshop", "We switched the formatter to ruff format.", "project:black-formatting"),
    ("webshop", "Type checking is no longer strict, it was too noisy.", "project:mypy-strict"),
    ("webshop", "Prod moved off k8s to ECS.", "project:k8s-helm-deploy"),
    ("webshop", "Merge commits are fine now, no need to squash.", "project:squash-merge"),
    ("webshop", "We moved the UI tests to Vitest.", "project:jest-frontend-tests"),
    ("webshop", "Linting for the React code uses Biome now.", "project:eslint-airbnb"),
    ("webshop", "We log payloads again, but masked.", "project:pci-no-card-logs"),
    ("webshop", "The on-call docs moved to Confluence.", "project:oncall-runbook"),
    ("webshop", "We dropped Stripe for Adyen.", "project:stripe-payments"),
    ("webshop", "The orders page shows 100 rows per page now.", "project:orders-pagination-50"),
    ("webshop", "Product photos are on Cloudflare R2 now.", "project:s3-media-storage"),
    ("webshop", "Sign-in attempts are limited to 10 a minute now.", "project:rate-limit-login"),
    ("webshop", "Longer, detailed answers are fine now.", "global:prefers-short-answers"),
    ("webshop", "Co-authored trailers are fine after all.", "global:no-coauthor-lines"),
    ("webshop", "You don't have to check with me before pulling in a library anymore.", "global:ask-before-new-dependencies"),
    ("webshop", "American spelling is fine, forget the British rule.", "global:british-spelling"),
    ("webshop", "I moved to VS Code.", "global:editor-neovim"),
    ("webshop", "I'm on Linux with fish now.", "global:shell-zsh-macos"),
    ("webshop", "I'm in New York now, use Eastern time.", "global:timezone-cet"),
    ("webshop", "unittest is fine for new tests too.", "global:prefers-pytest"),
    ("webshop", "Stop signing commits, the GPG setup is gone.", "global:git-gpg-signing"),
    ("webshop", "Emoji in the docs are ok now.", "global:no-emoji"),
    ("webshop", "Reply in Chinese when I write in Chinese.", "global:english-answers"),
    ("clitool", "Linting uses staticcheck only now.", "project:golangci-lint"),
    ("clitool", "We migrated the commands from cobra to urfave/cli.", "project:cobra-cli"),
    ("clitool", "Binaries are built by a plain GitHub workflow now.", "project:goreleaser-release"),
    ("clitool", "The minimum toolchain is 1.22 now.", "project:min-go-121"),
    ("clitool", "The settings file is YAML now.", "project:config-toml"),
    ("clitool", "We need cgo for the keychain support now.", "project:no-cgo"),
    ("clitool", "The brew formula moved to homebrew-core.", "project:homebrew-tap"),
    ("clitool", "Bare errors are fine in tests, no need to add context there.", "project:errors-wrap"),
    ("clitool", "The cache is a bolt database now.", "project:sqlite-cache"),
    ("clitool", "Logs use slog from the standard library now.", "project:zerolog-logging"),
    ("clitool", "We dropped Windows.", "project:windows-support"),
    ("clitool", "The documentation site moved to Hugo.", "project:docs-mkdocs"),
    ("clitool", "We stopped vendoring third-party modules.", "project:vendor-deps"),
    ("clitool", "Snapshot files are regenerated with UPDATE=1 now.", "project:testdata-golden"),
    ("clitool", "Usage stats are collected by default since 2.0.", "project:telemetry-opt-in"),
    ("clitool", "We ship every Monday now.", "project:release-every-two-weeks"),
    ("clitool", "Machine-readable output moved to a separate --format flag.", "project:json-output-flag"),
    ("clitool", "The CI matrix is Linux only now.", "project:ci-github-actions-matrix"),
    ("clitool", "No timeout on the download client, large files need as long as they take.", "project:http-client-timeouts"),
    ("clitool", "I'm fine with red and green after all, I got new glasses.", "global:colour-blind-output"),
]

# Written after the lookup (and its table of developer terms) was frozen, never used to tune it:
# a third project of another kind, whose tools the table mostly does not know.
DATAPIPE = [
    ("airflow-orchestration", "project", "pipelines are scheduled with Airflow",
     "DAGs live in dags/ and are deployed to the Airflow cluster by CI."),
    ("pandas-dataframes", "project", "data frames use pandas",
     "pandas 2 with pyarrow dtypes. **How to apply:** vectorise, no row loops."),
    ("snowflake-warehouse", "project", "the warehouse is Snowflake",
     "Analytics tables live in Snowflake, database ANALYTICS, schema CORE."),
    ("dbt-models", "project", "transformations are dbt models",
     "SQL models in models/, run with dbt build; tests in schema.yml."),
    ("terraform-infra", "project", "infrastructure is managed with Terraform",
     "Modules in infra/, state in an S3 backend. **How to apply:** terraform plan in CI before apply."),
    ("mlflow-tracking", "project", "experiments are tracked in MLflow",
     "Every training run logs params and metrics to the MLflow server."),
    ("jupyter-notebooks-not-committed", "project", "notebooks are not committed",
     "Jupyter notebooks stay out of git. **Why:** huge diffs. **How to apply:** export the code to scripts/."),
    ("gpu-cuda-12", "project", "training runs on CUDA 12",
     "The training images pin CUDA 12.1 and cuDNN 8.9."),
    ("parquet-storage", "project", "raw data is stored as Parquet files",
     "Raw extracts land as Parquet, partitioned by date."),
    ("great-expectations", "project", "data quality checks use Great Expectations",
     "Expectation suites in gx/ run after each load."),
    ("slack-alerts", "project", "pipeline failures alert #data-alerts on Slack",
     "Airflow's failure callback posts to #data-alerts."),
    ("auth0-login", "project", "the dashboard login uses Auth0",
     "Single sign-on through Auth0, tenant acme-data."),
    ("streamlit-dashboard", "project", "the internal dashboard is Streamlit",
     "app/dashboard.py, deployed on the internal cluster."),
    ("pydantic-v2", "project", "models use pydantic v2",
     "BaseModel with model_validate; no v1 compatibility layer."),
    ("poetry-deps", "project", "dependencies are managed with poetry",
     "poetry.lock is committed; poetry install for a dev setup."),
    ("pre-commit-hooks", "project", "pre-commit runs ruff and black",
     ".pre-commit-config.yaml; install it with pre-commit install."),
    ("python-311", "project", "the project runs on Python 3.11",
     "requires-python = '>=3.11,<3.12' because of the Airflow image."),
    ("daily-batch-0300", "project", "the batch runs daily at 03:00 UTC",
     "The main DAG is scheduled at 03:00 UTC, after the upstream exports."),
    ("pii-hashing", "project", "PII columns are hashed before loading",
     "Emails and phone numbers are SHA-256 hashed with a salt before they reach the warehouse."),
    ("dev-container", "project", "development happens in a devcontainer",
     ".devcontainer/ has the toolchain; open the repo in it."),
    ("kafka-ingest", "project", "events are ingested from Kafka",
     "The ingest service consumes the events topic and writes Parquet."),
    ("docs-in-readme", "project", "documentation lives in the README",
     "One README per package; no separate docs site."),
    ("sample-data-fixtures", "project", "tests use small sample CSVs in tests/fixtures",
     "Each test reads a hand-made CSV of a few rows."),
    ("retries-three", "project", "tasks retry three times with exponential backoff",
     "retries=3, retry_exponential_backoff=True on every task."),
    ("sql-style-lowercase", "feedback", "SQL keywords are lowercase",
     "select, from, where in lower case. **Why:** the team's sqlfluff config."),
    ("feature-store-feast", "project", "features are served from Feast",
     "Online features come from the Feast store backed by Redis."),
    ("model-registry-s3", "project", "trained models are saved to S3 under models/",
     "Each trained model is a versioned folder in the ml-artifacts bucket."),
    ("black-line-88", "project", "black with the default line length 88",
     "No line-length override in pyproject."),
]
HOLDOUT_CASES = [
    ("datapipe", "We moved the DAGs to Dagster.", "project:airflow-orchestration"),
    ("datapipe", "We're on polars now for the dataframes.", "project:pandas-dataframes"),
    ("datapipe", "The warehouse moved to BigQuery.", "project:snowflake-warehouse"),
    ("datapipe", "Transformations are plain SQL scripts now, no more dbt.", "project:dbt-models"),
    ("datapipe", "Infra is Pulumi now.", "project:terraform-infra"),
    ("datapipe", "Experiment tracking moved to Weights & Biases.", "project:mlflow-tracking"),
    ("datapipe", "It's fine to commit notebooks now, we strip the outputs.", "project:jupyter-notebooks-not-committed"),
    ("datapipe", "The training boxes were upgraded to CUDA 12.4.", "project:gpu-cuda-12"),
    ("datapipe", "Raw dumps are CSV again, Parquet was too painful.", "project:parquet-storage"),
    ("datapipe", "We replaced Great Expectations with Soda.", "project:great-expectations"),
    ("datapipe", "Failures page the on-call through PagerDuty now instead of the chat channel.", "project:slack-alerts"),
    ("datapipe", "The dashboard sign-in is Keycloak now.", "project:auth0-login"),
    ("datapipe", "The internal dashboard is Dash now.", "project:streamlit-dashboard"),
    ("datapipe", "We're still on pydantic 1 actually.", "project:pydantic-v2"),
    ("datapipe", "We use uv now for the environment.", "project:poetry-deps"),
    ("datapipe", "The git hooks are gone, CI does the checks.", "project:pre-commit-hooks"),
    ("datapipe", "We're on 3.12 now.", "project:python-311"),
    ("datapipe", "The nightly job runs at 05:00 now.", "project:daily-batch-0300"),
    ("datapipe", "We encrypt personal data columns instead of hashing them now.", "project:pii-hashing"),
    ("datapipe", "Nobody uses the devcontainer anymore; set up a local venv.", "project:dev-container"),
    ("datapipe", "Events come from Kinesis now.", "project:kafka-ingest"),
    ("datapipe", "Docs moved to a Docusaurus site.", "project:docs-in-readme"),
    ("datapipe", "Test data is generated with factories now, not CSV files.", "project:sample-data-fixtures"),
    ("datapipe", "Tasks don't retry anymore, they fail fast.", "project:retries-three"),
    ("datapipe", "Write SQL keywords in upper case.", "project:sql-style-lowercase"),
    ("datapipe", "We dropped the feature store.", "project:feature-store-feast"),
    ("datapipe", "Trained models go to the model registry in MLflow now.", "project:model-registry-s3"),
    ("datapipe", "Line length is 100 now.", "project:black-line-88"),
    ("datapipe", "I switched from Neovim to Helix.", "global:editor-neovim"),
    ("datapipe", "I'm back on bash.", "global:shell-zsh-macos"),
    ("datapipe", "Commit subjects can be past tense, I don't mind.", "global:commit-messages-imperative"),
    ("datapipe", "You can install packages without asking me.", "global:ask-before-new-dependencies"),
]

_WORD = re.compile(r"[a-z0-9]+")
_STOP_WORDS = ("a an the and or but to of in on for with that this it is are be we i you our my me now no not "
               "new old again after all too as at by from so than then any there their they them was were "
               "has have had its it's do does did use uses used")
_STOP = frozenset(_STOP_WORDS.split())


def content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1}


def memories(rows: list[tuple[str, str, str, str]], scope: str) -> list[dict[str, str]]:
    return [{"scope": scope, "name": n, "type": t, "description": d, "body": b} for n, t, d, b in rows]


def main() -> None:
    pools: dict[str, dict[str, Any]] = {
        "webshop": {"key": "-home-dev-webshop", "memories": memories(GLOBAL, "global") + memories(WEBSHOP, "project")},
        "clitool": {"key": "-home-dev-tool", "memories": memories(GLOBAL, "global") + memories(CLITOOL, "project")},
        "datapipe": {"key": "-home-dev-datapipe", "memories": memories(GLOBAL, "global") + memories(DATAPIPE, "project")},
    }
    lines: list[dict[str, Any]] = [{"kind": "pool", "id": pid, **pool} for pid, pool in pools.items()]
    # a global memory corrected from the tool project must exist there too: the drawer is shared
    labelled = [(*c, "tuning") for c in CASES] + [(*c, "holdout") for c in HOLDOUT_CASES]
    for i, (pid, text, target, split) in enumerate(labelled):
        scope, name = target.split(":", 1)
        mem = next((m for m in pools[pid]["memories"] if m["scope"] == scope and m["name"] == name), None)
        assert mem is not None, target
        shared = content_words(text) & content_words(" ".join((mem["name"].replace("-", " "), mem["description"],
                                                                mem["body"])))  # fmt: skip
        lines.append({"kind": "case", "id": f"c{i + 1:03d}", "pool": pid, "text": text, "target": target,
                      "words": "shared" if shared else "different", "split": split})  # fmt: skip
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8")
    cases = [x for x in lines if x["kind"] == "case"]
    diff = sum(1 for c in cases if c["words"] == "different")
    sizes = {pid: len(p["memories"]) for pid, p in pools.items()}
    hold = sum(1 for c in cases if c["split"] == "holdout")
    print(f"{OUT}: {len(cases)} cases ({diff} with no content word in common with their memory; {hold} held out), "
          f"pools {sizes}")


if __name__ == "__main__":
    main()

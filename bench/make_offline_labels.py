"""Writes tests/data/offline_labels.jsonl: user statements labelled for the offline extraction rules.

Each line: {"id", "text", "durable", "scope", "types", "group", "source", "split"}.

- `durable`: would a careful reader keep it as long-term memory (SPEC §3.1)? Questions,
  chit-chat, one-off task instructions, temporary context and requests *not* to remember
  are not; facts about the user, guidance on the way of working, project decisions and
  constraints, and pointers to outside resources are.
- `scope` (durable only): "global" for user/feedback memories not tied to one project,
  "project" otherwise (§3.2: project and reference memories always go to the project).
- `types` (durable only): the acceptable memory types, best first; a stated preference is
  often both `user` and `feedback`, a project rule both `feedback` and `project`.
- `group`: what kind of statement it is (question, chit-chat, task, temporary, dont-keep,
  user, feedback, project, reference), for the per-group figures.
- `source`: "corpus" (a paraphrase of a human turn of ../shared/corpus/claude-code — the
  corpus holds 33 human turns, all one-off requests; none is quoted verbatim and nothing
  personal is kept), "sample" (the bundled sample home, written for memd), "issue" (the
  misfires reported in issue 13), "own" (written for this set).
- `split`: "dev" or "test", fixed by a hash of the text, or "holdout". The offline rules
  were tuned on the dev half's mistakes; the test half is not blind (the old rules' mistakes on
  both halves were seen while the set was built, and one bug — "so much" counted as a rule
  without a "don't" — was fixed after a test-half mistake showed it). The "holdout" statements
  were written after the rules were frozen and never used to tune them: the figure to trust.

Re-run to regenerate: `.venv/bin/python bench/make_offline_labels.py`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "offline_labels.jsonl"

G, P = "global", "project"
U, F, PR, R = "user", "feedback", "project", "reference"

# (text, durable, scope, types, group, source)
NOT_DURABLE: list[tuple[str, str, str]] = [
    # -- questions, many with a durable-sounding word in them (issue 13: 9 of 9 were kept)
    ("What should I keep in mind when I work here?", "question", "issue"),
    ("Is there anything I should remember about this codebase?", "question", "own"),
    ("What do you remember about how we deploy?", "question", "own"),
    ("Do you remember what we decided about the cart API?", "question", "own"),
    ("What are the rules for committing in this repo?", "question", "own"),
    ("Should we always run the migrations first?", "question", "own"),
    ("Do I always need to open a PR for one-line fixes?", "question", "own"),
    ("Which package manager does this project use?", "question", "own"),
    ("Why does the checkout handler return 500 when the cart is empty?", "question", "own"),
    ("Can you remind me what our branching convention is?", "question", "own"),
    ("Do you prefer tabs or spaces?", "question", "own"),
    ("How do I run the tests with the race detector?", "question", "own"),
    ("What did we decide about the logging format?", "question", "own"),
    ("Is it ever OK to commit directly to main?", "question", "own"),
    ("What do you know about me so far?", "question", "own"),
    ("Where is the staging board?", "question", "own"),
    ("Would it be better to never use an ORM here?", "question", "own"),
    ("Why does the build never finish on CI?", "question", "own"),
    ("What's worth remembering from today's session?", "question", "own"),
    ("Any conventions I should keep in mind before I start?", "question", "own"),
    ("Does the nav bar get the logged-in user from the auth store?", "question", "corpus"),
    ("Keep in mind anything special about the build here?", "question", "own"),
    ("What should a new contributor always do before pushing?", "question", "own"),
    ("Remind me, do we deploy on Fridays or Mondays?", "question", "own"),
    ("Is it true that we never squash merge?", "question", "own"),
    ("How do you decide what to remember?", "question", "own"),
    ("What's our policy on force pushes?", "question", "own"),
    ("Can you note which tests are flaky and tell me?", "question", "own"),
    ("Did we agree on Postgres or MySQL for billing?", "question", "own"),
    ("Should I always use pnpm here, or is npm fine?", "question", "own"),
    # -- chit-chat
    ("Hey", "chit-chat", "corpus"),
    ("thanks, that worked!", "chit-chat", "sample"),
    ("ok bye", "chit-chat", "sample"),
    ("Great, looks good to me.", "chit-chat", "own"),
    ("Nice, I like it.", "chit-chat", "own"),
    ("lol, that was fast", "chit-chat", "own"),
    ("I'm a bit confused by that output.", "chit-chat", "own"),
    ("Thanks! I love how clean this is now.", "chit-chat", "own"),
    ("No worries, take your time.", "chit-chat", "own"),
    ("Good morning!", "chit-chat", "own"),
    ("That's perfect, thank you so much.", "chit-chat", "own"),
    ("I want to say thanks for all the help today.", "chit-chat", "own"),
    ("Sorry, my bad, I mistyped the path.", "chit-chat", "own"),
    ("Hmm, interesting, I never thought of that.", "chit-chat", "own"),
    ("I'm so happy this finally works.", "chit-chat", "own"),
    ("Wow, you always find these bugs so quickly.", "chit-chat", "own"),
    # -- one-off task instructions (many paraphrased from the corpus's human turns)
    ("Can you add the first two initials of the logged-in user to the nav avatar?", "task", "corpus"),
    ("The menu says Guest User although I'm logged in; use the initials from the username when there is no name.", "task", "corpus"),
    ("Please move the plus button to its own button right of the search box in the sidebar.", "task", "corpus"),
    ("Not the new session button, the other plus button in the screenshot.", "task", "corpus"),
    ("Put it completely outside the search bar.", "task", "corpus"),
    ("Let's give the button a background.", "task", "corpus"),
    ("Search the web for the Claude Code response types.", "task", "corpus"),
    ("Can you audit this codebase?", "task", "corpus"),
    ("Please update CLAUDE.md for the current changes.", "task", "corpus"),
    ("Can you run ls -la in the project folder?", "task", "corpus"),
    ("Create a hello_world.py file with a minimal program in it.", "task", "corpus"),
    ("Read the file back with the Read tool.", "task", "corpus"),
    ("Try running cat on a file that does not exist.", "task", "corpus"),
    ("Do something that needs several tools in one turn.", "task", "corpus"),
    ("Work on the spotter bead: show the issue, list the ready subtasks and start with the first one.", "task", "corpus"),
    ("continue implementation", "task", "corpus"),
    ("The Phoenix dev server doesn't seem to start.", "task", "corpus"),
    ("Start the Phoenix server in the background.", "task", "corpus"),
    ("Scrolling back in the xterm.js terminal still does not work, maybe the outer page catches it; look up how xterm.js and tmux interact.", "task", "corpus"),
    ("Create the beads for these tasks.", "task", "corpus"),
    ("Let's explore scrolling to the bottom when new messages arrive; I'd like to evaluate the AI Elements components for our chat view.", "task", "corpus"),
    ("Next: the admin order list is slow. Let's look at the query.", "task", "sample"),
    ("The checkout handler returns 500 when the cart is empty. Can you find out why and fix it?", "task", "sample"),
    ("Fix the typo in the README heading.", "task", "own"),
    ("Rename this variable to something clearer.", "task", "own"),
    ("Don't add a test for this one, it's a throwaway script.", "task", "own"),
    ("Use the other function instead, the one in utils.", "task", "own"),
    ("No, I meant the left sidebar, not the right one.", "task", "own"),
    ("Stop, that's the wrong file.", "task", "own"),
    ("Wrong, revert that last change.", "task", "own"),
    ("Let's use a map here instead of the switch statement.", "task", "own"),
    ("I want you to refactor the payment module.", "task", "own"),
    ("I prefer the second option you proposed.", "task", "own"),
    ("I like the blue one better.", "task", "own"),
    ("Remember the file I showed you earlier? Open it again.", "task", "own"),
    ("I don't remember where the config lives, can you find it?", "task", "own"),
    ("Never mind, I'll do it myself.", "task", "own"),
    ("Look at https://github.com/acme/webshop/issues/412 and tell me what's wrong.", "task", "own"),
    ("Here's the stack trace: https://pastebin.com/raw/x7Gm2kQa", "task", "own"),
    ("The tests never finish on my laptop, can you check why?", "task", "own"),
    ("It always crashes when I click save.", "task", "own"),
    ("This endpoint never returns more than 50 rows.", "task", "own"),
    ("No, do it in the handler, not in the middleware.", "task", "own"),
    ("Instead of patching the test, fix the function.", "task", "own"),
    ("Don't run the full suite, just the checkout tests.", "task", "own"),
    ("Write a migration that adds an index on orders.created_at.", "task", "own"),
    ("Let's deploy this to staging and see what happens.", "task", "own"),
    ("We should use the initials from the username if the name isn't present.", "task", "corpus"),
    # -- temporary context
    ("Don't touch the migrations folder for now.", "temporary", "own"),
    ("For this PR, skip the changelog entry.", "temporary", "own"),
    ("Just this once, push directly without a review.", "temporary", "own"),
    ("Remember to bump the version in this PR.", "temporary", "own"),
    ("Keep in mind the log file is huge, so read it in chunks.", "temporary", "own"),
    ("Note that the build is currently red because of a flaky test.", "temporary", "own"),
    ("We are deploying the hotfix right now, hold on a minute.", "temporary", "own"),
    ("Today I only have an hour, so let's keep the change small.", "temporary", "own"),
    ("I'm in a meeting, I'll be back in ten minutes.", "temporary", "own"),
    # -- asked not to keep
    ("My personal password manager is 1Password and I always use the staging account alice@example.com — don't remember this.", "dont-keep", "sample"),
    ("Don't remember this, but my home address is 12 Elm Street.", "dont-keep", "own"),
    ("Please don't save this anywhere: the VPN passphrase changes weekly.", "dont-keep", "own"),
]

DURABLE: list[tuple[str, str, list[str], str, str]] = [
    # -- who the user is, preferences (global unless tied to this project)
    ("I'm mostly a backend person, so when you touch the React admin, explain the frontend bits in a bit more detail.", G, [U, F], "user", "sample"),
    ("I'm a data scientist, mostly working in Python and R.", G, [U], "user", "own"),
    ("I'm new to Rust, so explain ownership errors when they come up.", G, [U, F], "user", "own"),
    ("I prefer short answers, in every project.", G, [U, F], "user", "issue"),
    ("Remember: I prefer short answers, in every project.", G, [U, F], "user", "issue"),
    ("I prefer concise explanations without long preambles.", G, [U, F], "user", "own"),
    ("I hate emojis in commit messages.", G, [F, U], "user", "own"),
    ("My role is tech lead for the payments team.", G, [U], "user", "own"),
    ("I'm a frontend engineer; I know React well but little about Kubernetes.", G, [U], "user", "own"),
    ("I usually work on a Mac with zsh.", G, [U], "user", "own"),
    ("I'm colour-blind, so don't rely on red and green alone in terminal output.", G, [U, F], "user", "own"),
    ("English isn't my first language, so keep explanations simple.", G, [U, F], "user", "own"),
    ("I like detailed commit messages that explain why.", G, [U, F], "user", "own"),
    ("In every project, I want type hints on all new Python functions.", G, [F, U], "user", "own"),
    ("I find table-driven tests easier to review than long test functions.", G, [U, F], "user", "own"),
    ("Prefer table-driven tests in Go; I find them easier to review.", G, [F, U], "user", "sample"),
    ("I prefer tabs over spaces in this project.", P, [U, F], "user", "own"),
    ("I'd rather you ask a clarifying question than guess.", G, [F, U], "user", "own"),
    ("我更喜欢简短的回答。", G, [U, F], "user", "own"),
    ("I'm the only maintainer of this repo, so I review every PR myself.", P, [U, PR], "user", "own"),
    ("I'm an SRE, so I care more about logs and metrics than about UI details.", G, [U], "user", "own"),
    ("My background is embedded C, so compare things to C when you explain them.", G, [U, F], "user", "own"),
    # -- guidance on the way of working, not tied to one project
    ("Never add Co-Authored-By lines to my commits.", G, [F], "feedback", "own"),
    ("Always write commit messages in the imperative mood.", G, [F], "feedback", "own"),
    ("Don't ever use git push --force on shared branches.", G, [F], "feedback", "own"),
    ("From now on, ask before installing new dependencies.", G, [F], "feedback", "own"),
    ("Stop summarising what you just did at the end of every answer.", G, [F], "feedback", "own"),
    ("Please don't apologise so much; just fix it.", G, [F], "feedback", "own"),
    ("Always show me the diff before you commit.", G, [F], "feedback", "own"),
    ("Never run destructive database commands without asking me first.", G, [F], "feedback", "own"),
    ("Every time you change a dependency, update the lock file in the same commit.", G, [F], "feedback", "own"),
    ("Going forward, use British spelling in docs and comments.", G, [F], "feedback", "own"),
    ("Don't use abbreviations like cfg or ctx2 in variable names; spell them out.", G, [F], "feedback", "own"),
    ("Always use absolute imports in Python code.", G, [F], "feedback", "own"),
    ("No, don't write comments that restate the code; only explain why.", G, [F], "feedback", "own"),
    ("When you're unsure, say so instead of guessing.", G, [F], "feedback", "own"),
    ("Use conventional commits everywhere (feat:, fix:, chore:).", G, [F], "feedback", "own"),
    ("Always answer in English, even when I write in Chinese.", G, [F, U], "feedback", "own"),
    ("Never use emojis in code comments or docs, in any project.", G, [F], "feedback", "own"),
    ("Keep pull request descriptions short: what changed and why.", G, [F], "feedback", "own"),
    ("Don't mock what you don't own; wrap third-party clients and mock the wrapper.", G, [F], "feedback", "own"),
    ("Always run the formatter before you show me code.", G, [F], "feedback", "own"),
    ("Stop adding docstrings to private helper functions, they are noise.", G, [F], "feedback", "own"),
    ("Never suggest disabling a failing test as a fix.", G, [F], "feedback", "own"),
    ("For all my repos, default to MIT when a licence is needed.", G, [F, U], "feedback", "own"),
    ("Remember that I review code on my phone, so keep diffs small.", G, [U, F], "feedback", "own"),
    # -- guidance tied to this project
    ("Please always run the tests with -race in this repo; we had data races slip through before.", P, [F, PR], "feedback", "sample"),
    ("Never commit directly to main; always open a PR, even for one-line fixes.", P, [F, PR], "feedback", "sample"),
    ("In this repo, never edit the generated files under api/gen by hand.", P, [F, PR], "feedback", "own"),
    ("Always use the Makefile targets here instead of calling go build directly.", P, [F, PR], "feedback", "own"),
    ("Don't use the ORM for reporting queries in this codebase; write raw SQL.", P, [F, PR], "feedback", "own"),
    ("For this project, always add a changelog entry for user-visible changes.", P, [F, PR], "feedback", "own"),
    ("Never log the request body in this service; it may hold card numbers.", P, [F, PR], "feedback", "own"),
    ("Here we always squash-merge; don't create merge commits.", P, [F, PR], "feedback", "own"),
    ("Always bump the API version in openapi.yaml when you change a response shape.", P, [F, PR], "feedback", "own"),
    ("Never call the payment provider's live endpoint from tests in this project.", P, [F, PR], "feedback", "own"),
    ("Don't add new Celery tasks here; use the job queue in app/jobs instead.", P, [F, PR], "feedback", "own"),
    ("Always run make check before pushing to this repo.", P, [F, PR], "feedback", "own"),
    ("No, don't return 400 there. We decided that an empty cart is a 422 with a JSON error body — that's the API contract with the mobile app.", P, [PR, F], "project", "sample"),
    # -- decisions and constraints of the project
    ("We decided that an empty cart is a 422 with a JSON error body — that's the API contract with the mobile app.", P, [PR], "project", "sample"),
    ("Remember that we deploy only on Fridays, and migrations must go out a day before the code that needs them.", P, [PR], "project", "sample"),
    ("We switched to poetry, uv is gone.", P, [PR], "project", "issue"),
    ("We use pnpm, not npm, in this monorepo.", P, [PR], "project", "own"),
    ("We decided to use Postgres for the billing service.", P, [PR], "project", "own"),
    ("We decided to require two reviews for every database migration.", P, [PR], "project", "own"),
    ("Our convention is snake_case for JSON fields in the public API.", P, [PR], "project", "own"),
    ("We agreed to drop support for Python 3.9 at the end of the quarter.", P, [PR], "project", "own"),
    ("The payments service must stay PCI compliant, so card data never touches our logs.", P, [PR, F], "project", "own"),
    ("We standardized on structlog for logging across the backend.", P, [PR], "project", "own"),
    ("We moved CI from Jenkins to GitHub Actions last month.", P, [PR], "project", "own"),
    ("We release from the release branches, never from main.", P, [PR], "project", "own"),
    ("We no longer support IE11, so modern CSS is fine.", P, [PR], "project", "own"),
    ("Our API is versioned in the URL path and we never break v1.", P, [PR], "project", "own"),
    ("We chose SQLite for the local cache because it has to work offline.", P, [PR], "project", "own"),
    ("The mobile app depends on the orders endpoint staying backwards compatible.", P, [PR], "project", "own"),
    ("Staging is reset every Sunday night, so don't keep test data there.", P, [PR], "project", "own"),
    ("Migrations must be backwards compatible because we do rolling deploys.", P, [PR], "project", "own"),
    ("The legacy billing module is frozen; only security fixes go in.", P, [PR], "project", "own"),
    ("We're migrating internal services from REST to gRPC; new services use gRPC.", P, [PR], "project", "own"),
    ("Remember that the analytics database is read-only for us.", P, [PR], "project", "own"),
    ("Note that the feature flags live in LaunchDarkly, not in the config files.", P, [PR, R], "project", "own"),
    ("Remember, the staging database gets wiped nightly.", P, [PR], "project", "own"),
    ("我们决定用 Redis 做会话存储。", P, [PR], "project", "own"),
    ("记住：这个项目只在周五部署。", P, [PR], "project", "own"),
    ("We don't use Docker in development here; everything runs with nix develop.", P, [PR, F], "project", "own"),
    ("Our rule is that every public function needs a docstring.", P, [PR, F], "project", "own"),
    ("We require 90% test coverage on the core package.", P, [PR], "project", "own"),
    ("The frontend must support Safari 15 because of our enterprise customers.", P, [PR], "project", "own"),
    ("We picked Tailwind over CSS modules for the new admin UI.", P, [PR], "project", "own"),
    ("From now on the main branch is called trunk in this repo.", P, [PR, F], "project", "own"),
    ("Keep in mind that the billing cron runs at 02:00 UTC and locks the invoices table.", P, [PR], "project", "own"),
    ("We deploy with Helm charts from the deploy/helm folder.", P, [PR], "project", "own"),
    # -- pointers to outside resources
    ("Our staging board is at https://linear.app/webshop/team/OPS — file the follow-up there.", P, [R], "reference", "sample"),
    ("Bugs are tracked in Jira: https://acme.atlassian.net/browse/SHOP", P, [R], "reference", "own"),
    ("The runbook for on-call is at https://wiki.acme.dev/oncall/runbook.", P, [R], "reference", "own"),
    ("The Grafana dashboard for API latency is https://grafana.acme.dev/d/api-latency", P, [R], "reference", "own"),
    ("Design docs live in the Notion space https://notion.so/acme/Design-Docs-123", P, [R], "reference", "own"),
    ("Remember the API docs are at https://docs.acme.dev/api/v2.", P, [R], "reference", "own"),
    ("For deploy status, check the dashboard at https://deploy.acme.dev.", P, [R], "reference", "own"),
    ("File infra tickets on the Platform board: https://github.com/orgs/acme/projects/7", P, [R], "reference", "own"),
    ("Incidents are tracked at https://status.acme.dev/admin; link them in postmortems.", P, [R], "reference", "own"),
    ("The style guide we follow is https://google.github.io/styleguide/pyguide.html.", P, [R, PR], "reference", "own"),
]


# Written after the rules were tuned and never used to tune them: the held-out figure.
HOLDOUT_NOT_DURABLE: list[tuple[str, str, str]] = [
    ("Can you make the error message friendlier?", "task", "own"),
    ("why is this import failing", "question", "own"),
    ("run the migrations and tell me if anything breaks", "task", "own"),
    ("I think the bug is in the date parsing, check parse_date first.", "task", "own"),
    ("awesome, ship it", "chit-chat", "own"),
    ("Let's call it a day.", "chit-chat", "own"),
    ("Could you explain what this regex does?", "question", "own"),
    ("I never understood why this works, can you walk me through it?", "question", "own"),
    ("Make the sidebar collapsible.", "task", "own"),
    ("That's not what I asked for, I wanted the totals per month.", "task", "own"),
    ("Use a dataclass for this config object.", "task", "own"),
    ("Add logging to the retry loop so we can see what happens.", "task", "own"),
    ("Hold on, I'm checking something.", "chit-chat", "own"),
    ("Ignore the failing lint job, it's unrelated to this change.", "temporary", "own"),
    ("I'd like the chart to use a log scale.", "task", "own"),
    ("Please always keep this tab open while I test.", "temporary", "own"),
    ("The CI is failing again, take a look.", "task", "own"),
    ("Try the fix on staging first.", "task", "own"),
    ("Which of these two approaches is faster?", "question", "own"),
    ("I love this refactor.", "chit-chat", "own"),
    ("Write a unit test for the new parser.", "task", "own"),
    ("We need to fix this before the demo on Thursday.", "temporary", "own"),
    ("My laptop is slow today, so builds take forever.", "temporary", "own"),
    ("No, the other way round: keys first, then values.", "task", "own"),
    ("Great catch!", "chit-chat", "own"),
    ("Show me the last five commits.", "task", "own"),
    ("Where do we configure the rate limiter?", "question", "own"),
    ("Let's not worry about performance yet.", "temporary", "own"),
    ("Can you summarise what changed in this branch?", "question", "own"),
    ("OK, now do the same for the orders table.", "task", "own"),
]
HOLDOUT_DURABLE: list[tuple[str, str, list[str], str, str]] = [
    ("I'm a product manager, so skip the low-level details unless I ask.", G, [U, F], "user", "own"),
    ("I always want tests for bug fixes, in every repo.", G, [F, U], "feedback", "own"),
    ("Never use print statements for debugging output; use the logger.", G, [F], "feedback", "own"),
    ("We use Django 5 with Postgres 16 in production.", P, [PR], "project", "own"),
    ("Our deploys go through Argo CD, never kubectl apply by hand.", P, [PR, F], "project", "own"),
    ("Remember that the payments sandbox resets every night.", P, [PR], "project", "own"),
    ("Please don't reformat files you didn't change.", G, [F], "feedback", "own"),
    ("I prefer functional components with hooks over class components.", G, [U, F], "user", "own"),
    ("The team agreed that all new endpoints need OpenAPI docs.", P, [PR], "project", "own"),
    ("We only support Node 20 and later.", P, [PR], "project", "own"),
    ("Keep in mind that the staging API key is rotated every month.", P, [PR], "project", "own"),
    ("Customer data must stay in the EU region.", P, [PR], "project", "own"),
    ("From now on, write docs in Markdown, not reStructuredText.", G, [F], "feedback", "own"),
    ("I'm a junior developer, explain things step by step.", G, [U, F], "user", "own"),
    ("Our Slack channel for incidents is #inc-webshop.", P, [R, PR], "reference", "own"),
    ("The on-call handbook is at https://handbook.acme.dev/oncall", P, [R], "reference", "own"),
    ("Track all tech debt in the GitHub project at https://github.com/orgs/acme/projects/12", P, [R], "reference", "own"),
    ("We use Renovate for dependency updates, so don't bump versions manually.", P, [PR, F], "project", "own"),
    ("Always use UTC for timestamps you store.", G, [F], "feedback", "own"),
    ("I work mostly in Go and TypeScript.", G, [U], "user", "own"),
    ("Every PR needs a linked issue in this repo.", P, [F, PR], "feedback", "own"),
    ("Don't use lodash in the frontend; we removed it to cut bundle size.", P, [PR, F], "project", "own"),
    ("Please always explain the trade-offs before you pick a library.", G, [F], "feedback", "own"),
    ("I hate long functions; keep them under 40 lines.", G, [U, F], "user", "own"),
    ("We pin all dependencies to exact versions.", P, [PR], "project", "own"),
    ("Our release notes are written by hand, not generated.", P, [PR], "project", "own"),
    ("Note that the admin panel is only used internally, so accessibility is lower priority there.", P, [PR], "project", "own"),
    ("In all my projects, use 2-space indentation for YAML.", G, [F], "feedback", "own"),
    ("The mobile team owns the mobile API routes; don't change them without asking.", P, [PR, F], "project", "own"),
    ("We never store raw passwords, only Argon2 hashes.", P, [PR], "project", "own"),
]


def split_of(text: str) -> str:
    return "dev" if hashlib.sha256(text.encode()).digest()[0] % 2 == 0 else "test"


def rows() -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for text, group, source in NOT_DURABLE:
        out.append({"text": text, "durable": False, "scope": None, "types": [], "group": group, "source": source})
    for text, scope, types, group, source in DURABLE:
        out.append({"text": text, "durable": True, "scope": scope, "types": types, "group": group, "source": source})
    for text, group, source in HOLDOUT_NOT_DURABLE:
        out.append({"text": text, "durable": False, "scope": None, "types": [], "group": group, "source": source,
                    "split": "holdout"})
    for text, scope, types, group, source in HOLDOUT_DURABLE:
        out.append({"text": text, "durable": True, "scope": scope, "types": types, "group": group, "source": source,
                    "split": "holdout"})
    seen: set[str] = set()
    for i, r in enumerate(out):
        assert r["text"] not in seen, r["text"]
        seen.add(str(r["text"]))
        r["id"] = f"s{i + 1:03d}"
        r.setdefault("split", split_of(str(r["text"])))
    return [{k: r[k] for k in ("id", "text", "durable", "scope", "types", "group", "source", "split")} for r in out]


def main() -> None:
    data = rows()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in data), encoding="utf-8")
    durable = sum(1 for r in data if r["durable"])
    splits = {k: sum(1 for r in data if r["split"] == k) for k in ("dev", "test", "holdout")}
    print(f"{OUT}: {len(data)} statements, {durable} durable, {len(data) - durable} not; {splits}")


if __name__ == "__main__":
    main()

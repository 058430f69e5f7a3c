"""Secret redaction: recall, false positives and speed of candidate detectors (issue 16).

    .venv/bin/python bench/bench_secrets.py                  # measure, print, update RESULTS.md
    .venv/bin/python bench/bench_secrets.py --write-corpus   # regenerate tests/data/secrets_corpus.jsonl
    .venv/bin/python bench/bench_secrets.py --no-results     # measure and print only
    .venv/bin/python bench/bench_secrets.py --round 23       # issue 23's set: main's redactor against this one

The corpus (tests/data/secrets_corpus.jsonl) is generated here from a fixed seed, so it is
reproducible: every value is synthetic, random characters in the shape of the real format,
never a live credential. Each entry is one *context* (a user message, a tool output such as an
`env` dump, a config file or a shell command, an assistant reply, a JSON transcript line, a URL):

* `kind: "secret"` entries label the secret span(s) (`spans`, character offsets into `text`;
  `secrets` repeats them as text for readers) that must disappear, and `keep`, context around
  them that a good redaction leaves (the variable name, the user name, the host);
* `kind: "lookalike"` entries must come out unchanged: UUIDs, git SHAs, base64 images,
  content hashes, npm integrity strings, Anthropic message and request ids, thinking-block
  signatures, identifiers, file paths, placeholders, and code that *refers* to a secret.

Placeholders, decided here and tested in tests/redact/test_redact.py: a value that is a template
(`<password>`, `${TOKEN}`, `{{ secrets.X }}`, `$VAR`), a mask (`xxx`, `****`, `...`) or a
well-known dummy (`changeme`, `your-api-key-here`, `YOUR_API_KEY`) is not a secret and must
survive: redacting it would hide what the text is about and protects nothing.

Candidates:

* `memd-before`: memd/redact/redactor.py as of commit 44479e2 (read from git), before issue 16;
* `detect-secrets`: Yelp's detect-secrets, every plugin and its default filters, line by line;
* `credsweeper`: Samsung's CredSweeper with its default rules and ML validation;
* `gitleaks-rules`: gitleaks' published rules (config/gitleaks.toml, MIT, 222 rules) run by a
  small Python engine here: keywords pre-check, regex, secret group, entropy, allowlists;
* `memd`: memd/redact/redactor.py as it is now.

The external detectors are optional: they are imported if installed (they are not memd
dependencies). To measure them, install them in a side virtualenv and point
`MEMD_BENCH_SITE` at its site-packages, e.g.

    python3.11 -m venv /tmp/secbench && /tmp/secbench/bin/pip install detect-secrets==1.5.0 credsweeper==1.19.5
    MEMD_BENCH_SITE=/tmp/secbench/lib/python3.11/site-packages \\
    MEMD_GITLEAKS_TOML=/path/to/gitleaks/config/gitleaks.toml .venv/bin/python bench/bench_secrets.py

A candidate *recalls* a secret span when its findings cover every character of it; a
look-alike is a *false positive* when any finding touches it.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import json
import math
import os
import platform
import random
import re
import shutil
import statistics
import string
import subprocess
import sys
import sysconfig
import tempfile
import time
import tomllib
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from memd.redact import redactor as mod

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.common import CORPUS, write_section  # noqa: E402

CORPUS_FILE = REPO / "tests" / "data" / "secrets_corpus.jsonl"
CORPUS_23_FILE = REPO / "tests" / "data" / "secrets_corpus_23.jsonl"
RESULTS = REPO / "bench" / "RESULTS.md"
BEFORE_COMMIT = "44479e2"  # the last commit with the pre-issue-16 rules
SEED = 16

Span = tuple[int, int]

# --- corpus ------------------------------------------------------------------------------


class Gen:
    """Random characters in the shapes of real credentials, from one seeded generator."""

    def __init__(self, seed: int) -> None:
        self.rnd = random.Random(seed)

    def pick(self, alphabet: str, n: int) -> str:
        return "".join(self.rnd.choice(alphabet) for _ in range(n))

    def hex(self, n: int) -> str:
        return self.pick("0123456789abcdef", n)

    def alnum(self, n: int) -> str:
        return self.pick(string.ascii_letters + string.digits, n)

    def upper_alnum(self, n: int) -> str:
        return self.pick(string.ascii_uppercase + string.digits, n)

    def letters(self, n: int) -> str:
        return self.pick(string.ascii_letters, n)

    def b64url(self, n: int) -> str:
        return self.pick(string.ascii_letters + string.digits + "-_", n)

    def b64(self, nbytes: int) -> str:
        return base64.b64encode(self.rnd.randbytes(nbytes)).decode()

    def digits(self, n: int) -> str:
        return str(self.rnd.randint(1, 9)) + self.pick(string.digits, n - 1)

    def uuid(self) -> str:
        h = self.hex(32)
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}"

    def password(self, n: int = 14) -> str:
        """A human-made password: letters, digits and a few symbols, never a dictionary word."""
        core = self.pick(string.ascii_letters + string.digits, n - 2)
        return core[:4] + self.rnd.choice("!#%&*+-.@^_~") + core[4:] + self.rnd.choice(string.digits)


def _pem(g: Gen, kind: str = "RSA ") -> str:
    body = g.b64(600)
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return "\n".join([f"-----BEGIN {kind}PRIVATE KEY-----", *lines, f"-----END {kind}PRIVATE KEY-----"])


@dataclass
class Entry:
    id: str
    kind: str  # "secret" | "lookalike"
    fmt: str
    placement: str
    text: str
    secrets: list[str] = field(default_factory=list)
    keep: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        spans: list[list[int]] = []  # as JSON reads it back
        for s in self.secrets:
            start = self.text.find(s)
            if start < 0:
                raise ValueError(f"{self.id}: secret not in text: {s[:20]}")
            spans.append([start, start + len(s)])
        for k in self.keep:
            if k not in self.text:
                raise ValueError(f"{self.id}: keep not in text: {k}")
        return {
            "id": self.id,
            "kind": self.kind,
            "format": self.fmt,
            "placement": self.placement,
            "text": self.text,
            "spans": spans,
            "secrets": self.secrets,
            "keep": self.keep,
        }


def _as_transcript_line(g: Gen, entry: Entry, role: str = "user") -> Entry:
    """The same context as a raw JSONL transcript record: newlines and quotes JSON-escaped."""
    if role == "user":
        record: dict[str, Any] = {"type": "user", "message": {"role": "user", "content": entry.text}}
    elif role == "tool":
        record = {
            "type": "user",
            "message": {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_01" + g.alnum(22), "content": entry.text}],
            },
        }
    else:
        record = {
            "type": "assistant",
            "message": {"role": "assistant", "id": "msg_01" + g.alnum(22), "content": [{"type": "text", "text": entry.text}]},
        }
    record["uuid"] = g.uuid()
    record["timestamp"] = "2026-02-12T16:02:25.227Z"
    esc = lambda s: json.dumps(s, ensure_ascii=False)[1:-1]  # noqa: E731
    return Entry(
        entry.id + "-jsonl",
        entry.kind,
        entry.fmt,
        "jsonl:" + entry.placement,
        json.dumps(record, ensure_ascii=False),
        [esc(s) for s in entry.secrets],
        [esc(k) for k in entry.keep],
    )


def build_corpus(seed: int = SEED) -> list[Entry]:
    g = Gen(seed)
    out: list[Entry] = []

    def sec(id_: str, fmt: str, placement: str, text: str, secrets: list[str], keep: Iterable[str] = ()) -> Entry:
        e = Entry(id_, "secret", fmt, placement, text, list(secrets), list(keep))
        out.append(e)
        return e

    def look(id_: str, fmt: str, placement: str, text: str) -> Entry:
        e = Entry(id_, "lookalike", fmt, placement, text)
        out.append(e)
        return e

    # --- Slack -----------------------------------------------------------------------------
    hook = f"T{g.upper_alnum(8)}/B{g.upper_alnum(10)}/{g.alnum(24)}"
    sec("slack-webhook-user", "slack-webhook", "user",
        f"alerts go to https://hooks.slack.com/services/{hook} — can you wire the deploy job to post there?",
        [hook], ["hooks.slack.com"])
    hook2 = f"T{g.upper_alnum(10)}/B{g.upper_alnum(10)}/{g.alnum(24)}"
    e = sec("slack-webhook-config", "slack-webhook", "tool:config",
            f'{{\n  "channel": "#deploys",\n  "webhook_url": "https://hooks.slack.com/services/{hook2}",\n  "username": "ci"\n}}',
            [hook2], ['"channel": "#deploys"'])
    out.append(_as_transcript_line(g, e, "tool"))
    hook3 = f"T{g.upper_alnum(9)}/B{g.upper_alnum(11)}/{g.alnum(24)}"
    sec("slack-webhook-assistant", "slack-webhook", "assistant",
        f"I added the notifier. It posts with `curl -X POST -d @payload.json https://hooks.slack.com/services/{hook3}`, "
        "so the channel gets one message per release.",
        [hook3], ["curl -X POST"])
    xapp = f"xapp-1-A0{g.upper_alnum(9)}-{g.digits(13)}-{g.hex(64)}"
    sec("slack-xapp-env", "slack-app-token", "tool:env",
        f"HOME=/home/alice\nSHELL=/bin/bash\nSLACK_APP_TOKEN={xapp}\nLANG=en_US.UTF-8",
        [xapp], ["SLACK_APP_TOKEN=", "LANG=en_US.UTF-8"])
    xapp2 = f"xapp-1-A0{g.upper_alnum(9)}-{g.digits(13)}-{g.hex(64)}"
    sec("slack-xapp-user", "slack-app-token", "user",
        f"socket mode needs the app-level token, here it is: {xapp2}", [xapp2], ["socket mode"])
    xoxb = f"xoxb-{g.digits(12)}-{g.digits(13)}-{g.alnum(24)}"
    sec("slack-bot-yaml", "slack-bot-token", "tool:config",
        f"slack:\n  bot_token: {xoxb}\n  channel: C0123ABCD\n", [xoxb], ["bot_token:", "channel: C0123ABCD"])

    # --- Azure -----------------------------------------------------------------------------
    acct_key = g.b64(64)
    conn = f"DefaultEndpointsProtocol=https;AccountName=prodassets;AccountKey={acct_key};EndpointSuffix=core.windows.net"
    e = sec("azure-conn-env", "azure-storage-key", "tool:config",
            f'AZURE_STORAGE_CONNECTION_STRING="{conn}"\nAZURE_CONTAINER=uploads\n',
            [acct_key], ["AccountName=prodassets", "AZURE_CONTAINER=uploads"])
    out.append(_as_transcript_line(g, e, "tool"))
    acct_key2 = g.b64(64)
    sec("azure-conn-appsettings", "azure-storage-key", "tool:config",
        '{\n  "ConnectionStrings": {\n    "Blob": "DefaultEndpointsProtocol=https;AccountName=contoso;'
        f'AccountKey={acct_key2};EndpointSuffix=core.windows.net"\n  }}\n}}',
        [acct_key2], ['"ConnectionStrings"'])
    sig = g.b64(32).replace("+", "%2B").replace("/", "%2F").replace("=", "%3D")
    sas = (f"https://prodassets.blob.core.windows.net/uploads/report.pdf?sv=2022-11-02&ss=b&srt=o&sp=r"
           f"&se=2026-03-01T00:00:00Z&st=2026-02-01T00:00:00Z&spr=https&sig={sig}")
    sec("azure-sas-url", "azure-sas", "url", f"download it with: curl -o report.pdf '{sas}'", [sig], ["prodassets.blob.core.windows.net"])

    # --- package registries -------------------------------------------------------------------
    npm = "npm_" + g.alnum(36)
    sec("npm-npmrc", "npm-token", "tool:config",
        f"$ cat ~/.npmrc\n//registry.npmjs.org/:_authToken={npm}\nsave-exact=true\n", [npm], ["//registry.npmjs.org/:_authToken=", "save-exact=true"])
    npm2 = "npm_" + g.alnum(36)
    e = sec("npm-user", "npm-token", "user", f"publish with my automation token {npm2} please", [npm2], ["publish with my"])
    out.append(_as_transcript_line(g, e, "user"))
    pypi = "pypi-AgEIcHlwaS5vcmc" + g.b64url(160)
    sec("pypi-pypirc", "pypi-token", "tool:config",
        f"[distutils]\nindex-servers = pypi\n\n[pypi]\nusername = __token__\npassword = {pypi}\n", [pypi], ["username = __token__"])
    pypi2 = "pypi-AgEIcHlwaS5vcmc" + g.b64url(140)
    sec("pypi-twine", "pypi-token", "tool:shell",
        f"$ twine upload -u __token__ -p {pypi2} dist/*\nUploading distributions to https://upload.pypi.org/legacy/",
        [pypi2], ["twine upload -u __token__ -p", "dist/*"])

    # --- Twilio, SendGrid, Mailgun ----------------------------------------------------------------
    tw_sid, tw_tok = "AC" + g.hex(32), g.hex(32)
    sec("twilio-python", "twilio-auth-token", "tool:config",
        f'from twilio.rest import Client\n\naccount_sid = "{tw_sid}"\nauth_token = "{tw_tok}"\nclient = Client(account_sid, auth_token)\n',
        [tw_tok], ["client = Client(account_sid, auth_token)"])
    tw_key = "SK" + g.hex(32)
    tw_secret = g.alnum(32)
    sec("twilio-api-key-user", "twilio-api-key", "user",
        f"the Twilio API key is {tw_key} and its secret is {tw_secret}", [tw_key, tw_secret], ["the Twilio API key is"])
    tw_tok2 = g.hex(32)
    sec("twilio-env", "twilio-auth-token", "tool:env", f"TWILIO_ACCOUNT_SID=AC{g.hex(32)}\nTWILIO_AUTH_TOKEN={tw_tok2}\n", [tw_tok2], ["TWILIO_AUTH_TOKEN="])
    sg = f"SG.{g.b64url(22)}.{g.b64url(43)}"
    e = sec("sendgrid-python", "sendgrid", "assistant",
            f"Here's the mailer:\n\n```python\nsg = SendGridAPIClient('{sg}')\nsg.send(message)\n```",
            [sg], ["sg = SendGridAPIClient("])
    out.append(_as_transcript_line(g, e, "assistant"))
    mg = "key-" + g.hex(32)
    sec("mailgun-requests", "mailgun", "tool:config",
        f'requests.post(\n    "https://api.mailgun.net/v3/mg.example.com/messages",\n    auth=("api", "{mg}"),\n    data={{"to": to}},\n)',
        [mg], ['auth=("api", '])
    mg2 = f"{g.hex(32)}-{g.hex(8)}-{g.hex(8)}"
    sec("mailgun-env", "mailgun", "tool:env", f"MAILGUN_DOMAIN=mg.example.com\nMAILGUN_API_KEY={mg2}\n", [mg2], ["MAILGUN_DOMAIN=mg.example.com"])
    mg3 = f"{g.hex(32)}-{g.hex(8)}-{g.hex(8)}"
    sec("mailgun-curl", "mailgun", "tool:shell",
        f"curl -s --user 'api:{mg3}' https://api.mailgun.net/v3/mg.example.com/messages -F to=bob@example.com",
        [mg3], ["curl -s --user 'api:", "https://api.mailgun.net/v3/mg.example.com/messages"])

    # --- ML platforms --------------------------------------------------------------------------
    hf = "hf_" + g.letters(34)
    sec("hf-cli", "huggingface", "tool:shell", f"$ huggingface-cli login --token {hf}\nLogin successful", [hf], ["Login successful"])
    hf2 = "hf_" + g.letters(34)
    e = sec("hf-python", "huggingface", "user",
            f'why does this 401?\n\nfrom huggingface_hub import login\nlogin(token="{hf2}")', [hf2], ["from huggingface_hub import login"])
    out.append(_as_transcript_line(g, e, "user"))
    dapi = "dapi" + g.hex(32)
    sec("databricks-cfg", "databricks", "tool:config",
        f"$ cat ~/.databrickscfg\n[DEFAULT]\nhost = https://adb-1234567890123456.7.azuredatabricks.net\ntoken = {dapi}\n",
        [dapi], ["host = https://adb-1234567890123456.7.azuredatabricks.net"])
    dapi2 = "dapi" + g.hex(32) + "-2"
    sec("databricks-assistant", "databricks", "assistant",
        f"Set `DATABRICKS_HOST` and use the token `{dapi2}` you pasted; the job then authenticates.", [dapi2], ["DATABRICKS_HOST"])

    # --- commerce, chat bots --------------------------------------------------------------------
    shp = "shpat_" + g.hex(32)
    sec("shopify-js", "shopify", "tool:config",
        f"const shopify = shopifyApi({{\n  adminApiAccessToken: '{shp}',\n  apiVersion: '2024-01',\n}});",
        [shp], ["apiVersion: '2024-01'"])
    shp2 = "shpat_" + g.hex(32)
    sec("shopify-curl", "shopify", "tool:shell",
        f'curl -H "X-Shopify-Access-Token: {shp2}" https://my-shop.myshopify.com/admin/api/2024-01/products.json',
        [shp2], ["https://my-shop.myshopify.com/admin/api/2024-01/products.json"])
    shpss = "shpss_" + g.hex(32)
    sec("shopify-secret-user", "shopify", "user", f"app secret: {shpss}", [shpss], ["app secret:"])
    discord = f"{base64.b64encode(g.digits(19).encode()).decode().rstrip('=')}.{g.b64url(6)}.{g.b64url(38)}"
    e = sec("discord-python", "discord-bot-token", "tool:config",
            f"import discord\n\nclient = discord.Client(intents=intents)\nclient.run('{discord}')\n", [discord], ["import discord"])
    out.append(_as_transcript_line(g, e, "tool"))
    discord2 = f"{base64.b64encode(g.digits(18).encode()).decode().rstrip('=')}.{g.b64url(6)}.{g.b64url(27)}"
    sec("discord-env", "discord-bot-token", "tool:env", f"DISCORD_BOT_TOKEN={discord2}\nDISCORD_GUILD=8123\n", [discord2], ["DISCORD_GUILD=8123"])
    tg = f"{g.digits(10)}:AA{g.b64url(33)}"
    sec("telegram-url", "telegram-bot-token", "tool:shell",
        f"curl 'https://api.telegram.org/bot{tg}/sendMessage?chat_id=-100123&text=deployed'", [tg], ["https://api.telegram.org/bot", "/sendMessage?chat_id=-100123"])
    tg2 = f"{g.digits(9)}:AA{g.b64url(33)}"
    sec("telegram-user", "telegram-bot-token", "user", f"BotFather gave me {tg2}, hook it up", [tg2], ["BotFather gave me"])

    # --- PaaS -----------------------------------------------------------------------------
    hrku = "HRKU-AA" + g.b64url(58)
    sec("heroku-cli", "heroku", "tool:shell",
        f"$ heroku auth:token\n ›   Warning: token will expire 03/01/2027\n{hrku}\n", [hrku], ["heroku auth:token"])
    hk_uuid = g.uuid()
    sec("heroku-env", "heroku", "tool:env", f"HEROKU_API_KEY={hk_uuid}\nHEROKU_APP=api-prod\n", [hk_uuid], ["HEROKU_APP=api-prod"])
    dop = "dop_v1_" + g.hex(64)
    sec("digitalocean-cli", "digitalocean", "tool:shell", f"doctl auth init --access-token {dop}", [dop], ["doctl auth init"])
    dop2 = "dop_v1_" + g.hex(64)
    sec("digitalocean-tf", "digitalocean", "tool:config",
        f'variable "region" {{ default = "nyc3" }}\n\nprovider "digitalocean" {{\n  token = "{dop2}"\n}}\n', [dop2], ['provider "digitalocean"'])

    # --- Datadog ------------------------------------------------------------------------------
    dd = g.hex(32)
    sec("datadog-yaml", "datadog", "tool:config",
        f"## datadog.yaml\nsite: datadoghq.eu\napi_key: {dd}\nlogs_enabled: true\n", [dd], ["site: datadoghq.eu", "logs_enabled: true"])
    dd_api, dd_app = g.hex(32), g.hex(40)
    sec("datadog-curl", "datadog", "tool:shell",
        f'curl -X GET "https://api.datadoghq.com/api/v1/validate" -H "DD-API-KEY: {dd_api}" -H "DD-APPLICATION-KEY: {dd_app}"',
        [dd_api, dd_app], ["https://api.datadoghq.com/api/v1/validate"])
    dd2 = g.hex(32)
    sec("datadog-user", "datadog", "user", f"our datadog api key is {dd2} if you need to test the agent", [dd2], ["if you need to test the agent"])

    # --- Google ---------------------------------------------------------------------------------
    gocspx = "GOCSPX-" + g.b64url(28)
    cid = f"{g.digits(12)}-{g.pick(string.ascii_lowercase + string.digits, 32)}.apps.googleusercontent.com"
    e = sec("google-oauth-json", "google-oauth-secret", "tool:config",
            f'{{"installed":{{"client_id":"{cid}","project_id":"tidy-atlas-4321",'
            f'"auth_uri":"https://accounts.google.com/o/oauth2/auth","client_secret":"{gocspx}",'
            '"redirect_uris":["http://localhost"]}}', [gocspx], ['"project_id":"tidy-atlas-4321"'])
    out.append(_as_transcript_line(g, e, "tool"))
    gocspx2 = "GOCSPX-" + g.b64url(28)
    sec("google-oauth-user", "google-oauth-secret", "user", f"client secret {gocspx2} for the desktop app", [gocspx2], ["for the desktop app"])
    ya29 = "ya29.a0" + g.b64url(150)
    sec("google-access-token", "google-oauth-token", "tool:shell",
        f"$ gcloud auth print-access-token\n{ya29}\n", [ya29], ["gcloud auth print-access-token"])
    sa_pem = _pem(g, "")
    sa = json.dumps({"type": "service_account", "project_id": "tidy-atlas-4321", "private_key_id": g.hex(40),
                     "private_key": sa_pem + "\n", "client_email": "ci@tidy-atlas-4321.iam.gserviceaccount.com"}, indent=2)
    sec("gcp-service-account", "private-key", "tool:config", sa, [json.dumps(sa_pem)[1:-1]], ['"client_email"'])

    # --- passwords in context -----------------------------------------------------------------------------
    pw = g.password()
    sec("password-compose", "password", "tool:config",
        f"services:\n  db:\n    image: postgres:16\n    environment:\n      POSTGRES_USER: app\n      POSTGRES_PASSWORD: {pw}\n",
        [pw], ["POSTGRES_USER: app"])
    pw = g.password()
    e = sec("password-yaml-unquoted", "password", "tool:config",
            f"production:\n  adapter: postgresql\n  username: deploy\n  password: {pw}\n  host: db.internal\n",
            [pw], ["username: deploy", "host: db.internal"])
    out.append(_as_transcript_line(g, e, "tool"))
    pw = g.password(12)
    sec("password-properties", "password", "tool:config",
        f"spring.datasource.url=jdbc:postgresql://db:5432/app\nspring.datasource.username=app\nspring.datasource.password={pw}\n",
        [pw], ["spring.datasource.username=app"])
    pw = g.password(10)
    sec("password-mysql-cli", "password", "tool:shell", f"$ mysql -h 127.0.0.1 -u root -p{pw} shop < dump.sql", [pw], ["mysql -h 127.0.0.1 -u root -p", "shop < dump.sql"])
    pw = g.password(12)
    sec("password-mysqldump-quoted", "password", "tool:shell", f"mysqldump -uroot -p'{pw}' --single-transaction shop > shop.sql", [pw], ["--single-transaction shop > shop.sql"])
    pw = g.password(12)
    sec("password-curl-u", "basic-auth", "tool:shell", f"curl -u admin:{pw} https://jenkins.example.com/api/json", [pw], ["curl -u admin:", "https://jenkins.example.com/api/json"])
    pw = g.password(16)
    e = sec("password-curl-user", "basic-auth", "assistant",
            f'You can check the registry with `curl --user "ci-bot:{pw}" https://registry.example.com/v2/_catalog`.',
            [pw], ["ci-bot", "https://registry.example.com/v2/_catalog"])
    out.append(_as_transcript_line(g, e, "assistant"))
    pw = g.password(12)
    sec("password-docker-login", "password", "tool:shell", f"docker login -u deploy --password {pw} registry.example.com", [pw], ["registry.example.com"])
    pw = g.password(12)
    sec("password-libpq", "password", "tool:shell", f'psql "host=db.internal port=5432 user=app password={pw} dbname=app sslmode=require"',
        [pw], ["dbname=app sslmode=require"])
    pw = g.password(12)
    sec("password-netrc", "password", "tool:config", f"machine api.example.com\n  login alice\n  password {pw}\n", [pw], ["login alice"])
    pw = g.password(12)
    sec("password-user-prose", "password", "user", f"the staging db password is {pw} — use it for the migration", [pw], ["use it for the migration"])
    pw = g.password(12)
    sec("password-sshpass", "password", "tool:shell", f"sshpass -p '{pw}' ssh deploy@10.0.0.12 'systemctl restart api'", [pw], ["ssh deploy@10.0.0.12"])
    pw = g.password(12)
    sec("password-url", "url-password", "tool:env", f"DATABASE_URL=postgres://app:{pw}@db.internal:5432/app\n", [pw], ["postgres://app:"])
    pw = g.password(12)
    sec("password-ini", "password", "tool:config", f"[mysql]\nuser = backup\npassword = {pw}\nhost = localhost\n", [pw], ["user = backup"])
    k8s = base64.b64encode(g.password(16).encode()).decode()
    sec("k8s-secret-data", "password", "tool:config",
        f"apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\ntype: Opaque\ndata:\n  password: {k8s}\n", [k8s], ["kind: Secret"])

    # --- AWS ------------------------------------------------------------------------------
    aws_secret = g.pick(string.ascii_letters + string.digits + "/+", 40)
    sec("aws-configure-set", "aws-secret-access-key", "tool:shell",
        f"aws configure set aws_secret_access_key {aws_secret} --profile ci", [aws_secret], ["--profile ci"])
    aws_secret = g.pick(string.ascii_letters + string.digits + "/+", 40)
    sec("aws-cli-flag", "aws-secret-access-key", "tool:shell",
        f"s3cmd --access_key=AKIA{g.upper_alnum(16)} --secret_key={aws_secret} ls s3://backups", [aws_secret], ["ls s3://backups"])
    aws_secret = g.pick(string.ascii_letters + string.digits + "/+", 40)
    aws_id = "AKIA" + g.upper_alnum(16)
    sec("aws-credentials-file", "aws-secret-access-key", "tool:config",
        f"[default]\naws_access_key_id = {aws_id}\naws_secret_access_key = {aws_secret}\nregion = eu-west-1\n",
        [aws_id, aws_secret], ["region = eu-west-1"])
    aws_secret = g.pick(string.ascii_letters + string.digits + "/+", 40)
    sec("aws-user-prose", "aws-secret-access-key", "user",
        f"access key AKIA{g.upper_alnum(16)}, secret key {aws_secret}, region us-east-1", [aws_secret], ["region us-east-1"])

    # --- tokens of well-known prefixes already covered, in new placements -----------------------------
    ghs = "ghs_" + g.alnum(36)
    sec("github-remote-url", "github", "tool:shell",
        f"$ git remote -v\norigin\thttps://x-access-token:{ghs}@github.com/acme/api.git (fetch)", [ghs], ["github.com/acme/api.git"])
    ant = "sk-ant-api03-" + g.b64url(93) + "AA"
    e = sec("anthropic-assistant-echo", "anthropic", "assistant",
            f"I exported `ANTHROPIC_API_KEY={ant}` in your shell profile.", [ant], ["ANTHROPIC_API_KEY="])
    out.append(_as_transcript_line(g, e, "assistant"))
    glrt = "glrt-" + g.b64url(20)
    sec("gitlab-runner", "gitlab", "tool:shell",
        f"gitlab-runner register --url https://gitlab.example.com --token {glrt} --executor docker", [glrt], ["--executor docker"])
    hvs = "hvs.CAESI" + g.b64url(86)
    sec("vault-login", "vault", "tool:shell", f"$ vault login {hvs}\nSuccess! You are now authenticated.", [hvs], ["Success! You are now authenticated."])
    whsec = "whsec_" + g.alnum(32)
    sec("stripe-webhook-secret", "stripe", "user", f"the signing secret for the endpoint is {whsec}", [whsec], ["for the endpoint"])
    jwt = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
           + base64.urlsafe_b64encode(json.dumps({"sub": g.uuid(), "exp": 1767225600}).encode()).decode().rstrip("=")
           + "." + g.b64url(43))
    sec("jwt-cookie", "jwt", "tool:shell", f"curl -b 'session={jwt}' https://app.example.com/api/me", [jwt], ["https://app.example.com/api/me"])
    drf = g.hex(40)
    sec("token-header", "auth-header", "tool:shell",
        f'curl -H "Authorization: Token {drf}" https://api.example.com/v1/items/', [drf], ["https://api.example.com/v1/items/"])
    xauth = g.hex(37)
    sec("cloudflare-global-key", "auth-header", "tool:shell",
        f'curl https://api.cloudflare.com/client/v4/zones -H "X-Auth-Email: ops@example.com" -H "X-Auth-Key: {xauth}"',
        [xauth], ["X-Auth-Email: ops@example.com"])
    gl_priv = "glpat-" + g.b64url(20)
    sec("gitlab-private-token-header", "gitlab", "tool:shell",
        f'curl --header "PRIVATE-TOKEN: {gl_priv}" "https://gitlab.example.com/api/v4/projects"', [gl_priv], ["https://gitlab.example.com/api/v4/projects"])
    lin = "lin_api_" + g.alnum(40)
    sec("linear-key", "linear", "user", f"use {lin} for the Linear sync", [lin], ["for the Linear sync"])
    pmak = f"PMAK-{g.hex(24)}-{g.hex(34)}"
    sec("postman-key", "postman", "tool:env", f"POSTMAN_API_KEY={pmak}\n", [pmak], ["POSTMAN_API_KEY="])
    ntn = "ntn_" + g.digits(11) + g.alnum(35)
    sec("notion-token", "notion", "tool:config", f'const notion = new Client({{ auth: "{ntn}" }});', [ntn], ["const notion = new Client("])
    sec("openai-proj-yaml", "openai", "tool:config",
        (oa := "sk-proj-" + g.b64url(74) + "T3BlbkFJ" + g.b64url(74)) and f"llm:\n  provider: openai\n  api_key: {oa}\n",
        [oa], ["provider: openai"])
    pem = _pem(g, "OPENSSH ")
    sec("ssh-key-cat", "private-key", "tool:shell", f"$ cat ~/.ssh/id_ed25519\n{pem}\n$ ls", [pem], ["$ ls"])
    kube_key = base64.b64encode(_pem(g, "EC ").encode()).decode()
    kube_ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n" + g.b64(300).encode() + b"\n-----END CERTIFICATE-----\n").decode()
    sec("kubeconfig-client-key", "private-key", "tool:config",
        f"users:\n- name: admin\n  user:\n    client-certificate-data: {kube_ca}\n    client-key-data: {kube_key}\n",
        [kube_key], ["client-certificate-data: " + kube_ca[:40]])
    api_tok = g.alnum(40)
    sec("generic-cli-token", "token-flag", "tool:shell", f"./deploy.sh --env prod --api-token {api_tok} --yes", [api_tok], ["--env prod", "--yes"])
    sec("generic-query-token", "url-token", "url",
        (qt := g.alnum(32)) and f"GET https://api.example.com/v2/export?format=csv&access_token={qt}&page=2 -> 200",
        [qt], ["format=csv", "&page=2"])
    sec("generic-json-secret", "secret-assignment", "tool:config",
        (cs := g.b64url(32)) and f'{{"auth": {{"clientId": "web-app", "clientSecret": "{cs}"}}}}', [cs], ['"clientId": "web-app"'])

    pw = g.password(14)
    sec("k8s-from-literal", "password", "tool:shell",
        f"kubectl create secret generic db-creds --from-literal=username=app --from-literal=password={pw}",
        [pw], ["--from-literal=username=app"])
    pw = g.password(14)
    sec("docker-run-env", "password", "tool:shell",
        f"docker run -d -e POSTGRES_PASSWORD={pw} -p 5432:5432 postgres:16", [pw], ["-p 5432:5432 postgres:16"])
    dj = "django-insecure-" + g.pick(string.ascii_lowercase + string.digits + "!@#$%^&*(-_=+)", 50).replace("'", "")
    sec("django-secret-key", "secret-assignment", "tool:config",
        f"DEBUG = True\nSECRET_KEY = '{dj}'\nALLOWED_HOSTS = []\n", [dj], ["ALLOWED_HOSTS = []"])

    # --- look-alikes ------------------------------------------------------------------------
    u1, u2 = g.uuid(), g.uuid()
    look("uuid-json", "uuid", "jsonl",
         f'{{"parentUuid":"{u1}","isSidechain":false,"sessionId":"{u2}","type":"user","uuid":"{g.uuid()}"}}')
    look("uuid-prose", "uuid", "assistant", f"The failing job is {g.uuid()}; its parent run was {g.uuid()}.")
    look("anthropic-ids", "message-ids", "jsonl",
         f'{{"message":{{"id":"msg_01{g.alnum(22)}","type":"message","usage":{{"input_tokens":1200,"cache_creation_input_tokens":5821,'
         f'"cache_read_input_tokens":0,"output_tokens":87}}}},"requestId":"req_011C{g.alnum(20)}",'
         f'"toolUseID":"toolu_01{g.alnum(22)}"}}')
    look("thinking-signature", "signature", "jsonl",
         f'{{"type":"thinking","thinking":"Let me check the config.","signature":"{g.b64(300)}"}}')
    sha1, sha2 = g.hex(40), g.hex(40)
    look("git-log", "git-sha", "tool:shell",
         f"$ git log -2 --format='%H %s'\n{sha1} Fix token refresh race\n{sha2} Add password reset form\n$ git rev-parse HEAD\n{sha1}")
    look("github-api-sha", "git-sha", "tool:config",
         f'{{"sha": "{g.hex(40)}", "node_id": "C_kwDOAbc123", "commit": {{"tree": {{"sha": "{g.hex(40)}"}}}}}}')
    look("data-image", "base64-image", "jsonl",
         f'{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":"{g.b64(900)}"}}}}')
    look("data-url", "base64-image", "user", f'<img src="data:image/png;base64,{g.b64(600)}" alt="chart">')
    look("docker-digest", "content-hash", "tool:shell",
         f"Digest: sha256:{g.hex(64)}\nStatus: Downloaded newer image for python@sha256:{g.hex(64)}")
    look("npm-integrity", "npm-integrity", "tool:config",
         f'"node_modules/left-pad": {{\n  "version": "1.3.0",\n  "resolved": "https://registry.npmjs.org/left-pad/-/left-pad-1.3.0.tgz",\n'
         f'  "integrity": "sha512-{g.b64(64)}"\n}}')
    look("pip-hashes", "content-hash", "tool:config",
         f"requests==2.32.3 \\\n    --hash=sha256:{g.hex(64)} \\\n    --hash=sha256:{g.hex(64)}")
    look("md5sum", "content-hash", "tool:shell", f"$ md5sum dist/*.tar.gz\n{g.hex(32)}  dist/memd-0.1.0.tar.gz")
    look("identifiers", "identifier", "assistant",
         "I renamed `refreshAccessTokenIfExpiredOrMissing` to `PasswordResetTokenGeneratorService.issueSingleUseToken` "
         "and `getSecretManagerServiceClientForProject` now caches; `tokenizer.decode(token_ids)` is unchanged.")
    look("file-paths", "path", "tool:shell",
         "$ ls ~/.aws/credentials /home/alice/.config/gcloud/application_default_credentials.json "
         "src/auth/tokens/refresh_token_store.py C:\\Users\\bob\\.ssh\\id_rsa.pub")
    look("npm-env-vars", "env-names", "tool:env",
         "npm_config_cache=/home/alice/.npm\nnpm_lifecycle_event=test\nnpm_package_json=/work/app/package.json\n"
         "HF_HOME=/root/.cache/huggingface\nTOKENIZERS_PARALLELISM=false\nPWD=/work/app\nOLDPWD=/work\n")
    look("token-counts", "counts", "tool:config",
         'max_tokens=4096\n{"input_tokens": 1200, "token_count": 12, "max_output_tokens": 8192}\nTOKEN_EXPIRY_SECONDS=3600')
    look("placeholder-angle", "placeholder", "tool:config", 'db:\n  user: app\n  password: "<password>"\napi_key: <your-api-key>\n')
    look("placeholder-mask", "placeholder", "tool:env", "API_KEY=xxx\nDB_PASSWORD=********\nSECRET_TOKEN=...\n")
    look("placeholder-words", "placeholder", "assistant",
         'Put `export ANTHROPIC_API_KEY="your-api-key-here"` in `.env`; locally `password: changeme` is fine, '
         'and `{"apiKey": "YOUR_API_KEY"}` in the example.')
    look("placeholder-templates", "placeholder", "tool:config",
         "env:\n  NPM_TOKEN: ${{ secrets.NPM_TOKEN }}\n  DB_PASSWORD: ${DB_PASSWORD:?required}\n"
         "  password: '{{ vault_db_password }}'\n  API_KEY: $API_KEY\n")
    look("code-reads-secret", "code", "tool:config",
         'password = os.environ["DB_PASSWORD"]\napi_key = settings.OPENAI_API_KEY\nsecret = get_secret("prod/db")\n'
         "client = OpenAI(api_key=api_key)\nlogin(user, password=password)\ntoken = None\n")
    look("code-types", "code", "tool:config",
         "class Login(BaseModel):\n    username: str\n    password: str\n    token: Optional[str] = None\n\n"
         "function auth(password: string, token?: string): Promise<Token> {}\n")
    look("code-fstring", "code", "assistant",
         'headers = {"Authorization": f"Bearer {token}"}\nresp = requests.get(url, headers=headers, auth=(user, password))')
    look("prose-keywords", "prose", "user",
         "The password: it must be rotated every 90 days. The key-value store is fine, and "
         "the token: see the docs. Secret: none of these need changing; the api key rotation runs weekly.")
    look("cli-prompts", "cli", "tool:shell",
         "$ mysql -u root -p\nEnter password:\n$ mkdir -p build/out\n$ ssh -p 2222 deploy@10.0.0.12\n"
         "$ curl -u admin https://jenkins.example.com/api/json\n$ echo \"$PW\" | docker login --password-stdin -u deploy\n"
         "$ psql --no-password -d app")
    look("public-keys", "public-key", "tool:config",
         f"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{g.b64(32)} alice@laptop\n"
         f"-----BEGIN PUBLIC KEY-----\n{g.b64(48)}\n-----END PUBLIC KEY-----\n"
         f"-----BEGIN CERTIFICATE-----\n{g.b64(48)}\n-----END CERTIFICATE-----")
    look("versions-times", "misc", "tool:shell",
         "Python 3.11.7, node v20.11.1, build 2026-02-12T16:02:25.227Z, v1.2.3-rc.1+build.5, color #1e90ff, port 127.0.0.1:8443")
    look("sourcemap", "base64", "tool:config", f"//# sourceMappingURL=data:application/json;charset=utf-8;base64,{g.b64(240)}")
    look("url-no-password", "url", "tool:shell",
         "git clone https://github.com/acme/api.git && open https://alice@example.com:8443/path?q=a@b and ssh://git@github.com/acme/api.git")
    look("hash-in-config", "content-hash", "tool:config",
         f'{{"etag": "W/\\"{g.hex(32)}\\"", "checksum": "{g.hex(64)}", "lockfileVersion": 3, "revision": "{g.hex(40)}"}}')
    look("css-minified", "code", "tool:config",
         ".btn-primary{background:#0d6efd}.tokenInput__wrapper--secret{display:none}.passwordStrengthMeter{width:100%}")
    look("package-json", "dependency", "tool:config",
         '"dependencies": {\n    "express": "^4.18.2",\n    "jsonwebtoken": "^9.0.2",\n    "csrf-token": "~1.0.4",\n'
         '    "keytar": "7.9.0"\n  }')
    look("code-constants", "code", "tool:config",
         "const STORAGE_KEY = 'todos';\nconst SORT_KEY = \"created_at\";\nHOTKEY=ctrl+shift+k\n"
         'SECRET_KEY = os.environ.get("SECRET_KEY")\nAWS_SECRET_ACCESS_KEY = config("AWS_SECRET_ACCESS_KEY")\n'
         "PASSWORD_MIN_LENGTH=12\nAPI_KEY_HEADER=X-Api-Key\nGITHUB_TOKEN_FILE=/run/secrets/gh\n")
    look("typed-code", "code", "tool:config",
         'let api_key: String = env::var("API_KEY")?;\nconst apiKey: string | undefined = process.env.API_KEY;\n'
         "token, err := auth.GetToken(ctx)\nif password == \"\" {\n\treturn ErrNoPassword\n}\n"
         'APIKey string `json:"api_key"`\npassword = var.db_password\n')
    look("k8s-refs", "config", "tool:config",
         "env:\n  - name: DB_PASSWORD\n    valueFrom:\n      secretKeyRef:\n        name: db-creds\n        key: password\n"
         "secretName: my-tls-secret\n")
    look("json-schema", "config", "tool:config",
         '{"password": {"type": "string", "minLength": 8}, "token_type": "Bearer", "tokenType": "bearer", '
         '"api_key": null, "secret": true}')
    look("prose-more", "prose", "assistant",
         "The token expired at 2026-05-01T10:00:00Z, so I refreshed it. Your password manager v2.3.1 is fine; "
         "secret scanning found 3 alerts. Merge pull request #123 from acme/fix-token-refresh. "
         "The private key id_ed25519 is loaded by the agent.")
    look("env-example", "placeholder", "tool:config",
         "OPENAI_API_KEY=sk-your-key-here\nANTHROPIC_API_KEY=sk-ant-...\nSTRIPE_SECRET_KEY=sk_test_...\n"
         'Authorization: Bearer <token>\ncurl -H "x-api-key: $ANTHROPIC_API_KEY" https://api.anthropic.com/v1/messages\n')
    look("flags-no-secret", "cli", "tool:shell",
         "gh auth token --hostname github.com >/dev/null; vault kv get -field=password secret/db; "
         "op read --no-newline op://vault/item/password; aws sts get-session-token --duration-seconds 900")
    look("library-code", "code", "tool:config",  # shapes found in 87 MB of real library code
         "styles = {\n    Token:              '#ABB2BF',\n    Comment:            '#5C6370',\n}\n"
         'ENV_AUTH_TOKEN = "ANTHROPIC_AUTH_TOKEN"\n    AttributeOID.CHALLENGE_PASSWORD: "challengePassword",\n'
         "credentials can be provided via the --username and --password options instead\n"
         "# RFC 7523: JWT bearer authorization grant\n"
         "def encode_private(self, private_key: ed25519.Ed25519PrivateKey, f_priv: _FragList) -> None:\n"
         "def sign(data: bytes, private_key: PKCS7PrivateKeyTypes, hash_algorithm: str) -> bytes:\n"
         "# FRAMES_PER_TOKEN = SAMPLE_RATE // HOP_LENGTH\nROOT_KEY = '__root__'\nKEY_TYPE_SECRET = 2\n"
         "_SSHKEY_CERT_MAX_PRINCIPALS = 256\n")
    return out


# --- issue 23: formats the rules did not know ------------------------------------------------------
#
# Two labelled sets, one file (tests/data/secrets_corpus_23.jsonl). `dev`: the contexts the issue
# reported, rebuilt from its text, which the new rules were written against. `held`: contexts written
# before the new rules, in the same classes but other languages, placements and formats, never looked
# at while writing the rules: their figures are the blind ones.


def build_corpus_23(seed: int = 23) -> list[Entry]:
    g = Gen(seed)
    out: list[Entry] = []

    def sec(id_: str, fmt: str, placement: str, text: str, secrets: list[str], keep: Iterable[str] = ()) -> Entry:
        e = Entry(id_, "secret", fmt, placement, text, list(secrets), list(keep))
        out.append(e)
        return e

    def look(id_: str, fmt: str, placement: str, text: str) -> Entry:
        e = Entry(id_, "lookalike", fmt, placement, text)
        out.append(e)
        return e

    def pw(n: int = 12) -> str:
        return g.password(n)

    def esc(s: str) -> str:
        return "".join(f"\\u{ord(c):04x}" for c in s)

    def b64s(s: str) -> str:
        return base64.b64encode(s.encode()).decode()

    gh = lambda: "ghp_" + g.alnum(36)  # noqa: E731
    # --- dev: the contexts -------------------------------------------------------------------
    p = g.pick(string.ascii_lowercase + string.digits, 12)
    sec("dev-zh-password", "word-zh", "user", f"我们的测试数据库密码是 {p}，别提交到仓库。", [p], ["我们的测试数据库"])
    t = g.alnum(32)
    sec("dev-zh-token", "word-zh", "user", f"部署用的访问令牌：{t}", [t], ["部署用的"])
    p = pw()
    sec("dev-ja-password", "word-ja", "user", f"本番サーバーのパスワード：{p}", [p], ["本番サーバー"])
    p = pw()
    sec("dev-ru-password", "word-ru", "user", f"пароль от админки: {p}", [p], ["от админки"])
    p = pw()
    sec("dev-fr-password", "word-fr", "user", f"le mot de passe du VPN est {p} pour cette semaine", [p], ["pour cette semaine"])
    p = pw()
    sec("dev-zh-koling", "word-zh", "user", f"服务器口令：{p}", [p], ["服务器"])
    k = g.alnum(24)
    sec("dev-zh-key", "word-zh", "user", f"支付接口的密钥是 {k}", [k], ["支付接口"])
    p = pw()
    sec("dev-es-password", "word-es", "user", f"la contraseña de la base de datos es {p}", [p], ["de la base de datos"])
    p = pw()
    sec("dev-de-password", "word-de", "user", f"Das Passwort für den Server ist {p}", [p], ["für den Server"])
    p = pw()
    sec("dev-pt-password", "word-pt", "user", f"a senha do wifi é {p}", [p], ["do wifi"])
    p = pw()
    sec("dev-nl-password", "word-nl", "user", f"het wachtwoord is {p}", [p], ["het wachtwoord"])
    p = pw()
    sec("dev-pl-password", "word-pl", "user", f"hasło do serwera: {p}", [p], ["do serwera"])
    tok = gh()
    sec("dev-github-wrapped", "wrapped", "tool:shell",
        f"$ gh auth token\n{tok[:23]}\n{tok[23:]}\n$ echo done", [tok[:23], tok[23:]], ["$ echo done"])
    tok = gh()
    e = sec("dev-json-escape", "json-escape", "tool:config",
            f'{{"token": "{esc(tok[:4])}{tok[4:]}", "scopes": "repo"}}', [esc(tok[:4]) + tok[4:]], ['"scopes": "repo"'])
    glp = "glpat-" + g.b64url(20)
    sec("dev-ansi-glpat", "ansi", "tool:shell",
        f"Created token: \x1b[32m{glp[:10]}\x1b[1m{glp[10:]}\x1b[0m\n", [f"{glp[:10]}\x1b[1m{glp[10:]}"], ["Created token: "])
    dpw = pw(16)
    auth = b64s(f"deploy:{dpw}")
    dcj = b64s(json.dumps({"auths": {"registry.example.com": {"username": "deploy", "password": dpw, "auth": auth}}}))
    sec("dev-dockerconfigjson", "base64", "tool:config",
        f"apiVersion: v1\nkind: Secret\nmetadata:\n  name: regcred\ntype: kubernetes.io/dockerconfigjson\n"
        f"data:\n  .dockerconfigjson: {dcj}\n", [dcj], ["name: regcred"])
    skl = "sk_live_" + g.alnum(24)
    enc = b64s(skl)
    sec("dev-base64-echo", "base64", "tool:shell", f"$ echo {enc} | base64 -d > key.txt", [enc], ["| base64 -d > key.txt"])
    nr = "NRAK-" + g.upper_alnum(27)
    sec("dev-newrelic", "newrelic", "user", f"use {nr} for the New Relic graphql calls", [nr], ["for the New Relic graphql calls"])
    fb = g.alnum(40)
    sec("dev-firebase-auth", "url-token", "tool:shell",
        f"curl 'https://acme-prod.firebaseio.com/users.json?auth={fb}'", [fb], ["https://acme-prod.firebaseio.com/users.json"])
    sid = g.pick(string.ascii_lowercase + string.digits, 32)
    sec("dev-django-session", "cookie", "tool:shell",
        f"curl -H 'Cookie: csrftoken=abc; sessionid={sid}' https://app.example.com/admin/", [sid], ["https://app.example.com/admin/"])
    key = g.hex(32)
    sec("dev-traceback-locals", "traceback", "tool:shell",
        "Traceback (most recent call last):\n  File \"/app/billing.py\", line 42, in charge\n"
        f"    resp = client.post(url, json=payload)\n    key = '{key}'\n    url = 'https://api.example.com/v1/charge'\n"
        "ConnectionError: timed out", [key], ["ConnectionError: timed out"])
    hk = g.uuid()
    sec("dev-heroku-uuid", "heroku", "tool:shell", f"$ heroku auth:token\n{hk}\n", [hk], ["heroku auth:token"])
    # dev look-alikes
    look("dev-look-prose-words", "prose", "user",
         "密码不要写在代码里，请用环境变量。パスワードを忘れた場合はリセットしてください。пароль должен быть длинным. "
         "le mot de passe est dans le coffre. la contraseña es segura.")
    look("dev-look-uuids", "uuid", "tool:shell", f"$ heroku apps:info\n=== api-prod\nId: {g.uuid()}\nRegion: eu\n")
    look("dev-look-b64-text", "base64", "tool:config", f"data:\n  motd: {b64s('Welcome to the staging box, be nice.')}\n")
    look("dev-look-git", "git-sha", "tool:shell", f"$ git log --oneline -3\n{g.hex(7)} fix token\n{g.hex(7)} add auth\n$ git rev-parse HEAD\n{g.hex(40)}")
    look("dev-look-ansi", "ansi", "tool:shell", "\x1b[32mPASSED\x1b[0m tests/test_auth.py::test_token_refresh \x1b[1m(0.02s)\x1b[0m")
    look("dev-look-escape", "json-escape", "tool:config", '{"name": "caf\\u00e9", "city": "K\\u00f6ln"}')

    # --- held out: written before the rules, never tuned on ------------------------------------------
    p = pw()
    sec("held-zh-tw", "word-zh", "user", f"資料庫密碼為：{p}", [p], ["資料庫"])
    p = pw()
    sec("held-ko", "word-ko", "user", f"관리자 비밀번호는 {p} 입니다", [p], ["관리자"])
    p = pw()
    sec("held-es-staging", "word-es", "user", f"la contraseña del servidor de staging es {p}, no la compartas", [p], ["no la compartas"])
    p = pw()
    sec("held-de-kennwort", "word-de", "user", f"Das Kennwort für den Jenkins-Admin lautet {p}.", [p], ["Jenkins-Admin"])
    p = pw()
    sec("held-pt-prod", "word-pt", "user", f"a senha do banco de produção é {p}", [p], ["banco de produção"])
    p = pw()
    sec("held-it", "word-it", "user", f"la password del router è {p}", [p], ["del router"])
    p = pw()
    sec("held-tr", "word-tr", "user", f"veritabanı şifresi: {p}", [p], ["veritabanı"])
    p = pw()
    sec("held-sv", "word-sv", "user", f"lösenordet till wifi är {p}", [p], ["till wifi"])
    t = g.alnum(40)
    sec("held-ja-token", "word-ja", "user", f"APIトークンは {t} です", [t], ["です"])
    t = f"{g.digits(10)}x{g.alnum(20)}"
    sec("held-ru-token", "word-ru", "user", f"токен бота: {t}", [t], ["бота"])
    p = pw()
    e = sec("held-zh-jsonl", "word-zh", "user", f"生产环境的数据库密码是：{p}，记得轮换。", [p], ["记得轮换"])
    out.append(_as_transcript_line(g, e, "user"))
    pat = "github_pat_" + g.alnum(22) + "_" + g.alnum(59)
    line = f"export GH_TOKEN={pat}"
    sec("held-github-pat-wrapped", "wrapped", "tool:shell", f"{line[:80]}\n{line[80:]}\n", [pat[:64], pat[64:]], ["export GH_TOKEN="])
    ant = "sk-ant-api03-" + g.b64url(93) + "AA"
    sec("held-anthropic-crlf", "wrapped", "tool:shell", f"key: {ant[:60]}\r\n{ant[60:]}\r\n", [ant[:60], ant[60:]], ["key: "])
    npm = "npm_" + g.alnum(36)
    e = sec("held-npm-wrapped-jsonl", "wrapped", "tool:shell", f"$ cat .npmrc\n//r/:_authToken=\n{npm[:18]}\n{npm[18:]}\nok",
            [npm[:18], npm[18:]], ["$ cat .npmrc"])
    out.append(_as_transcript_line(g, e, "tool"))
    ant = "sk-ant-api03-" + g.b64url(93) + "AA"
    sec("held-escape-prefix", "json-escape", "tool:config", f'{{"k":"{esc("sk-ant-")}{ant[7:]}"}}', [esc("sk-ant-") + ant[7:]], ['{"k":"'])
    xox = f"xoxb-{g.digits(12)}-{g.digits(13)}-{g.alnum(24)}"
    sec("held-escape-full", "json-escape", "tool:config", f'bot = "{esc(xox)}"', [esc(xox)], ["bot = "])
    tok = gh()
    sec("held-ansi-ghp", "ansi", "tool:shell", f"token \x1b[1;33m{tok[:15]}\x1b[22m{tok[15:]}\x1b[0m saved", [f"{tok[:15]}\x1b[22m{tok[15:]}"], [" saved"])
    hf = "hf_" + g.letters(34)
    e = sec("held-ansi-hf-jsonl", "ansi", "tool:shell", f"login: \x1b[36m{hf[:9]}\x1b[0m\x1b[36m{hf[9:]}\x1b[0m", [f"{hf[:9]}\x1b[0m\x1b[36m{hf[9:]}"], ["login: "])
    out.append(_as_transcript_line(g, e, "tool"))
    envf = b64s(f"DB_PASSWORD={pw(14)}\nLOG_LEVEL=info\n")
    sec("held-b64-envfile", "base64", "tool:config", f"kind: Secret\ndata:\n  app.env: {envf}\n", [envf], ["kind: Secret"])
    aws = f"aws_access_key_id=AKIA{g.upper_alnum(16)}\naws_secret_access_key={g.pick(string.ascii_letters + string.digits + '/+', 40)}"
    enc = b64s(aws)
    sec("held-b64-decode-aws", "base64", "tool:shell", f"echo '{enc}' | base64 --decode >> ~/.aws/credentials", [enc], [">> ~/.aws/credentials"])
    xox = f"xoxb-{g.digits(12)}-{g.digits(13)}-{g.alnum(24)}"
    enc = b64s(xox)
    sec("held-b64-atob", "base64", "assistant", f'const token = atob("{enc}");', [enc], ["const token = atob("])
    nr = "NRAK-" + g.upper_alnum(27)
    sec("held-newrelic-yaml", "newrelic", "tool:config", f"newrelic:\n  user_key_for_graphql: {nr}\n  region: EU\n", [nr], ["region: EU"])
    fb = g.alnum(40)
    sec("held-firebase-js", "url-token", "assistant",
        f"fetch(`https://demo-app-default-rtdb.europe-west1.firebasedatabase.app/orders.json?auth={fb}&print=pretty`)", [fb], ["&print=pretty"])
    sid = g.pick(string.ascii_lowercase + string.digits, 32)
    sec("held-django-setcookie", "cookie", "tool:shell",
        f"< HTTP/1.1 302 Found\n< Set-Cookie: sessionid={sid}; expires=Tue, 15 Dec 2026 10:00:00 GMT; HttpOnly; Path=/\n", [sid], ["HttpOnly; Path=/"])
    key = g.alnum(40)
    sec("held-traceback-showlocals", "traceback", "tool:shell",
        f"_______ test_charge _______\n\nkey        = '{key}'\nretries    = 3\nurl        = 'https://api.example.com'\n\n    def test_charge():\nE   AssertionError",
        [key], ["retries    = 3"])
    hk = g.uuid()
    e = sec("held-heroku-jsonl", "heroku", "tool:shell", f"$ heroku auth:token\n ›   Warning: token will expire in 29 days\n{hk}", [hk], ["heroku auth:token"])
    out.append(_as_transcript_line(g, e, "tool"))
    # held-out look-alikes
    look("held-look-zh", "prose", "assistant", "我已经把数据库密码改成从环境变量读取，密钥也放进了 Vault。令牌的有效期是 30 天。")
    look("held-look-ja-ko", "prose", "user", "パスワードは12文字以上にしてください。비밀번호는 안전하게 보관하세요.")
    look("held-look-de-pt", "prose", "user", "Das Passwort ist abgelaufen. A senha expirou ontem. Het wachtwoord is verlopen.")
    look("held-look-ru", "prose", "assistant", "пароль хранится в менеджере паролей; токен обновляется каждые 24 часа.")
    look("held-look-uuids", "uuid", "tool:shell", f"$ heroku ps\n=== web (Basic): gunicorn app:app (1)\nweb.1: up 2026/02/12 {g.uuid()}\nrelease {g.uuid()}")
    look("held-look-b64-config", "base64", "tool:config",
         f"binaryData:\n  nginx.conf: {b64s('server { listen 80; server_name example.com; root /var/www; }')}\n")
    look("held-look-b64-decode", "base64", "tool:shell", f"$ echo {b64s('hello from the build bot')} | base64 -d\nhello from the build bot")
    look("held-look-git-wrapped", "git-sha", "tool:shell",
         f"commit {g.hex(40)}\nAuthor: Alice <a@example.com>\n\n    Rotate the ghp_ prefix check\n    and the glpat- docs\n")
    look("held-look-ansi-jsonl", "ansi", "jsonl",
         json.dumps({"type": "user", "message": {"content": "\x1b[31mFAILED\x1b[0m test_login - AssertionError: password mismatch"}}))
    look("held-look-cache-key", "code", "tool:shell", "    key = 'user:42:profile'\n    ttl = 300\n    value = None")
    look("held-look-urls", "url", "tool:shell", "GET /login?auth=basic&next=/home and https://x.firebaseio.com/.json?print=pretty")
    look("held-look-cookies", "cookie", "tool:shell", "Set-Cookie: sessionid=; expires=Thu, 01 Jan 1970 00:00:00 GMT; Path=/\ntheme=dark; lang=en")
    return out


def write_corpus_23() -> None:
    entries = [e.to_json() for e in build_corpus_23()]
    ids = [e["id"] for e in entries]
    assert len(ids) == len(set(ids)), "duplicate ids"
    with open(CORPUS_23_FILE, "w") as fh:
        for e in entries:
            fh.write(json.dumps(e, ensure_ascii=False) + "\n")
    n_sec = sum(e["kind"] == "secret" for e in entries)
    print(f"wrote {CORPUS_23_FILE.relative_to(REPO)}: {len(entries)} contexts ({n_sec} with secrets, "
          f"{len(entries) - n_sec} look-alikes)")


def write_corpus() -> None:
    CORPUS_FILE.parent.mkdir(parents=True, exist_ok=True)
    entries = [e.to_json() for e in build_corpus()]
    ids = [e["id"] for e in entries]
    assert len(ids) == len(set(ids)), "duplicate ids"
    with open(CORPUS_FILE, "w") as fh:
        for e in entries:
            fh.write(json.dumps(e, ensure_ascii=False) + "\n")
    n_sec = sum(e["kind"] == "secret" for e in entries)
    print(f"wrote {CORPUS_FILE.relative_to(REPO)}: {len(entries)} contexts ({n_sec} with secrets, "
          f"{sum(len(e['spans']) for e in entries)} secret spans, {len(entries) - n_sec} look-alikes)")


def load_corpus() -> list[dict[str, Any]]:
    with open(CORPUS_FILE) as fh:
        return [json.loads(line) for line in fh if line.strip()]


# --- candidates ------------------------------------------------------------------------------


@dataclass
class Candidate:
    name: str
    spans: Callable[[str], list[Span]]
    install: str  # what it takes to have it
    note: str = ""


def _module_from_source(name: str, source: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = f"<{name}>"
    sys.modules[name] = module  # dataclasses look their module up
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


def memd_before() -> Candidate | str:
    try:
        source = subprocess.run(["git", "-C", str(REPO), "show", f"{BEFORE_COMMIT}:memd/redact/redactor.py"],
                                capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        return f"git show {BEFORE_COMMIT}:memd/redact/redactor.py failed: {exc}"
    mod = _module_from_source("memd_redact_before", source)
    return Candidate("memd-before", lambda t: [s for _, s in mod.find_secrets(t)], "none (memd, 18 rules)")


def memd_now() -> Candidate:
    return Candidate("memd", lambda t: [s for _, s in mod.find_secrets(t)], f"none (memd, {len(mod.RULES)} rules)")


def _values_to_spans(text: str, line_values: Iterable[tuple[int, str]]) -> list[Span]:
    """Findings reported as (line number, value) become spans: every occurrence on that line."""
    starts = [0]
    for m in re.finditer("\n", text):
        starts.append(m.end())
    spans: list[Span] = []
    for lineno, value in line_values:
        if not value or lineno >= len(starts):
            continue
        base = starts[lineno]
        end_of_line = starts[lineno + 1] - 1 if lineno + 1 < len(starts) else len(text)
        line = text[base:end_of_line]
        i = line.find(value)
        while i >= 0:
            spans.append((base + i, base + i + len(value)))
            i = line.find(value, i + 1)
    return spans


_KEEP_ALIVE: list[Any] = []


def detect_secrets_candidate() -> Candidate | str:
    try:
        import detect_secrets  # noqa: PLC0415 - optional: a comparison candidate, not a dependency
        from detect_secrets.core.scan import scan_file  # noqa: PLC0415 - optional: a comparison candidate, not a dependency
        from detect_secrets.settings import default_settings  # noqa: PLC0415 - optional: a comparison candidate, not a dependency
    except ImportError:
        return "not installed (pip install detect-secrets)"

    ctx = default_settings()
    ctx.__enter__()  # every plugin, default filters, for the whole run
    _KEEP_ALIVE.append(ctx)  # a collected context manager would restore the empty settings
    tmp_dir = tempfile.mkdtemp(prefix="bench-secrets-")
    atexit.register(shutil.rmtree, tmp_dir, True)
    tmp = Path(tmp_dir) / "transcript.txt"

    def spans(text: str) -> list[Span]:
        # As in a scan of a file: scan_line's ad-hoc mode ("eager search") reports any short
        # quoted-less string and flags everything.
        tmp.write_text(text)
        found = [(s.line_number - 1, s.secret_value or "") for s in scan_file(str(tmp))]
        return _values_to_spans(text, found)

    version = getattr(detect_secrets, "__version__", None) or _dist_version("detect-secrets")
    return Candidate("detect-secrets", spans, f"detect-secrets {version} + pyyaml, requests (~8 MB)",
                     "every plugin, default filters, as a scan of a .txt file")


def _dist_version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


def credsweeper_candidate() -> Candidate | str:
    try:
        import logging  # noqa: PLC0415 - optional: a comparison candidate, not a dependency

        from credsweeper import CredSweeper, StringContentProvider  # noqa: PLC0415 - optional: a comparison candidate, not a dependency
    except ImportError:
        return "not installed (pip install credsweeper)"
    logging.getLogger("credsweeper").setLevel(logging.ERROR)
    sweeper = CredSweeper()

    def spans(text: str) -> list[Span]:
        lines = text.split("\n")
        cands = sweeper.file_scan(StringContentProvider(lines))
        sweeper.credential_manager.set_credentials(cands)
        sweeper.post_processing(None)
        found = [(ld.line_num - 1, ld.value) for c in sweeper.credential_manager.get_credentials() for ld in c.line_data_list]
        sweeper.credential_manager.set_credentials([])
        return _values_to_spans(text, found)

    return Candidate("credsweeper", spans, f"credsweeper {_dist_version('credsweeper')} + numpy, onnxruntime, pandas, lxml, … (~420 MB)",
                     "default rules, ML validation (medium threshold)")


# gitleaks' Go (RE2) syntax as Python `re`: POSIX classes, and inline flags that Python only
# allows at the start of a pattern (a flag part-way is applied to the whole pattern: a slight
# over-match, in gitleaks' favour for recall).
_POSIX = {"[:alnum:]": "a-zA-Z0-9", "[:alpha:]": "a-zA-Z", "[:digit:]": "0-9", "[:upper:]": "A-Z",
          "[:lower:]": "a-z", "[:space:]": r"\s", "[:xdigit:]": "0-9A-Fa-f", "[:punct:]": r"!-/:-@\[-`{-~",
          "[:word:]": r"\w"}


def _go_regex(src: str) -> re.Pattern[str]:
    for k, v in _POSIX.items():
        src = src.replace(k, v)
    src = src.replace(r"\z", r"\Z")
    flags = 0
    if "(?i)" in src:
        src = src.replace("(?i)", "")
        flags |= re.IGNORECASE
    if "(?s)" in src:
        src = src.replace("(?s)", "")
        flags |= re.DOTALL
    if "(?m)" in src:
        src = src.replace("(?m)", "")
        flags |= re.MULTILINE
    return re.compile(src, flags)


def _entropy(s: str) -> float:
    if not s:
        return 0.0
    counts: dict[str, int] = {}
    for ch in s:
        counts[ch] = counts.get(ch, 0) + 1
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


@dataclass
class _Allow:
    regexes: list[re.Pattern[str]]
    stopwords: list[str]
    target: str
    and_: bool
    has_other: bool  # paths or commits: never true for a text fragment

    def allowed(self, secret: str, match: str, line: str) -> bool:
        target = {"match": match, "line": line}.get(self.target, secret)
        checks = []
        if self.regexes:
            checks.append(any(r.search(target) for r in self.regexes))
        low = secret.lower()
        if self.stopwords:
            checks.append(any(w in low for w in self.stopwords))
        if self.and_:
            return bool(checks) and all(checks) and not self.has_other
        return any(checks)


def _allow(d: dict[str, Any]) -> _Allow:
    return _Allow([_go_regex(r) for r in d.get("regexes", [])], [w.lower() for w in d.get("stopwords", [])],
                  d.get("regexTarget", "secret"), d.get("condition", "OR").upper() == "AND",
                  bool(d.get("paths") or d.get("commits")))


def gitleaks_candidate() -> Candidate | str:
    path = os.environ.get("MEMD_GITLEAKS_TOML")
    if not path or not Path(path).is_file():
        return "no rules (set MEMD_GITLEAKS_TOML to gitleaks' config/gitleaks.toml)"

    cfg = tomllib.loads(Path(path).read_text())
    global_allow = [_allow(cfg["allowlist"])] if "allowlist" in cfg else []
    global_allow += [_allow(a) for a in cfg.get("allowlists", [])]
    rules = []
    skipped = 0
    for r in cfg["rules"]:
        if "regex" not in r:
            skipped += 1  # path-only rules (pkcs12 files)
            continue
        try:
            pattern = _go_regex(r["regex"])
        except re.error:
            skipped += 1
            continue
        allows = [_allow(a) for a in r.get("allowlists", [])]
        if "allowlist" in r:
            allows.append(_allow(r["allowlist"]))
        rules.append((r["id"], pattern, [k.lower() for k in r.get("keywords", [])], float(r.get("entropy", 0.0)),
                      int(r.get("secretGroup", 0)), allows))

    def spans(text: str) -> list[Span]:
        low = text.lower()
        out: list[Span] = []
        for _id, pattern, keywords, min_entropy, group, allows in rules:
            if keywords and not any(k in low for k in keywords):
                continue
            for m in pattern.finditer(text):
                if m.lastindex:
                    g = group or next((i for i in range(1, m.lastindex + 1) if m.group(i)), 0)
                else:
                    g = 0
                start, end = m.span(g)
                secret = text[start:end]
                if not secret or (min_entropy and _entropy(secret) <= min_entropy):
                    continue
                ls = text.rfind("\n", 0, m.start()) + 1
                le = text.find("\n", m.end())
                line = text[ls : le if le >= 0 else len(text)]
                if any(a.allowed(secret, m.group(0), line) for a in global_allow + allows):
                    continue
                out.append((start, end))
        return out

    return Candidate("gitleaks-rules", spans, "none if ported (rules are data); gitleaks itself is a Go binary, not on PyPI",
                     f"{len(rules)} of {len(cfg['rules'])} rules ({skipped} path-only or not portable), no decoding passes")


# --- measures --------------------------------------------------------------------------------


def covered(spans: list[Span], target: Span) -> bool:
    """Whether the union of `spans` covers every character of `target`."""
    pos = target[0]
    for s, e in sorted(spans):
        if s > pos:
            break
        pos = max(pos, e)
        if pos >= target[1]:
            return True
    return pos >= target[1]


@dataclass
class Score:
    spans_total: int = 0
    spans_hit: int = 0
    contexts: int = 0
    contexts_clean: int = 0
    lookalikes: int = 0
    false_positives: int = 0
    collateral: int = 0  # `keep` context destroyed in secret entries
    missed: list[str] = field(default_factory=list)
    fp_ids: list[str] = field(default_factory=list)


def score(cand: Candidate, corpus: list[dict[str, Any]]) -> Score:
    sc = Score()
    for e in corpus:
        text = e["text"]
        spans = cand.spans(text)
        if e["kind"] == "lookalike":
            sc.lookalikes += 1
            if spans:
                sc.false_positives += 1
                sc.fp_ids.append(e["id"])
            continue
        sc.contexts += 1
        hits = [covered(spans, tuple(s)) for s in e["spans"]]
        sc.spans_total += len(hits)
        sc.spans_hit += sum(hits)
        if all(hits):
            sc.contexts_clean += 1
        else:
            sc.missed.append(e["id"])
        for k in e["keep"]:
            ks = text.find(k)
            if any(s < ks + len(k) and e_ > ks for s, e_ in spans):
                sc.collateral += 1
    return sc


def transcript_spans(size: int = 50_000, count: int = 12) -> list[str]:
    """`count` 50 KB spans of real transcript JSONL (whole lines), spread over the shared corpus."""
    files = sorted(CORPUS.rglob("*.jsonl")) if CORPUS.is_dir() else []
    blob = "".join(p.read_text(errors="replace") for p in files)
    if len(blob) < size:
        g = Gen(1)  # no corpus: prose-like filler, the speed figure is then only indicative
        blob = " ".join(g.pick(string.ascii_lowercase, g.rnd.randint(2, 10)) for _ in range(size // 4))
    step = max(1, (len(blob) - size) // count)
    out = []
    for i in range(count):
        start = blob.find("\n", i * step) + 1
        out.append(blob[start : start + size])
    return out


def speed(cand: Candidate, spans: list[str], budget_s: float = 20.0,
          clock: Callable[[], float] = time.perf_counter) -> tuple[float, float, int]:
    """Median and max µs per KB over the spans: each scanned up to 5 times (within 0.3 s), the fastest
    kept, which is the figure least disturbed by other work on a shared machine (`clock`:
    `time.process_time` counts this process's CPU time only, for a machine others load)."""
    per_kb: list[float] = []
    started = time.perf_counter()
    for text in spans:
        best = math.inf
        spent = 0.0
        for _ in range(5):
            t = clock()
            cand.spans(text)
            took = clock() - t
            best, spent = min(best, took), spent + took
            if spent > 0.3:
                break
        per_kb.append(best * 1e6 / (len(text.encode()) / 1024))
        if time.perf_counter() - started > budget_s:
            break
    return statistics.median(per_kb), max(per_kb), len(per_kb)


def real_findings(cand: Candidate, spans: list[str]) -> int:
    """Findings in real transcripts: none should be secrets (the corpus was scrubbed), so each is a likely FP."""
    return sum(len(cand.spans(t)) for t in spans)


WHY = """**Why memd keeps its own rules (no new dependency).** Recall is what the issue is about, and
the ported rules plus memd's context rules recall every labelled span with no look-alike touched;
the detectors built for scanning repositories miss the contexts a transcript is made of (unquoted
`password:` fields, `mysql -p…`, `curl -u user:pass`, secrets as CLI flags, prose like "the
password is …") and, in the case of detect-secrets, flag look-alikes (its entropy plugins take
base64 images, hashes and signatures for keys). Speed decides the rest: redaction runs on every
model request and every file and log write, and memd's rules are one to two orders of magnitude
faster than the alternatives (CredSweeper's ML validation costs milliseconds per KB). Install weight
agrees: detect-secrets brings requests and its stack (~8 MB), CredSweeper numpy, onnxruntime,
pandas and more (~400 MB); gitleaks is a Go binary that a PyPI install cannot bring, so its
published rules (MIT) were ported instead: literal-first regexes in memd/redact/redactor.py, each marked
`(gitleaks: <rule id>)`. The Python engine for the full gitleaks rule set measured above is the
bench's own and shows what running all 222 rules unported would cost."""


def library_code(limit_mb: float = 40.0) -> tuple[list[str], float]:
    """Python files of this virtualenv's libraries (tests left out), up to `limit_mb`: code full of
    `token`, `password`, `secret` and `key` that holds few real secrets (documentation examples)."""

    root = Path(sysconfig.get_paths()["purelib"])
    texts: list[str] = []
    size = 0
    for p in sorted(root.rglob("*.py")):
        if "test" in str(p.relative_to(root)):
            continue
        try:
            t = p.read_text()
        except (OSError, UnicodeDecodeError):
            continue
        texts.append(t)
        size += len(t.encode())
        if size > limit_mb * 1e6:
            break
    return texts, size / 1e6


# --- issue 23: the second round, against main's redactor in the same run ------------------------------

ROUND_23 = "## Secrets, second round (issue 23)"


def memd_main(ref: str = "main") -> Candidate | str:
    """memd/redact as it is on `ref`, loaded beside this checkout's under another package name."""
    try:
        names = subprocess.run(["git", "-C", str(REPO), "ls-tree", "--name-only", f"{ref}:memd/redact"],
                               capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError) as exc:
        return f"git ls-tree {ref}:memd/redact failed: {exc}"
    pkg = f"memd_redact_{re.sub(r'[^a-z0-9]', '_', ref.lower())}"
    package = types.ModuleType(pkg)
    package.__path__ = []
    sys.modules[pkg] = package
    sources = {n[:-3]: subprocess.run(["git", "-C", str(REPO), "show", f"{ref}:memd/redact/{n}"], capture_output=True,
                                      text=True, check=True).stdout.replace("memd.redact.", f"{pkg}.")
               for n in names if n.endswith(".py") and n != "__init__.py"}
    loaded: dict[str, types.ModuleType] = {}

    def load(name: str) -> types.ModuleType:
        if name not in loaded:
            for dep in re.findall(rf"from {pkg}\.(\w+) import", sources[name]):
                load(dep)
            loaded[name] = _module_from_source(f"{pkg}.{name}", sources[name])
        return loaded[name]

    red = load("redactor")
    return Candidate(f"memd@{ref}", lambda t: [s for _, s in red.find_secrets(t)], f"memd on {ref}")


def load_corpus_23() -> list[dict[str, Any]]:
    with open(CORPUS_23_FILE) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def round_23(write: bool) -> None:
    """Issue 23's labelled set, dev and held out, for main's redactor and this one; speed as a ratio."""
    corpus = load_corpus_23()
    spans50 = transcript_spans()
    old = memd_main()
    if isinstance(old, str):
        sys.exit(old)
    cands = [old, memd_now()]
    rows = []
    speeds = {}
    for _ in range(2):  # interleaved twice: the machine is shared, each keeps its best
        for cand in cands:
            med, worst, _n = speed(cand, spans50, clock=time.process_time)
            prev = speeds.get(cand.name)
            speeds[cand.name] = (med, worst) if prev is None or med < prev[0] else prev
    ref = speeds[old.name][0]
    for cand in cands:
        med, worst = speeds[cand.name]
        rf = real_findings(cand, spans50)
        for split in ("dev", "held"):
            sc = score(cand, [e for e in corpus if e["id"].startswith(split)])
            rows.append((cand.name, split, sc, med, worst, rf))
            print(f"{cand.name:12} {split:4} leaked {sc.contexts - sc.contexts_clean}/{sc.contexts} contexts, "
                  f"spans removed {sc.spans_hit}/{sc.spans_total}, look-alikes altered {sc.false_positives}/{sc.lookalikes}, "
                  f"{med:,.0f} µs/KB ({med / ref:.2f}× main), {rf} findings in real transcripts; "
                  f"missed {', '.join(sc.missed) or '-'}; FP {', '.join(sc.fp_ids) or '-'}")
    old16 = score(old, load_corpus())
    new16 = score(memd_now(), load_corpus())
    print(f"issue 16 corpus: main {old16.spans_hit}/{old16.spans_total} FP {old16.false_positives}; "
          f"now {new16.spans_hit}/{new16.spans_total} FP {new16.false_positives}")
    if not write:
        return
    real_kb = sum(len(t.encode()) for t in spans50) / 1024
    table = ["| redactor | set | contexts leaked | secret spans removed | look-alikes altered | µs per KB, median (max) "
             "| cost per KB vs main | findings in real transcripts |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for name, split, sc, med, worst, rf in rows:
        table.append(f"| {name} | {split} | {sc.contexts - sc.contexts_clean}/{sc.contexts} | {sc.spans_hit}/{sc.spans_total} "
                     f"| {sc.false_positives}/{sc.lookalikes} | {med:,.0f} ({worst:,.0f}) | {med / ref:.2f}× | {rf} |")
    held_missed = next(r for r in rows if r[0] != old.name and r[1] == "held")[2]
    section = "\n".join([
        ROUND_23, "",
        "Command: `.venv/bin/python bench/bench_secrets.py --round 23`. Corpus: `tests/data/secrets_corpus_23.jsonl` "
        "(`--write-corpus`, seed 23): `dev` rebuilds the contexts issue 23 reported (the rules were written against "
        "it); `held` was written before the new rules in the same classes but other languages, placements and "
        "formats, and not tuned on. main's redactor (`git show main:memd/redact/*`) is measured in the same process "
        f"and run, interleaved, twice, each span's best of up to 5 kept (CPU time of the process: "
        f"`time.process_time`), on 12 spans of 50 KB ({real_kb:,.0f} KB) of real "
        f"transcript JSONL; load average {os.getloadavg()[0]:.1f} at the end (2 shared cores: read the ratio, not the µs).",
        "", *table, "",
        f"Issue 16's corpus, same run: main {old16.spans_hit}/{old16.spans_total} spans, {old16.false_positives} look-alikes "
        f"altered; now {new16.spans_hit}/{new16.spans_total}, {new16.false_positives}.",
        "",
        f"Held-out contexts still leaking: {', '.join(f'`{m}`' for m in held_missed.missed) or 'none'}; "
        f"held-out look-alikes altered: {', '.join(f'`{m}`' for m in held_missed.fp_ids) or 'none'}.",
        "",
        "What the redactor does now (memd/redact): the password and token words of Chinese, Japanese, Korean, "
        "Russian, French, Spanish, German, Portuguese, Dutch, Polish, Swedish, Turkish and more, a bounded gap, "
        "a separator, a secret-shaped value (`words.py`); every rule also runs on the text with JSON and C escapes "
        "decoded, control sequences removed and wrapped tokens of known prefixes joined, its findings mapped back "
        "to the original characters (`views.py`); a base64 run that decodes to text holding a secret is redacted "
        "whole (found on a byte mask, so ordinary text pays a substring search); New Relic keys, `?auth=`, session "
        "cookies, a bare `key = '…'` with a token-shaped value, `heroku auth:token`'s UUID (`rules.py`). Names, file "
        "names and commit subjects drop token-shaped words no rule knows (`shapes.py`).",
        "",
    ])
    write_section(ROUND_23, section, RESULTS)
    print(f"updated {RESULTS.relative_to(REPO)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write-corpus", action="store_true", help="regenerate the corpus file and exit")
    ap.add_argument("--no-results", action="store_true", help="do not update bench/RESULTS.md")
    ap.add_argument("--verbose", action="store_true", help="list missed and false-positive contexts")
    ap.add_argument("--round", type=int, choices=(16, 23), default=16,
                    help="16: the first corpus against other detectors; 23: issue 23's set against main's redactor")
    args = ap.parse_args()
    if args.round == 23 and not args.write_corpus:
        round_23(not args.no_results)
        return
    if args.write_corpus:
        write_corpus()
        write_corpus_23()
        return
    extra = os.environ.get("MEMD_BENCH_SITE")
    if extra:
        sys.path.append(extra)  # after our own packages: ours win on a clash
    corpus = load_corpus()
    spans50 = transcript_spans()
    real_kb = sum(len(t.encode()) for t in spans50) / 1024
    # CredSweeper last: onnxruntime's threads keep spinning after inference and would slow
    # whatever is measured after it in this process.
    builders: list[Callable[[], Candidate | str]] = [memd_before, memd_now, gitleaks_candidate,
                                                     detect_secrets_candidate, credsweeper_candidate]
    rows = []
    notes = []
    for build in builders:
        cand = build()
        if isinstance(cand, str):
            notes.append(f"- `{build.__name__}`: skipped, {cand}")
            print(f"skip {build.__name__}: {cand}")
            continue
        sc = score(cand, corpus)
        med, worst, n = speed(cand, spans50)
        rf = real_findings(cand, spans50)
        rows.append((cand, sc, med, worst, n, rf))
        print(f"{cand.name:15} recall {sc.spans_hit}/{sc.spans_total} spans ({sc.spans_hit / sc.spans_total:.0%}), "
              f"{sc.contexts_clean}/{sc.contexts} contexts; FP {sc.false_positives}/{sc.lookalikes}; "
              f"collateral {sc.collateral}; {med:,.0f} µs/KB (max {worst:,.0f}, {n} spans); "
              f"{rf} findings in {real_kb:,.0f} KB of real transcripts")
        if args.verbose:
            print("   missed:", ", ".join(sc.missed) or "-")
            print("   FP:    ", ", ".join(sc.fp_ids) or "-")
    for ctx in _KEEP_ALIVE:  # close detect-secrets' settings while the interpreter still runs
        ctx.__exit__(None, None, None)
    code, code_mb = library_code()
    code_rows = []
    for cand, *_ in rows:
        if cand.name.startswith("memd"):  # the others take minutes on 40 MB
            code_rows.append(f"| {cand.name} | {sum(len(cand.spans(t)) for t in code):,} |")
    if args.no_results:
        print("\n".join(code_rows))
        return
    n_sec = sum(e["kind"] == "secret" for e in corpus)
    n_spans = sum(len(e["spans"]) for e in corpus)
    table = ["| candidate | secret spans removed (recall) | contexts fully clean | look-alikes altered (FP) "
             "| context lost | µs per KB, median (max) | findings in real transcripts | install |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for cand, sc, med, worst, _n, rf in rows:
        table.append(f"| {cand.name} | {sc.spans_hit}/{sc.spans_total} ({sc.spans_hit / sc.spans_total:.0%}) "
                     f"| {sc.contexts_clean}/{sc.contexts} | {sc.false_positives}/{sc.lookalikes} | {sc.collateral} "
                     f"| {med:,.0f} ({worst:,.0f}) | {rf} | {cand.install} |")
    detail = []
    for cand, sc, *_ in rows:
        detail.append(f"- **{cand.name}**{' (' + cand.note + ')' if cand.note else ''}: missed "
                      f"{', '.join(f'`{m}`' for m in sc.missed) or 'nothing'}; false positives "
                      f"{', '.join(f'`{m}`' for m in sc.fp_ids) or 'none'}.")
    section = "\n".join([
        "## Secrets (issue 16)",
        "",
        "Command: `.venv/bin/python bench/bench_secrets.py` (external detectors from a side virtualenv: "
        "`MEMD_BENCH_SITE=/tmp/secbench/lib/python3.11/site-packages MEMD_GITLEAKS_TOML=…/gitleaks.toml`, see the "
        "script's docstring). Corpus: `tests/data/secrets_corpus.jsonl`, written by "
        "`bench/bench_secrets.py --write-corpus` from a fixed seed: "
        f"{len(corpus)} contexts, {n_sec} holding {n_spans} synthetic secret spans, {len(corpus) - n_sec} look-alikes "
        "that must come out unchanged. Speed: 12 spans of 50 KB of real transcript JSONL from the shared corpus, "
        f"each scanned up to 5 times, the fastest kept; Python {platform.python_version()}, 2 shared cores, "
        f"load average {os.getloadavg()[0]:.1f} at the end of the run (other work on the machine inflates "
        "every candidate's time alike).",
        "",
        *table,
        "",
        "Placeholders are not secrets and must survive (the look-alikes hold them): a template (`<password>`, "
        "`${TOKEN}`, `{{ secrets.X }}`), a mask (`xxx`, `****`) or a well-known dummy (`changeme`, "
        "`your-api-key-here`); `memd-before` redacted them. The memd rules were written alongside this corpus "
        "(and the look-alikes found in real library code were added to it), so its 100 % is not a blind figure; "
        "the blind checks are the real transcripts and the library code below, and the other candidates.",
        "",
        "\"Context lost\" counts labelled surroundings (a variable name, a user, a host) a candidate's findings ate. "
        "\"Findings in real transcripts\" counts findings in the same "
        f"{real_kb:,.0f} KB of real transcripts used for speed, which hold no live secret: each is a likely false positive.",
        "",
        *detail,
        *([""] + notes if notes else []),
        "",
        f"Findings in {code_mb:.0f} MB of Python library code (this virtualenv's site-packages, tests left out): "
        "code full of `token`, `password`, `secret` and `key`, with a few documentation examples "
        "(`password: sekrit`, `https://user:pass@host`) as its only secrets. Indicative: it depends on "
        "what is installed.",
        "",
        "| candidate | findings |",
        "|---|---:|",
        *code_rows,
        "",
        WHY,
        "",
    ])
    write_section("## Secrets (issue 16)", section, RESULTS)
    print(f"updated {RESULTS.relative_to(REPO)}")


if __name__ == "__main__":
    main()

"""The rules `memd.redact.redactor` applies, in order: which secrets it knows and what it calls them.

Three families of detectors:

- *Token formats*: credentials with a recognisable shape (`sk-ant-`, `ghp_`,
  `xapp-`, `npm_`, `hf_`, `dapi…`, `SG.….…`, a Telegram bot token). Most are
  ported from gitleaks' published rules (config/gitleaks.toml,
  https://github.com/gitleaks/gitleaks, MIT licence, Copyright (c) 2019 Zachary
  Rice), rewritten to start with their literal and to run on Python's `re`;
  each ported rule says `(gitleaks: <rule id>)`.
- *Contexts*: a value is a secret because of where it stands: `.env` lines
  (`API_TOKEN=…`), assignments in code and config (`password: …`,
  `"clientSecret": "…"`), URLs (`://user:pass@`, `?access_token=`, `&sig=`),
  HTTP headers (`Authorization: Token …`, `X-Auth-Key: …`), command lines
  (`mysql -p…`, `curl -u user:pass`, `--api-token …`, `sshpass -p …`), and
  prose (`the password is …`). What they accept is `memd.redact.vetting`.
- *Blocks*: PEM private keys, also base64-encoded (a kubeconfig's `client-key-data`).

A rule's name is the `<rule>` of `[REDACTED:<rule>]`: stable across versions (tests
pin it). The detector kinds and `rule`/`token`/`tokens` are `memd.redact.detectors`.
"""

from __future__ import annotations

import re

from memd.redact.detectors import (
    AfterRule,
    Detector,
    EnvRule,
    HeadRule,
    KeywordRule,
    PemRule,
    rule,
    token,
    tokens,
)
from memd.redact.lazyre import lazy
from memd.redact.shapes import has_token
from memd.redact.vetting import (
    after_scheme,
    b64_pem_is_private,
    cli_p_is_password,
    cli_value_is_secret,
    curl_user_is_secret,
    env_name_is_secret,
    is_placeholder,
    telegram_boundary,
    vet_assignment,
    vet_prose,
    vet_url_param,
)
from memd.redact.words import WordRule

__all__ = ["RULES"]

# Names in code and config, any case, whose *last* part says "secret" (db_password,
# spring.datasource.password, adminApiAccessToken, DD-API-KEY, client_secret). Bare
# "key" is too common (sort_key, primary_key) to count: it needs a qualifier before
# it (api_key, secretKey, DD-APPLICATION-KEY); plural "tokens" is a count.
_ROOTS = ("pass", "pwd", "secret", "token", "credential", "key")  # found once, shared by the keyword rules
_ASSIGN_KEYWORD = lazy(r"pass(?:word|wd|phrase)|pwd|secret|token|credentials?|key")
_KEY_QUALIFIER = lazy(
    r"(?:api|access|secret|private|auth|app|application|account|master|signing|encryption|client)[_\-]?$"
)
_ASSIGN_TAIL = lazy(
    # The name ends here: an optional closing quote (JSON-escaped or not), the separator.
    r"(?P<q>\\?[\"']?)[ \t]*(?P<sep>:=|=>|=|:)[ \t]*"
    # A quoted value (up to its closing quote on the line) or a bare one.
    r"(?:(?P<open>\\?[\"'`])(?P<quoted>[^\"'`\r\n\\]{1,1024})|(?P<bare>[^\s\"'`<>\\,;(){}\[\]]{1,1024}))"
)
_URL_KEYWORD = lazy(r"(?:pass(?:word|wd)|pwd|secret|token|key)=")
_URL_VALUE = lazy(r"(?P<secret>[a-z0-9%+/=_.~\-]{8,2048})")
# Prose: "the staging db password is Abc…", "its secret is …", "api key: …", "secret key …".
_PROSE_KEYWORD = lazy(r"pass(?:word|phrase|wd|code)|secret|token|key")
_PROSE_QUALIFIER = lazy(
    r"(?:api|access|secret|private|auth|app|application|signing|encryption|master|account|license|admin|"
    r"service|client|bot|deploy|developer)[ _\-]?$"
)
_PROSE_TAIL = lazy(
    # A gap or a separator after the keyword ("secret-not-for-production" is one word, not a secret).
    r"(?:[ \t]+(?:(?:is|was|=|:|->|=>)[ \t]+)?|[ \t]*[:=][ \t]*)\\?[`\"']?"
    r"(?P<secret>[a-z0-9+/=_.!@#$%^&*~\-]{8,256})"
)
# Command lines: a password as an option's argument.
_CLI_VALUE = r"(?:\\?\"(?P<secret>[^\"\s\\]{1,256})\\?\"|'(?P<secret_sq>[^'\s]{1,256})'|(?P<secret_bare>[^\s\"'\\;|&]{1,256}))"
_P_COMMANDS = lazy(r"\b(?:mysql[a-z]{0,6}|mariadb[a-z\-]{0,6}|sshpass)\b")
_LOGIN_COMMANDS = lazy(r"\b(?:sshpass|(?:docker|podman|buildah|helm|oras|nerdctl)\b.{0,80}\blogin)\b")
# Words after `--password` or `secret:` in documentation, not values.
_PROSE_WORDS = frozenset({
    "option", "options", "flag", "flags", "argument", "arguments", "arg", "args", "parameter", "parameters",
    "and", "or", "is", "to", "the", "with", "for", "of", "field", "value", "values", "instead", "will", "must",
    "can", "should", "may", "are", "was", "were", "be", "not", "only", "if", "when", "from", "as",
})


_B64URL = r"A-Za-z0-9_\-"

# Order matters only for labels: when spans overlap, the earlier rule names the merged span.
RULES: tuple[Detector | WordRule, ...] = (
    PemRule(),
    rule(
        "private-key",  # base64 of a PEM private key: a kubeconfig's client-key-data, a k8s Secret
        r"LS0tLS1CRUdJTi[A-Za-z0-9+/]{66,65536}={0,2}",
        ("LS0tLS1CRUdJTi",),
        accept=b64_pem_is_private,
    ),
    # --- token formats ------------------------------------------------------------------------------
    rule("anthropic", rf"sk-ant-[{_B64URL}]{{20,}}", ("sk-ant-",)),
    rule(
        "openai",
        rf"sk-(?:(?:proj|svcacct|admin)-[{_B64URL}]{{40,}}|[A-Za-z0-9]{{32,}})",
        ("sk-",),
        boundary=True,  # "disk-<hash>" is not a key
    ),
    rule(
        "aws-access-key-id",  # (gitleaks: aws-access-token)
        r"(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}\b",
        # No hints: five `in` scans cost more than the regex's own scan for "A".
    ),
    token("aws-bedrock-key", r"ABSK[A-Za-z0-9+/]{109,269}={0,2}", "ABSK"),  # (gitleaks: aws-amazon-bedrock-api-key-long-lived)
    rule(
        "aws-secret-access-key",
        # aws_secret_access_key = …, "aws_secret_access_key": "…", `aws configure set aws_secret_access_key …`
        r"aws_?secret_?access_?key\\?[\"']?(?:\s*[:=]\s*|\s+)\\?[\"']?(?P<secret>[a-z0-9/+=]{40})(?![a-z0-9/+=])",
        ("secret",),
        ci=True,
        boundary=True,
    ),
    rule("github", r"gh[pousr]_[A-Za-z0-9]{36,255}\b"),  # literal-first: its scan is the pre-check
    rule("github-pat", r"github_pat_[A-Za-z0-9_]{40,255}", ("github_pat_",)),
    rule(
        "gitlab",  # (gitleaks: gitlab-pat, -deploy-token, -ptt, -runner-authentication-token, -scim-token, …)
        rf"gl(?:pat|dt|ptt|rt|soat|cbt|ft|imt|ffct|agent|oas)-[{_B64URL}.]{{20,300}}",
    ),
    rule("gitlab", rf"GR1348941[{_B64URL}]{{20,300}}", ("GR1348941",)),  # (gitleaks: gitlab-rrt)
    rule(
        "slack-webhook",  # (gitleaks: slack-webhook-url); the host stays, the path is the secret
        r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<secret>[A-Za-z0-9+/_\-]{20,256})",
        ("hooks.slack.com",),
    ),
    rule(
        "slack",  # (gitleaks: slack-bot-token, -user-token, -app-token, -config-*-token, -legacy-*)
        r"(?:xox[abeoprs]-[A-Za-z0-9\-]{10,}|xoxe\.xox[bp]-[A-Za-z0-9\-]{10,}|xapp-\d-[A-Za-z0-9]{6,}-\d{6,}-[A-Za-z0-9]{16,})",
        ("xox", "xapp-"),
    ),
    rule(
        "discord-webhook",
        r"discord(?:app)?\.com/api/webhooks/(?P<secret>\d{5,30}/[A-Za-z0-9_\-]{40,128})",
        ("/api/webhooks/",),
    ),
    rule(
        "teams-webhook",  # (gitleaks: microsoft-teams-webhook)
        r"\.webhook\.office\.com/webhookb2/(?P<secret>[A-Za-z0-9@/\-]{40,300})",
        ("webhook.office.com",),
    ),
    # (gitleaks: stripe-access-token); webhook signing secrets too
    rule("stripe", r"sk_(?:live|test|prod)_[A-Za-z0-9]{16,}"),
    rule("stripe", r"rk_(?:live|test|prod)_[A-Za-z0-9]{16,}"),
    rule("stripe", r"whsec_[A-Za-z0-9+/=]{24,}"),
    rule("google-api-key", rf"AIza[{_B64URL}]{{35}}(?![{_B64URL}])", ("AIza",)),  # (gitleaks: gcp-api-key)
    rule(
        "google-oauth",  # client secrets, access tokens, refresh tokens
        rf"(?:GOCSPX-[{_B64URL}]{{24,40}}|ya29\.[{_B64URL}]{{20,2048}}|1//0[{_B64URL}]{{40,512}})(?![{_B64URL}])",
        ("GOCSPX-", "ya29.", "1//0"),
        boundary=True,
    ),
    rule(
        "azure-storage-key",  # connection strings: AccountKey=…, SharedAccessKey=…
        r"(?:accountkey|sharedaccesskey)=(?P<secret>[a-z0-9+/]{20,512}={0,2})",
        ("accountkey=", "sharedaccesskey="),
        ci=True,
    ),
    rule(
        "azure-ad-client-secret",  # (gitleaks: azure-ad-client-secret)
        r"(?<![A-Za-z0-9_~.])[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.\-]{31,34}(?![A-Za-z0-9_~.\-])",
        ("Q~",),
    ),
    rule(
        "url-signature",  # Azure SAS `sig=`, S3 presigned `X-Amz-Signature=`, `X-Amz-Security-Token=`
        r"[?&](?:sig|x-amz-signature|x-amz-security-token|x-goog-signature)=(?P<secret>[a-z0-9%+/=_\-]{16,4096})",
        ("sig=", "signature=", "security-token="),
        ci=True,
    ),
    token("npm", r"npm_[A-Za-z0-9]{36}", "npm_"),  # (gitleaks: npm-access-token)
    rule("pypi", rf"pypi-AgE(?:IcHlwaS5vcmc|NdGVzdC5weXBpLm9yZw)[{_B64URL}]{{50,1000}}", ("pypi-AgE",)),  # (gitleaks: pypi-upload-token)
    token("twilio", r"SK[0-9a-fA-F]{32}", "SK"),  # (gitleaks: twilio-api-key)
    token("sendgrid", rf"SG\.[{_B64URL}]{{22}}\.[{_B64URL}]{{43}}", "SG."),  # (gitleaks: sendgrid-api-token)
    token("sendinblue", r"xkeysib-[a-f0-9]{64}-[A-Za-z0-9]{16}", "xkeysib-"),  # (gitleaks: sendinblue-api-token)
    *tokens("mailgun", r"key-[0-9a-f]{32}", r"pubkey-[0-9a-f]{32}"),  # (gitleaks: mailgun-private-api-token, -pub-key)
    *tokens("huggingface", r"hf_[A-Za-z]{34}", r"api_org_[A-Za-z]{34}"),  # (gitleaks: huggingface-*)
    token("databricks", r"dapi[a-f0-9]{32}(?:-\d)?", "dapi"),  # (gitleaks: databricks-api-token)
    token("shopify", r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}", "shp"),  # (gitleaks: shopify-*)
    HeadRule(  # base64 of the bot's numeric id, a timestamp, an HMAC: found from its first dot
        "discord-bot-token",
        lazy(r"\.[A-Za-z0-9_\-]{6,7}\.[A-Za-z0-9_\-]{27,40}(?![A-Za-z0-9_\-])"),
        lazy(r"[MNO][A-Za-z0-9]{23,27}$"),
        28,
    ),
    rule(
        "telegram-bot-token",
        r"\d{8,10}:AA[A-Za-z0-9_\-]{33}(?![A-Za-z0-9_\-])",
        (":AA",),
        accept=telegram_boundary,
    ),
    token("heroku", rf"HRKU-AA[{_B64URL}]{{58}}"),  # (gitleaks: heroku-api-key-v2)
    token("digitalocean", r"do[opr]_v1_[a-f0-9]{64}", "_v1_"),  # (gitleaks: digitalocean-*)
    *tokens("vault", rf"hvs\.[{_B64URL}]{{90,120}}", rf"hvb\.[{_B64URL}]{{138,300}}"),  # (gitleaks: vault-*)
    *tokens("linear", r"lin_api_[A-Za-z0-9]{40}", r"lin_oauth_[A-Za-z0-9]{40}"),  # (gitleaks: linear-api-key)
    token("postman", r"PMAK-[a-fA-F0-9]{24}-[a-fA-F0-9]{34}"),  # (gitleaks: postman-api-token)
    *tokens("notion", r"ntn_\d{11}[A-Za-z0-9]{35}", r"secret_[A-Za-z0-9]{43}"),  # (gitleaks: notion-api-token)
    token("atlassian", rf"ATATT3[{_B64URL}=]{{100,300}}"),
    *tokens(  # (gitleaks: grafana-*)
        "grafana",
        r"glc_[A-Za-z0-9+/]{32,400}={0,3}",
        r"glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}",
        r"eyJrIjoi[A-Za-z0-9]{70,400}={0,3}",
    ),
    *tokens("sentry", r"sntrys_eyJ[A-Za-z0-9+/=_]{60,600}", r"sntryu_[a-f0-9]{64}"),  # (gitleaks: sentry-*)
    *tokens(  # Perplexity (gitleaks: perplexity-api-key), Groq, xAI, Replicate
        "llm-provider",
        r"pplx-[A-Za-z0-9]{48}",
        r"gsk_[A-Za-z0-9]{52}",
        r"xai-[A-Za-z0-9]{80}",
        r"r8_[A-Za-z0-9]{37}",
    ),
    *tokens(
        "saas-token",
        r"ops_eyJ[A-Za-z0-9+/]{250,}={0,3}",  # (gitleaks: 1password-service-account-token)
        r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}",  # (gitleaks: age-secret-key)
        r"pul-[a-f0-9]{40}",  # (gitleaks: pulumi-api-token)
        r"rubygems_[a-f0-9]{48}",  # (gitleaks: rubygems-api-token)
        r"dp\.pt\.[A-Za-z0-9]{43}",  # (gitleaks: doppler-api-token)
        r"dt0c01\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{64}",  # (gitleaks: dynatrace-api-token)
        r"fo1_[A-Za-z0-9_\-]{43}",  # (gitleaks: flyio-access-token)
        r"fm1[ar]_[A-Za-z0-9+/]{100,}={0,3}",
        r"fm2_[A-Za-z0-9+/]{100,}={0,3}",
        r"ico-[A-Za-z0-9]{32}",  # (gitleaks: infracost-api-token)
        r"sgp_(?:[a-fA-F0-9]{16}_)?[a-fA-F0-9]{40}",  # (gitleaks: sourcegraph-access-token)
        r"sq0atp-[A-Za-z0-9_\-]{22,60}",  # (gitleaks: square-access-token)
        r"sq0csp-[A-Za-z0-9_\-]{22,60}",
        r"EAA[MC][A-Za-z0-9]{100,}",  # (gitleaks: facebook-page-access-token)
        r"sha256~[A-Za-z0-9_\-]{43}",  # (gitleaks: openshift-user-token)
        r"pscale_(?:tkn|oauth|pw)_[A-Za-z0-9_=.\-]{32,64}",  # (gitleaks: planetscale-*)
        r"pnu_[A-Za-z0-9]{36}",  # (gitleaks: prefect-api-token)
        r"rdme_[a-z0-9]{70}",  # (gitleaks: readme-api-token)
        r"tk-us-[A-Za-z0-9_\-]{48}",  # (gitleaks: scalingo-api-token)
        r"shippo_(?:live|test)_[a-fA-F0-9]{40}",  # (gitleaks: shippo-api-token)
        r"CLOJARS_[A-Za-z0-9]{60}",  # (gitleaks: clojars-api-token)
        r"AKCp[A-Za-z0-9]{69}",  # (gitleaks: artifactory-api-key)
        r"EZ[AT]K[A-Za-z0-9]{54}",  # (gitleaks: easypost-*)
        r"LTAI[A-Za-z0-9]{20}",  # (gitleaks: alibaba-access-key-id)
        r"fio-u-[A-Za-z0-9_=\-]{64}",  # (gitleaks: frameio-api-token)
        r"duffel_(?:test|live)_[A-Za-z0-9_=\-]{43}",  # (gitleaks: duffel-api-token)
        r"v1\.0-[a-f0-9]{24}-[a-f0-9]{146}",  # (gitleaks: cloudflare-origin-ca-key)
        r"sbp_[a-f0-9]{40}",  # Supabase access token
    ),
    *tokens(  # (gitleaks: new-relic-user-api-key, new-relic-insert-key, new-relic-browser-api-token)
        "newrelic",
        r"NRAK-[A-Z0-9]{27}",
        r"NRII-[A-Za-z0-9\-]{32}",
        r"NRJS-[a-f0-9]{19}",
    ),
    rule("jwt", rf"eyJ[{_B64URL}]{{8,}}\.eyJ[{_B64URL}]{{8,}}\.[{_B64URL}]*", ("eyJ",)),
    # --- contexts ------------------------------------------------------------------------------
    rule(
        "url-password",
        # scheme://user:password@host: keep the user, take the password.
        r"://[^\s:/?#@'\"]{0,256}:(?P<secret>[^\s/?#@'\"]{1,256})@",
        ("://",),
        boundary=False,
        accept=after_scheme,
    ),
    rule(
        "url-token",  # a Firebase URL's ?auth=…: the database secret or an ID token
        r"[?&]auth=(?P<secret>[A-Za-z0-9%+/=_.~\-]{16,4096})",
        ("auth=",),
        accept=lambda text, m: _token_value(m.group("secret")),
    ),
    rule(
        "session-cookie",  # Django's sessionid=…, PHPSESSID, JSESSIONID, connect.sid, <app>_session
        r"session(?:id|_id)?=(?P<secret>[a-z0-9%+/=_.~\-]{16,4096})",
        ("session=", "sessionid=", "session_id="),  # not "session": every transcript line holds a sessionId
        ci=True,
        accept=lambda text, m: _token_value(m.group("secret")),
    ),
    rule(
        "session-cookie",
        r"(?:sessid|connect\.sid)=(?P<secret>[a-z0-9%+/=_.~\-]{16,4096})",
        ("sessid", "connect.sid"),
        ci=True,
        accept=lambda text, m: _token_value(m.group("secret")),
    ),
    # ?access_token=…&, &api_key=…, ?password=…: query parameters that carry a credential
    KeywordRule("url-token", _ROOTS, _URL_KEYWORD, _URL_VALUE, None, vet_url_param),
    rule(
        "bearer",
        r"bearer\s+(?P<secret>[A-Za-z0-9\-._~+/]{12,}=*)",
        ("bearer",),
        ci=True,
        boundary=True,
        accept=lambda text, m: not m.group("secret").isalpha() or len(m.group("secret")) >= 24,  # "bearer authorization"
    ),
    rule(
        "basic-auth",
        r"authorization[\"']?\s*[:=]\s*[\"']?basic\s+(?P<secret>[A-Za-z0-9+/]{8,}=*)",
        ("basic",),
        ci=True,
        boundary=True,
    ),
    rule(
        "auth-header",  # Authorization: Token …, Authorization: ApiKey …, a bare credential
        r"authorization\\?[\"']?[ \t]*[:=][ \t]*\\?[\"']?(?:(?:token|apikey|api-key|key|sso-key|dsn|digest)[ \t]+)?"
        r"(?P<secret>[a-z0-9\-._~+/=:]{16,4096})",
        ("authorization",),
        ci=True,
        boundary=True,
        accept=lambda text, m: not is_placeholder(m.group("secret")) and not m.group("secret").startswith(("bearer", "basic")),
    ),
    rule(
        "api-key-header",  # X-Api-Key, X-Auth-Key, X-Auth-Token, X-Vault-Token, X-Shopify-Access-Token, …
        rf"x-(?:[a-z0-9]+-){{0,3}}(?:api-?key|auth-key|auth-token|token|access-token|secret)\\?[\"']?\s*[:=]\s*\\?[\"']?"
        rf"(?P<secret>[{_B64URL}.=+/]{{16,}})",
        ("x-",),
        ci=True,
        boundary=True,
    ),
    EnvRule(
        "env-assignment",
        # NAME=value, NAME: value, export NAME="value", "NAME": "value"; not NAME=$OTHER.
        # Quotes may arrive JSON-escaped (\\"); the name may follow a JSON \\n.
        lazy(
            r"(?:(?<![A-Za-z0-9_])|(?<=\\[ntr]))(?P<name>[A-Z0-9_]{1,128})\b\\?[\"']?[ \t]*[=:][ \t]*(?!\$)"
            # A quoted secret ends before an escaping backslash, so `\\"` survives intact.
            r"(?:\\?\"(?!\$)(?P<secret>[^\"\r\n]{0,4095}[^\"\r\n\\])\\?\""
            r"|\\?'(?P<secret_sq>[^'\r\n]{0,4095}[^'\r\n\\])\\?'"
            r"|(?P<secret_bare>(?:[^\s\"'`\\]|\\(?![nrt\"'])){1,4096}))"
        ),
        env_name_is_secret,
    ),
    KeywordRule("secret-assignment", _ROOTS, _ASSIGN_KEYWORD, _ASSIGN_TAIL, _KEY_QUALIFIER, vet_assignment),
    rule(
        "cli-password",  # mysql -pSECRET, mysqldump -p'SECRET', sshpass -pSECRET
        r"-p" + _CLI_VALUE,
        ("mysql", "mariadb", "sshpass"),
        accept=lambda text, m: cli_p_is_password(text, m, _P_COMMANDS),
    ),
    rule(
        "cli-password",  # sshpass -p SECRET, docker login -u me -p SECRET
        r"-p[ \t]+" + _CLI_VALUE,
        ("sshpass", "login"),
        accept=lambda text, m: cli_p_is_password(text, m, _LOGIN_COMMANDS),
    ),
    rule(
        "cli-password",
        r"-(?:store|key|srcstore|deststore|srckey|destkey)pass[ \t]+" + _CLI_VALUE,
        ("pass",),
        accept=cli_value_is_secret,
    ),
    rule(
        "cli-flag",  # --password X, --api-token=X, --aws-secret-access-key X, --secret_key=X
        r"--(?:[a-z0-9]+[\-_]){0,4}(?:password|passwd|passphrase|token|secret|api[\-_]?key|apikey|"
        r"secret[\-_]?key|secret[\-_]?access[\-_]?key|access[\-_]?token|auth[\-_]?token|client[\-_]?secret)"
        r"(?:=|[ \t]+)" + _CLI_VALUE,
        ("--",),
        ci=True,
        accept=lambda text, m: (
            cli_value_is_secret(text, m)
            and not re.match(r"--(?:no|ask|prompt|skip)-", m.group(0))
            and (m.group("secret") or m.group("secret_sq") or m.group("secret_bare") or "").lower() not in _PROSE_WORDS
        ),
    ),
    rule(
        "curl-user",  # curl -u user:pass, curl --user "user:pass": keep the user
        r"-(?:u|-user|-http-user)(?:=|[ \t]+)\\?[\"']?[^\s:\"'$\\]{1,128}:" + _CLI_VALUE,
        ("curl", "wget"),
        accept=curl_user_is_secret,
    ),
    rule(
        "netrc",  # machine HOST login USER password SECRET
        r"machine(?:\s|\\[nt])+\S{1,256}(?:\s|\\[nt])+login(?:\s|\\[nt])+\S{1,256}(?:\s|\\[nt])+password(?:\s|\\[nt])+"
        r"(?P<secret>[^\s\\]{1,256})",
        ("machine",),
    ),
    KeywordRule("secret-in-prose", _ROOTS, _PROSE_KEYWORD, _PROSE_TAIL, _PROSE_QUALIFIER, vet_prose),
    WordRule("secret-in-prose"),  # the password words of other languages, and a few words between
    rule(
        "secret-assignment",  # a bare `key` with a token-shaped quoted value: a traceback's locals, pytest --showlocals
        r"key[ \t]{0,40}[:=][ \t]{0,4}b?(?P<q>['\"])(?P<secret>[A-Za-z0-9+/=_\-]{16,512})(?P=q)",
        ("key",),
        ci=True,
        accept=lambda text, m: has_token(m.group("secret")),
    ),
    AfterRule(  # `heroku auth:token` prints the API key as a bare UUID, at the start of a line a few lines on
        "heroku",
        "auth:token",
        lazy(r"(?:\n|\\n)[ \t]{0,8}(?P<secret>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})(?![0-9a-f\-])"),
        400,
    ),
)


def _token_value(value: str) -> bool:
    """A cookie's or a URL parameter's value that is a credential, not a flag or a word (`auth=basic`)."""
    return not is_placeholder(value) and any(c.isdigit() for c in value) and any(c.isalpha() for c in value)

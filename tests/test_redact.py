"""Secret redaction: one positive and one near-miss negative per rule, then properties.

Test secrets are assembled at run time so secret scanners do not flag this file.
"""

from __future__ import annotations

import json
import random
import string
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memd.redact import RULES, find_secrets, redact


def j(*parts: str) -> str:
    return "".join(parts)


ANTHROPIC = j("sk-", "ant-api03-", "AbCdEf0123456789_-xyzXYZ0123456789abcd")
OPENAI_PROJ = j("sk-", "proj-", "Ab12" * 12, "-_Zz")
OPENAI_LEGACY = j("sk-", "T3BlbkFJ", "a1B2c3D4e5" * 4)
AWS_ID = j("AKIA", "IOSFODNN7EXAMPLE")
AWS_SECRET = j("wJalrXUtnFEMI/K7MDENG/", "bPxRfiCYEXAMPLEKEY")
GITHUB = j("ghp", "_", "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8")
GITHUB_PAT = j("github", "_pat_", "11ABCDEFG0123456789_", "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZab")
GITLAB = j("glpat", "-", "xYz012345678901234AbC")
SLACK = j("xox", "b-", "1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx")
STRIPE = j("sk", "_live_", "4eC39HqLyjWDarjtT1zdp7dc")
GOOGLE = j("AIza", "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q")
JWT = j("eyJhbGciOiJIUzI1NiJ9", ".", "eyJzdWIiOiIxMjM0NTY3ODkwIn0", ".", "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U")
PEM_BODY = "MIIEowIBAAKCAQEA7bq9\nQk1Lx0e+Zz/9Uq3vQ==\n"
PEM = j("-----BEGIN RSA ", "PRIVATE KEY-----\n", PEM_BODY, "-----END RSA ", "PRIVATE KEY-----")

# (rule, text holding a secret, the secret, a near miss that must stay untouched)
CASES = [
    ("private-key", f"key:\n{PEM}\ndone", PEM, j("-----BEGIN ", "PUBLIC KEY-----\nMIIBIjANBg\n-----END PUBLIC KEY-----")),
    ("anthropic", f"use {ANTHROPIC} here", ANTHROPIC, "sk-ant-short and the sk-ant- prefix alone"),
    ("openai", f"OPENAI={OPENAI_PROJ}!", OPENAI_PROJ, "the sk-learn-style-css-class and disk-0123456789abcdef0123456789abcdef"),
    ("openai", f"old key {OPENAI_LEGACY}", OPENAI_LEGACY, "sk-12345 is too short"),
    ("aws-access-key-id", f"id {AWS_ID} ok", AWS_ID, "AKIA1234 and akiaiosfodnn7example"),
    ("aws-secret-access-key", f"aws_secret_access_key = {AWS_SECRET}", AWS_SECRET, "aws_secret_access_key = tooShort123"),
    ("github", f"token {GITHUB}", GITHUB, "ghp_short123 and laughs_aloud"),
    ("github-pat", f"pat {GITHUB_PAT}", GITHUB_PAT, "github_pat_tooshort"),
    ("gitlab", f"glab {GITLAB}", GITLAB, "glpat-short"),
    ("slack", f"slack {SLACK}", SLACK, "xoxz-1234567890-abc and xoxb-123"),
    ("stripe", f"stripe {STRIPE}", STRIPE, j("pk", "_live_", "4eC39HqLyjWDarjtT1zdp7dc")),
    ("google-api-key", f"maps {GOOGLE}", GOOGLE, "AIzaShortKey123"),
    ("jwt", f"cookie={JWT};", JWT, "eyJhbGciOiJIUzI1NiJ9 alone is only a header"),
    ("url-password", "postgres://alice:hunter2@db:5432/app", "hunter2", "https://alice@example.com:8443/path?q=a@b"),
    ("bearer", "Authorization: Bearer abcDEF123456ghiJKL", "abcDEF123456ghiJKL", "the bearer of bad news; Authorization: Bearer $TOKEN"),
    ("basic-auth", "Authorization: Basic YWxpY2U6aHVudGVyMg==", "YWxpY2U6aHVudGVyMg==", "Authorization: Basic realm=x"),
    ("api-key-header", "-H 'x-api-key: abcdef0123456789abcd'", "abcdef0123456789abcd", "x-api-key: $KEY"),
    ("env-assignment", "DATABASE_PASSWORD=s3cr3t!", "s3cr3t!", "KEYBOARD_LAYOUT=us SECRETARY=bob PWD=/home/alice"),
    ("secret-assignment", 'db.password = "hunter22"', "hunter22", 'sort_key = "created_at"; password = "short"'),
]


@pytest.mark.parametrize(("rule", "text", "secret", "near_miss"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rule_finds_its_secret_and_spares_the_near_miss(rule: str, text: str, secret: str, near_miss: str) -> None:
    found = find_secrets(text)
    assert [name for name, _ in found] == [rule]
    start, end = found[0][1]
    assert text[start:end] == secret
    out = redact(text)
    assert secret not in out
    assert f"[REDACTED:{rule}]" in out
    assert find_secrets(near_miss) == []
    assert redact(near_miss) == near_miss


def test_every_rule_has_a_case() -> None:
    assert {r.name for r in RULES} == {c[0] for c in CASES}


def test_url_password_keeps_the_user_and_host() -> None:
    assert redact("git clone https://bob:tok3n@git.example.com/x.git") == (
        "git clone https://bob:[REDACTED:url-password]@git.example.com/x.git"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("API_KEY=abc123", "API_KEY=[REDACTED:env-assignment]"),
        ("API_KEY: abc123", "API_KEY: [REDACTED:env-assignment]"),
        ('export GITHUB_TOKEN="a b c"', 'export GITHUB_TOKEN="[REDACTED:env-assignment]"'),
        ("export AUTH_SECRET='x y'", "export AUTH_SECRET='[REDACTED:env-assignment]'"),
        ('{"SLACK_TOKEN": "abc"}', '{"SLACK_TOKEN": "[REDACTED:env-assignment]"}'),
        ("MY_CREDENTIALS=abc", "MY_CREDENTIALS=[REDACTED:env-assignment]"),
        ("DB_PASSWD=x", "DB_PASSWD=[REDACTED:env-assignment]"),
        ("MYSQL_PWD=x", "MYSQL_PWD=[REDACTED:env-assignment]"),
        ("API_KEY=$OPENAI_KEY", "API_KEY=$OPENAI_KEY"),
        ('API_KEY="${FROM_VAULT}"', 'API_KEY="${FROM_VAULT}"'),
        ("OLDPWD=/tmp", "OLDPWD=/tmp"),
        ("api_key=abc123", "api_key=abc123"),  # lower case and unquoted: code, not a .env
    ],
)
def test_env_assignments_keep_the_name(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_json_escaped_transcript_lines_stay_valid_json() -> None:
    """Raw JSONL lines hold `\\n` and `\\"` escapes; redaction must not break them or miss keys."""
    record = {"text": f"my key:\n{ANTHROPIC}\nexport API_TOKEN=\"abc def\"\npassword = \"hunter22\"\n{PEM}"}
    line = json.dumps(record)
    out = redact(line)
    decoded = json.loads(out)["text"]
    for secret in (ANTHROPIC, "abc def", "hunter22", PEM_BODY.splitlines()[0]):
        assert secret not in out
        assert secret not in decoded
    assert "export API_TOKEN=" in decoded


def test_truncated_private_key_block_is_still_redacted() -> None:
    text = j("-----BEGIN OPENSSH ", "PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\nQUJDREVGRw==")
    out = redact(text + "\n. rest")
    assert "b3BlbnNzaC1rZXktdjEAAAAA" not in out
    assert out.endswith(". rest")


def test_overlapping_findings_merge_into_one_span() -> None:
    text = f"ANTHROPIC_API_KEY={ANTHROPIC}"
    found = find_secrets(text)
    assert len(found) == 1
    assert found[0][0] == "anthropic"  # the more specific rule names it
    assert redact(text) == "ANTHROPIC_API_KEY=[REDACTED:anthropic]"


def test_redacting_twice_changes_nothing() -> None:
    once = redact(f"ANTHROPIC_API_KEY={ANTHROPIC} PASSWORD='a b' https://u:p@h {PEM}")
    assert "[REDACTED:anthropic]" in once
    assert redact(once) == once


def test_text_without_secrets_is_returned_unchanged() -> None:
    text = "Plain prose about keys, tokens and passwords, with a URL https://example.com/a:b@c."
    assert redact(text) == text


# --- speed: linear on a megabyte, including adversarial shapes ---------------------------

_ADVERSARIAL = [
    "KEY_" * 250_000,
    "AKEY" * 250_000,
    "KEY=" * 250_000,
    'API_KEY="' + "a" * 1_000_000,
    "token_" * 170_000,
    'password="' * 100_000,
    "aws_secret_access_key=" * 45_000,
    "x://a:" * 170_000,
    j("-----BEGIN RSA ", "PRIVATE KEY-----.") * 30_000,
    "eyJaaaaaaaaa." * 77_000,
    "Bearer " * 140_000,
    "\\n" * 500_000,
]


@pytest.mark.parametrize("text", _ADVERSARIAL, ids=[t[:10] for t in _ADVERSARIAL])
def test_adversarial_megabyte_is_fast(text: str) -> None:
    started = time.perf_counter()
    redact(text)
    assert time.perf_counter() - started < 1.5


def test_random_megabyte_with_secrets_is_fast_and_complete() -> None:
    rnd = random.Random(7)
    chunks = [
        "".join(rnd.choice(string.ascii_letters + string.digits + " \n._-=:/\"'") for _ in range(10_000))
        for _ in range(100)
    ]
    chunks[10] += f" {ANTHROPIC} "
    chunks[90] += f" {GITHUB} "
    text = "".join(chunks)
    started = time.perf_counter()
    out = redact(text)
    assert time.perf_counter() - started < 1.5
    assert ANTHROPIC not in out and GITHUB not in out


# --- properties ------------------------------------------------------------------------

_SURROUNDINGS = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
_DISTINCT = st.sampled_from([ANTHROPIC, GITHUB_PAT, GITLAB, SLACK, JWT, PEM])


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(prefix=_SURROUNDINGS, secret=_DISTINCT, suffix=_SURROUNDINGS)
def test_a_distinctive_secret_never_survives_whatever_surrounds_it(prefix: str, secret: str, suffix: str) -> None:
    assert secret not in redact(f"{prefix}{secret}{suffix}")


@settings(max_examples=300)
@given(st.text(max_size=300))
def test_spans_are_sorted_disjoint_and_redaction_is_idempotent(text: str) -> None:
    found = find_secrets(text)
    last_end = -1
    for _, (start, end) in found:
        assert 0 <= start < end <= len(text)
        assert start >= last_end
        last_end = end
    once = redact(text)
    assert redact(once) == once
    if not found:
        assert once == text

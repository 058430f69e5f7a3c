"""The model layer, through the real `anthropic` client, against the local fake API.

Nothing of memd is mocked: the SDK speaks HTTP to `tests/fakeapi.py`. Only the
backoff `sleep` is injected (recorded, not slept), so retries cost no time.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from memd.llm.client import LLM
from memd.llm.types import (
    BACKOFF_CAP_S,
    BudgetExceeded,
    LLMConfig,
    ModelCallFailed,
    ModelCallStopped,
    ModelError,
    ModelUnavailable,
    backoff_delay,
    parse_retry_after,
)
from tests.fakeapi import FAKE_SECRET, FakeAnthropic, delay, drip, malformed, status, text

REPO = Path(__file__).resolve().parents[2]
KEY = "k-test-not-a-real-key-7f3a"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's own key or endpoint must not leak into (or out of) a test."""
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "ANTHROPIC_PROFILE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def api() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        yield fake


class Harness:
    """An LLM wired to the fake, with its usage records and requested sleeps kept."""

    def __init__(self, api: FakeAnthropic, used_today: int = 0, **config: Any) -> None:
        self.records: list[dict[str, Any]] = []
        self.sleeps: list[float] = []
        self.used_today = used_today
        cfg = {"provider": "anthropic", "api_key": KEY, "base_url": api.url, "timeout_s": 5.0, **config}
        self.llm = LLM(
            LLMConfig(**cfg),
            usage_sink=self.records.append,
            tokens_used_today=lambda: self.used_today,
            sleep=self.sleeps.append,
        )

    def call(self, **kw: Any) -> Any:
        args = {"job": "gate", "tier": "small", "system": "You are the GATE.", "user": "hello", **kw}
        return self.llm.complete(**args)


# --- success ---------------------------------------------------------------------------


def test_success_returns_text_and_records_usage(api: FakeAnthropic) -> None:
    api.enqueue(text("yes", usage={"input_tokens": 120, "output_tokens": 3, "cache_read_input_tokens": 7,
                                   "cache_creation_input_tokens": 11}))  # fmt: skip
    h = Harness(api)
    done = h.call(max_tokens=5)
    assert (done.text, done.model, done.attempts, done.stop_reason) == ("yes", "claude-haiku-4-5", 1, "end_turn")
    assert (done.input_tokens, done.output_tokens, done.cache_read_tokens, done.cache_write_tokens) == (120, 3, 7, 11)
    [rec] = h.records
    assert rec | {"ts": 0} == {
        "ts": 0, "job": "gate", "model": "claude-haiku-4-5", "tier": "small", "input_tokens": 120,
        "output_tokens": 3, "cache_read_tokens": 7, "cache_write_tokens": 11, "ok": True, "error": None,
    }  # fmt: skip
    assert abs(rec["ts"] - time.time()) < 60
    [req] = api.requests
    assert req.path == "/v1/messages" and req["max_tokens"] == 5
    assert req["messages"] == [{"role": "user", "content": "hello"}]
    assert h.sleeps == []


def test_tiers_choose_the_configured_models_and_default_max_tokens(api: FakeAnthropic) -> None:
    api.enqueue(text("a"), text("b"))
    h = Harness(api, small_model="small-m", strong_model="strong-m", max_output_tokens=321)
    assert h.call(tier="small").model == "small-m"
    assert h.call(tier="strong", job="extract").model == "strong-m"
    assert [(r["model"], r["max_tokens"]) for r in api.requests] == [("small-m", 321), ("strong-m", 321)]
    with pytest.raises(ValueError, match="tier"):
        h.call(tier="huge")


def test_the_key_is_sent_but_never_recorded(api: FakeAnthropic) -> None:
    api.enqueue(text("ok"))
    Harness(api).call()
    [req] = api.requests
    assert req.has_credential
    assert KEY not in json.dumps(req.to_json())


def test_system_prompt_is_one_cached_block(api: FakeAnthropic) -> None:
    api.enqueue(text("ok"))
    Harness(api).call(system="STATIC INSTRUCTIONS")
    assert api.requests[0]["system"] == [
        {"type": "text", "text": "STATIC INSTRUCTIONS", "cache_control": {"type": "ephemeral"}}
    ]


def test_cache_reads_reach_the_completion(api: FakeAnthropic) -> None:
    """The fake simulates the prompt cache: the second identical long prefix is a read."""
    api.enqueue(text("1"), text("2"))
    h = Harness(api)
    system = "Rules of the gate. " * 400  # about 1,900 tokens: above the cacheable minimum
    first, second = h.call(system=system), h.call(system=system, user="again")
    assert first.cache_write_tokens > 1000 and first.cache_read_tokens == 0
    assert second.cache_read_tokens == first.cache_write_tokens and second.cache_write_tokens == 0
    assert second.input_tokens < first.cache_write_tokens


def test_secrets_are_redacted_before_sending(api: FakeAnthropic) -> None:
    api.enqueue(text("ok"))
    Harness(api).call(system=f"Admin key {FAKE_SECRET}", user="export DB_PASSWORD=hunter2\npostgres://me:pw1@db/x")
    sent = json.dumps(dict(api.requests[0]))
    for secret in (FAKE_SECRET, "hunter2", "pw1"):
        assert secret not in sent
    assert "[REDACTED:anthropic]" in sent and "[REDACTED:env-assignment]" in sent and "me:[REDACTED" in sent


# --- retries ---------------------------------------------------------------------------


def test_429_honours_retry_after(api: FakeAnthropic) -> None:
    api.enqueue(status(429, retry_after=1), text("ok"))
    h = Harness(api)
    done = h.call()
    assert done.text == "ok" and done.attempts == 2
    assert len(h.sleeps) == 1 and h.sleeps[0] >= 1
    assert len(api.requests) == 2
    assert [r["ok"] for r in h.records] == [True]


def test_529_and_500_are_retried_with_capped_backoff(api: FakeAnthropic) -> None:
    api.enqueue(status(529), status(500), status(503), text("finally"))
    h = Harness(api)
    done = h.call()
    assert done.text == "finally" and done.attempts == 4
    assert len(h.sleeps) == 3 and all(0 < s <= BACKOFF_CAP_S for s in h.sleeps)
    assert len(api.requests) == 4


def test_retries_exhausted_raise_and_record_the_failure(api: FakeAnthropic) -> None:
    api.enqueue(*[status(529)] * 3)
    h = Harness(api, max_retries=2)
    with pytest.raises(ModelCallFailed) as err:
        h.call(user="private conversation text")
    assert err.value.attempts == 3 and err.value.status == 529 and err.value.retryable
    assert err.value.exit_code == 4 and isinstance(err.value, ModelError)
    assert "529" in str(err.value) and "private conversation" not in str(err.value)
    assert err.value.__context__ is None and err.value.__cause__ is None  # no SDK request (and key) attached
    assert len(api.requests) == 3 and len(h.sleeps) == 2
    [rec] = h.records
    assert rec["ok"] is False and "529" in rec["error"] and rec["input_tokens"] == 0


def test_client_errors_are_not_retried(api: FakeAnthropic) -> None:
    api.enqueue(status(400, message="prompt is too long"))
    h = Harness(api)
    with pytest.raises(ModelCallFailed, match="400 invalid_request_error: prompt is too long") as err:
        h.call()
    assert err.value.attempts == 1 and not err.value.retryable
    assert len(api.requests) == 1 and h.sleeps == []


def test_timeout_is_retried_then_fails(api: FakeAnthropic) -> None:
    # Replies 60 s late, so "bounded" is told apart from "waited" with room for a loaded machine
    # (a 2 s reply against a 2.5 s bound was a race there).
    api.enqueue(delay(60.0), delay(60.0))
    h = Harness(api, max_retries=1, timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(ModelCallFailed, match=r"timed out after 0\.5 s") as err:
        h.call()
    assert time.monotonic() - started < 30
    assert err.value.attempts == 2 and err.value.status is None
    assert len(api.requests) == 2 and len(h.sleeps) == 1
    assert h.records[-1]["ok"] is False


def test_timeout_then_success(api: FakeAnthropic) -> None:
    api.enqueue(delay(60.0), text("late but fine"))
    h = Harness(api)
    done = h.call(timeout_s=2)  # the second, prompt answer must fit in it on a loaded machine too
    assert done.text == "late but fine" and done.attempts == 2


# --- the whole call is bounded (issue 16) ------------------------------------------------


def _model_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "memd-model-call" and t.is_alive()]


@pytest.mark.slow
def test_a_drip_feed_is_cut_at_the_timeout(api: FakeAnthropic) -> None:
    """A byte every 2 s never trips a per-read timeout; the answer would take ~10 minutes.
    The attempt is bounded whole: it fails as a timeout, and its socket and thread are let go."""
    api.enqueue(drip(2.0))
    h = Harness(api, timeout_s=2, max_retries=0)
    h.llm._get_client()  # the SDK import (seconds on a slow machine) is not what is measured
    started = time.monotonic()
    with pytest.raises(ModelCallFailed, match="timed out after 2 s") as err:
        h.call()
    assert time.monotonic() - started < 60  # bounded; unbounded it is ~600 s
    assert err.value.retryable and err.value.attempts == 1 and err.value.status is None
    assert len(api.requests) == 1 and h.records[-1]["ok"] is False
    deadline = time.monotonic() + 120
    while _model_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _model_threads() == []  # the client was closed: the abandoned attempt ended too


@pytest.mark.slow
def test_each_retry_is_bounded_too(api: FakeAnthropic) -> None:
    api.enqueue(drip(2.0), drip(2.0), drip(2.0))
    h = Harness(api, timeout_s=2, max_retries=2)
    h.llm._get_client()
    started = time.monotonic()
    with pytest.raises(ModelCallFailed, match="after 3 attempts: timed out after 2 s"):
        h.call()
    assert time.monotonic() - started < 3 * 2 + 60  # three bounded attempts (backoff is not slept here); unbounded ~1800 s
    assert len(api.requests) == 3 and len(h.sleeps) == 2


def test_a_quick_drip_is_an_answer(api: FakeAnthropic) -> None:
    """The drip is a whole response in the end: within the bound it is read like any other."""
    api.enqueue(drip(0.002, text("slowly but surely")))
    assert Harness(api, timeout_s=20).call().text == "slowly but surely"


def test_a_stop_request_starts_no_attempt(api: FakeAnthropic) -> None:
    api.enqueue(text("never"))
    h = Harness(api)
    h.llm.should_stop = lambda: True
    with pytest.raises(ModelCallStopped, match="memd is stopping") as err:
        h.call()
    assert err.value.exit_code == 4 and api.requests == [] and h.records == []


@pytest.mark.slow
def test_a_stop_during_an_attempt_lets_it_end_but_starts_no_other(api: FakeAnthropic) -> None:
    """The attempt in flight runs to its bound; the retries it had left are not started."""
    api.enqueue(drip(2.0), text("never asked"))
    h = Harness(api, timeout_s=2, max_retries=3)
    stop = False
    h.llm.should_stop = lambda: stop

    def asked() -> None:
        nonlocal stop
        deadline = time.monotonic() + 120
        while not api.requests and time.monotonic() < deadline:
            time.sleep(0.01)
        stop = True

    threading.Thread(target=asked, daemon=True).start()
    with pytest.raises(ModelCallStopped, match="not retried after 1 attempt") as err:
        h.call()
    assert "timed out after 2 s" in str(err.value) and "hello" not in str(err.value)
    assert len(api.requests) == 1 and h.sleeps == [] and api.pending == 1
    [rec] = h.records
    assert rec["ok"] is False and "memd is stopping" in rec["error"]


def test_a_stop_during_the_backoff_starts_no_attempt(api: FakeAnthropic) -> None:
    api.enqueue(status(529, retry_after=5), text("never asked"))
    h = Harness(api)
    h.llm.should_stop = lambda: bool(h.sleeps)  # the stop comes while waiting
    with pytest.raises(ModelCallStopped, match="HTTP 529"):
        h.call()
    assert len(api.requests) == 1 and h.sleeps == [5] and api.pending == 1


def test_a_stop_cuts_a_real_backoff_short(api: FakeAnthropic) -> None:
    """A server asking for 100 s between attempts does not hold a stopping daemon for 100 s
    (the model layer's own wait, not an injected one)."""

    api.enqueue(status(529, retry_after=100), text("never asked"))
    llm = LLM(LLMConfig(provider="anthropic", api_key=KEY, base_url=api.url, timeout_s=5))
    stop = threading.Event()
    llm.should_stop = stop.is_set
    threading.Timer(0.5, stop.set).start()
    started = time.monotonic()
    with pytest.raises(ModelCallStopped):
        llm.complete(job="gate", tier="small", system="s", user="u")
    assert time.monotonic() - started < 30  # the wait asked to be 100 s
    assert len(api.requests) == 1


def test_a_real_backoff_without_a_stop_is_waited_whole(api: FakeAnthropic) -> None:
    api.enqueue(status(529, retry_after=0.6), text("ok"))
    llm = LLM(LLMConfig(provider="anthropic", api_key=KEY, base_url=api.url, timeout_s=5), should_stop=lambda: False)
    assert llm.complete(job="gate", tier="small", system="s", user="u").attempts == 2
    assert api.requests[1].ts - api.requests[0].ts >= 0.6


def test_connection_refused_is_retried_then_fails() -> None:
    with FakeAnthropic() as gone:
        url = gone.url
    h = Harness(gone, base_url=url, max_retries=1)
    with pytest.raises(ModelCallFailed, match="connection error"):
        h.call()
    assert len(h.sleeps) == 1


def test_malformed_response_fails_clearly_without_retry(api: FakeAnthropic) -> None:
    api.enqueue(malformed())
    h = Harness(api)
    with pytest.raises(ModelCallFailed, match="malformed response: the body is not valid JSON") as err:
        h.call()
    assert err.value.attempts == 1 and len(api.requests) == 1
    assert h.records[-1]["ok"] is False and "malformed" in h.records[-1]["error"]


def test_a_wait_longer_than_a_worker_should_block_fails_at_once(api: FakeAnthropic) -> None:
    api.enqueue(status(429, retry_after=3600))
    h = Harness(api)
    with pytest.raises(ModelCallFailed, match="wait 3600 s") as err:
        h.call()
    assert err.value.retryable and h.sleeps == []


def test_a_failing_usage_sink_does_not_lose_the_answer(api: FakeAnthropic) -> None:
    api.enqueue(text("kept"))

    def broken(_: dict[str, Any]) -> None:
        raise OSError("disk full")

    llm = LLM(LLMConfig(provider="anthropic", api_key=KEY, base_url=api.url), usage_sink=broken)
    assert llm.complete(job="j", tier="small", system="s", user="u").text == "kept"


def test_logs_carry_neither_prompts_nor_keys(api: FakeAnthropic) -> None:
    api.enqueue(status(529), text("ok"), status(400))
    h = Harness(api)
    with capture_logs() as logs:
        h.call(system="SYSTEM-PROMPT-TEXT", user="USER-PROMPT-TEXT")
        with pytest.raises(ModelCallFailed):
            h.call(system="SYSTEM-PROMPT-TEXT", user="USER-PROMPT-TEXT")
    events = [e["event"] for e in logs]
    assert events == ["model.retrying", "model.completed", "model.failed"]
    dumped = json.dumps(logs, default=str)
    for needle in ("SYSTEM-PROMPT-TEXT", "USER-PROMPT-TEXT", KEY):
        assert needle not in dumped


# --- budget and availability -------------------------------------------------------------


def test_budget_exceeded_sends_nothing(api: FakeAnthropic) -> None:
    api.enqueue(text("never"))
    h = Harness(api, used_today=2_000_000, daily_token_budget=2_000_000)
    with pytest.raises(BudgetExceeded) as err:
        h.call()
    assert err.value.used == 2_000_000 and err.value.budget == 2_000_000 and err.value.exit_code == 4
    assert api.requests == [] and h.records == []
    assert h.llm.available().reason == "budget" and not h.llm.available()


def test_zero_budget_is_unlimited(api: FakeAnthropic) -> None:
    api.enqueue(text("ok"))
    assert Harness(api, used_today=10**12, daily_token_budget=0).call().text == "ok"


def test_offline_provider_makes_no_calls(api: FakeAnthropic) -> None:
    h = Harness(api, provider="offline")
    assert h.llm.provider == "offline"
    with pytest.raises(ModelUnavailable, match="offline provider makes no model calls"):
        h.call()
    assert api.requests == [] and h.llm.available().reason == "offline"


def test_auto_provider_follows_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    assert LLM(LLMConfig(provider="auto")).provider == "offline"
    assert LLM(LLMConfig(provider="auto", api_key="x")).provider == "anthropic"
    monkeypatch.setenv("ANTHROPIC_API_KEY", "from-env")
    assert LLM(LLMConfig(provider="auto")).provider == "anthropic"


def test_anthropic_without_a_key_waits_visibly(api: FakeAnthropic) -> None:
    llm = LLM(LLMConfig(provider="anthropic", base_url=api.url))
    avail = llm.available()
    assert not avail and avail.reason == "no-key" and "ANTHROPIC_API_KEY" in avail.why
    with pytest.raises(ModelUnavailable, match="no API key"):
        llm.complete(job="gate", tier="small", system="s", user="u")
    assert api.requests == []


def test_environment_supplies_key_and_endpoint(api: FakeAnthropic, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
    api.enqueue(text("via env"))
    llm = LLM(LLMConfig())
    assert llm.available() and llm.base_url == api.url
    assert llm.complete(job="gate", tier="small", system="s", user="u").text == "via env"
    assert api.requests[0].has_credential


def test_config_hides_the_key_and_rejects_nonsense() -> None:
    cfg = LLMConfig(api_key="super-secret-value")
    assert "super-secret-value" not in repr(cfg) and "super-secret-value" not in repr(LLM(cfg))
    with pytest.raises(ValueError, match="provider"):
        LLMConfig(provider="openai")
    with pytest.raises(ValueError, match="max_retries"):
        LLMConfig(max_retries=-1)
    assert (LLMConfig().small_model, LLMConfig().strong_model) == ("claude-haiku-4-5", "claude-sonnet-4-6")
    assert (LLMConfig().timeout_s, LLMConfig().max_retries, LLMConfig().daily_token_budget) == (60, 4, 2_000_000)


# --- pure policy ---------------------------------------------------------------------------


class _Headers(dict):  # type: ignore[type-arg]
    pass


def test_retry_after_forms() -> None:
    now = 1_000_000.0
    assert parse_retry_after(_Headers({"retry-after": "3"}), now) == 3
    assert parse_retry_after(_Headers({"retry-after": "1.5"}), now) == 1.5
    assert parse_retry_after(_Headers({"retry-after-ms": "250", "retry-after": "9"}), now) == 0.25
    date = format_datetime(datetime.fromtimestamp(now + 30, UTC), usegmt=True)
    assert parse_retry_after(_Headers({"retry-after": date}), now) == pytest.approx(30, abs=1)
    assert parse_retry_after(_Headers({"retry-after": "soon"}), now) is None
    assert parse_retry_after(_Headers(), now) is None and parse_retry_after(None, now) is None


def test_backoff_grows_with_jitter_and_is_capped() -> None:
    rng = random.Random(1)
    for attempt in range(1, 12):
        step = min(BACKOFF_CAP_S, 2 ** (attempt - 1))
        assert step / 2 <= backoff_delay(attempt, rng) <= step
    assert backoff_delay(50, rng) <= BACKOFF_CAP_S


# --- start-up cost and process mode of the fake -------------------------------------------


def test_importing_the_model_layer_does_not_import_the_sdk() -> None:
    code = "import memd.llm.client, memd.memory.operations, memd.redact.redactor, sys; assert 'anthropic' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=60)


def test_fake_runs_as_a_process_with_a_scripted_rule(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({
        "replies": [{"kind": "status", "status": 529}],
        "rules": [{"if_system_contains": "GATE", "reply": {"kind": "text", "text": "no"}}],
        "default": "default answer",
    }))  # fmt: skip
    port_file, record = tmp_path / "port", tmp_path / "requests.jsonl"
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "fakeapi.py"), "--port-file", str(port_file),
         "--script", str(script), "--record", str(record)],
        cwd=REPO,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not port_file.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "fakeapi did not start"
            time.sleep(0.02)
        url = f"http://127.0.0.1:{int(port_file.read_text())}"
        sleeps: list[float] = []
        llm = LLM(LLMConfig(provider="anthropic", api_key=KEY, base_url=url), sleep=sleeps.append)
        assert llm.complete(job="gate", tier="small", system="GATE: yes or no", user="hi").text == "no"
        assert len(sleeps) == 1  # the scripted 529 came first
        assert llm.complete(job="extract", tier="strong", system="EXTRACT", user="hi").text == "default answer"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert [line["path"] for line in lines] == ["/v1/messages"] * 3
    assert all(line["has_credential"] for line in lines) and KEY not in record.read_text()
    assert lines[-1]["body"]["model"] == "claude-sonnet-4-6"

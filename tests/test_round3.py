"""Hostile inputs and faults, round 3 (issue 22): each case pinned where it was fixed."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from pytest_mock import MockerFixture

from cooldown import (
    APIError,
    CredentialPool,
    ModelCooldown,
    ModelCooldownExhausted,
    NanoGPTKeyPool,
    api_error_response,
    classify_upstream_outcome,
    config,
    configured_nanogpt_keys,
    cooldown_error_response,
    init_app,
    model_cooldown,
    rate_limit_advice,
    recording_context,
    retry_after_seconds,
    settings,
    status_blueprint,
)
from cooldown.pools.legacy import MAX_LIVE_RESTS
from cooldown.pools.validation import MAX_REJECTIONS
from cooldown.store.budget import ScopeBudget
from cooldown.store.schedule import DeadlineSchedule

from .conftest import free_port

THROTTLED = classify_upstream_outcome(429)
P = "ce-gpt-plus"
BASE = "CODEX_EVERYWHERE_API_KEY_GPT_PLUS_POOL"


# -- 2. no full-table rescans under ordinary load -------------------------------------------------


def test_a_now_read_a_moment_earlier_never_truncates_the_table(mocker: MockerFixture) -> None:
    store = ModelCooldown()
    for index in range(2000):
        store.record("p", f"k{index}", THROTTLED, model="m", retry_after_seconds=10**6, now=100.0)
    truncate = mocker.spy(DeadlineSchedule, "_truncate")
    for step in range(200):  # threads whose clocks were read microseconds apart
        store.select("p", ["x"], model="m", now=100.0 - step * 1e-6, max_seconds=3600)
        store.record("p", "y", THROTTLED, model="m", retry_after_seconds=10**6, now=100.0)
    assert truncate.call_count == 0
    store.select("p", ["x"], model="m", now=100.0, max_seconds=60)  # a lowered maximum: once
    store.select("p", ["x"], model="m", now=100.0, max_seconds=60)
    assert truncate.call_count == 1


def test_a_key_at_its_scope_budget_is_counted_once(mocker: MockerFixture) -> None:
    store = ModelCooldown()
    for index in range(3000):  # a full table, so an exact count would be expensive
        store.record("filler", f"f{index}", THROTTLED, model="m", now=0.0)
    for index in range(64):
        store.record("p", "k", THROTTLED, model=f"m{index}", now=0.0)
    scans = mocker.spy(ScopeBudget, "admits")
    counted = 0
    original = sum

    def counting_sum(*args: Any) -> Any:
        nonlocal counted
        counted += 1
        return original(*args)

    mocker.patch("cooldown.store.budget.sum", counting_sum, create=True)
    for index in range(50):
        store.record("p", "k", THROTTLED, model=f"new-{index}", now=1.0)
    assert scans.call_count == 50
    assert counted == 1  # then the credential is known to be at its budget
    assert store.stats()["escalated_total"] == 50


# -- 4. NanoGPT: a rejection recorded while a probe is in flight wins -----------------------------


@pytest.mark.parametrize("scoped", [False, True])
def test_a_rejection_during_a_probe_is_not_ignored(
    scoped: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if scoped:
        monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "true")
    scope = {"model": "m"} if scoped else {}
    keys = ["nano-a", "nano-b"]

    def probe(key: str) -> int:
        if key == "nano-a":  # the key is throttled by a real request while we probe it
            NanoGPTKeyPool.record_result("nano-a", 429, now=0.0, **scope)
        return 200

    chosen = NanoGPTKeyPool.select_key(keys, probe, now=0.0, **scope)
    assert chosen == "nano-b"


# -- 5. the demo --------------------------------------------------------------------------------


def test_the_demo_survives_a_key_rotated_away_mid_request(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from cooldown.demo import DemoConfig, create_app
    from cooldown.demo.upstream import SimulatedUpstream

    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "true")
    monkeypatch.setenv("ROTATE_DEMO_KEY", "sk-ROTATED-AWAY-0001")
    upstream = SimulatedUpstream(quota=5, window=30)

    def rotating_dispatch(key: str, model: str, body: Any) -> Any:
        monkeypatch.setenv("ROTATE_DEMO_KEY", "sk-the-new-key-0002")  # rotated mid-request
        return upstream.answer(key, model)

    app = create_app(DemoConfig(rotating_dispatch, keys_env="ROTATE_DEMO_KEY"))
    with caplog.at_level(logging.DEBUG):
        answer = app.test_client().post("/v1/chat/completions", json={"model": "gpt-demo"})
    assert answer.status_code == 200
    assert "X-Upstream-Key-Index" not in answer.headers
    assert "sk-ROTATED-AWAY-0001" not in caplog.text


def test_the_demo_answers_400_to_json_nested_too_deeply(monkeypatch: pytest.MonkeyPatch) -> None:
    from cooldown.demo import DemoConfig, SimulatedUpstream, create_app
    from cooldown.demo.gateway import simulated_dispatch

    app = create_app(DemoConfig(simulated_dispatch(SimulatedUpstream()), keys_env="NO_KEYS_HERE"))
    answer = app.test_client().post(
        "/v1/chat/completions", data=b"[" * 5000, content_type="application/json"
    )
    assert answer.status_code == 400


# -- 6. a secret that is not UTF-8 ----------------------------------------------------------------


def test_a_non_utf8_secret_turns_sharing_off_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, fresh_warnings: None, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "true")
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_SECRET", "s" * 32 + "\udcff")  # a byte 0xff
    monkeypatch.setenv(BASE, "sk-utf8-test")
    with caplog.at_level(logging.WARNING, logger="cooldown"):
        assert settings().redis_url is None
        CredentialPool.record(P, "sk-utf8-test", 429, model="m")
        with pytest.raises(ModelCooldownExhausted):
            CredentialPool.select(P, model="m")
    assert [record.getMessage() for record in caplog.records] == [
        "MODEL_COOLDOWN_REDIS_SECRET is malformed; cooldowns stay on, but are not shared"
    ]


# -- 9. every map is bounded ----------------------------------------------------------------------


def test_the_legacy_map_caps_live_rests_and_counts_the_dropped() -> None:
    for index in range(MAX_LIVE_RESTS + 500):
        CredentialPool.record(P, f"sk-junk-{index}", 429, now=0.0)
    assert len(CredentialPool._legacy) == MAX_LIVE_RESTS
    assert CredentialPool._legacy.dropped_total == 500
    CredentialPool.record(P, "sk-junk-0", 401, now=1.0)  # a held key's rest still updates
    assert CredentialPool._legacy.snapshot()[(P, "sk-junk-0")] == 301.0


def test_nanogpt_rejections_are_capped_and_counted() -> None:
    for index in range(MAX_REJECTIONS + 20):
        NanoGPTKeyPool.invalidate(f"nano-junk-{index}", 401, now=0.0)
    assert len(NanoGPTKeyPool.rejected_until) == MAX_REJECTIONS
    assert NanoGPTKeyPool.rejections_dropped_total == 20


def test_the_warn_once_set_is_capped(fresh_warnings: None) -> None:
    names = {f"NANOGPT_API_KEY_{index}": "your-key-here" for index in range(3000)}
    configured_nanogpt_keys(names)
    assert len(config._warned) == config.WARNED_NAMES_LIMIT
    assert config.warnings_suppressed_total >= 3000 - config.WARNED_NAMES_LIMIT


# -- 10. clear exception types ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: recording_context(429, {}, outcome="x"), TypeError),  # type: ignore[arg-type]
        (lambda: recording_context(429, {}, received_at=10**400), ValueError),
        (lambda: recording_context(429, {}, received_at=-math.inf), ValueError),
        (lambda: retry_after_seconds({"Retry-After": "5"}, received_at=math.nan), ValueError),
        (lambda: rate_limit_advice({}, received_at="now"), TypeError),  # type: ignore[arg-type]
        (lambda: model_cooldown.explain("p", ["k"], legacy_rest_until=["k"]), TypeError),  # type: ignore[arg-type]
        (lambda: CredentialPool.keys(P, {1: "x"}), TypeError),  # type: ignore[dict-item]
        (lambda: configured_nanogpt_keys({None: "x"}), TypeError),  # type: ignore[dict-item]
        (lambda: init_app(None), TypeError),  # type: ignore[arg-type]
        (lambda: status_blueprint(url_prefix=1), TypeError),  # type: ignore[arg-type]
        (lambda: cooldown_error_response("not an error"), TypeError),  # type: ignore[arg-type]
        (lambda: api_error_response(ValueError("x")), TypeError),  # type: ignore[arg-type]
        (lambda: APIError("x", status_code=1.5), TypeError),  # type: ignore[arg-type]
        (lambda: APIError("x", status_code=99), ValueError),
    ],
)
def test_wrong_input_is_a_clear_error(call: Callable[[], object], error: type[Exception]) -> None:
    with pytest.raises(error):
        call()


def test_a_list_variable_nested_too_deeply_is_malformed_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, fresh_warnings: None, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("NANOGPT_API_KEYS", "[" * 2000)
    with caplog.at_level(logging.WARNING, logger="cooldown"):
        assert configured_nanogpt_keys() == []
        assert configured_nanogpt_keys({"NANOGPT_API_KEYS": "[" * 2000}) == []
    assert [record.getMessage() for record in caplog.records] == [
        "NANOGPT_API_KEYS is malformed (nested too deeply); it is skipped"
    ]


# -- 11. shared-state degradation -----------------------------------------------------------------


class FailingCommand:
    """A Redis call that takes `seconds` and then fails, as a frozen server does."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self) -> Any:
        time.sleep(self.seconds)
        raise ConnectionError("timed out")


def test_the_backoff_counts_from_the_failure_not_the_start_of_the_call() -> None:
    from cooldown.shared.observations import FIRST_BACKOFF_SECONDS, RedisObservations

    backend = RedisObservations("redis://127.0.0.1:1/0")
    assert backend._call_with(100.0, FailingCommand(0.2), lambda answer: answer) is None
    assert backend._retry_at == pytest.approx(100.2 + FIRST_BACKOFF_SECONDS, abs=0.05)


def test_concurrent_failures_of_one_outage_do_not_double_the_backoff() -> None:
    from cooldown.shared.observations import FIRST_BACKOFF_SECONDS, RedisObservations

    backend = RedisObservations("redis://127.0.0.1:1/0")
    threads = [
        threading.Thread(target=backend._call_with, args=(100.0, FailingCommand(0.1), repr))
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert backend._backoff == FIRST_BACKOFF_SECONDS
    assert backend.stats()["shared_errors_total"] == 8
    retry_at = backend._retry_at
    backend._call_with(retry_at, FailingCommand(0.0), repr)  # the retry after it fails
    assert backend._backoff == 2 * FIRST_BACKOFF_SECONDS


def test_members_scored_infinite_stop_arming_the_capacity_guard(
    redis_servers: Callable[..., Any],
) -> None:
    import redis

    from cooldown.shared.observations import RedisObservations

    server = redis_servers()
    client = redis.Redis.from_url(server.url)
    client.zadd("{inf}:deadlines", {f"tampered-{index}": math.inf for index in range(200)})
    store = ModelCooldown()
    store.attach_shared(
        RedisObservations(server.url, prefix="inf", max_entries=200), secret=b"s" * 32
    )
    now = 1000.0
    for step in range(5):  # each write cuts up to 64 of them to now + max
        store.record("p", f"k{step}", THROTTLED, model="m", now=now, max_seconds=20)
    assert client.zcount("{inf}:deadlines", "(+inf", "+inf") == 0
    assert client.zcount("{inf}:deadlines", "+inf", "+inf") == 0
    later = now + 30  # past the maximum: every cut member has expired
    assert store.select("p", ["fresh"], model="m", now=later, max_seconds=20) == "fresh"
    store.record("p", "fresh", THROTTLED, model="m", now=later, max_seconds=20)
    assert store.select("p", ["other"], model="m", now=later, max_seconds=20) == "other"
    client.close()
    store.detach_shared()


def test_a_frozen_sentinel_delays_a_call_by_one_timeout_at_most(
    redis_servers: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    primary = redis_servers()
    sentinel = redis_servers(sentinel_of=primary)
    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "true")
    monkeypatch.setenv(
        "MODEL_COOLDOWN_REDIS_URL", f"redis+sentinel://127.0.0.1:{sentinel.port}/cooldown-primary"
    )
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_SECRET", "sentinel-secret-" + "x" * 20)
    monkeypatch.setenv(BASE, "sk-sentinel")
    sentinel.freeze()
    primary.freeze()
    durations = []
    for _ in range(3):
        started = time.monotonic()
        CredentialPool.record(P, "sk-sentinel", 429, model="m")
        durations.append(time.monotonic() - started)
    assert max(durations) < 0.5  # 100 ms timeouts, one attempt: not 2.5 to 5 s
    with pytest.raises(ModelCooldownExhausted):  # degraded to local: still cooling
        CredentialPool.select(P, model="m")


def test_an_unreachable_sentinel_is_as_quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "true")
    monkeypatch.setenv(
        "MODEL_COOLDOWN_REDIS_URL", f"redis+sentinel://127.0.0.1:{free_port()}/nowhere"
    )
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_SECRET", "sentinel-secret-" + "x" * 20)
    started = time.monotonic()
    CredentialPool.record(P, "sk-x", 429, model="m")
    assert time.monotonic() - started < 0.5


# -- 3. one caller's `now` cannot rewrite everyone's state ---------------------------------------


def test_a_wall_clock_now_is_refused_before_it_prunes_anything() -> None:
    store = ModelCooldown()
    store.record("p", "k", THROTTLED, model="m", retry_after_seconds=60)
    with pytest.raises(ValueError, match=r"time\.monotonic"):
        store.select("p", ["k"], model="m", now=time.time())
    with pytest.raises(ValueError, match=r"time\.monotonic"):
        CredentialPool.record(P, "k", 429, model="m", now=time.time())
    with pytest.raises(ModelCooldownExhausted):  # the real cooldown is still there
        store.select("p", ["k"], model="m")


def test_a_caller_passing_zero_does_not_cut_other_callers_cooldowns() -> None:
    store = ModelCooldown()
    store.record("p", "k", THROTTLED, model="m", retry_after_seconds=3000, now=5000.0)
    assert store.select("p", ["other"], model="m", now=0.0) == "other"
    with pytest.raises(ModelCooldownExhausted) as raised:
        store.select("p", ["k"], model="m", now=5001.0)
    assert raised.value.retry_after == 2999  # not cut to 0 + 3600
    store.select("p", ["other"], model="m", now=5001.0, max_seconds=60)  # a lowered maximum
    with pytest.raises(ModelCooldownExhausted) as lowered:
        store.select("p", ["k"], model="m", now=5001.0, max_seconds=60)
    assert lowered.value.retry_after == 60

"""Each defect found by trying the first wave at its edges, pinned by a test that failed then."""

from __future__ import annotations

import logging
import os
import random
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator

import pytest
from flask import Blueprint, Flask, Response
from flask_cors import CORS

from cooldown import (
    MAX_ENTRIES,
    CooldownError,
    CredentialPool,
    ModelCooldown,
    ModelCooldownCapacity,
    ModelCooldownExhausted,
    NanoGPTKeyPool,
    classify_upstream_outcome,
    configured_nanogpt_keys,
    cooldown_error_response,
    init_app,
    model_cooldown,
    recording_context,
    retry_after_seconds,
    selection_scope,
    settings,
)
from cooldown.store import SCOPES_PER_CREDENTIAL
from cooldown.web.errors import expose_retry_after

THROTTLED = classify_upstream_outcome(429)
LONG_DIGITS = "7" * 5000  # past Python's int-string conversion limit
BASE = "CODEX_EVERYWHERE_API_KEY_GPT_PLUS_POOL"


# -- 1. Flask-CORS keeps its exposed headers ---------------------------------------------------


def cors_app(*, cors_first: bool) -> Flask:
    app = Flask("cors")
    if cors_first:
        CORS(app, expose_headers=["X-Req-Id"])
        init_app(app)
    else:
        init_app(app)
        CORS(app, expose_headers=["X-Req-Id"])

    @app.post("/chat")
    def chat() -> Response:
        raise ModelCooldownExhausted(20)

    return app


@pytest.mark.parametrize("cors_first", [True, False])
def test_flask_cors_exposed_headers_survive_a_cooldown_429(cors_first: bool) -> None:
    response = (
        cors_app(cors_first=cors_first)
        .test_client()
        .post("/chat", headers={"Origin": "https://app.example"})
    )
    assert response.status_code == 429
    fields = response.headers.getlist("Access-Control-Expose-Headers")
    assert len(fields) == 1
    names = [name.strip().lower() for name in fields[0].split(",")]
    assert sorted(names) == ["retry-after", "x-req-id"]
    assert response.headers["Access-Control-Allow-Origin"] == "https://app.example"  # CORS's


def test_every_expose_field_is_merged_once() -> None:
    response = Response(headers={"Retry-After": "5"})
    response.headers.add("Access-Control-Expose-Headers", "X-A, retry-after")
    response.headers.add("Access-Control-Expose-Headers", "x-a, X-B")
    expose_retry_after(response)
    assert response.headers.getlist("Access-Control-Expose-Headers") == ["X-A, retry-after, X-B"]


# -- 2. over-long digit strings -----------------------------------------------------------------


def test_overlong_max_seconds_is_malformed_not_raised(
    fresh_warnings: None, caplog: pytest.LogCaptureFixture
) -> None:
    env = {"MODEL_COOLDOWN_ENABLED": "true", "MODEL_COOLDOWN_MAX_SECONDS": LONG_DIGITS}
    with caplog.at_level(logging.WARNING, logger="cooldown"):
        assert settings(env).enabled is False
        assert settings(env).enabled is False
    assert [record.getMessage() for record in caplog.records] == [
        "MODEL_COOLDOWN_MAX_SECONDS is malformed; model cooldown is disabled"
    ]


def test_overlong_numbered_names_are_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BASE, "sk-base")
    monkeypatch.setenv(f"{BASE}_{LONG_DIGITS}", "sk-overlong")
    monkeypatch.setenv(f"{BASE}_2", "sk-two")
    assert CredentialPool.keys("ce-gpt-plus") == ["sk-base", "sk-two"]
    nano = {
        "NANOGPT_API_KEY_1": "nano-one",
        f"NANOGPT_API_KEY_{LONG_DIGITS}": "nano-overlong",
        "NANOGPT_API_KEY_2": "nano-two",
        "NANOGPT_PREFERRED_KEY_INDEX": LONG_DIGITS,
    }
    assert configured_nanogpt_keys(nano) == ["nano-one", "nano-two"]


# -- 3. programming errors are TypeError / ValueError -------------------------------------------


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: selection_scope("p", "m", quota_buckets="str"), TypeError),
        (lambda: settings({"MODEL_COOLDOWN_ENABLED": 5}), TypeError),
        (lambda: settings({"MODEL_COOLDOWN_ENABLED": None}), TypeError),
        (lambda: settings({"MODEL_COOLDOWN_ENABLED": ["true"]}), TypeError),
        (lambda: settings("MODEL_COOLDOWN_ENABLED=1"), TypeError),
        (lambda: configured_nanogpt_keys({"NANOGPT_API_KEYS": None}), TypeError),
        (lambda: configured_nanogpt_keys({"NANOGPT_API_KEY": 5}), TypeError),
        (lambda: CredentialPool.keys("ce-gpt-plus", {BASE: b"sk"}), TypeError),
        (lambda: ModelCooldown().select("p", iter([]), model="m"), TypeError),
        (lambda: ModelCooldown().available("p", {"k": 1}, model="m"), TypeError),
        (lambda: CredentialPool.available("ce-gpt-plus", iter(["k"]), model="m"), TypeError),
        (lambda: ModelCooldown().select("p", ["k"], model="m", now=1e300), ValueError),
        (lambda: ModelCooldown().record("p", "k", THROTTLED, model="m", now=-1e300), ValueError),
        (lambda: retry_after_seconds({}, now=1.0), TypeError),
        (lambda: recording_context(429, {}, now=1.0), TypeError),
    ],
)
def test_wrong_input_is_a_clear_error(call: Callable[[], object], error: type[Exception]) -> None:
    with pytest.raises(error):
        call()


class CountingBackend:
    """A stand-in for Redis that counts what reaches it."""

    def __init__(self) -> None:
        self.calls = 0

    def record(
        self, entry: str, deadline: float, now: float, max_seconds: int, foreign: object = None
    ) -> bool:
        self.calls += 1
        return False

    def clear(self, entry: str, now: float) -> None:
        self.calls += 1

    def lookup(self, entries: object, now: float, max_seconds: int) -> None:
        self.calls += 1

    def stats(self) -> dict[str, int | bool]:
        return {"shared": True, "shared_errors_total": 0, "shared_degraded": False}


def test_a_huge_now_is_refused_before_reaching_redis() -> None:
    store = ModelCooldown()
    backend = CountingBackend()
    store.attach_shared(backend, secret=b"s" * 32)
    with pytest.raises(ValueError, match="monotonic"):
        store.select("p", ["k"], model="m", now=1e300)
    with pytest.raises(ValueError, match="monotonic"):
        store.record("p", "k", THROTTLED, model="m", now=1e300)
    assert backend.calls == 0


# -- 4. fork safety ------------------------------------------------------------------------------


def fork_and_select() -> int:
    """Fork, select in the child, and return its exit status (-1 if it hung for 10 s)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork with threads
        pid = os.fork()
    if pid == 0:  # the child
        try:
            CredentialPool.record("ce-gpt-plus", "sk-child", 429, model="m")
            CredentialPool.select("ce-gpt-plus", model="m")
            NanoGPTKeyPool.select_available_key(["nano"], model="m")
            settings()
        finally:
            os._exit(0)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return -1


@pytest.fixture
def locks_held_by_another_thread() -> Iterator[None]:
    """Every lock the child needs is held by a parent thread at the moment of the fork."""
    from cooldown import config

    locks = [
        model_cooldown._state.lock,
        CredentialPool._lock,
        CredentialPool._legacy._lock,
        NanoGPTKeyPool._lock,
        NanoGPTKeyPool._validation,
        config._warned_lock,
    ]
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        for lock in locks:
            lock.acquire()
        holding.set()
        release.wait(30)
        for lock in reversed(locks):
            lock.release()

    holder = threading.Thread(target=hold)
    holder.start()
    holding.wait(10)
    yield
    release.set()
    holder.join()


def test_a_forked_child_gets_usable_locks(
    enabled: None, monkeypatch: pytest.MonkeyPatch, locks_held_by_another_thread: None
) -> None:
    monkeypatch.setenv(BASE, "sk-child")
    assert [fork_and_select() for _ in range(5)] == [0] * 5


# -- 5. the legacy map stays bounded -------------------------------------------------------------


def test_legacy_map_is_bounded_by_its_live_rests() -> None:
    largest = 0
    for index in range(200_000):  # a new key every 0.4 s (80 000 s in all), each resting 300 s
        CredentialPool.record("ce-gpt-plus", f"sk-{index}", 401, now=index * 0.4)
        largest = max(largest, len(CredentialPool._legacy))
    assert largest <= 1024
    assert CredentialPool.available("ce-gpt-plus", ["sk-199999"], now=199_999 * 0.4) == []


def test_live_legacy_rests_are_never_dropped() -> None:
    for index in range(5000):  # all live at once: the map grows, nothing is forgotten
        CredentialPool.record("ce-gpt-plus", f"sk-{index}", 429, now=0.0)
    keys = [f"sk-{index}" for index in range(5000)]
    assert CredentialPool.available("ce-gpt-plus", keys, now=1.0) == []
    assert len(CredentialPool._legacy) <= max(1024, 2 * 5000)


# -- 6. junk model names cannot take the gateway down --------------------------------------------


def test_junk_scopes_through_one_provider_leave_the_others_selectable(
    enabled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BASE, "sk-plus-1")
    monkeypatch.setenv(f"{BASE}_1", "sk-plus-2")
    monkeypatch.setenv(f"{BASE}_2", "sk-plus-3")
    monkeypatch.setenv("CODEX_EVERYWHERE_API_KEY_GPT_PRO_POOL", "sk-pro")
    CredentialPool.record("ce-gpt-plus", "sk-plus-1", 429, model="gpt-4o", now=0.0)
    rng = random.Random(7)
    for _ in range(12_000):
        junk = f"junk-{rng.getrandbits(64):x}"
        for key in ("sk-plus-1", "sk-plus-2", "sk-plus-3"):
            CredentialPool.record("ce-gpt-plus", key, 429, model=junk, now=1.0)
    stats = model_cooldown.stats()
    assert stats["live_observations"] <= 3 * (SCOPES_PER_CREDENTIAL + 1) < MAX_ENTRIES // 10
    assert stats["escalated_total"] > 0
    assert stats["dropped_at_capacity_total"] == 0
    assert CredentialPool.select("ce-gpt-pro", model="gpt-4o", now=2.0) == "sk-pro"
    with pytest.raises(ModelCooldownExhausted):  # the known-cooling scope still cools
        CredentialPool.select("ce-gpt-plus", model="gpt-4o", now=2.0)
    assert CredentialPool._legacy.snapshot() == {}  # an escalation is not an auth rejection


def test_escalation_cools_the_credential_for_every_scope(store: ModelCooldown) -> None:
    for index in range(SCOPES_PER_CREDENTIAL):
        store.record("p", "k", THROTTLED, model=f"m{index}", now=0)
    assert store.available("p", ["k"], model="fresh", now=1) == ["k"]
    store.record("p", "k", THROTTLED, model="one-too-many", now=1)
    assert store.stats()["escalated_total"] == 1
    assert store.entry_count == SCOPES_PER_CREDENTIAL + 1
    assert store.available("p", ["k"], model="fresh", now=2) == []
    assert store.available("p", ["other"], model="fresh", now=2) == ["other"]
    assert store.available("p", ["k"], model="m0", now=59) == []  # known scopes stay cooling
    assert store.available("p", ["k"], model="fresh", now=61) == ["k"]  # until its deadline


# -- 7. a lowered maximum shortens live cooldowns ------------------------------------------------


def test_a_lowered_maximum_truncates_live_cooldowns_once(store: ModelCooldown) -> None:
    store.record("p", "k", THROTTLED, model="m", retry_after_seconds=3000, now=0)
    with pytest.raises(ModelCooldownExhausted) as raised:
        store.select("p", ["k"], model="m", max_seconds=10, now=5)
    assert raised.value.retry_after == 10
    assert store.select("p", ["k"], model="m", max_seconds=3600, now=15) == "k"


def test_lowering_the_setting_shortens_a_pool_cooldown(
    enabled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BASE, "sk-only")
    CredentialPool.record("ce-gpt-plus", "sk-only", 429, model="m", retry_after_seconds=3000, now=0)
    monkeypatch.setenv("MODEL_COOLDOWN_MAX_SECONDS", "10")
    with pytest.raises(ModelCooldownExhausted) as raised:
        CredentialPool.select("ce-gpt-plus", model="m", now=100)
    assert raised.value.retry_after == 10
    monkeypatch.setenv("MODEL_COOLDOWN_MAX_SECONDS", "3600")
    assert CredentialPool.select("ce-gpt-plus", model="m", now=110) == "sk-only"


def test_a_lowered_maximum_shortens_the_capacity_guard() -> None:
    store = ModelCooldown(max_entries=1)
    store.record("p", "a", THROTTLED, model="m", retry_after_seconds=3000, now=0)
    store.record("p", "b", THROTTLED, model="m", retry_after_seconds=3000, now=0)
    with pytest.raises(ModelCooldownCapacity) as raised:
        store.select("p", ["c"], model="m", max_seconds=10, now=1)
    assert raised.value.retry_after == 10
    assert store.select("p", ["c"], model="m", max_seconds=10, now=11) == "c"


# -- 9. a slow probe blocks only the callers that need it ----------------------------------------


def test_a_slow_probe_blocks_no_caller_that_does_not_probe(enabled: None) -> None:
    keys = ["nano-a", "nano-b"]
    probing, release = threading.Event(), threading.Event()
    probes: list[str] = []

    def slow_probe(key: str) -> int:
        probes.append(key)
        probing.set()
        release.wait(10)
        return 200

    results: dict[str, object] = {}
    validator = threading.Thread(
        target=lambda: results.setdefault("first", NanoGPTKeyPool.select_key(keys, slow_probe))
    )
    validator.start()
    assert probing.wait(10)
    waiter = threading.Thread(  # a second selection waits for the same validation
        target=lambda: results.setdefault("second", NanoGPTKeyPool.select_key(keys, slow_probe))
    )
    waiter.start()
    # While the probe hangs, the callers that never probe finish at once.
    NanoGPTKeyPool.record_result("nano-b", 200)
    NanoGPTKeyPool.invalidate("nano-b", 429)
    assert NanoGPTKeyPool.select_available_key(keys) == "nano-a"
    NanoGPTKeyPool.record_result("nano-a", 429, model="m")
    assert not release.is_set()
    assert validator.is_alive()
    release.set()
    validator.join(10)
    waiter.join(10)
    assert results == {"first": "nano-a", "second": "nano-a"}
    assert probes == ["nano-a"]


# -- 10. a blueprint's Exception handler and the documented fix ----------------------------------


def test_a_blueprint_exception_handler_wins_unless_cooldown_errors_are_reraised() -> None:
    app = Flask("precedence")
    init_app(app)
    blueprint = Blueprint("api", __name__)

    @blueprint.errorhandler(Exception)
    def any_error(error: Exception) -> tuple[str, int]:
        return "internal", 500

    @blueprint.post("/chat")
    def chat() -> str:
        raise ModelCooldownExhausted(7)

    app.register_blueprint(blueprint)
    assert app.test_client().post("/chat").status_code == 500  # Flask's rule, not ours

    fixed = Flask("fixed")
    init_app(fixed)
    repaired = Blueprint("api", __name__)
    repaired.register_error_handler(CooldownError, cooldown_error_response)  # the fix

    @repaired.errorhandler(Exception)
    def any_other(error: Exception) -> tuple[str, int]:
        return "internal", 500

    repaired.add_url_rule("/chat", view_func=chat, methods=["POST"])
    fixed.register_blueprint(repaired)
    answer = fixed.test_client().post("/chat")
    assert (answer.status_code, answer.headers["Retry-After"]) == (429, "7")


# -- secrecy of the new paths --------------------------------------------------------------------


def test_new_paths_leak_no_names(
    enabled: None,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    fresh_warnings: None,
) -> None:
    monkeypatch.setenv(BASE, "sk-SECRET-escalated")
    monkeypatch.setenv(f"{BASE}_1", "your-SECRET-placeholder")
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_URL", "redis://:SECRET-pw@[bad")
    with caplog.at_level(logging.DEBUG):
        assert CredentialPool.keys("ce-gpt-plus") == ["sk-SECRET-escalated"]
        for index in range(SCOPES_PER_CREDENTIAL + 3):
            CredentialPool.record(
                "ce-gpt-plus", "sk-SECRET-escalated", 429, model=f"SECRET-model-{index}", now=0
            )
        monkeypatch.setenv("MODEL_COOLDOWN_MAX_SECONDS", "5")
        with pytest.raises(ModelCooldownExhausted) as raised:
            CredentialPool.select("ce-gpt-plus", model="SECRET-model-0", now=1)
    dump = "\n".join(
        [caplog.text, str(raised.value), repr(vars(model_cooldown)), str(model_cooldown.stats())]
    )
    assert "placeholder" in caplog.text
    assert "REDIS_URL is malformed" in caplog.text
    assert "SECRET" not in dump
    assert b"SECRET" not in b"".join(model_cooldown._state.deadlines)


# -- placeholder values are not keys -------------------------------------------------------------

PLACEHOLDERS = [
    "your-api-key",
    "YOUR_KEY_HERE",
    "<paste your key>",
    "changeme",
    "REPLACE_ME",
    "replaceme",
]


@pytest.mark.parametrize("placeholder", PLACEHOLDERS)
def test_a_placeholder_is_not_a_credential_pool_key(
    placeholder: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    fresh_warnings: None,
) -> None:
    monkeypatch.setenv(BASE, placeholder)
    monkeypatch.setenv(f"{BASE}_1", "sk-real-key")
    with caplog.at_level(logging.WARNING, logger="cooldown"):
        assert CredentialPool.keys("ce-gpt-plus") == ["sk-real-key"]
        assert CredentialPool.select("ce-gpt-plus") == "sk-real-key"
    assert [r.getMessage() for r in caplog.records] == [
        f"{BASE} holds a placeholder, not a key; it is skipped"
    ]  # once per variable name, never the value


def test_placeholders_are_not_nanogpt_keys(
    caplog: pytest.LogCaptureFixture, fresh_warnings: None
) -> None:
    env = {
        "NANOGPT_API_KEY": "<your key>",
        "NANOGPT_API_KEYS": '["changeme", "nano-listed"]',
        "NANO_GPT_KEYS": "your_key,nano-comma",
        "NANOGPT_API_KEY_1": "replace-me",
        "NANOGPT_API_KEY_2": "nano-numbered",
    }
    with caplog.at_level(logging.WARNING, logger="cooldown"):
        for _ in range(2):
            assert configured_nanogpt_keys(env) == ["nano-listed", "nano-comma", "nano-numbered"]
    warned = sorted(r.getMessage().split()[0] for r in caplog.records)
    assert warned == ["NANOGPT_API_KEY", "NANOGPT_API_KEYS", "NANOGPT_API_KEY_1", "NANO_GPT_KEYS"]
    assert "changeme" not in caplog.text
    assert "your_key" not in caplog.text


def test_a_real_key_that_merely_contains_a_placeholder_word_is_kept() -> None:
    env = {"NANOGPT_API_KEY": "sk-changeme-not-really", "NANOGPT_API_KEY_1": "your"}
    assert configured_nanogpt_keys(env) == ["sk-changeme-not-really", "your"]


def test_a_lowered_maximum_shortens_a_credential_wide_rejection_in_both_pools(
    enabled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BASE, "sk-only")
    CredentialPool.record("ce-gpt-plus", "sk-only", 401, model="m", retry_after_seconds=3000, now=0)
    NanoGPTKeyPool.invalidate("nano-only", 401, model="m", retry_after_seconds=3000, now=0)
    monkeypatch.setenv("MODEL_COOLDOWN_MAX_SECONDS", "10")
    with pytest.raises(ModelCooldownExhausted) as raised:
        CredentialPool.select("ce-gpt-plus", model="other", now=100)
    assert raised.value.retry_after == 10  # what the client is told is also what holds
    with pytest.raises(ModelCooldownExhausted) as nano_raised:
        NanoGPTKeyPool.select_available_key(["nano-only"], model="other", now=100)
    assert nano_raised.value.retry_after == 10
    assert CredentialPool.select("ce-gpt-plus", model="other", now=110) == "sk-only"
    assert NanoGPTKeyPool.select_available_key(["nano-only"], model="other", now=110) == "nano-only"

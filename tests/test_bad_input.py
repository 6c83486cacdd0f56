"""Hostile input at every public entry point: a clear error or the documented default."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from cooldown import (
    APIError,
    CredentialPool,
    ModelCooldown,
    ModelCooldownExhausted,
    NanoGPTKeyPool,
    UpstreamOutcome,
    api_error_response,
    classify_upstream_outcome,
    configured_nanogpt_keys,
    cooldown_error_response,
    init_app,
    is_nanogpt_credential_rejection,
    model_cooldown,
    rate_limit_advice,
    recording_context,
    retry_after_seconds,
    selection_scope,
    settings,
    status_blueprint,
)

THROTTLED = classify_upstream_outcome(429)
HUGE = "x" * 1_000_000
S = ModelCooldown()

RAISES: list[tuple[str, Callable[[], object], type[Exception]]] = [
    ("classify str status", lambda: classify_upstream_outcome("429"), TypeError),  # type: ignore[arg-type]
    ("classify float status", lambda: classify_upstream_outcome(429.0), TypeError),  # type: ignore[arg-type]
    ("classify bool status", lambda: classify_upstream_outcome(True), TypeError),  # type: ignore[arg-type]
    (
        "classify bad transport",
        lambda: classify_upstream_outcome(transport_failure="dns"),
        ValueError,
    ),
    ("outcome bad health", lambda: UpstreamOutcome(False, "neutral", "bad", "r"), ValueError),
    ("store max_entries str", lambda: ModelCooldown(max_entries="9"), TypeError),  # type: ignore[arg-type]
    ("store short secret", lambda: ModelCooldown(secret=b"short"), ValueError),
    ("record None provider", lambda: S.record(None, "k", THROTTLED, model="m"), TypeError),  # type: ignore[arg-type]
    ("record bytes key", lambda: S.record("p", b"k", THROTTLED, model="m"), TypeError),  # type: ignore[arg-type]
    (
        "record dict outcome",
        lambda: S.record("p", "k", {"credential_health": "throttled"}),
        TypeError,
    ),  # type: ignore[arg-type]
    ("record int model", lambda: S.record("p", "k", THROTTLED, model=3), TypeError),  # type: ignore[arg-type]
    ("record bytes bucket", lambda: S.record("p", "k", THROTTLED, quota_bucket=b"b"), TypeError),  # type: ignore[arg-type]
    ("record NaN now", lambda: S.record("p", "k", THROTTLED, model="m", now=math.nan), ValueError),
    ("record inf now", lambda: S.record("p", "k", THROTTLED, model="m", now=math.inf), ValueError),
    ("record str now", lambda: S.record("p", "k", THROTTLED, model="m", now="1"), TypeError),  # type: ignore[arg-type]
    (
        "record NaN fallback",
        lambda: S.record("p", "k", THROTTLED, model="m", fallback_seconds=math.nan),
        ValueError,
    ),
    (
        "record str max",
        lambda: S.record("p", "k", THROTTLED, model="m", max_seconds="60"),
        TypeError,
    ),  # type: ignore[arg-type]
    ("record int wide", lambda: S.record("p", "k", THROTTLED, credential_wide_auth=1), TypeError),  # type: ignore[arg-type]
    ("select str keys", lambda: S.select("p", "key", model="m"), TypeError),
    ("select int key", lambda: S.select("p", [1], model="m"), TypeError),  # type: ignore[list-item]
    (
        "select NaN legacy",
        lambda: S.select("p", ["k"], legacy_rest_until={"k": math.nan}),
        ValueError,
    ),
    (
        "available None legacy value",
        lambda: S.available("p", ["k"], legacy_rest_until={"k": None}),
        TypeError,
    ),  # type: ignore[dict-item]
    ("pool str status", lambda: CredentialPool.record("ce-gpt-plus", "k", "429"), TypeError),  # type: ignore[arg-type]
    ("pool int key", lambda: CredentialPool.record("ce-gpt-plus", 5, 429), TypeError),  # type: ignore[arg-type]
    ("pool int model", lambda: CredentialPool.select("ce-gpt-plus", model=5), TypeError),  # type: ignore[arg-type]
    (
        "pool str outcome",
        lambda: CredentialPool.record("ce-gpt-plus", "k", 429, model="m", outcome="x"),
        TypeError,
    ),  # type: ignore[arg-type]
    ("register empty", lambda: CredentialPool.register("p", ""), ValueError),
    ("nano str keys", lambda: NanoGPTKeyPool.select_key("key", lambda k: 200), TypeError),
    (
        "nano NaN ttl",
        lambda: NanoGPTKeyPool.select_key(["a"], lambda k: 200, check_ttl_seconds=math.nan),
        ValueError,
    ),
    (
        "nano str budget",
        lambda: NanoGPTKeyPool.select_key(["a", "b"], lambda k: 200, check_every_requests="5"),
        TypeError,
    ),  # type: ignore[arg-type]
    ("nano None status", lambda: NanoGPTKeyPool.record_result("a", None), TypeError),  # type: ignore[arg-type]
    ("nano bytes key", lambda: NanoGPTKeyPool.invalidate(b"a", 401), TypeError),  # type: ignore[arg-type]
    ("error float retry", lambda: ModelCooldownExhausted(1.5), TypeError),  # type: ignore[arg-type]
    (
        "recording bad transport",
        lambda: recording_context(
            None, transport_failure="x", environ={"MODEL_COOLDOWN_ENABLED": "1"}
        ),
        ValueError,
    ),
]


@pytest.mark.parametrize(("name", "call", "error"), RAISES, ids=[r[0] for r in RAISES])
def test_clear_error(name: str, call: Callable[[], object], error: type[Exception]) -> None:
    with pytest.raises(error):
        call()


def test_documented_defaults() -> None:
    store = ModelCooldown()
    for advice in (math.nan, math.inf, -1, True, "5", None, [1]):
        assert store.record("p", "k", THROTTLED, model="m", retry_after_seconds=advice, now=0) == 60  # type: ignore[arg-type]
    # max_seconds=-5 is clamped to 1, which truncates the live 60 s entry to 1 s.
    assert store.record("p", "k", THROTTLED, model="m", max_seconds=-5, now=0) == 1
    assert ModelCooldown(max_entries=-1).capacity == 1
    assert retry_after_seconds({"Retry-After": HUGE}) is None
    assert retry_after_seconds({"Retry-After": "\x00\n"}) is None
    assert retry_after_seconds("not headers") is None  # type: ignore[arg-type]
    assert settings({"MODEL_COOLDOWN_ENABLED": HUGE}).enabled is False
    assert selection_scope("p", b"model", environ={"MODEL_COOLDOWN_ENABLED": "1"})["model"] is None
    assert is_nanogpt_credential_rejection(None) is False
    assert configured_nanogpt_keys({"NANOGPT_API_KEYS": '[1, null, {"a": 1}]'}) == []
    assert cooldown_error_response(ModelCooldownExhausted(-7)).headers["Retry-After"] == "1"


@pytest.mark.parametrize(
    "name", ["k\x00\n\t", "🔑-ключ-鍵", HUGE, " ", "\ud800", "a" * 10_000 + "\u202e"]
)
def test_odd_but_valid_strings_work(name: str) -> None:
    store = ModelCooldown()
    assert store.record("p", name, THROTTLED, model=name, quota_bucket=None, now=0) == 60
    assert store.available("p", [name, "other"], model=name, now=1) == ["other"]
    assert store.available("p", [name], model=name + "x", now=1) == [name]


def test_store_still_answers_after_hostile_calls(
    enabled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _, call, error in RAISES:
        with pytest.raises(error):
            call()
    monkeypatch.setenv("CODEX_EVERYWHERE_API_KEY_GPT_PLUS_POOL", "sk-after")
    CredentialPool.record("ce-gpt-plus", "sk-after", 429, model="m", now=0)
    with pytest.raises(ModelCooldownExhausted) as raised:
        CredentialPool.select("ce-gpt-plus", model="m", now=1)
    assert raised.value.retry_after == 59
    assert CredentialPool.select("ce-gpt-plus", model="n", now=1) == "sk-after"
    assert model_cooldown.entry_count == 1


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: recording_context(429, {}, outcome="x"), TypeError),  # type: ignore[arg-type]
        (lambda: recording_context(429, {}, received_at=10**400), ValueError),
        (lambda: recording_context(429, {}, received_at=-math.inf), ValueError),
        (lambda: retry_after_seconds({"Retry-After": "5"}, received_at=math.nan), ValueError),
        (lambda: rate_limit_advice({}, received_at="now"), TypeError),  # type: ignore[arg-type]
        (lambda: model_cooldown.explain("p", ["k"], legacy_rest_until=["k"]), TypeError),  # type: ignore[arg-type]
        (lambda: CredentialPool.keys("ce-gpt-plus", {1: "x"}), TypeError),  # type: ignore[dict-item]
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

"""`register(limits=...)` and `MODEL_COOLDOWN_LIMITS`: a pool never starts an attempt that
would pass a window the provider documents, and says so to clients and operators."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from flask import Flask

from cooldown import CredentialPool, ModelCooldownExhausted, init_app

P = "gemini-free"
KEYS = ["sk-gem-one-0123456789", "sk-gem-two-0123456789"]
PER_MINUTE = {"requests": {"minute": 2, "day": 3}}


class Answer:
    status_code, headers = 200, {}


def served(pool: CredentialPool, now: float, model: str = "m") -> str:
    sent: list[str] = []

    def send(key: str) -> Answer:
        sent.append(key)
        return Answer()

    pool.dispatch(P, send, model=model, now=now)
    [key] = sent
    return key


@pytest.fixture
def pool(enabled: None) -> CredentialPool:
    pool = CredentialPool()
    pool.register(P, keys=KEYS, limits=PER_MINUTE)
    return pool


def test_keys_at_their_declared_limit_are_not_sent_and_the_client_is_told(
    pool: CredentialPool,
) -> None:
    sent = [served(pool, now=100.0 + second) for second in range(4)]
    assert sorted(sent) == sorted(KEYS * 2)
    with pytest.raises(ModelCooldownExhausted) as refused:
        served(pool, now=104.0)
    assert refused.value.reason == "limit"
    assert refused.value.message.startswith(
        "Every upstream key for this model is out of quota or at its declared limit"
    )
    assert served(pool, now=162.0) in KEYS  # a minute later: each key's third of its day


def test_the_day_window_holds_after_the_minute_rolled(pool: CredentialPool) -> None:
    for second in range(6):  # three per key: each key's day is spent
        served(pool, now=100.0 + 61 * second)
    with pytest.raises(ModelCooldownExhausted) as refused:
        served(pool, now=100.0 + 61 * 6)
    assert refused.value.reason == "limit"


def test_status_shows_each_window_and_names_the_limit(pool: CredentialPool) -> None:
    served(pool, now=100.0)
    served(pool, now=100.5)
    served(pool, now=101.0)
    status = pool.status(P, model="m", now=101.5)
    rows = {row["label"]: row for row in status["keys"]}
    assert sorted(row["limits"][0]["used"] for row in rows.values()) == [1, 2]
    full = next(row for row in rows.values() if row["limits"][0]["used"] == 2)
    assert full["reason"] == "limit"
    assert full["state"] == "cooling"
    minute, day = full["limits"]
    assert minute == {
        "counter": "requests",
        "unit": "minute",
        "used": 2,
        "limit": 2,
        "resets_in": 60,
    }
    assert {**day, "resets_in": 0} == {
        "counter": "requests",
        "unit": "day",
        "used": 2,
        "limit": 3,
        "resets_in": 0,
    }
    assert 0 < day["resets_in"] <= 86400  # until midnight, UTC
    assert "limits" not in pool.status(P, now=101.5)["keys"][0]  # no scope asked: none shown


def test_the_environment_declares_limits_for_a_provider_registered_without(
    enabled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_LIMITS", json.dumps({P: {"requests": {"minute": 1}}}))
    pool = CredentialPool()
    pool.register(P, keys=KEYS[:1])
    served(pool, now=100.0)
    with pytest.raises(ModelCooldownExhausted):
        served(pool, now=101.0)
    pool.register(P, keys=KEYS[:1], limits={"requests": {"minute": 5}})  # registered wins
    served(pool, now=102.0)


def test_app_config_declares_limits_too(enabled: None) -> None:
    app = Flask(__name__)
    app.config["MODEL_COOLDOWN_LIMITS"] = {P: {"requests": {"minute": 0}}}
    init_app(app)
    pool = CredentialPool()
    pool.register(P, keys=KEYS)
    with pytest.raises(ModelCooldownExhausted):
        served(pool, now=100.0)


@pytest.mark.parametrize(
    "raw",
    ["{not json", "[1]", json.dumps({P: {"requests": {"minute": -1}}}), json.dumps({P: 5})],
)
def test_a_malformed_setting_declares_nothing_and_warns_once_without_its_value(
    raw: str,
    enabled: None,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    fresh_warnings: None,
) -> None:
    from cooldown.pools import limits

    limits._setting._parsed.cache_clear()
    monkeypatch.setenv("MODEL_COOLDOWN_LIMITS", raw)
    pool = CredentialPool()
    pool.register(P, keys=KEYS[:1])
    with caplog.at_level(logging.WARNING, "cooldown"):
        for second in range(3):
            served(pool, now=100.0 + second)  # nothing declared: every request goes
    warned = [r.getMessage() for r in caplog.records if "MODEL_COOLDOWN_LIMITS" in r.getMessage()]
    assert len(warned) == 1
    assert raw not in warned[0]


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"limits": {"requests": {"minute": "15"}}}, TypeError),
        ({"limits": {"requests": {"week": 1}}}, ValueError),
        ({"day_zone": "Pacific Time"}, ValueError),
        ({"day_zone": None}, TypeError),
    ],
)
def test_register_refuses_malformed_limits(arguments: dict[str, Any], error: type) -> None:
    pool = CredentialPool()
    with pytest.raises(error):
        pool.register(P, keys=KEYS, **arguments)
    assert P not in pool.providers()  # nothing half-registered


def test_flask_answers_the_declared_limit_with_a_429_saying_so(pool: CredentialPool) -> None:
    app = Flask(__name__)
    init_app(app)

    @app.post("/v1/chat/completions")
    def chat() -> dict[str, str]:
        pool.dispatch(P, lambda key: Answer(), model="m", now=100.0)
        return {"ok": "yes"}

    client = app.test_client()
    assert [client.post("/v1/chat/completions").status_code for _ in range(5)] == [
        200,
        200,
        200,
        200,
        429,
    ]
    refused = client.post("/v1/chat/completions")
    assert refused.headers["Retry-After"] == "61"
    body = refused.get_json()
    assert body["error"] == "model_cooldown"
    assert "out of quota or at its declared limit" in body["message"]


def test_a_dispatch_that_may_wait_waits_for_the_window_to_have_room(enabled: None) -> None:
    pool = CredentialPool()
    pool.register(P, keys=KEYS[:1], limits={"requests": {"second": 1}})
    sent: list[str] = []
    pool.dispatch(P, lambda key: sent.append(key) or Answer(), model="m")
    pool.dispatch(P, lambda key: sent.append(key) or Answer(), model="m", wait=3)
    assert sent == KEYS[:1] * 2  # the second a second after the first, not a 429


def test_adispatch_keeps_the_same_windows(pool: CredentialPool) -> None:
    async def send(key: str) -> Answer:
        return Answer()

    async def burst() -> list[str]:
        outcomes = []
        for second in range(5):
            try:
                await pool.adispatch(P, send, model="m", now=100.0 + second / 10)
                outcomes.append("served")
            except ModelCooldownExhausted as refused:
                outcomes.append(refused.reason)
        return outcomes

    assert asyncio.run(burst()) == ["served"] * 4 + ["limit"]

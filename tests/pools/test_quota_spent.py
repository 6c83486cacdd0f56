"""A spent quota (credit, a daily cap) is not a rate limit: the key and every key of its
account are out for every model until the quota is back, and operators read it as such."""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from cooldown import (
    QUOTA_SPENT,
    CredentialPool,
    ModelCooldown,
    ModelCooldownExhausted,
    QuotaSpent,
    google_quota_spent,
)

P = "quota-spent"
KEYS = ["sk-quota-a-one-0123456789", "sk-quota-a-two-0123456789", "sk-quota-b-one-0123456789"]
ACCOUNTS = {"team-a": [1, 2], "team-b": [3]}
NOTE = "out of quota (credit or a daily limit): add credit, or clear it after topping up"


class Answer:
    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.status_code, self.headers = status, headers or {}


def insufficient_quota() -> openai.RateLimitError:
    """The exception the real `openai` SDK raises for OpenAI's out-of-credit 429."""
    body = {
        "error": {
            "message": "You exceeded your current quota, please check your plan and billing.",
            "type": "insufficient_quota",
            "param": None,
            "code": "insufficient_quota",
        }
    }
    request = httpx.Request("POST", "https://api.openai.com/v1/chat/completions")
    response = httpx.Response(429, json=body, request=request)
    return openai.RateLimitError("quota", response=response, body=body["error"])


def gemini_per_day(delay: str | None = "43s", quota_id: str = "PerDay") -> bytes:
    details: list[dict[str, Any]] = [
        {
            "@type": "type.googleapis.com/google.rpc.QuotaFailure",
            "violations": [
                {
                    "quotaMetric": "generativelanguage.googleapis.com/generate_requests",
                    "quotaId": f"GenerateRequests{quota_id}PerProjectPerModel-FreeTier",
                    "quotaValue": "50",
                }
            ],
        }
    ]
    if delay is not None:
        details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay})
    error = {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "quota", "details": details}
    return json.dumps({"error": error}).encode()


@pytest.fixture(autouse=True)
def pool(enabled: None) -> Iterator[None]:
    CredentialPool.register(P, keys=KEYS, accounts=ACCOUNTS)
    yield
    CredentialPool._providers.pop(P, None)


def spend(key: str, **when: Any) -> None:
    """What a gateway recording by hand says of a spent quota: the classified outcome."""
    CredentialPool.record(P, key, 402, model="m", outcome=QUOTA_SPENT, **when)


def test_a_spent_quota_cools_the_key_and_its_account_for_every_model() -> None:
    spend(KEYS[0], now=0)
    for model in ("m", "another", "a third"):
        assert CredentialPool.available(P, model=model, now=1) == [KEYS[2]]
    assert CredentialPool.available(P, now=1) == [KEYS[2]]  # unscoped routes too
    assert CredentialPool.available(P, model="m", now=3600) == KEYS  # the default hour


def test_a_bare_402_is_a_caller_error_that_cools_nothing() -> None:
    """One request may cost more than the credit left; a smaller one may pass."""
    CredentialPool.record(P, KEYS[0], 402, model="m", now=0)
    CredentialPool.record_headers(P, {"Authorization": f"Bearer {KEYS[2]}"}, 402, model="m", now=0)
    sent: list[str] = []

    def send(key: str) -> Any:
        sent.append(key)
        return Answer(402)

    answer = CredentialPool.dispatch(P, send, model="m", order="configured", now=0)
    assert answer.status_code == 402  # the caller's answer, as it came: no rotation
    assert sent == [KEYS[0]]
    for model in ("m", "another"):
        assert CredentialPool.available(P, model=model, now=1) == KEYS
    assert all(row["reason"] is None for row in CredentialPool.status(P, model="m")["keys"])


def test_an_advice_reader_makes_a_402_a_spent_quota_for_a_provider_whose_402_means_it() -> None:
    sent: list[str] = []

    def send(key: str) -> Any:
        sent.append(key)
        return Answer(402) if key == KEYS[0] else Answer(200)

    def advice(answer: Any) -> object:
        return QuotaSpent() if answer.status_code == 402 else None

    answer = CredentialPool.dispatch(P, send, model="m", order="configured", advice=advice, now=0)
    assert answer.status_code == 200
    assert sent == [KEYS[0], KEYS[2]]  # rotated past the whole account
    assert CredentialPool.available(P, model="another", now=1) == [KEYS[2]]


def test_anything_but_quota_spent_that_a_reader_says_of_a_402_is_ignored() -> None:
    def send(key: str) -> Any:
        return Answer(402)

    answer = CredentialPool.dispatch(P, send, model="m", advice=lambda answer: 30.0, now=0)
    assert answer.status_code == 402
    assert CredentialPool.available(P, model="m", now=1) == KEYS


def test_the_quota_seconds_setting_is_capped_by_the_maximum(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_QUOTA_SECONDS", "600")
    spend(KEYS[2], now=0)
    assert CredentialPool.available(P, model="other", now=599) == KEYS[:2]
    assert CredentialPool.available(P, model="other", now=600) == KEYS
    monkeypatch.setenv("MODEL_COOLDOWN_MAX_SECONDS", "120")
    spend(KEYS[2], now=1000)
    assert CredentialPool.available(P, model="other", now=1120) == KEYS


def test_a_malformed_quota_seconds_is_the_default_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, fresh_warnings: None
) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_QUOTA_SECONDS", "an hour, secret-ish")
    with caplog.at_level(logging.WARNING, logger="cooldown"):
        spend(KEYS[2], now=0)
        spend(KEYS[2], now=0)
    assert CredentialPool.available(P, model="m", now=3599) == KEYS[:2]
    warned = [r.getMessage() for r in caplog.records if "QUOTA_SECONDS" in r.getMessage()]
    assert warned == ["MODEL_COOLDOWN_QUOTA_SECONDS is malformed; its default is used"]


def test_a_success_for_another_model_does_not_reopen_a_spent_quota() -> None:
    spend(KEYS[2], now=0)
    CredentialPool.record(P, KEYS[2], 200, model="other", now=5)
    assert CredentialPool.available(P, model="other", now=6) == KEYS[:2]


def test_dispatch_reads_insufficient_quota_from_the_sdk_and_never_sends_the_key_again() -> None:
    sent: list[tuple[str, str]] = []

    def send_for(model: str) -> Any:
        def send(key: str) -> Any:
            sent.append((key, model))
            if key == KEYS[0]:
                raise insufficient_quota()
            return Answer(200)

        return send

    answer = CredentialPool.dispatch(P, send_for("m"), model="m", order="configured", now=0)
    assert answer.status_code == 200
    assert sent == [(KEYS[0], "m"), (KEYS[2], "m")]  # rotated past the whole account
    for step, model in enumerate(["m", "other", "a third"] * 3, start=1):
        CredentialPool.dispatch(P, send_for(model), model=model, order="configured", now=step)
    assert {key for key, _ in sent[2:]} == {KEYS[2]}  # nothing more to team-a
    CredentialPool.dispatch(P, send_for("other"), model="other", order="configured", now=3600)
    assert sent[-2:] == [(KEYS[0], "other"), (KEYS[2], "other")]  # its quota seconds passed


def test_every_key_out_of_quota_is_our_429_with_retry_after() -> None:
    def send(key: str) -> Any:
        raise insufficient_quota()

    with pytest.raises(ModelCooldownExhausted) as raised:
        CredentialPool.dispatch(P, send, model="m", order="configured", now=0)
    assert raised.value.retry_after == 3600
    with pytest.raises(ModelCooldownExhausted):
        CredentialPool.select(P, model="something else", now=10)


def test_an_advice_reader_may_say_the_quota_is_spent_for_its_seconds() -> None:
    def send(key: str) -> Any:
        answer = Answer(429)
        answer.content = gemini_per_day("43s")  # type: ignore[attr-defined]
        return answer

    def advice(answer: Any) -> object:
        return google_quota_spent(answer.content)

    with pytest.raises(ModelCooldownExhausted) as raised:
        CredentialPool.dispatch(P, send, model="gemini", advice=advice, now=0)
    assert raised.value.retry_after == 43
    assert CredentialPool.available(P, model="any other", now=42) == []
    assert CredentialPool.available(P, model="any other", now=43) == KEYS


def test_a_per_minute_limit_in_the_same_shape_is_a_throttle_of_one_model() -> None:
    def send(key: str) -> Any:
        answer = Answer(429)
        answer.content = gemini_per_day("43s", quota_id="PerMinute")  # type: ignore[attr-defined]
        return answer

    def advice(answer: Any) -> object:
        return google_quota_spent(answer.content)

    with pytest.raises(ModelCooldownExhausted):
        CredentialPool.dispatch(P, send, model="gemini", advice=advice, now=0)
    assert CredentialPool.available(P, model="any other", now=1) == KEYS


def test_status_names_the_quota_and_what_to_do_and_clear_forgets_it() -> None:
    spend(KEYS[0])
    for status in (CredentialPool.status(P, model="other"), CredentialPool.status(P)):
        spent = [key for key in status["keys"] if key["reason"] == "quota"]
        assert [key["index"] for key in spent] == [1, 2]  # the key and its sibling
        assert all(key["note"] == NOTE for key in spent)
        assert "note" not in status["keys"][2]
    CredentialPool.clear(P, CredentialPool.status(P)["keys"][0]["label"])
    rows = CredentialPool.status(P, model="m")["keys"]
    assert rows[0]["state"] == "ready"
    assert rows[1]["reason"] == "quota"  # a clear is the one key's
    CredentialPool.record(P, KEYS[0], 401, model="m")  # after the clear: an auth rejection
    assert CredentialPool.status(P, model="m")["keys"][0]["reason"] == "credential"


def test_an_auth_rejection_outlasting_the_quota_is_named_as_such(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_QUOTA_SECONDS", "60")
    now = time.monotonic()
    spend(KEYS[2], now=now)
    CredentialPool.record(P, KEYS[2], 401, model="m", now=now)  # 300 s, beyond the quota
    assert CredentialPool.status(P, model="m", now=now)["keys"][2]["reason"] == "credential"


def test_a_hand_recorded_quota_outcome_is_a_spent_quota() -> None:
    CredentialPool.record(P, KEYS[2], 429, model="m", outcome=QUOTA_SPENT, now=0)
    assert CredentialPool.available(P, model="other", now=1) == KEYS[:2]


@pytest.mark.parametrize("seconds", [True, "60", b"60", [60]])
def test_quota_seconds_of_the_wrong_type_are_a_type_error(seconds: object) -> None:
    with pytest.raises(TypeError, match="seconds"):
        QuotaSpent(seconds)  # type: ignore[arg-type]


@pytest.mark.parametrize("seconds", [0, -1, 0.0, math.inf, math.nan])
def test_quota_seconds_that_are_not_positive_and_finite_are_a_value_error(
    seconds: float,
) -> None:
    with pytest.raises(ValueError, match="seconds"):
        QuotaSpent(seconds)


def test_the_flag_off_keeps_the_legacy_rest_for_a_402(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "false")
    CredentialPool.record(P, KEYS[2], 402, model="m", now=0)
    assert CredentialPool.available(P, model="m", now=299) == KEYS[:2]
    assert CredentialPool.available(P, model="m", now=300) == KEYS


# -- across processes ---------------------------------------------------------------------


@pytest.fixture
def fleet(process: Callable[[], ModelCooldown]) -> list[CredentialPool]:
    """Two gateway processes' pools, sharing one Redis."""
    pools = [CredentialPool(store=process()) for _ in range(2)]
    for pool in pools:
        pool.register(P, keys=KEYS, accounts=ACCOUNTS)
    return pools


def test_a_quota_spent_in_one_process_holds_the_account_in_another(
    fleet: list[CredentialPool],
) -> None:
    first, second = fleet

    def send(key: str) -> Any:
        if key == KEYS[0]:
            raise insufficient_quota()
        return Answer(200)

    first.dispatch(P, send, model="m", order="configured")
    assert second.available(P, model="a model the first never saw") == [KEYS[2]]
    rows = second.status(P, model="other")["keys"]
    assert [row["reason"] for row in rows] == ["quota", "quota", None]
    assert rows[0]["note"] == NOTE
    second.clear(P, rows[0]["label"])
    later = time.monotonic() + 1  # past the quarter second a read of the fleet's marks holds
    assert [row["reason"] for row in first.status(P, model="other", now=later)["keys"]] == [
        None,
        "quota",
        None,
    ]
    second.record(P, KEYS[0], 401, model="m")  # after the clear: an auth rejection
    assert second.status(P, model="m")["keys"][0]["reason"] == "credential"

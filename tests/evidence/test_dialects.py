"""Provider dialects: the bare `X-RateLimit-*` pair, Azure's millisecond advice,
Google's advice in a body, and model names in paths."""

from __future__ import annotations

import json
import math
import time
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cooldown import (
    CredentialPool,
    google_retry_delay,
    rate_limit_advice,
    recording_context,
    retry_after_seconds,
    upstream_model,
)

RECEIVED = 1_767_225_625.0  # wall clock
ON = {"MODEL_COOLDOWN_ENABLED": "true"}
P = "ce-gpt-pro"
BASE = "CODEX_EVERYWHERE_API_KEY_GPT_PRO_POOL"


def bare(remaining: str, reset: str) -> dict[str, str]:
    return {"X-RateLimit-Remaining": remaining, "X-RateLimit-Reset": reset}


# -- the bare pair --------------------------------------------------------------------------------


def test_bare_pair_reset_as_delta_seconds() -> None:
    assert rate_limit_advice(bare("0", "20"), received_at=RECEIVED) == 20


def test_bare_pair_reset_in_unix_seconds() -> None:
    assert rate_limit_advice(bare("0", "1767225645"), received_at=RECEIVED) == 20


def test_bare_pair_reset_in_unix_milliseconds() -> None:
    assert rate_limit_advice(bare("0", "1767225645000"), received_at=RECEIVED) == 20


def test_bare_pair_with_requests_left_is_no_advice_but_a_budget(enabled: None) -> None:
    assert rate_limit_advice(bare("3", "20"), received_at=RECEIVED) is None
    evidence = recording_context(200, bare("3", "20"), received_at=RECEIVED)
    assert evidence["outcome"].credential_health == "accepted"


def test_a_bare_reset_in_the_past_is_zero() -> None:
    assert rate_limit_advice(bare("0", "1767225600"), received_at=RECEIVED) == 0


def test_on_a_429_the_bare_pair_and_retry_after_give_the_later(enabled: None) -> None:
    headers = {"Retry-After": "5", **bare("0", "1767225645")}
    evidence = recording_context(429, headers, received_at=RECEIVED)
    assert evidence["retry_after_seconds"] == 20


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch, enabled: None) -> None:
    monkeypatch.setenv(BASE, "sk-one")
    monkeypatch.setenv(f"{BASE}_1", "sk-two")


class Answer:
    def __init__(self, status: int, headers: dict[str, str]) -> None:
        self.status_code = status
        self.headers = headers


def first_key_answers(status: int, headers: dict[str, str]) -> Any:
    return lambda key: Answer(status, headers) if key == "sk-one" else Answer(200, {})


def cooling_for(model: str = "gpt-4o") -> int | None:
    return CredentialPool.status(P, model=model)["keys"][0]["retry_after"]


def test_through_a_pool_a_spent_bare_pair_cools_until_its_unix_reset(pool: None) -> None:
    reset = str(int(time.time()) + 20)
    CredentialPool.dispatch(P, first_key_answers(429, bare("0", reset)), model="gpt-4o")
    assert cooling_for() in (19, 20, 21)


def test_through_a_pool_a_reset_far_away_is_capped_at_the_maximum(
    pool: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_MAX_SECONDS", "600")
    CredentialPool.dispatch(P, first_key_answers(429, bare("0", "999999999")), model="gpt-4o")
    assert cooling_for() == 600


def test_through_a_pool_requests_left_are_a_budget(pool: None) -> None:
    served = CredentialPool.dispatch(
        P, first_key_answers(200, bare("1", "30")), model="gpt-4o", order="configured"
    )
    assert served.status_code == 200
    assert CredentialPool.eligible(P, model="gpt-4o") == ["sk-one", "sk-two"]


# -- Azure's millisecond advice --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["retry-after-ms", "x-ms-retry-after-ms"])
def test_azure_millisecond_advice_on_a_429(name: str, enabled: None) -> None:
    evidence = recording_context(429, {name: "1500"}, received_at=RECEIVED)
    assert evidence["retry_after_seconds"] == 1.5


def test_azure_millisecond_advice_and_the_later_of_two(enabled: None) -> None:
    later_ms = {"Retry-After": "2", "retry-after-ms": "7000", "x-ms-retry-after-ms": "3000"}
    assert recording_context(429, later_ms, received_at=RECEIVED)["retry_after_seconds"] == 7
    later_seconds = {"Retry-After": "9", "retry-after-ms": "7000"}
    assert recording_context(429, later_seconds, received_at=RECEIVED)["retry_after_seconds"] == 9


def test_retry_after_seconds_still_reads_retry_after_alone() -> None:
    assert retry_after_seconds({"retry-after-ms": "7000"}, received_at=RECEIVED) is None


@pytest.mark.parametrize("value", ["", "-5", "nan", "1e3", "12ms", "9" * 80])
def test_malformed_millisecond_advice_is_ignored(value: str, enabled: None) -> None:
    evidence = recording_context(429, {"retry-after-ms": value}, received_at=RECEIVED)
    assert evidence["retry_after_seconds"] is None


def test_through_a_pool_azure_advice_cools_for_its_milliseconds(pool: None) -> None:
    CredentialPool.dispatch(P, first_key_answers(429, {"retry-after-ms": "42000"}), model="gpt-4o")
    assert cooling_for() == 42


# -- Google's advice in a body ---------------------------------------------------------------------

GEMINI_429 = {
    "error": {
        "code": 429,
        "status": "RESOURCE_EXHAUSTED",
        "details": [
            {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "30s"},
        ],
    }
}


@pytest.mark.parametrize(
    "body",
    [GEMINI_429, json.dumps(GEMINI_429), json.dumps(GEMINI_429).encode(), [GEMINI_429]],
    ids=["dict", "str", "bytes", "list"],
)
def test_google_retry_delay_reads_every_form_of_the_body(body: object) -> None:
    assert google_retry_delay(body) == 30


@pytest.mark.parametrize(
    ("delay", "seconds"), [("1.5s", 1.5), ("0s", 0.0), ("0.000001s", 1e-6), ("3600s", 3600)]
)
def test_google_retry_delay_reads_protobuf_durations(delay: str, seconds: float) -> None:
    body = {"error": {"details": [{"@type": "x/google.rpc.RetryInfo", "retryDelay": delay}]}}
    assert google_retry_delay(body) == seconds


@pytest.mark.parametrize(
    "body",
    [
        None,
        5,
        b"\xff\xfe",
        "not json",
        "[" * 5000,
        {"error": "flat"},
        {"error": {"details": "no list"}},
        {"error": {"details": [{"@type": "x/google.rpc.RetryInfo", "retryDelay": "-1s"}]}},
        {"error": {"details": [{"@type": "x/google.rpc.RetryInfo", "retryDelay": "30"}]}},
        {"error": {"details": [{"@type": "x/google.rpc.RetryInfo", "retryDelay": 30}]}},
        {"error": {"details": [{"@type": "x/google.rpc.Help", "retryDelay": "30s"}]}},
    ],
)
def test_google_retry_delay_gives_none_for_anything_else(body: object) -> None:
    assert google_retry_delay(body) is None


@given(
    st.one_of(
        st.text(), st.binary(), st.none(), st.integers(), st.dictionaries(st.text(), st.text())
    )
)
def test_google_retry_delay_never_raises(body: object) -> None:
    seconds = google_retry_delay(body)
    assert seconds is None or (math.isfinite(seconds) and seconds >= 0)


# -- upstream_model ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "model"),
    [
        ("/v1/models/gpt-4o/extra", "gpt-4o"),
        ("/v1beta/models/gemini%2D2.0:generateContent", "gemini-2.0"),
        ("/v1beta/models/tuned%2Fmine%3Av2:generateContent", "tuned/mine:v2"),
        ("/v1/models/gpt-4o", "gpt-4o"),
        ("/v1/models/", None),
        ("/v1/models/%ff", None),
        ("/v1/models/%2F", "/"),
    ],
)
def test_upstream_model_from_paths(path: str, model: str | None) -> None:
    assert upstream_model(None, path) == model


@given(st.text())
def test_hostile_headers_give_finite_advice_or_none(value: str) -> None:
    for name in ("X-RateLimit-Reset", "retry-after-ms"):
        advice = rate_limit_advice(
            {"X-RateLimit-Remaining": "0", name: value}, received_at=RECEIVED
        )
        assert advice is None or (math.isfinite(advice) and advice >= 0)


# -- a lone reset on a 429 is advice -----------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"X-RateLimit-Reset": "20"}, 20.0),
        ({"x-ratelimit-reset-requests": "20s"}, 20.0),
        ({"x-ratelimit-reset-tokens": "1m30s"}, 90.0),
        ({"ratelimit-reset": "15"}, 15.0),
        ({"anthropic-ratelimit-requests-reset": "2026-12-02T00:00:42Z"}, 42.0),
    ],
)
def test_a_429_with_a_reset_and_no_remaining_counter_is_advice(
    headers: dict[str, str], seconds: float
) -> None:
    now = datetime(2026, 12, 2, tzinfo=timezone.utc).timestamp()
    evidence = recording_context(429, headers, received_at=now, environ=ON)
    assert evidence["retry_after_seconds"] == pytest.approx(seconds)


def test_the_later_of_a_lone_reset_and_retry_after_stands() -> None:
    later_reset = recording_context(
        429, {"X-RateLimit-Reset": "20", "Retry-After": "5"}, environ=ON
    )
    assert later_reset["retry_after_seconds"] == 20.0
    later_advice = recording_context(
        429, {"X-RateLimit-Reset": "20", "retry-after-ms": "30000"}, environ=ON
    )
    assert later_advice["retry_after_seconds"] == 30.0


def test_a_lone_reset_on_a_success_cools_nothing() -> None:
    served = recording_context(200, {"x-ratelimit-reset-requests": "20s"}, environ=ON)
    assert served["retry_after_seconds"] is None
    assert served["outcome"].credential_health == "accepted"


def test_a_lone_reset_through_dispatch_cools_for_it_not_the_fallback(
    enabled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cooldown import CredentialPool, ModelCooldownExhausted

    monkeypatch.setattr(CredentialPool, "_providers", dict(CredentialPool._providers))
    CredentialPool.register("lone-reset", keys=["sk-lone-reset-0123456789"])
    throttle = type("Throttle", (), {"status_code": 429, "headers": {"X-RateLimit-Reset": "20"}})()
    with pytest.raises(ModelCooldownExhausted) as raised:
        CredentialPool.dispatch("lone-reset", lambda key: throttle, model="m", now=0.0)
    assert raised.value.retry_after == 20  # not the 60 s fallback

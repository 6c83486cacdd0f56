"""Provider rate-limit headers: a spent window cools the key before the provider says 429."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st
from werkzeug.datastructures import Headers as WerkzeugHeaders

from cooldown import (
    CredentialPool,
    ModelCooldownExhausted,
    UpstreamOutcome,
    rate_limit_advice,
    recording_context,
)
from cooldown.errors import LARGEST_RETRY_AFTER
from cooldown.evidence.ratelimit import (
    go_duration_seconds,
    request_budget,
    rfc3339_timestamp,
    token_budget,
)

RECEIVED = 1_800_000_000.0  # wall clock
ON = {"MODEL_COOLDOWN_ENABLED": "true"}


def iso(seconds_after: float) -> str:
    moment = datetime.fromtimestamp(RECEIVED + seconds_after, tz=timezone.utc)
    return moment.isoformat().replace("+00:00", "Z")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1s", 1.0),
        ("6m0s", 360.0),
        ("20ms", 0.02),
        ("1h2m3.5s", 3723.5),
        ("2m59.56s", 179.56),
        ("17", 17.0),
        ("0.5", 0.5),
        ("", None),
        ("-1s", None),
        ("1d", None),
        ("s", None),
        ("1s ms", None),
        ("nan", None),
        ("1" * 80 + "s", None),
    ],
)
def test_go_durations(text: str, seconds: float | None) -> None:
    assert go_duration_seconds(text) == (None if seconds is None else pytest.approx(seconds))


def test_openai_spent_request_window() -> None:
    headers = {  # no limit announced: the window is held until its reset (no refill to assume)
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "6m0s",
        "x-ratelimit-remaining-tokens": "1200",
        "x-ratelimit-reset-tokens": "20ms",
    }
    assert rate_limit_advice(headers) == 360.0


def test_with_the_limit_a_spent_window_waits_for_one_request_to_refill() -> None:
    headers = {  # 500 a window, full again in 6 minutes: one request is back in 0.72 s
        "x-ratelimit-limit-requests": "500",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "6m0s",
        "x-ratelimit-remaining-tokens": "1200",
        "x-ratelimit-reset-tokens": "20ms",
    }
    assert rate_limit_advice(headers) == pytest.approx(0.72)
    anthropic = {
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": iso(60),
    }
    assert rate_limit_advice(anthropic, received_at=RECEIVED) == pytest.approx(1.2)


def test_every_spent_window_must_reset_so_the_latest_wins() -> None:
    headers = [
        ("X-RateLimit-Remaining-Requests", "0"),
        ("X-RateLimit-Reset-Requests", "1s"),
        ("X-RateLimit-Remaining-Tokens", "0"),
        ("X-RateLimit-Reset-Tokens", "2m59.56s"),
    ]
    assert rate_limit_advice(headers) == pytest.approx(179.56)


def test_anthropic_reset_is_a_date_relative_to_received_at() -> None:
    headers = WerkzeugHeaders(
        {
            "anthropic-ratelimit-requests-remaining": "12",
            "anthropic-ratelimit-requests-reset": iso(5),
            "anthropic-ratelimit-output-tokens-remaining": "0",
            "anthropic-ratelimit-output-tokens-reset": iso(42.5),
        }
    )
    assert rate_limit_advice(headers, received_at=RECEIVED) == pytest.approx(42.5)
    past = {
        "anthropic-ratelimit-tokens-remaining": "0",
        "anthropic-ratelimit-tokens-reset": iso(-9),
    }
    assert rate_limit_advice(past, received_at=RECEIVED) == 0.0


def test_ietf_fields() -> None:
    assert rate_limit_advice({"RateLimit-Remaining": "0", "RateLimit-Reset": "30"}) == 30.0
    assert rate_limit_advice({"RateLimit-Remaining": "3", "RateLimit-Reset": "30"}) is None


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"x-ratelimit-remaining-requests": "0"},  # no reset: ignored
        {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "soon"},
        {"x-ratelimit-remaining-requests": "-0", "x-ratelimit-reset-requests": "1s"},
        {"anthropic-ratelimit-tokens-remaining": "0", "anthropic-ratelimit-tokens-reset": "1s"},
        {"RateLimit-Remaining": "0", "RateLimit-Reset": "inf"},
        {"RateLimit-Remaining": ["0"], "RateLimit-Reset": 3},
    ],
)
def test_unusable_counters_give_no_advice(headers: dict[str, object]) -> None:
    assert rate_limit_advice(headers, received_at=RECEIVED) is None


def test_a_spent_window_on_a_success_is_recorded_as_a_throttle() -> None:
    headers = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "45s"}
    context = recording_context(200, headers, environ=ON)
    assert context["outcome"] == UpstreamOutcome(
        False, "success", "throttled", "rate_limit_exhausted"
    )
    assert context["retry_after_seconds"] == 45.0


def test_on_a_429_the_later_of_retry_after_and_the_spent_window_wins() -> None:
    window = {"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "1m"}
    both = recording_context(429, {**window, "Retry-After": "7"}, environ=ON)
    assert both["retry_after_seconds"] == 60.0  # retrying in 7 s meets the spent window
    longer = recording_context(429, {**window, "Retry-After": "90"}, environ=ON)
    assert longer["retry_after_seconds"] == 90.0
    alone = recording_context(429, {**window, "Retry-After": "soon"}, environ=ON)
    assert alone["retry_after_seconds"] == 60.0
    assert alone["outcome"].reason == "http_throttled"
    unspent = {"x-ratelimit-remaining-tokens": "5", "x-ratelimit-reset-tokens": "1m"}
    assert (
        recording_context(429, {**unspent, "Retry-After": "7"}, environ=ON)["retry_after_seconds"]
        == 7.0
    )


def test_a_supplied_or_cancelled_classification_is_not_rewritten() -> None:
    window = {"RateLimit-Remaining": "0", "RateLimit-Reset": "30"}
    served = UpstreamOutcome(False, "success", "accepted", "mine")
    assert recording_context(200, window, outcome=served, environ=ON)["outcome"] is served
    cancelled = recording_context(200, window, cancelled=True, environ=ON)
    assert cancelled["outcome"].reason == "cancelled"
    assert recording_context(200, window, environ={}) == {}


def test_the_pool_skips_a_key_whose_window_is_spent(
    enabled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CODEX_EVERYWHERE_API_KEY_GPT_PRO_POOL", "sk-a")
    monkeypatch.setenv("CODEX_EVERYWHERE_API_KEY_GPT_PRO_POOL_1", "sk-b")
    spent = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "30s"}
    evidence = recording_context(200, spent)
    CredentialPool.record("ce-gpt-pro", "sk-a", 200, model="gpt-4o", now=0, **evidence)
    assert CredentialPool.select("ce-gpt-pro", model="gpt-4o", now=1) == "sk-b"
    assert CredentialPool.select("ce-gpt-pro", model="gpt-4o-mini", now=1) == "sk-a"
    CredentialPool.record("ce-gpt-pro", "sk-b", 200, model="gpt-4o", now=1, **evidence)
    with pytest.raises(ModelCooldownExhausted) as raised:
        CredentialPool.select("ce-gpt-pro", model="gpt-4o", now=2)
    assert raised.value.retry_after == 28
    assert CredentialPool.select("ce-gpt-pro", model="gpt-4o", now=30) == "sk-a"


# -- properties ------------------------------------------------------------------------------

units = st.sampled_from([("h", 3600.0), ("m", 60.0), ("s", 1.0), ("ms", 1e-3), ("us", 1e-6)])


@given(st.lists(st.tuples(st.integers(0, 10_000), units), min_size=1, max_size=5))
def test_generated_go_durations_round_trip(parts: list[tuple[int, tuple[str, float]]]) -> None:
    text = "".join(f"{amount}{unit}" for amount, (unit, _) in parts)
    expected = sum(amount * scale for amount, (_, scale) in parts)
    assert go_duration_seconds(text) == pytest.approx(expected)


@given(st.one_of(st.text(max_size=80), st.binary(max_size=20), st.integers(), st.none()))
def test_go_duration_never_raises_and_is_finite_and_non_negative(value: object) -> None:
    seconds = go_duration_seconds(value)
    assert seconds is None or (math.isfinite(seconds) and seconds >= 0)


@given(
    st.datetimes(
        min_value=datetime(1971, 1, 1),
        max_value=datetime(9998, 1, 1),
        timezones=st.sampled_from([timezone.utc, timezone(timedelta(hours=5, minutes=30))]),
    )
)
def test_generated_rfc3339_times_round_trip(moment: datetime) -> None:
    assert rfc3339_timestamp(moment.isoformat()) == pytest.approx(moment.timestamp())


@given(
    st.one_of(
        st.text(max_size=80),
        st.integers(min_value=10**9 - 5, max_value=10**20).map(str),  # Unix times, and absurd ones
        st.floats(min_value=0, max_value=1e300, allow_nan=False).map(repr),
    ),
    st.floats(allow_nan=False, allow_infinity=False, min_value=0, max_value=4e9),
)
def test_rate_limit_advice_never_raises_never_negative(value: str, received: float) -> None:
    headers = {
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": value,
        "x-ratelimit-remaining-tokens": "0",
        "x-ratelimit-reset-tokens": value,
        "RateLimit-Remaining": "0",
        "RateLimit-Reset": value,
    }
    seconds = rate_limit_advice(headers, received_at=received)
    assert seconds is None or (math.isfinite(seconds) and seconds >= 0)


@pytest.mark.parametrize(
    "headers",
    [
        {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "99999999h"},
        {"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "99999999999999ms"},
        {
            "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-requests-reset": "9999-12-31T23:59:59Z",
        },
        {
            "anthropic-ratelimit-output-tokens-remaining": "0",
            "anthropic-ratelimit-output-tokens-reset": "9999-12-31T23:59:59Z",
        },
    ],
)
def test_no_reset_is_read_longer_than_the_largest_maximum(headers: dict[str, str]) -> None:
    advice = rate_limit_advice(headers, received_at=1000.0)
    assert advice is not None
    assert advice <= LARGEST_RETRY_AFTER
    lowered = {name.lower(): value for name, value in headers.items()}
    for budget in (token_budget(lowered, 1000.0), request_budget(lowered, 1000.0)):
        assert budget is None or budget[1] <= LARGEST_RETRY_AFTER

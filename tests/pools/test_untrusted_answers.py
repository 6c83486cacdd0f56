"""What `send` gives back cannot break `dispatch`: resets of any size are bounded by
`max_seconds` on every path, and this package's own errors are never the upstream's answer."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cooldown import APIError, CredentialPool, ModelCooldownExhausted

P = "untrusted"
KEYS = ["sk-untrusted-first-0123", "sk-untrusted-second-0123"]


class Answer:
    def __init__(self, status: int, headers: dict[str, str]) -> None:
        self.status_code = status
        self.headers = headers


@pytest.fixture(autouse=True)
def pool(monkeypatch: pytest.MonkeyPatch, enabled: None) -> None:
    monkeypatch.setattr(CredentialPool, "_providers", dict(CredentialPool._providers))
    CredentialPool.register(P, keys=KEYS[:1])


HUGE_RESETS = [
    {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "99999999h"},
    {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "99999999999999ms"},
    {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "99999999999"},
    {"ratelimit-remaining": "0", "ratelimit-reset": "9" * 300},
    {
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": "9999-12-31T23:59:59Z",
    },
    {"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "99999999999999ms"},
    {
        "x-ratelimit-remaining-tokens": "5",
        "x-ratelimit-limit-tokens": "100",
        "x-ratelimit-reset-tokens": "99999999h",
    },
    {
        "anthropic-ratelimit-input-tokens-remaining": "0",
        "anthropic-ratelimit-input-tokens-reset": "9999-12-31T23:59:59Z",
    },
]


@pytest.mark.parametrize("headers", HUGE_RESETS)
def test_a_served_answer_with_a_huge_reset_is_returned(headers: dict[str, str]) -> None:
    answer = Answer(200, headers)
    assert CredentialPool.dispatch(P, lambda key: answer, model="m", now=1000.0) is answer


@pytest.mark.parametrize("headers", HUGE_RESETS)
def test_a_throttle_with_a_huge_reset_is_our_429_within_the_maximum(
    headers: dict[str, str],
) -> None:
    with pytest.raises(ModelCooldownExhausted) as raised:
        CredentialPool.dispatch(P, lambda key: Answer(429, headers), model="m", now=1000.0)
    assert 1 <= raised.value.retry_after <= 3600


def spend_tokens(now: float) -> None:
    """500 tokens seen once (so 10 is no oversize request), then none left for 31 years."""
    for remaining, reset in (("500", "1s"), ("0", "999999999s")):
        headers = {"x-ratelimit-remaining-tokens": remaining, "x-ratelimit-reset-tokens": reset}
        answer = Answer(200, headers)
        CredentialPool.dispatch(P, lambda key, given=answer: given, model="m", now=now, cost=10)


def ask(now: float) -> Any:
    return CredentialPool.dispatch(P, lambda key: Answer(200, {}), model="m", now=now, cost=10)


def test_a_token_budget_holds_no_longer_than_the_maximum() -> None:
    spend_tokens(1000.0)
    with pytest.raises(ModelCooldownExhausted) as raised:
        ask(1001.0)
    assert raised.value.retry_after <= 3600
    assert ask(1000.0 + 3600).status_code == 200


def test_lowering_the_maximum_shortens_a_live_budget_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spend_tokens(1000.0)
    monkeypatch.setenv("MODEL_COOLDOWN_MAX_SECONDS", "60")
    with pytest.raises(ModelCooldownExhausted) as raised:
        ask(1030.0)
    assert raised.value.retry_after <= 60  # live cooldowns are cut to the new maximum too
    assert ask(1091.0).status_code == 200


def test_a_spent_request_budget_holds_no_longer_than_the_maximum() -> None:
    headers = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "9999999s"}
    CredentialPool.dispatch(P, lambda key: Answer(200, headers), model="m", now=1000.0)
    with pytest.raises(ModelCooldownExhausted):
        ask(1001.0)
    assert ask(1000.0 + 3600).status_code == 200


# -- this package's own errors are not upstream evidence -------------------------------------


def test_an_application_apierror_inside_send_cools_nothing() -> None:
    CredentialPool.register(P, keys=KEYS)
    sent: list[str] = []

    def send(key: str) -> Answer:
        sent.append(key)
        raise APIError("the application refused", 401)

    with pytest.raises(APIError, match="the application refused"):
        CredentialPool.dispatch(P, send, model="m", now=0.0)
    assert sent == KEYS[:1]  # propagated at once, no rotation
    assert CredentialPool.status(P, model="m", now=1.0)["cooling"] == 0
    assert CredentialPool.status(P, now=1.0)["cooling"] == 0  # not credential-wide either


def test_a_nested_dispatchs_429_cools_no_outer_key() -> None:
    CredentialPool.register(P, keys=KEYS)
    CredentialPool.register("inner", keys=["sk-inner-0123456789"])

    def inner_throttled(key: str) -> Answer:
        return Answer(429, {"Retry-After": "30"})

    def outer(key: str) -> Any:
        return CredentialPool.dispatch("inner", inner_throttled, model="m", now=0.0)

    with pytest.raises(ModelCooldownExhausted):
        CredentialPool.dispatch(P, outer, model="m", now=0.0)
    assert CredentialPool.status(P, model="m", now=1.0)["cooling"] == 0
    assert CredentialPool.status("inner", model="m", now=1.0)["cooling"] == 1


def test_a_full_table_answers_our_503_never_the_upstreams_401() -> None:
    from cooldown import (
        MAX_ENTRIES,
        ModelCooldownCapacity,
        classify_upstream_outcome,
        model_cooldown,
    )

    CredentialPool.register(P, keys=KEYS)
    throttled = classify_upstream_outcome(429)
    for index in range(MAX_ENTRIES):  # other keys' cooldowns fill the table
        model_cooldown.record(
            "filler", f"sk-filler-{index}", throttled, model="m", retry_after_seconds=600, now=0
        )
    revoked = Answer(401, {"x-leak": "Incorrect API key provided: sk-untr***0123"})
    with pytest.raises(ModelCooldownCapacity):
        CredentialPool.dispatch(P, lambda key: revoked, model="m", now=1.0)


def test_a_key_the_pool_holds_is_recorded_as_before() -> None:
    CredentialPool.record(P, KEYS[0], 429, model="m", retry_after_seconds=30, now=0.0)
    assert CredentialPool.status(P, model="m", now=1.0)["cooling"] == 1


# -- generated answers: whatever the headers say, dispatch answers ---------------------------

GENERATED_CASES = int(os.environ.get("COOLDOWN_GENERATED_CASES", "300"))
"""How many generated answers the property below tries (docs/reliability.md ran 20000)."""


def dispatched(send: Any, cost: int | None) -> Any:
    """What `dispatch` gave, or the 429 it raised."""
    try:
        return CredentialPool.dispatch(P, send, model="m", now=1000.0, cost=cost)
    except ModelCooldownExhausted as refused:
        return refused


FAMILIES = [  # (remaining, reset) as each provider pairs them
    ("x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"),
    ("x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"),
    ("X-RateLimit-Remaining", "X-RateLimit-Reset"),
    ("ratelimit-remaining", "ratelimit-reset"),
    ("anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-reset"),
    ("anthropic-ratelimit-input-tokens-remaining", "anthropic-ratelimit-input-tokens-reset"),
]
RESETS = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.builds(lambda n, unit: f"{n}{unit}", st.integers(0, 10**12), st.sampled_from("hms")),
    st.builds(lambda n: f"{n}ms", st.integers(0, 10**18)),
    st.dates().map(lambda day: f"{day.isoformat()}T00:00:00Z"),
    st.text(max_size=30),
)


@settings(
    max_examples=GENERATED_CASES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    status=st.sampled_from([200, 429, 401, 503]),
    pairs=st.lists(st.tuples(st.sampled_from(FAMILIES), st.integers(0, 10**6), RESETS), max_size=3),
    advice=st.dictionaries(st.sampled_from(["Retry-After", "retry-after-ms"]), RESETS),
    limit=st.one_of(st.none(), st.integers(0, 10**7)),
    cost=st.one_of(st.none(), st.integers(0, 10**9)),
)
def test_any_headers_give_the_answer_or_our_bounded_429(
    status: int,
    pairs: list[tuple[tuple[str, str], int, str]],
    advice: dict[str, str],
    limit: int | None,
    cost: int | None,
) -> None:
    from cooldown import model_cooldown

    model_cooldown.reset()
    CredentialPool.reset()
    headers = dict(advice)
    for (remaining_name, reset_name), remaining, reset in pairs:
        headers[remaining_name], headers[reset_name] = str(remaining), reset
    if limit is not None:
        headers["x-ratelimit-limit-tokens"] = headers["x-ratelimit-limit-requests"] = str(limit)
    answer = Answer(status, headers)
    got = dispatched(lambda key: answer, cost)
    if isinstance(got, ModelCooldownExhausted):
        assert status in (429, 401)
        assert 1 <= got.retry_after <= 3600
    else:
        assert got is answer
    later = CredentialPool.status(P, model="m", now=1001.0, cost=cost)
    assert all(
        key["retry_after"] is None or 1 <= key["retry_after"] <= 3600 for key in later["keys"]
    )

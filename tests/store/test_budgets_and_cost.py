"""Budgets a provider announces: requests and tokens, refilled continuously when
the limit is announced; a request's `cost` held against a key's tokens while in flight."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from cooldown import CredentialPool, ModelCooldown, ModelCooldownExhausted
from cooldown.store import Order

P, KEYS, MODEL = "p", ["sk-a", "sk-b"], "m"
NOW = 100.0


def tokens(
    store: ModelCooldown, key: str, remaining: int, reset: float, limit: int | None = None
) -> None:
    store.record_token_budget(
        P, key, model=MODEL, remaining=remaining, reset_seconds=reset, limit=limit, now=NOW
    )


def test_a_key_without_the_tokens_a_request_costs_is_not_free(store: ModelCooldown) -> None:
    tokens(store, KEYS[0], 3000, 30)
    assert store.select(P, KEYS, model=MODEL, now=NOW, cost=12000) == KEYS[1]
    assert store.select(P, KEYS, model=MODEL, now=NOW, cost=2000) == KEYS[0]  # it fits
    assert store.select(P, KEYS, model=MODEL, now=NOW) == KEYS[0]  # unknown cost: 1 token


def test_a_cost_sent_since_the_budget_is_held_until_a_newer_budget_covers_it(
    store: ModelCooldown,
) -> None:
    tokens(store, KEYS[0], 1000, 30)
    first = store.admit(P, KEYS, model=MODEL, now=NOW, order="configured", cost=600)
    assert first is not None
    assert first[0] == KEYS[0]
    second = store.admit(P, KEYS, model=MODEL, now=NOW, order="configured", cost=600)
    assert second is not None
    assert second[0] == KEYS[1]  # 1000 - 600 in flight cannot hold another 600
    store.finish(first[1], served=True)  # answered without headers: its 600 are spent
    assert store.select(P, KEYS, model=MODEL, now=NOW, cost=600) == KEYS[1]
    store.record_token_budget(
        P, KEYS[0], model=MODEL, remaining=1000, reset_seconds=30, now=NOW + 1
    )
    assert store.select(P, KEYS, model=MODEL, now=NOW + 1, cost=600) == KEYS[0]


def test_an_attempt_that_got_no_answer_gives_its_cost_back(store: ModelCooldown) -> None:
    tokens(store, KEYS[0], 1000, 30)
    first = store.admit(P, KEYS, model=MODEL, now=NOW, order="configured", cost=600)
    assert first is not None
    store.finish(first[1], served=False, answered=False)  # a timeout: the provider saw nothing
    assert store.select(P, KEYS, model=MODEL, now=NOW, cost=600) == KEYS[0]


def test_spread_order_prefers_the_largest_share_of_tokens_left(store: ModelCooldown) -> None:
    tokens(store, KEYS[0], 2000, 30, limit=10000)
    tokens(store, KEYS[1], 9000, 30, limit=10000)
    assert store.available(P, KEYS, model=MODEL, now=NOW, order="spread", cost=100) == [
        KEYS[1],
        KEYS[0],
    ]


def test_a_key_with_no_token_budget_counts_as_full(store: ModelCooldown) -> None:
    tokens(store, KEYS[0], 500, 30, limit=10000)
    order = store.available(P, KEYS, model=MODEL, now=NOW, order="spread", cost=100)
    assert order == [KEYS[1], KEYS[0]]


def test_without_a_limit_the_soonest_reset_is_the_advice(store: ModelCooldown) -> None:
    tokens(store, KEYS[0], 100, 40)
    tokens(store, KEYS[1], 100, 25)
    chosen = store.available(P, KEYS, model=MODEL, now=NOW, cost=50)
    assert chosen == KEYS  # both hold 50
    store.record_token_budget(P, KEYS[0], model=MODEL, remaining=10, reset_seconds=40, now=NOW)
    store.record_token_budget(P, KEYS[1], model=MODEL, remaining=10, reset_seconds=25, now=NOW)
    with pytest.raises(ModelCooldownExhausted) as raised:
        store.select(P, KEYS, model=MODEL, now=NOW, cost=50)
    assert raised.value.retry_after == 25
    assert store.select(P, KEYS, model=MODEL, now=NOW + 25, cost=50) == KEYS[1]


def test_with_the_limit_tokens_refill_continuously_until_the_reset(store: ModelCooldown) -> None:
    # 100 of 10 000 left, full again in 25 s: 396 tokens a second come back
    tokens(store, KEYS[0], 100, 25, limit=10000)
    with pytest.raises(ModelCooldownExhausted) as raised:
        store.select(P, [KEYS[0]], model=MODEL, now=NOW, cost=5000)
    assert raised.value.retry_after == 13  # (5000 - 100) / 396: back long before the reset
    with pytest.raises(ModelCooldownExhausted):
        store.select(P, [KEYS[0]], model=MODEL, now=NOW + 12, cost=5000)
    assert store.select(P, [KEYS[0]], model=MODEL, now=NOW + 13, cost=5000) == KEYS[0]
    assert store.select(P, [KEYS[0]], model=MODEL, now=NOW + 1, cost=400) == KEYS[0]


@pytest.mark.parametrize("order", ["spread", "configured"])
def test_a_request_larger_than_every_limit_goes_to_the_largest_limit(
    store: ModelCooldown, order: Order
) -> None:
    tokens(store, KEYS[0], 1000, 30, limit=30000)
    tokens(store, KEYS[1], 1000, 30, limit=90000)
    chosen = store.available(P, KEYS, model=MODEL, now=NOW, order=order, cost=200000)
    assert chosen == [KEYS[1], KEYS[0]]  # the provider decides; the largest limit first
    assert store.select(P, KEYS, model=MODEL, now=NOW, order=order, cost=200000) == KEYS[1]


@pytest.mark.parametrize(
    ("cost", "error"),
    [
        (True, TypeError),
        ("5", TypeError),
        (1.5, TypeError),
        (-1, ValueError),
        (10**9 + 1, ValueError),
    ],
)
def test_a_cost_that_is_not_tokens_is_refused(
    store: ModelCooldown, cost: Any, error: type[Exception]
) -> None:
    for call in (store.select, store.available, store.eligible, store.admit):
        with pytest.raises(error, match="cost"):
            call(P, KEYS, model=MODEL, cost=cost)


SHORT_OF_TOKENS = {  # requests left, 1954 of 30000 tokens: this request did not fit
    "x-ratelimit-remaining-requests": "40",
    "x-ratelimit-reset-requests": "1s",
    "x-ratelimit-remaining-tokens": "1954",
    "x-ratelimit-reset-tokens": "6s",
    "x-ratelimit-limit-tokens": "30000",
    "Retry-After": "6",
}


class Answer:
    def __init__(self, status: int, headers: dict[str, str]) -> None:
        self.status_code, self.headers = status, headers


def test_dispatch_reads_token_headers_and_a_shortfall_cools_nothing(
    enabled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CODEX_EVERYWHERE_API_KEY_GPT_PRO_POOL", KEYS[0])
    monkeypatch.setenv("CODEX_EVERYWHERE_API_KEY_GPT_PRO_POOL_1", KEYS[1])

    sent: list[str] = []

    def send(key: str) -> Answer:
        sent.append(key)
        return Answer(429, SHORT_OF_TOKENS) if key == KEYS[0] else Answer(200, {})

    P2 = "ce-gpt-pro"
    answer = CredentialPool.dispatch(P2, send, model=MODEL, order="configured", cost=5934)
    assert answer.status_code == 200
    assert sent == KEYS  # rotated away from the shortfall
    # the key is not cooled: a median request still goes to it, a large one does not
    assert CredentialPool.select(P2, model=MODEL, order="configured", cost=800) == KEYS[0]
    assert CredentialPool.select(P2, model=MODEL, order="configured", cost=5934) == KEYS[1]
    assert CredentialPool.status(P2, model=MODEL)["keys"][0]["state"] == "ready"


@pytest.fixture
def unknown_cost(enabled: None) -> Iterator[str]:
    """A provider registered for one test only."""
    yield "unknown-cost"
    CredentialPool._providers.pop("unknown-cost", None)


def test_an_unknown_cost_that_did_not_fit_rests_its_key_a_second_and_asks_more_of_the_next(
    unknown_cost: str,
) -> None:
    """No `cost=`: a 429 with requests left and tokens short of the limit is this request's
    shortfall. The key rests one second, not the six its advice gives this request (the next
    request may be smaller), and no sibling cools; the request is now known to need more than
    the 1954 tokens that key had, so a key holding fewer is passed over."""
    keys = ["sk-short", "sk-fewer", "sk-more", "sk-sibling"]
    CredentialPool.register(unknown_cost, keys=keys, accounts={"one": [1, 4]})
    CredentialPool.store.record_token_budget(
        unknown_cost, keys[1], model=MODEL, remaining=1000, reset_seconds=60, limit=30000
    )
    sent: list[str] = []

    def send(key: str) -> Answer:
        sent.append(key)
        return Answer(429, SHORT_OF_TOKENS) if key == keys[0] else Answer(200, {})

    sent_at = time.monotonic()
    answer = CredentialPool.dispatch(unknown_cost, send, model=MODEL, order="configured")
    assert answer.status_code == 200
    assert sent == [keys[0], keys[2]]  # 1000 tokens cannot hold what 1954 could not
    assert CredentialPool.available(unknown_cost, model=MODEL, now=sent_at + 0.5) == keys[1:]
    # the sibling shares the 1954 tokens: free for a request that fits them, not cooled
    back = CredentialPool.available(unknown_cost, model=MODEL, now=sent_at + 1.5)
    assert back == keys


def test_in_windows_an_unknown_cost_short_of_tokens_cools_its_key_as_advised(
    unknown_cost: str,
) -> None:
    """Where the provider counts in windows, the tokens left are all there is until the
    reset: the key rests as its advice says."""
    CredentialPool.register(unknown_cost, keys=["sk-short"], refill="window")
    sent_at = time.monotonic()
    with pytest.raises(ModelCooldownExhausted):
        CredentialPool.dispatch(unknown_cost, lambda key: Answer(429, SHORT_OF_TOKENS), model=MODEL)
    assert CredentialPool.available(unknown_cost, model=MODEL, now=sent_at + 1.5) == []


def test_a_429_with_requests_and_every_token_left_still_cools_the_key(unknown_cost: str) -> None:
    """Not a shortfall of tokens: something else refused it."""
    CredentialPool.register(unknown_cost, keys=["sk-refused"])
    full = {**SHORT_OF_TOKENS, "x-ratelimit-remaining-tokens": "30000"}
    with pytest.raises(ModelCooldownExhausted):
        CredentialPool.dispatch(unknown_cost, lambda key: Answer(429, full), model=MODEL)
    with pytest.raises(ModelCooldownExhausted):
        CredentialPool.select(unknown_cost, model=MODEL)


def test_a_429_without_requests_left_still_cools_the_key(
    enabled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CODEX_EVERYWHERE_API_KEY_GPT_PRO_POOL", KEYS[0])
    spent = {
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "20s",
        "x-ratelimit-remaining-tokens": "1954",
        "x-ratelimit-reset-tokens": "6s",
    }

    class Answer:
        status_code, headers = 429, spent

    with pytest.raises(ModelCooldownExhausted):
        CredentialPool.dispatch("ce-gpt-pro", lambda key: Answer(), model=MODEL, cost=5934)
    with pytest.raises(ModelCooldownExhausted):
        CredentialPool.select("ce-gpt-pro", model=MODEL, cost=10)


def test_spread_order_reads_the_tokens_refilled_since_the_answer(store: ModelCooldown) -> None:
    store.record_token_budget(
        P, KEYS[0], model=MODEL, remaining=100, reset_seconds=25, limit=10000, now=NOW - 20
    )  # 20 s later, 8020 of its 10 000 are back
    tokens(store, KEYS[1], 5000, 30, limit=10000)
    chosen = store.available(P, KEYS, model=MODEL, now=NOW, order="spread", cost=100)
    assert chosen == [KEYS[0], KEYS[1]]


def test_a_request_budget_with_its_limit_refills_instead_of_waiting_for_the_reset(
    store: ModelCooldown,
) -> None:
    # 0 of 60 requests left, full again in 60 s: one request is back every second
    store.record_budget(P, KEYS[0], model=MODEL, remaining=1, reset_seconds=60, limit=60, now=NOW)
    taken = store.admit(P, [KEYS[0]], model=MODEL, now=NOW)  # the last one: 0 left now
    assert taken is not None
    with pytest.raises(ModelCooldownExhausted) as raised:
        store.select(P, [KEYS[0]], model=MODEL, now=NOW)
    assert raised.value.retry_after == 2  # 1 in flight + 1 more, at one a second
    assert store.select(P, [KEYS[0]], model=MODEL, now=NOW + 2) == KEYS[0]


def test_a_request_budget_without_its_limit_waits_for_the_reset(store: ModelCooldown) -> None:
    store.record_budget(P, KEYS[0], model=MODEL, remaining=1, reset_seconds=60, now=NOW)
    assert store.admit(P, [KEYS[0]], model=MODEL, now=NOW) is not None
    with pytest.raises(ModelCooldownExhausted) as raised:
        store.select(P, [KEYS[0]], model=MODEL, now=NOW + 30)
    assert raised.value.retry_after == 30


def test_status_explains_a_token_hold_for_the_requests_cost(
    enabled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(CredentialPool, "_providers", dict(CredentialPool._providers))
    CredentialPool.register("token-held", keys=["sk-token-held-0123456789"])
    headers = {
        "x-ratelimit-remaining-tokens": "100",
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-reset-tokens": "4s",
    }
    served = type("Served", (), {"status_code": 200, "headers": headers})()
    CredentialPool.dispatch("token-held", lambda key: served, model=MODEL, now=NOW, cost=10)
    with pytest.raises(ModelCooldownExhausted) as raised:
        CredentialPool.dispatch("token-held", lambda key: served, model=MODEL, now=NOW, cost=500)
    held = CredentialPool.status("token-held", model=MODEL, now=NOW, cost=500)
    assert [key["reason"] for key in held["keys"]] == ["budget"]
    assert held["keys"][0]["retry_after"] == raised.value.retry_after  # what the client got
    assert CredentialPool.status("token-held", model=MODEL, now=NOW)["ready"] == 1  # 1 fits


class Served:
    def __init__(self, headers: dict[str, str]) -> None:
        self.status_code, self.headers = 200, headers


@pytest.mark.parametrize(
    ("headers", "held"),
    [
        (  # the docs' example: one request back every 360 s / 500
            {
                "x-ratelimit-limit-requests": "500",
                "x-ratelimit-remaining-requests": "0",
                "x-ratelimit-reset-requests": "6m0s",
            },
            0.72,
        ),
        ({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "200ms"}, 0.2),
        ({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "0.5s"}, 0.5),
    ],
    ids=["refill-0.72s", "reset-200ms", "reset-0.5s"],
)
@pytest.mark.parametrize("refill", ["auto", "continuous"])
def test_a_budgets_sub_second_hold_lasts_as_long_as_its_refill_says(
    enabled: None,
    monkeypatch: pytest.MonkeyPatch,
    headers: dict[str, str],
    held: float,
    refill: Any,
) -> None:
    monkeypatch.setattr(CredentialPool, "_providers", dict(CredentialPool._providers))
    CredentialPool.register("sub-second", keys=KEYS[:1], refill=refill)
    CredentialPool.dispatch("sub-second", lambda key: Served(headers), model=MODEL, now=NOW)
    assert CredentialPool.available("sub-second", model=MODEL, now=NOW + held - 0.01) == []
    assert CredentialPool.available("sub-second", model=MODEL, now=NOW + held + 0.01) == KEYS[:1]


def test_a_throttle_without_advice_still_cools_for_a_second(enabled: None) -> None:
    CredentialPool.record("ce-gpt-pro", KEYS[0], 429, model=MODEL, retry_after_seconds=0, now=NOW)
    assert CredentialPool.available("ce-gpt-pro", [KEYS[0]], model=MODEL, now=NOW + 0.99) == []
    assert CredentialPool.available("ce-gpt-pro", [KEYS[0]], model=MODEL, now=NOW + 1.0) == KEYS[:1]

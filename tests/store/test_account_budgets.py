"""An account's keys share its request and token budgets: what one key's answer
announces holds its siblings too, and what is in flight on any of them is summed."""

from __future__ import annotations

from typing import Any

import pytest

from cooldown import ModelCooldown, ModelCooldownExhausted

P, MODEL, NOW = "p", "m", 100.0
KEYS = ["sk-a-one", "sk-a-two", "sk-b-one"]
ACCOUNTS = {KEYS[0]: "team-a", KEYS[1]: "team-a", KEYS[2]: "team-b"}


def account_tokens(store: ModelCooldown, remaining: int, *, limit: int | None = None) -> None:
    store.record_token_budget(
        P,
        KEYS[0],
        model=MODEL,
        remaining=remaining,
        reset_seconds=30,
        limit=limit,
        now=NOW,
        account="team-a",
    )


def test_one_keys_token_budget_holds_its_siblings(store: ModelCooldown) -> None:
    account_tokens(store, 3000)
    free = store.available(P, KEYS, model=MODEL, now=NOW, cost=5000, accounts=ACCOUNTS)
    assert free == [KEYS[2]]
    assert store.available(P, KEYS, model=MODEL, now=NOW, cost=2000, accounts=ACCOUNTS) == KEYS


def test_without_accounts_a_budget_recorded_for_an_account_holds_no_key(
    store: ModelCooldown,
) -> None:
    account_tokens(store, 3000)
    assert store.available(P, KEYS, model=MODEL, now=NOW, cost=5000) == KEYS


def test_a_cost_in_flight_on_one_key_is_held_against_its_siblings(store: ModelCooldown) -> None:
    account_tokens(store, 1000)
    first = store.admit(
        P, KEYS, model=MODEL, now=NOW, order="configured", cost=600, accounts=ACCOUNTS
    )
    assert first is not None
    assert first[0] == KEYS[0]
    second = store.admit(
        P, KEYS, model=MODEL, now=NOW, order="configured", cost=600, accounts=ACCOUNTS
    )
    assert second is not None
    assert second[0] == KEYS[2]  # not the sibling: 1000 - 600 in flight on the account
    store.finish(first[1], served=True)  # answered, announcing nothing newer
    chosen = store.select(
        P, KEYS, model=MODEL, now=NOW, order="configured", cost=600, accounts=ACCOUNTS
    )
    assert chosen == KEYS[2]  # its 600 are spent at the provider: the budget has not seen it
    store.record_token_budget(  # an answer sent after it: 1000 again, the 600 seen
        P, KEYS[1], model=MODEL, remaining=1000, reset_seconds=30, now=NOW + 1, account="team-a"
    )
    chosen = store.select(
        P, KEYS, model=MODEL, now=NOW + 1, order="configured", cost=600, accounts=ACCOUNTS
    )
    assert chosen == KEYS[0]


def test_requests_in_flight_are_summed_over_the_account(store: ModelCooldown) -> None:
    store.record_budget(
        P, KEYS[1], model=MODEL, remaining=2, reset_seconds=30, now=NOW, account="team-a"
    )
    taken = [
        store.admit(P, KEYS[:2], model=MODEL, now=NOW, order="spread", accounts=ACCOUNTS)
        for _ in range(2)
    ]
    assert [admitted[0] for admitted in taken if admitted is not None] == [
        KEYS[0],  # the account's one share: then the fewest in flight
        KEYS[1],
    ]
    with pytest.raises(ModelCooldownExhausted) as raised:  # team-a's 2 are in flight
        store.select(P, KEYS[:2], model=MODEL, now=NOW, accounts=ACCOUNTS)
    assert raised.value.retry_after == 30
    reasons = store.explain(P, KEYS[:2], model=MODEL, now=NOW, accounts=ACCOUNTS)
    assert [reason for reason, _ in reasons] == ["budget", "budget"]


def test_the_accounts_request_budget_refills_for_every_key(store: ModelCooldown) -> None:
    store.record_budget(  # 0 of 30 left, full in 30 s: one back every second
        P, KEYS[0], model=MODEL, remaining=0, reset_seconds=30, limit=30, now=NOW, account="team-a"
    )
    with pytest.raises(ModelCooldownExhausted) as raised:
        store.select(P, KEYS[:2], model=MODEL, now=NOW, accounts=ACCOUNTS)
    assert raised.value.retry_after == 1
    assert store.select(P, KEYS[:2], model=MODEL, now=NOW + 1, accounts=ACCOUNTS) == KEYS[0]


@pytest.mark.parametrize(
    ("accounts", "error"),
    [(["team-a"], TypeError), ({KEYS[0]: 3}, TypeError), ({KEYS[0]: ""}, TypeError)],
)
def test_accounts_that_are_not_labels_by_key_are_refused(
    store: ModelCooldown, accounts: Any, error: type[Exception]
) -> None:
    for call in (store.select, store.available, store.eligible, store.admit, store.explain):
        with pytest.raises(error, match="account"):
            call(P, KEYS, model=MODEL, accounts=accounts)


def test_a_budget_for_an_account_that_is_not_a_label_is_refused(store: ModelCooldown) -> None:
    with pytest.raises(TypeError, match="account"):
        store.record_budget(P, KEYS[0], model=MODEL, remaining=1, reset_seconds=1, account=b"a")

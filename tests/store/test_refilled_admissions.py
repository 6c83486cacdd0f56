"""An admission only a budget's continuous refill allowed says so: that is what lets one 429
teach that a provider counts in windows instead."""

from __future__ import annotations

from cooldown import ModelCooldown

P, MODEL, KEY = "refilled", "m", "sk-refilled-0123456789"


def admitted(store: ModelCooldown, now: float, cost: int | None = None) -> object:
    taken = store.admit(P, [KEY], model=MODEL, now=now, cost=cost)
    assert taken is not None
    store.finish(taken[1], served=True)
    return taken[1].refilled


def test_requests_spent_at_the_stamp_and_back_by_refill() -> None:
    store = ModelCooldown()
    store.record_budget(P, KEY, model=MODEL, remaining=0, reset_seconds=60, limit=2, now=0)
    assert admitted(store, 31) == "requests"


def test_requests_left_at_the_stamp_are_no_refill() -> None:
    store = ModelCooldown()
    store.record_budget(P, KEY, model=MODEL, remaining=1, reset_seconds=60, limit=10, now=0)
    assert admitted(store, 1) is None
    assert admitted(store, 20) == "requests"  # the one left is spent: only the refill admits


def test_tokens_short_at_the_stamp_and_back_by_refill() -> None:
    store = ModelCooldown()
    store.record_token_budget(
        P, KEY, model=MODEL, remaining=100, reset_seconds=60, limit=1000, now=0
    )
    assert admitted(store, 30, cost=50) is None  # it fitted what was announced
    assert admitted(store, 30, cost=500) == "tokens"  # 550 there by refill, 50 announced left

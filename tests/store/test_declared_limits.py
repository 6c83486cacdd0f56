"""Limits declared for a provider: no attempt starts that would pass one."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from cooldown import ModelCooldown, ModelCooldownExhausted
from cooldown.store.declared import declared_limits
from cooldown.store.scope import CallScope

KEYS = ["sk-one-0123456789", "sk-two-0123456789"]


def scope(limits: Any, now: float, *, zone: str = "UTC", **parts: Any) -> CallScope:
    return CallScope("p", "m", now=now, limits=declared_limits(limits, zone), **parts)


def take(store: ModelCooldown, at: CallScope, keys: list[str] = KEYS) -> str:
    taken = store.admit(at, keys)
    assert taken is not None
    store.finish(taken[1], served=True)
    return taken[0]


def test_a_key_at_its_minute_limit_gives_way_to_another() -> None:
    store = ModelCooldown()
    limits = {"requests": {"minute": 2}}
    taken = [take(store, scope(limits, 1000.0 + i)) for i in range(4)]
    assert sorted(taken) == sorted(KEYS * 2)
    with pytest.raises(ModelCooldownExhausted) as refused:
        store.admit(scope(limits, 1004.0), KEYS)
    assert refused.value.reason == "limit"
    assert "out of quota or at its declared limit" in refused.value.message
    assert refused.value.retry_after == 57  # the first key's first slot leaves at 1061


def test_a_rolling_window_frees_room_as_its_attempts_leave_it() -> None:
    store = ModelCooldown()
    limits = {"requests": {"second": 1}}
    assert take(store, scope(limits, 10.0), KEYS[:1]) == KEYS[0]
    with pytest.raises(ModelCooldownExhausted):
        store.admit(scope(limits, 10.5), KEYS[:1])
    assert take(store, scope(limits, 11.02), KEYS[:1]) == KEYS[0]  # a slot (1/60 s) late at most


def test_tokens_count_the_cost_and_an_unknown_cost_needs_one_left() -> None:
    store = ModelCooldown()
    limits = {"tokens": {"minute": 100}}
    take(store, scope(limits, 0.0, cost=60), KEYS[:1])
    with pytest.raises(ModelCooldownExhausted):
        store.admit(scope(limits, 1.0, cost=41), KEYS[:1])
    take(store, scope(limits, 1.0, cost=40), KEYS[:1])
    with pytest.raises(ModelCooldownExhausted):
        store.admit(scope(limits, 2.0), KEYS[:1])  # no cost: one token must be left


def test_an_unknown_cost_counts_no_tokens() -> None:
    store = ModelCooldown()
    limits = {"tokens": {"minute": 1}}
    for second in range(5):
        take(store, scope(limits, float(second)), KEYS[:1])


def test_a_request_no_window_could_hold_is_never_started() -> None:
    store = ModelCooldown()
    with pytest.raises(ModelCooldownExhausted) as refused:
        store.admit(scope({"requests": {"day": 0}}, 0.0, max_seconds=600), KEYS)
    assert refused.value.retry_after == 600  # bounded by the maximum
    with pytest.raises(ModelCooldownExhausted):
        store.admit(scope({"tokens": {"minute": 10}}, 0.0, cost=11), KEYS)


def test_each_model_counts_apart() -> None:
    store = ModelCooldown()
    limits = declared_limits({"requests": {"minute": 1}})
    take(store, CallScope("p", "m", now=0.0, limits=limits), KEYS[:1])
    take(store, CallScope("p", "other", now=0.0, limits=limits), KEYS[:1])
    with pytest.raises(ModelCooldownExhausted):
        store.admit(CallScope("p", "m", now=1.0, limits=limits), KEYS[:1])


def test_an_account_counts_once_for_all_its_keys() -> None:
    store = ModelCooldown()
    accounts = {KEYS[0]: "team", KEYS[1]: "team"}
    limits = {"requests": {"minute": 1}}
    take(store, scope(limits, 0.0, accounts=accounts))
    with pytest.raises(ModelCooldownExhausted):
        store.admit(scope(limits, 1.0, accounts=accounts), KEYS)


def midnight_in(zone: str) -> float:
    """The monotonic moment of the next midnight in `zone`, read as the store reads it."""
    offset = time.time() - time.monotonic()
    tomorrow = datetime.now(ZoneInfo(zone)).date() + timedelta(days=1)
    wall = datetime.combine(tomorrow, datetime.min.time(), ZoneInfo(zone)).timestamp()
    return wall - offset


def test_a_day_ends_at_midnight_in_its_zone() -> None:
    store = ModelCooldown()
    zone = "America/Los_Angeles"
    midnight = midnight_in(zone)
    limits = {"requests": {"day": 1}}
    take(store, scope(limits, midnight - 60, zone=zone), KEYS[:1])
    with pytest.raises(ModelCooldownExhausted) as refused:
        store.admit(scope(limits, midnight - 30, zone=zone), KEYS[:1])
    assert refused.value.retry_after in (30, 31)  # the clock offset is read at each call
    assert take(store, scope(limits, midnight + 1, zone=zone), KEYS[:1]) == KEYS[0]


def test_a_rolling_day_lasts_24_hours_from_each_attempt() -> None:
    store = ModelCooldown()
    midnight = midnight_in("UTC")
    limits = {"requests": {"day": 1}}
    take(store, scope(limits, midnight - 60, zone="rolling"), KEYS[:1])
    with pytest.raises(ModelCooldownExhausted):
        store.admit(scope(limits, midnight + 1, zone="rolling"), KEYS[:1])
    later = scope(limits, midnight + 1, zone="rolling", max_seconds=200000)
    [(reason, release)] = store.explain(later, KEYS[:1])
    assert reason == "limit"
    assert midnight - 60 + 86400 <= release <= midnight - 60 + 86400 + 1440  # a slot late


def test_explain_names_a_declared_limit() -> None:
    store = ModelCooldown()
    limits = {"requests": {"minute": 1}}
    take(store, scope(limits, 0.0), KEYS[:1])
    assert store.explain(scope(limits, 1.0), KEYS) == [("limit", 61.0), (None, 0.0)]
    counts = store.inspection.declared_counts(scope(limits, 1.0), KEYS)
    assert counts[0] == [
        {"counter": "requests", "unit": "minute", "used": 1, "limit": 1, "resets_in": 60}
    ]
    assert counts[1][0]["used"] == 0


def test_a_budget_and_a_declared_limit_both_hold_the_tighter_wins() -> None:
    store = ModelCooldown()
    limits = {"requests": {"minute": 10}}
    store.record_budget("p", KEYS[0], model="m", remaining=0, reset_seconds=5, now=0.0)
    assert store.explain(scope(limits, 1.0), KEYS[:1]) == [("budget", 5.0)]
    for second in range(10):
        take(store, scope(limits, 10.0 + second / 100), KEYS[:1])
    assert store.explain(scope(limits, 11.0), KEYS[:1])[0][0] == "limit"


def test_the_most_common_reason_is_told() -> None:
    store = ModelCooldown()
    keys = [*KEYS, "sk-three-0123456789"]
    limits = {"requests": {"minute": 1}}
    take(store, scope(limits, 0.0), keys[:1])
    take(store, scope(limits, 0.0), keys[1:2])
    store.record_budget("p", keys[2], model="m", remaining=0, reset_seconds=30, now=0.0)
    with pytest.raises(ModelCooldownExhausted) as refused:
        store.admit(scope(limits, 1.0), keys)
    assert refused.value.reason == "limit"
    assert "cooling down" in refused.value.message  # not every key is at its limit


@pytest.mark.parametrize(
    ("limits", "error"),
    [
        ({"requests": {"minute": True}}, TypeError),
        ({"requests": {"minute": "15"}}, TypeError),
        ({"requests": {"minute": 1.5}}, TypeError),
        ({"requests": {"minute": -1}}, ValueError),
        ({"requests": {"fortnight": 1}}, ValueError),
        ({"calls": {"minute": 1}}, ValueError),
        ({"requests": [15]}, TypeError),
        ({1: {"minute": 1}}, TypeError),
        ([("requests", 1)], TypeError),
    ],
)
def test_malformed_limits_are_refused_clearly(limits: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        declared_limits(limits)


@pytest.mark.parametrize(("zone", "error"), [("Mars/Olympus", ValueError), (0, TypeError)])
def test_an_unknown_day_zone_is_refused(zone: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        declared_limits({"requests": {"day": 1}}, zone)


def test_the_fleet_counts_every_process_in_one_window(
    process: Callable[[], ModelCooldown],
) -> None:
    workers = [process(), process()]
    at = time.monotonic()
    limits = {"requests": {"minute": 2}}
    for worker in workers:  # each process takes one: the fleet's two
        take(worker, scope(limits, at), KEYS[:1])
    for worker in workers:
        with pytest.raises(ModelCooldownExhausted) as refused:
            worker.admit(scope(limits, at + 1), KEYS[:1])
        assert refused.value.reason == "limit"
        assert "at its declared limit" in refused.value.message
        assert 59 <= refused.value.retry_after <= 61


def test_the_fleet_counts_a_calendar_day_and_tokens_alike(
    process: Callable[[], ModelCooldown],
) -> None:
    workers = [process(), process()]
    at = time.monotonic()
    limits = {"requests": {"day": 3}, "tokens": {"hour": 102}}
    take(workers[0], scope(limits, at, zone="Europe/Paris", cost=60), KEYS[:1])
    with pytest.raises(ModelCooldownExhausted):
        workers[1].admit(scope(limits, at, zone="Europe/Paris", cost=43), KEYS[:1])
    take(workers[1], scope(limits, at, zone="Europe/Paris", cost=41), KEYS[:1])
    take(workers[0], scope(limits, at, zone="Europe/Paris"), KEYS[:1])  # no cost: 0 counted
    with pytest.raises(ModelCooldownExhausted):
        workers[1].admit(scope(limits, at, zone="Europe/Paris"), KEYS[:1])  # the day's three


def test_every_process_shows_the_fleets_counts(process: Callable[[], ModelCooldown]) -> None:
    workers = [process(), process()]
    at = time.monotonic()
    limits = {"requests": {"minute": 2}}
    for worker in workers:
        take(worker, scope(limits, at), KEYS[:1])
    for worker in workers:  # each took one, each shows both, and the key held
        [row] = worker.inspection.declared_counts(scope(limits, at + 1), KEYS[:1])
        assert row[0]["used"] == 2
        [(reason, release)] = worker.explain(scope(limits, at + 1), KEYS[:1])
        assert reason == "limit"
        assert at + 59 <= release <= at + 62

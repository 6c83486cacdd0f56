"""What the store refuses, and that a refused call changes nothing."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cooldown import (
    CredentialPool,
    ModelCooldown,
    ModelCooldownExhausted,
    classify_upstream_outcome,
    model_cooldown,
)

P, KEYS, MODEL = "p", ["sk-a", "sk-b"], "m"
THROTTLED = classify_upstream_outcome(429)


def cooling(store: ModelCooldown, now: float) -> list[str]:
    return [key for key in KEYS if key not in store.available(P, KEYS, model=MODEL, now=now)]


# -- now: monotonic seconds, never far ahead of them -----------------------------------------------


@pytest.mark.parametrize("ahead", [2 * 24 * 3600.0, 1e9, 1e11])
def test_a_now_far_ahead_of_the_monotonic_clock_is_refused_before_anything_changes(
    store: ModelCooldown, ahead: float
) -> None:
    now = float(int(time.monotonic()))  # whole seconds: exact arithmetic on deadlines
    store.record(P, KEYS[0], THROTTLED, model=MODEL, retry_after_seconds=600, now=now)
    with pytest.raises(ValueError, match="now"):
        store.select(P, KEYS, model=MODEL, now=now + ahead)
    with pytest.raises(ValueError, match="now"):
        store.record(P, KEYS[1], THROTTLED, model=MODEL, now=now + ahead)
    assert cooling(store, now + 1) == [KEYS[0]]  # the 600 s throttle is still there


def test_milliseconds_by_mistake_are_refused(store: ModelCooldown) -> None:
    with pytest.raises(ValueError, match="more than a day ahead"):
        store.select(P, KEYS, model=MODEL, now=max(time.monotonic(), 200.0) * 1000)


def test_a_now_within_a_day_ahead_is_a_time(store: ModelCooldown) -> None:
    assert store.select(P, KEYS, model=MODEL, now=time.monotonic() + 3600) == KEYS[0]


@settings(max_examples=200)
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_any_now_is_a_time_or_a_clear_error(now: float) -> None:
    store = ModelCooldown()
    day_ahead = time.monotonic() + 24 * 3600
    assume(not (math.isfinite(now) and abs(now - day_ahead) < 60))  # the clock moves meanwhile
    if math.isfinite(now) and 0 <= now <= day_ahead:
        assert store.select(P, KEYS, model=MODEL, now=now) == KEYS[0]
    else:
        with pytest.raises(ValueError, match="now"):
            store.select(P, KEYS, model=MODEL, now=now)


# -- a refused call changes no state ---------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda store, now: store.select(P, ["ok", 5], model=MODEL, max_seconds=1, now=now),
        lambda store, now: store.available(P, [5], model=MODEL, max_seconds=1, now=now),
        lambda store, now: store.explain(P, ["ok", None], model=MODEL, max_seconds=1, now=now),
        lambda store, now: store.admit(P, ["ok", b"k"], model=MODEL, max_seconds=1, now=now),
        lambda store, now: store.select(
            P, ["ok"], model=MODEL, max_seconds=1, now=now, legacy_rest_until={"ok": "soon"}
        ),
    ],
)
def test_a_call_refused_for_its_arguments_cuts_no_cooldown(store: ModelCooldown, call: Any) -> None:
    now = float(int(time.monotonic()))  # whole seconds: exact arithmetic on deadlines
    store.record(P, KEYS[0], THROTTLED, model=MODEL, retry_after_seconds=600, now=now)
    with pytest.raises(TypeError):
        call(store, now)
    with pytest.raises(ModelCooldownExhausted) as held:
        store.select(P, [KEYS[0]], model=MODEL, now=now + 1)
    assert held.value.retry_after == 599  # not cut to the refused call's 1 s maximum


def test_one_bad_key_is_refused_wherever_it_stands(store: ModelCooldown) -> None:
    with pytest.raises(TypeError, match="each key"):
        store.select(P, ["ok", 5], model=MODEL)  # type: ignore[list-item]
    with pytest.raises(TypeError, match="each key"):
        store.select(P, [5], model=MODEL)  # type: ignore[list-item]


# -- attempts and budgets --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"remaining": 3, "reset_seconds": math.nan}, ValueError),
        ({"remaining": 3, "reset_seconds": math.inf}, ValueError),
        ({"remaining": 3, "reset_seconds": -1}, ValueError),
        ({"remaining": 3, "reset_seconds": 10**400}, ValueError),
        ({"remaining": 3, "reset_seconds": "60"}, TypeError),
        ({"remaining": 3, "reset_seconds": None}, TypeError),
        ({"remaining": None, "reset_seconds": 60}, TypeError),
        ({"remaining": "3", "reset_seconds": 60}, TypeError),
        ({"remaining": True, "reset_seconds": 60}, TypeError),
        ({"remaining": -1, "reset_seconds": 60}, ValueError),
    ],
)
def test_record_budget_refuses_what_is_not_a_budget(
    store: ModelCooldown, arguments: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        store.record_budget(P, KEYS[0], model=MODEL, **arguments)
    assert store.admit(P, KEYS, model=MODEL, order="configured") is not None
    assert store.explain(P, KEYS, model=MODEL) == [(None, 0.0), (None, 0.0)]


@pytest.mark.parametrize("attempt", [None, "attempt", object(), ("sk-a", None)])
def test_finish_and_ending_refuse_what_admit_did_not_return(
    store: ModelCooldown, attempt: Any
) -> None:
    with pytest.raises(TypeError, match="attempt"):
        store.finish(attempt, served=True)
    with pytest.raises(TypeError, match="attempt"), store.ending(attempt):
        pass


def test_admit_refuses_a_string_exclude_and_a_lease_that_is_not_positive(
    store: ModelCooldown,
) -> None:
    with pytest.raises(TypeError, match="exclude"):
        store.admit(P, KEYS, model=MODEL, exclude="sk-a")  # type: ignore[arg-type]
    for lease in (-5, 0):
        with pytest.raises(ValueError, match="lease_seconds"):
            store.admit(P, KEYS, model=MODEL, lease_seconds=lease)


def test_a_secret_that_is_not_bytes_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="bytes"):
        ModelCooldown(secret=bytearray(40))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="32 bytes"):
        ModelCooldown(secret=b"short")


def test_retry_after_beyond_any_maximum_is_capped() -> None:
    assert ModelCooldownExhausted(10**5000).retry_after == 2_147_483_647
    assert "2147483647" in ModelCooldownExhausted(10**5000).message


# -- what holds a key does not depend on the order asked for, and is shown -------------------------


@pytest.mark.parametrize("order", ["configured", "spread"])
def test_a_probe_in_flight_holds_its_key_in_every_order(store: ModelCooldown, order: Any) -> None:
    now = float(int(time.monotonic()))  # whole seconds: exact arithmetic on deadlines
    store.record(P, KEYS[0], THROTTLED, model=MODEL, retry_after_seconds=5, now=now)
    probe = store.admit(P, [KEYS[0]], model=MODEL, now=now + 6)  # the released key's probe
    assert probe is not None
    assert store.available(P, KEYS, model=MODEL, now=now + 6, order=order) == [KEYS[1]]
    assert store.select(P, KEYS, model=MODEL, now=now + 6, order=order) == KEYS[1]
    with pytest.raises(ModelCooldownExhausted):
        store.eligible(P, [KEYS[0]], model=MODEL, now=now + 6, order=order)
    assert store.explain(P, KEYS, model=MODEL, now=now + 6)[0][0] == "probe"
    store.finish(probe[1], served=True)
    assert sorted(store.available(P, KEYS, model=MODEL, now=now + 6, order=order)) == KEYS


@pytest.mark.parametrize("order", ["configured", "spread"])
def test_a_spent_budget_holds_its_key_in_every_order(store: ModelCooldown, order: Any) -> None:
    now = float(int(time.monotonic()))  # whole seconds: exact arithmetic on deadlines
    store.record_budget(P, KEYS[0], model=MODEL, remaining=1, reset_seconds=30, now=now)
    held = store.admit(P, [KEYS[0]], model=MODEL, now=now)  # the last request of the window
    assert held is not None
    assert store.select(P, KEYS, model=MODEL, now=now, order=order) == KEYS[1]
    reason, release = store.explain(P, KEYS, model=MODEL, now=now)[0]
    assert (reason, release) == ("budget", now + 30)


def test_status_shows_a_key_held_by_a_probe(monkeypatch: pytest.MonkeyPatch, enabled: None) -> None:

    monkeypatch.setenv("CODEX_EVERYWHERE_API_KEY_GPT_PRO_POOL", KEYS[0])
    now = float(int(time.monotonic()))  # whole seconds: exact arithmetic on deadlines
    CredentialPool.record("ce-gpt-pro", KEYS[0], 429, model=MODEL, retry_after_seconds=5, now=now)
    model_cooldown.admit("ce-gpt-pro", [KEYS[0]], model=MODEL, now=now + 6)
    status = CredentialPool.status("ce-gpt-pro", model=MODEL, now=now + 6)
    assert status["keys"][0]["state"] == "cooling"
    assert status["keys"][0]["reason"] == "probe"
    assert status["ready"] == 0


def test_a_wall_clock_now_is_refused_before_it_prunes_anything() -> None:
    store = ModelCooldown()
    store.record("p", "k", classify_upstream_outcome(429), model="m", retry_after_seconds=60)
    with pytest.raises(ValueError, match=r"time\.monotonic"):
        store.select("p", ["k"], model="m", now=time.time())
    with pytest.raises(ValueError, match=r"time\.monotonic"):
        CredentialPool.record("ce-gpt-plus", "k", 429, model="m", now=time.time())
    with pytest.raises(ModelCooldownExhausted):  # the real cooldown is still there
        store.select("p", ["k"], model="m")

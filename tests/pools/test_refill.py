"""How a provider's announced limits come back: continuously until its answers prove windows
(a key's budgets no one refill period explains, or a refill-only 429 no sibling could
explain; per provider and model, fleet-wide with sharing), or as `register` fixed."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

import pytest

from cooldown import CredentialPool, ModelCooldown, ModelCooldownExhausted, model_cooldown

P = "refilling"
KEY = "sk-refill-0123456789"
LIMIT = 2


class Answer:
    def __init__(self, status: int, headers: dict[str, str]) -> None:
        self.status_code, self.headers = status, headers


class FixedWindow:
    """A provider allowing `limit` requests per 60 s window, announcing its limit as OpenAI
    does; `refills=True` makes it a bucket that refills continuously instead. One counter for
    every key (an account whose keys were not declared), or (`per_key=True`) one per key."""

    def __init__(self, *, refills: bool = False, limit: int = LIMIT, per_key: bool = False) -> None:
        self.refills, self.limit, self.per_key = refills, limit, per_key
        self.sent: list[tuple[float, int]] = []
        self.counters: dict[str, list[float]] = {}  # window or last refill, used or level

    def send_at(self, now: float) -> Any:
        def send(key: str) -> Answer:
            limit = self.limit
            reset = 60 - now % 60
            counter = self.counters.setdefault(key if self.per_key else "", [-1.0, 0.0, limit])
            if self.refills:
                level = min(limit, counter[2] + (now - max(counter[0], 0.0)) * limit / 60)
                admitted = level >= 1
                counter[0], counter[2] = now, level - (1 if admitted else 0)
                remaining = int(counter[2])
                reset = (limit - counter[2]) * 60 / limit
            else:
                if now // 60 != counter[0]:
                    counter[0], counter[1] = now // 60, 0
                admitted = counter[1] < limit
                counter[1] += 1 if admitted else 0
                remaining = int(limit - counter[1])
            status = 200 if admitted else 429
            self.sent.append((now, status))
            headers = {
                "x-ratelimit-limit-requests": str(limit),
                "x-ratelimit-remaining-requests": str(remaining),
                "x-ratelimit-reset-requests": f"{reset:.3f}s",
            }
            return Answer(status, headers)

        return send

    def throttles(self) -> int:
        return sum(1 for _, status in self.sent if status == 429)


def answering(headers: dict[str, str]) -> Callable[[str], Answer]:
    """A `send` whose every answer is a 200 with these headers."""
    return lambda key: Answer(200, headers)


def drive(pool: Any, provider: FixedWindow, seconds: range, model: str = "m") -> None:
    """One dispatch each second; our own 429 (every key cooling) sends nothing."""
    for now in seconds:
        with contextlib.suppress(ModelCooldownExhausted):
            pool.dispatch(P, provider.send_at(float(now)), model=model, now=float(now))


@pytest.fixture(autouse=True)
def unregister(enabled: None) -> Iterator[None]:
    yield
    CredentialPool._providers.pop(P, None)


def test_a_fixed_window_is_learned_from_one_429_and_never_overrun_again() -> None:
    CredentialPool.register(P, keys=[KEY])
    assert CredentialPool.status(P)["refill"] == "unknown"
    provider = FixedWindow()
    drive(CredentialPool, provider, range(0, 600))
    assert provider.throttles() == 1  # the one that taught it
    assert CredentialPool.status(P)["refill"] == "window"
    served = sum(1 for _, status in provider.sent if status == 200)
    assert served == 2 * 10  # every window used up, none overrun
    assert model_cooldown.refills.refill_reading(P, "m", None) == "window"
    assert model_cooldown.refills.refill_reading(P, "another model", None) == "continuous"


@pytest.mark.parametrize("keys", [1, 3])
def test_a_fixed_window_shows_in_its_budgets_before_any_429(keys: int) -> None:
    """Its reset runs down while its remaining falls: no one refill period explains three
    readings of one key, so windows are known before the window is overrun."""
    CredentialPool.register(P, keys=[f"{KEY}-{index}" for index in range(keys)])
    provider = FixedWindow(limit=5, per_key=True)
    drive(CredentialPool, provider, range(0, 600))
    assert provider.throttles() == 0
    assert CredentialPool.status(P)["refill"] == "window"
    served = sum(1 for _, status in provider.sent if status == 200)
    assert served == 5 * keys * 10  # every key's every window used up


def test_a_siblings_collision_on_a_continuous_bucket_teaches_no_window() -> None:
    """Two keys of one account nobody declared: each credits itself the bucket's refill, so
    one's refill-only attempt meets the bucket the other just spent. That 429 is a collision,
    and the bucket's readings all fit one period: the refill stays continuous."""
    CredentialPool.register(P, keys=[f"{KEY}-a", f"{KEY}-b"])
    provider = FixedWindow(refills=True, limit=6)
    drive(CredentialPool, provider, range(0, 600))
    assert provider.throttles() > 0  # the collisions happened
    assert CredentialPool.status(P)["refill"] == "continuous"
    assert model_cooldown.refills.refill_reading(P, "m", None) == "continuous"
    served = sum(1 for _, status in provider.sent if status == 200)
    assert served >= 6 + 600 * 6 // 60 - 2  # its refill is used, not held to a reset


def test_a_daily_counter_whose_reset_outlasts_the_maximum_teaches_nothing() -> None:
    """A continuous day's budget announces resets of hours; cut to the hour the maximum
    allows, they would imply ever other periods, so they are not read for the shape."""
    CredentialPool.register(P, keys=[KEY])
    for used in range(100, 120):
        headers = {
            "x-ratelimit-limit-requests": "1000",
            "x-ratelimit-remaining-requests": str(1000 - used),
            "x-ratelimit-reset-requests": f"{used * 86.4:.3f}s",  # full again in a day
        }
        CredentialPool.dispatch(P, answering(headers), model="m", now=float(used))
    assert model_cooldown.refills.refill_reading(P, "m", None) == "continuous"


def test_the_429_that_teaches_holds_the_key_until_the_reset() -> None:
    CredentialPool.register(P, keys=[KEY])
    provider = FixedWindow()
    drive(CredentialPool, provider, range(0, 60))
    assert [now for now, _ in provider.sent] == [0, 1, 31]  # 31: one back by the refill
    assert provider.sent[-1][1] == 429


def test_a_continuous_provider_is_read_as_such_and_served_by_its_refill() -> None:
    CredentialPool.register(P, keys=[KEY])
    provider = FixedWindow(refills=True)
    drive(CredentialPool, provider, range(0, 300))
    assert provider.throttles() == 0
    assert CredentialPool.status(P)["refill"] == "continuous"
    served = sum(1 for _, status in provider.sent if status == 200)
    assert served >= 2 + 300 * LIMIT // 60 - 1  # the refill is used, not the whole window


def test_register_fixes_the_reading_and_nothing_is_learned() -> None:
    CredentialPool.register(P, keys=[KEY], refill="window")
    provider = FixedWindow()
    drive(CredentialPool, provider, range(0, 180))
    assert provider.throttles() == 0  # no early request: a window from the first answer
    assert CredentialPool.status(P)["refill"] == "window"
    CredentialPool.register(P, keys=[KEY], refill="continuous")
    model_cooldown.reset()
    drive(CredentialPool, provider, range(180, 600))
    assert provider.throttles() > 1  # told continuous: every early request stays
    assert CredentialPool.status(P)["refill"] == "continuous"
    assert model_cooldown.refills.provider_refill(P) == "unknown"


@pytest.mark.parametrize("refill", ["sometimes", "", True, None, 1])
def test_any_other_refill_is_a_value_error(refill: object) -> None:
    with pytest.raises(ValueError, match="refill"):
        CredentialPool.register(P, keys=[KEY], refill=refill)  # type: ignore[arg-type]


def test_reset_forgets_learned_readings() -> None:
    CredentialPool.register(P, keys=[KEY])
    drive(CredentialPool, FixedWindow(), range(0, 61))
    assert CredentialPool.status(P)["refill"] == "window"
    model_cooldown.reset()
    assert CredentialPool.status(P)["refill"] == "unknown"
    assert model_cooldown.refills.refill_reading(P, "m", None) == "continuous"


def test_pool_objects_learn_for_themselves() -> None:
    pool = CredentialPool()
    pool.register(P, keys=[KEY])
    CredentialPool.register(P, keys=[KEY])
    drive(pool, FixedWindow(), range(0, 61))
    assert pool.status(P)["refill"] == "window"
    assert CredentialPool.status(P)["refill"] == "unknown"


# -- across processes ---------------------------------------------------------------------


@pytest.fixture
def fleet(process: Callable[[], ModelCooldown]) -> list[CredentialPool]:
    """Two gateway processes' pools, sharing one Redis."""
    pools = [CredentialPool(store=process()) for _ in range(2)]
    for pool in pools:
        pool.register(P, keys=[KEY])
    return pools


def test_a_window_learned_in_one_process_holds_in_another(fleet: list[CredentialPool]) -> None:
    first, second = fleet
    base = time.monotonic()
    provider = FixedWindow()
    for offset in range(0, 61):  # the first process learns, on the provider's clock
        with contextlib.suppress(ModelCooldownExhausted):
            first.dispatch(P, provider.send_at(float(offset)), model="m", now=base + offset)
    assert provider.throttles() == 1
    later = base + 61  # past the quarter second the fleet's read is reused
    assert second.store.refills.refill_reading(P, "m", None, now=later) == "window"
    assert second.status(P, now=later)["refill"] == "window"
    assert second.store.refills.refill_reading(P, "other", None, now=later) == "continuous"


def test_several_keys_windows_show_across_the_fleet_before_any_429(
    process: Callable[[], ModelCooldown],
) -> None:
    """Two processes take turns on three keys with a window each: each reads only its own
    answers, and whichever first sees a key's budgets no one period explains teaches both."""
    keys = [f"{KEY}-{index}" for index in range(3)]
    pools = [CredentialPool(store=process()) for _ in range(2)]
    for pool in pools:
        pool.register(P, keys=keys)
    base = time.monotonic()
    provider = FixedWindow(limit=5, per_key=True)
    for offset in range(0, 180):
        with contextlib.suppress(ModelCooldownExhausted):
            pools[offset % 2].dispatch(
                P, provider.send_at(float(offset)), model="m", now=base + offset
            )
    assert provider.throttles() == 0
    later = base + 181  # past the quarter second the fleet's read is reused
    assert all(
        pool.store.refills.refill_reading(P, "m", None, now=later) == "window" for pool in pools
    )
    served = sum(1 for _, status in provider.sent if status == 200)
    assert served == 5 * 3 * 3


def test_a_reset_given_as_a_date_is_read_as_of_the_request_not_its_late_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Anthropic's reset is a moment: a budget kept as of its request's start must end at
    that moment, not one latency later (that would hold the key past the window's opening)."""
    clock = [1000.0]
    wall = time.time()
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(time, "time", lambda: wall + clock[0])
    CredentialPool.register(P, keys=[KEY], refill="window")

    def send(key: str) -> Answer:
        decided = time.time()  # the provider decides, then answers 5 s later
        clock[0] += 5
        reset = datetime.fromtimestamp(decided + 10, tz=timezone.utc).isoformat()
        headers = {
            "anthropic-ratelimit-requests-limit": str(LIMIT),
            "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-requests-reset": reset,
        }
        return Answer(200, headers)

    CredentialPool.dispatch(P, send, model="m")  # sent at 1000, answered at 1005
    assert CredentialPool.available(P, model="m", now=1009.5) == []
    assert CredentialPool.available(P, model="m", now=1010.5) == [KEY]  # the window opened


def test_an_attempt_only_the_fleets_refill_admitted_teaches_the_window(
    fleet: list[CredentialPool],
) -> None:
    """The second process never saw an answer: the shared budget says only its refill had
    room, so its 429 teaches windows (and the first process reads them)."""
    first, second = fleet
    base = time.monotonic()
    provider = FixedWindow()
    for offset in (0, 1):  # the window's two requests, answered in the first process
        first.dispatch(P, provider.send_at(float(offset)), model="m", now=base + offset)
    with pytest.raises(ModelCooldownExhausted):  # its 429: now every key cools
        second.dispatch(P, provider.send_at(31.0), model="m", now=base + 31)
    assert provider.sent[-1] == (31.0, 429)
    assert second.store.refills.refill_reading(P, "m", None, now=base + 31) == "window"
    assert first.store.refills.refill_reading(P, "m", None, now=base + 32) == "window"

"""One attempt, one settlement: a dispatch makes two calls into its store per attempt, one to
admit a key (drained keys left out) and one to settle the answer (its cooldown, its siblings',
its budgets, the refill it taught, its release)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from cooldown import CredentialPool, ModelCooldown

P = "settled"
KEYS = ["sk-settle-one-0123456789", "sk-settle-two-0123456789", "sk-settle-three-012345"]
HEADERS = {
    "x-ratelimit-limit-requests": "60",
    "x-ratelimit-remaining-requests": "59",
    "x-ratelimit-reset-requests": "1s",
    "x-ratelimit-limit-tokens": "1000",
    "x-ratelimit-remaining-tokens": "900",
    "x-ratelimit-reset-tokens": "6s",
}


PARTS = ("operators", "refills", "inspection", "waiters")


class CountingStore(ModelCooldown):
    """Counts the calls a pool makes into its store, through its public methods or its parts
    (`store.operators.drain` counts as `"operators.drain"`), not the store's calls to
    itself."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []
        self._inside = threading.local()
        for part_name in PARTS:
            part = getattr(self, part_name)
            for name in dir(part):
                if not name.startswith("_") and callable(getattr(part, name)):
                    counted = self._counted(f"{part_name}.{name}", getattr(part, name))
                    setattr(part, name, counted)

    def _counted(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(self._inside, "depth", 0)
            if depth == 0:
                self.calls.append(name)
            self._inside.depth = depth + 1
            try:
                return method(*args, **kwargs)
            finally:
                self._inside.depth = depth

        return counted


def _counted_method(name: str) -> Callable[..., Any]:
    method = getattr(ModelCooldown, name)

    def counted(self: CountingStore, *args: Any, **kwargs: Any) -> Any:
        return self._counted(name, method)(self, *args, **kwargs)

    return counted


for _name in dir(ModelCooldown):
    if not _name.startswith("_") and callable(getattr(ModelCooldown, _name)):
        setattr(CountingStore, _name, _counted_method(_name))


class Answer:
    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.status_code, self.headers = status, headers or {}


@pytest.fixture
def pool(enabled: None) -> tuple[CredentialPool, CountingStore]:
    store = CountingStore()
    pool = CredentialPool(store=store)
    pool.register(P, keys=KEYS, accounts={"team": [1, 2]})
    return pool, store


def test_a_served_attempt_is_one_admission_and_one_settlement(
    pool: tuple[CredentialPool, CountingStore],
) -> None:
    dispatching, store = pool
    dispatching.dispatch(P, lambda key: Answer(200, HEADERS), model="m", cost=50)
    assert store.calls == ["admit", "settle"]


def test_a_throttle_with_budgets_and_siblings_settles_in_one_call_too(
    pool: tuple[CredentialPool, CountingStore],
) -> None:
    dispatching, store = pool
    sent: list[str] = []

    def send(key: str) -> Answer:
        sent.append(key)
        if key == KEYS[2]:
            return Answer(200, HEADERS)
        return Answer(429, {**HEADERS, "x-ratelimit-remaining-requests": "0", "Retry-After": "30"})

    dispatching.dispatch(P, send, model="m", order="configured", cost=50)
    assert sent == [KEYS[0], KEYS[2]]  # the throttle cooled its sibling too
    assert store.calls == ["admit", "settle", "admit", "settle"]
    assert dispatching.available(P, model="m") == [KEYS[2]]


def test_with_redis_each_call_is_one_round_trip(
    enabled: None, process: Callable[[], ModelCooldown], script_calls: list[str]
) -> None:
    pool = CredentialPool(store=process())
    pool.register(P, keys=KEYS, accounts={"team": [1, 2]})
    sent: list[str] = []

    def send(key: str) -> Answer:
        sent.append(key)
        return Answer(429, {"Retry-After": "30"}) if key == KEYS[0] else Answer(200, HEADERS)

    script_calls.clear()
    pool.dispatch(P, send, model="m", order="configured")
    assert sent == [KEYS[0], KEYS[2]]
    assert script_calls == ["start", "end", "start", "end"]

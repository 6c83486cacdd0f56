"""Budgets as of when the provider decided: an answer is stamped with its attempt's start, an
older one never replaces a newer remaining, and attempts started since a stamp spend from it
(in flight or finished) until a budget stamped after them arrives."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest

from cooldown import CredentialPool, ModelCooldown, ModelCooldownExhausted

P, MODEL = "p", "m"
KEYS = ["sk-fresh-a", "sk-fresh-b"]


def admit(store: ModelCooldown, now: float, keys: list[str] = KEYS[:1]) -> Any:
    admitted = store.admit(P, keys, model=MODEL, now=now, order="configured")
    assert admitted is not None
    return admitted[1]


def announce(store: ModelCooldown, attempt: Any, remaining: int, *, now: float) -> None:
    store.record_budget(
        P, KEYS[0], model=MODEL, remaining=remaining, reset_seconds=60, now=now, attempt=attempt
    )


def free(store: ModelCooldown, now: float) -> list[str]:
    return store.available(P, KEYS[:1], model=MODEL, now=now)


def test_an_older_answer_arriving_last_replaces_no_newer_remaining(store: ModelCooldown) -> None:
    slow, fast = admit(store, 0.0), admit(store, 1.0)
    announce(store, fast, 1, now=2.0)  # sent at 1: one request left after it
    announce(store, slow, 50, now=9.0)  # sent at 0, answered last: stale
    store.finish(fast, served=True)
    store.finish(slow, served=True)
    spender = admit(store, 9.5)  # the one request left
    assert free(store, 9.6) == []  # the stale 50 did not come back
    store.finish(spender, served=True)


def test_attempts_started_since_the_stamp_spend_from_it_finished_or_not(
    store: ModelCooldown,
) -> None:
    first = admit(store, 0.0)
    later = [admit(store, 0.5), admit(store, 0.6)]  # sent after the first, before its answer
    for attempt in later:
        store.finish(attempt, served=True)  # answered, with no headers of their own
    announce(store, first, 2, now=5.0)  # two left as of 0.0: both were spent since
    store.finish(first, served=True)
    assert free(store, 5.1) == []


def test_a_budget_stamped_after_them_covers_them(store: ModelCooldown) -> None:
    first = admit(store, 0.0)
    store.finish(admit(store, 0.5), served=True)
    announce(store, first, 1, now=5.0)
    store.finish(first, served=True)
    assert free(store, 5.1) == []
    store.record_budget(P, KEYS[0], model=MODEL, remaining=3, reset_seconds=60, now=6.0)
    assert free(store, 6.1) == KEYS[:1]  # stamped at 6.0: the attempt at 0.5 is in its count


def test_an_attempt_that_got_no_answer_spends_nothing(store: ModelCooldown) -> None:
    first = admit(store, 0.0)
    lost = admit(store, 0.5)
    store.finish(lost, served=False, answered=False)  # refused connection: never reached it
    announce(store, first, 1, now=5.0)
    store.finish(first, served=True)
    assert free(store, 5.1) == KEYS[:1]


def test_an_older_answer_may_raise_the_known_limit(store: ModelCooldown) -> None:
    slow, fast = admit(store, 0.0), admit(store, 1.0)
    announce(store, fast, 0, now=2.0)  # none left, no limit known: held until the reset
    store.record_budget(
        P, KEYS[0], model=MODEL, remaining=9, reset_seconds=60, limit=60, now=3.0, attempt=slow
    )
    store.finish(fast, served=True)
    store.finish(slow, served=True)
    assert free(store, 1.5) == []  # the stale 9 did not come back ...
    assert free(store, 2.1) == KEYS[:1]  # ... but its limit did: one a second from the stamp


def test_refill_runs_from_the_stamp(store: ModelCooldown) -> None:
    first = admit(store, 0.0)
    store.record_budget(  # 0 of 60 left as of 0.0, answered at 8.0: one back a second
        P, KEYS[0], model=MODEL, remaining=0, reset_seconds=60, limit=60, now=8.0, attempt=first
    )
    store.finish(first, served=True)
    assert free(store, 8.0) == KEYS[:1]  # eight seconds of refill already happened


# -- the stress: answers out of order on a provider that counts at admission -------------------


class Provider:
    """One key's window of `limit` requests, counted when a request arrives; the answer (and
    its headers) comes back after a random delay, so answers arrive out of order."""

    def __init__(self, limit: int) -> None:
        self.limit, self.admitted, self.throttled = limit, 0, 0
        self.lock = threading.Lock()
        self.random = random.Random(7)

    def send(self, key: str) -> Any:
        with self.lock:
            if self.admitted >= self.limit:
                self.throttled += 1
                status, remaining = 429, 0
            else:
                self.admitted += 1
                status, remaining = 200, self.limit - self.admitted
            delay = self.random.uniform(0, 0.02)
        threading.Event().wait(delay)  # a completion's service time
        headers = {
            "x-ratelimit-remaining-requests": str(remaining),
            "x-ratelimit-reset-requests": "60s",
        }
        return type("Answer", (), {"status_code": status, "headers": headers})()


@pytest.mark.usefixtures("enabled")
def test_32_threads_with_answers_out_of_order_do_not_overdraw(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(CredentialPool, "_providers", dict(CredentialPool._providers))
    CredentialPool.register("fresh", keys=["sk-fresh-only-0123456789"])
    provider = Provider(limit=40)
    CredentialPool.dispatch("fresh", provider.send, model=MODEL)  # the first answer: a budget
    refused: list[int] = []

    def client() -> None:
        for _ in range(4):
            try:
                CredentialPool.dispatch("fresh", provider.send, model=MODEL)
            except ModelCooldownExhausted:
                refused.append(1)

    threads = [threading.Thread(target=client) for _ in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert provider.admitted == provider.limit  # the window was used up ...
    assert provider.throttled <= 1  # ... without sending into it once it was spent


def test_finished_attempts_no_budget_can_count_are_not_kept(store: ModelCooldown) -> None:
    for now in range(2000):  # answered, with no budget anywhere and nothing else in flight
        store.finish(admit(store, float(now)), served=True)
    assert (
        store._state.admission._unseen._starts == {}
    )  # nothing grows without a budget to count it

"""`dispatch(wait=...)`: a bounded wait for the earliest free key, woken by releases and
records, first come first served, capped, and never stalling an event loop."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
from flask import Flask

from cooldown import (
    CredentialPool,
    ModelCooldown,
    ModelCooldownExhausted,
    classify_upstream_outcome,
    init_app,
    model_cooldown,
    status_blueprint,
)
from cooldown.shared.observations import RedisObservations
from cooldown.store import CallScope

from ..conftest import longest_loop_gap

P = "waited"
KEYS = ["sk-waited-one-0123456789", "sk-waited-two-0123456789"]
SECRET = "waiting-secret-" + "s" * 32
BOUND = 10.0  # the longest any event here is waited for: a broken wake fails, never hangs


class Answer:
    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.status_code, self.headers = status, headers or {}


class Probe:
    """A `send` that holds its key's probe until released, and a waiter's `send`; when the
    one was released and the other sent."""

    def __init__(self, *, answered: bool = True) -> None:
        self.probing, self.release = threading.Event(), threading.Event()
        self.answered = answered
        self.released_at: list[float] = []
        self.sent_at: list[float] = []

    def __call__(self, key: str) -> Answer:
        self.probing.set()
        assert self.release.wait(BOUND)
        self.released_at.append(time.monotonic())
        if not self.answered:  # a refused connection: nothing is recorded, the attempt ends
            raise ConnectionRefusedError
        return Answer(200)

    def waiter_send(self, key: str) -> Answer:
        self.sent_at.append(time.monotonic())
        return Answer(200)

    def woken_after_release(self) -> float:
        assert self.sent_at, "the waiter was never served"
        return self.sent_at[0] - self.released_at[0]


@pytest.fixture(autouse=True)
def pool(enabled: None) -> Iterator[None]:
    CredentialPool.register(P, keys=KEYS)
    yield
    CredentialPool._providers.pop(P, None)


def cool_every_key(seconds: float) -> None:
    for key in KEYS:
        CredentialPool.record(P, key, 429, model="m", retry_after_seconds=seconds)


def waiting_in_a_thread(send: Callable[[str], Answer], *, wait: float) -> threading.Thread:
    """A dispatch with `wait` in a thread of its own, returned once it waits for a key."""
    thread = threading.Thread(
        target=CredentialPool.dispatch, args=(P, send), kwargs={"model": "m", "wait": wait}
    )
    thread.start()
    deadline = time.monotonic() + BOUND
    while model_cooldown.waiters.waiting == 0:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    return thread


def counts() -> dict[str, object]:
    stats = model_cooldown.stats()
    return {name: stats[name] for name in stats if name.startswith("waits")}


def test_a_waiter_is_served_when_a_cooldown_ends() -> None:
    cool_every_key(1)
    started = time.monotonic()
    answer = CredentialPool.dispatch(P, lambda key: Answer(200), model="m", wait=2)
    assert answer is not None
    assert answer.status_code == 200
    assert 0.8 < time.monotonic() - started < 1.8
    assert counts()["waits_total"] == 1
    assert counts()["waits_served_total"] == 1


def test_a_waiter_is_served_when_a_budget_refills() -> None:
    spent = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "0.3s"}
    for _ in KEYS:
        CredentialPool.dispatch(P, lambda key: Answer(200, spent), model="m")
    with pytest.raises(ModelCooldownExhausted):
        CredentialPool.dispatch(P, lambda key: Answer(200), model="m")  # wait=0: at once
    answer = CredentialPool.dispatch(P, lambda key: Answer(200), model="m", wait=2)
    assert answer is not None
    assert answer.status_code == 200


@pytest.mark.parametrize("answered", [True, False], ids=["answered", "no-answer"])
def test_a_waiter_is_served_when_an_attempt_in_flight_releases_its_probe(answered: bool) -> None:
    CredentialPool.register(P, keys=KEYS[:1])
    ended = time.monotonic() - 1.5  # a one-second cooldown that has just ended
    CredentialPool.record(P, KEYS[0], 429, model="m", retry_after_seconds=1, now=ended)
    probe = Probe(answered=answered)

    def dispatch_probe() -> None:
        with contextlib.suppress(ConnectionRefusedError):
            CredentialPool.dispatch(P, probe, model="m")

    prober = threading.Thread(target=dispatch_probe)
    prober.start()
    assert probe.probing.wait(BOUND)
    waiter = waiting_in_a_thread(probe.waiter_send, wait=5)
    probe.release.set()
    prober.join(BOUND)
    waiter.join(BOUND)
    assert probe.woken_after_release() < 0.5  # woken by the release, not the probe's 1 s


def test_a_waiter_waits_for_the_attempt_in_flight_on_the_last_unit_of_a_budget() -> None:
    CredentialPool.register(P, keys=KEYS[:1])
    last_one = {"x-ratelimit-remaining-requests": "1", "x-ratelimit-reset-requests": "60s"}
    CredentialPool.dispatch(P, lambda key: Answer(200, last_one), model="m")
    in_flight, release = threading.Event(), threading.Event()
    more = {"x-ratelimit-remaining-requests": "5", "x-ratelimit-reset-requests": "60s"}

    def on_the_last_unit(key: str) -> Answer:
        in_flight.set()
        assert release.wait(BOUND)
        return Answer(200, more)  # its answer announces a newer budget

    holder = threading.Thread(
        target=CredentialPool.dispatch, args=(P, on_the_last_unit), kwargs={"model": "m"}
    )
    holder.start()
    assert in_flight.wait(BOUND)
    with pytest.raises(ModelCooldownExhausted):  # without a wait: our 429 at once
        CredentialPool.dispatch(P, lambda key: Answer(200), model="m")
    probe = Probe()
    waiter = waiting_in_a_thread(probe.waiter_send, wait=4)
    released_at = time.monotonic()
    release.set()
    holder.join(BOUND)
    waiter.join(BOUND)
    assert probe.sent_at, "the waiter gave up while the last unit was in flight"
    assert probe.sent_at[0] - released_at < 0.5  # woken by the attempt's end


def test_the_deadline_is_kept_with_the_then_remaining_retry_after() -> None:
    cool_every_key(1)  # the shortest cooldown there is
    rethrottle = threading.Timer(0.3, cool_every_key, args=(30,))
    rethrottle.start()
    started = time.monotonic()
    with pytest.raises(ModelCooldownExhausted) as refused:
        CredentialPool.dispatch(P, lambda key: Answer(200), model="m", wait=1.5)
    rethrottle.join()
    assert time.monotonic() - started < 0.9  # woken by the record: no use waiting on
    assert 29 <= refused.value.retry_after <= 30
    assert counts()["waits_timed_out_total"] == 1


def test_no_wait_when_the_earliest_key_frees_beyond_it() -> None:
    cool_every_key(30)
    started = time.monotonic()
    with pytest.raises(ModelCooldownExhausted) as refused:
        CredentialPool.dispatch(P, lambda key: Answer(200), model="m", wait=2)
    assert time.monotonic() - started < 0.2
    assert refused.value.retry_after == 30
    assert counts()["waits_total"] == 0


def test_beyond_the_waiter_cap_the_429_comes_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_MAX_WAITERS", "1")
    cool_every_key(1)
    first = waiting_in_a_thread(lambda key: Answer(200), wait=3)
    with pytest.raises(ModelCooldownExhausted):
        CredentialPool.dispatch(P, lambda key: Answer(200), model="m", wait=3)
    first.join(BOUND)
    assert counts()["waits_refused_total"] == 1
    assert counts()["waits_served_total"] == 1


def test_waiters_are_served_first_come_first_served_under_8_threads() -> None:
    store = ModelCooldown()
    tokens: list[int] = []  # a key freed, one at a time, by this test
    served: list[int] = []
    lock = threading.Lock()
    refusal = ModelCooldownExhausted(1)
    refusal.free_in_seconds = 0.5

    def admit(index: int) -> int:
        with lock:
            if not tokens:
                raise refusal
            tokens.pop()
            served.append(index)
            return index

    threads = []
    for index in range(8):
        thread = threading.Thread(
            target=store.waiters.wait,
            args=(CallScope(P, "m"), refusal, lambda index=index: admit(index)),
            kwargs={"seconds": BOUND, "max_waiters": 64},
        )
        thread.start()
        deadline = time.monotonic() + BOUND
        while store.waiters.waiting < index + 1:  # queued in this order
            assert time.monotonic() < deadline
            time.sleep(0.002)
        threads.append(thread)
    for count in range(1, 9):
        with lock:
            tokens.append(1)
        store.waiters.notify()
        deadline = time.monotonic() + BOUND
        while len(served) < count:
            assert time.monotonic() < deadline
            time.sleep(0.002)
    for thread in threads:
        thread.join(BOUND)
    assert served == list(range(8))


def test_a_change_wakes_the_waiters_of_its_provider_only() -> None:
    """A success recorded for one provider re-checks its waiters, not another provider's
    (whose keys it cannot have freed); a release whose provider is unknown wakes both."""
    store = ModelCooldown()
    refusal = ModelCooldownExhausted(1)
    refusal.awaits_attempts = True  # wait for a release, however long the cooldown
    free = threading.Event()
    tried = {"first": 0, "second": 0}

    def admit(provider: str) -> str:
        tried[provider] += 1
        if not free.is_set():
            raise refusal
        return provider

    threads = [
        threading.Thread(
            target=store.waiters.wait,
            args=(CallScope(provider, "m"), refusal, lambda provider=provider: admit(provider)),
            kwargs={"seconds": BOUND, "max_waiters": 64},
        )
        for provider in tried
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + BOUND
    while store.waiters.waiting < 2 or min(tried.values()) < 1:
        assert time.monotonic() < deadline
        time.sleep(0.002)
    woken = {"first": 0, "second": 0}
    for (provider, _), queue in dict(store.waiters._queues).items():
        ticket = queue[0]

        def counted(n: int = 1, provider: str = provider, notify: Any = ticket.notify) -> None:
            woken[provider] += 1
            notify(n)

        ticket.notify = counted  # type: ignore[method-assign]
    store.record("first", "sk-first", classify_upstream_outcome(200), model="m")
    assert woken == {"first": 1, "second": 0}
    free.set()
    store.waiters.notify()  # whose key is unknown: every provider's waiters
    assert woken == {"first": 2, "second": 1}
    for thread in threads:
        thread.join(BOUND)
    assert not any(thread.is_alive() for thread in threads)


def test_an_async_waiter_never_stalls_the_event_loop() -> None:
    cool_every_key(1)

    async def send(key: str) -> Answer:
        return Answer(200)

    async def work() -> object:
        return await CredentialPool.adispatch(P, send, model="m", wait=2)

    gap, answer = longest_loop_gap(work)
    assert isinstance(answer, Answer)
    assert answer.status_code == 200
    assert gap < 0.05


@pytest.mark.parametrize(
    ("wait", "error"),
    [
        (True, TypeError),
        ("1", TypeError),
        (-1, ValueError),
        (61, ValueError),
        (float("nan"), ValueError),
    ],
)
def test_a_wait_out_of_range_is_refused_before_anything_is_sent(
    wait: object, error: type[Exception]
) -> None:
    sent: list[str] = []
    with pytest.raises(error):
        CredentialPool.dispatch(
            P, lambda key: sent.append(key) or Answer(200), model="m", wait=wait
        )  # type: ignore[arg-type]
    assert sent == []


def test_the_setting_gives_the_default_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_WAIT_SECONDS", "2")
    cool_every_key(1)
    answer = CredentialPool.dispatch(P, lambda key: Answer(200), model="m")
    assert answer is not None
    assert answer.status_code == 200


def test_a_waiter_in_one_process_is_served_after_a_release_in_another(
    redis_url: str, prefix: str
) -> None:
    stores = []
    for _ in range(2):
        store = ModelCooldown()
        store.attach_shared(RedisObservations(redis_url, prefix=prefix), secret=SECRET.encode())
        stores.append(store)
    try:
        first, second = CredentialPool(store=stores[0]), CredentialPool(store=stores[1])
        for pool in (first, second):
            pool.register(P, keys=KEYS[:1])
        ended = time.monotonic() - 1.5  # a shared cooldown that has just ended
        second.record(P, KEYS[0], 429, model="m", retry_after_seconds=1, now=ended)
        probe = Probe()
        prober = threading.Thread(target=second.dispatch, args=(P, probe), kwargs={"model": "m"})
        prober.start()
        assert probe.probing.wait(BOUND)
        with pytest.raises(ModelCooldownExhausted):
            first.dispatch(P, lambda key: Answer(200), model="m")  # the probe holds the key
        threading.Timer(0.2, probe.release.set).start()
        answer = first.dispatch(P, probe.waiter_send, model="m", wait=5)
        prober.join(BOUND)
        assert answer is not None
        assert answer.status_code == 200
        assert probe.woken_after_release() < 0.6  # seen at a re-check, not the probe's 1 s
        assert stores[0].stats()["waits_served_total"] == 1
    finally:
        for store in stores:
            backend = store.detach_shared()
            assert isinstance(backend, RedisObservations)
            backend.close()


def test_waits_are_counted_in_metrics_with_a_histogram_of_seconds(
    monkeypatch: pytest.MonkeyPatch, serve_in_thread: Callable[[Flask], str]
) -> None:
    token = "waiting-metrics-token-" + "0123456789" * 3
    monkeypatch.setenv("MODEL_COOLDOWN_STATUS_TOKEN", token)
    app = Flask("waiting")
    init_app(app)
    app.register_blueprint(status_blueprint())
    base = serve_in_thread(app)
    cool_every_key(1)
    CredentialPool.dispatch(P, lambda key: Answer(200), model="m", wait=2)
    text = requests.get(
        f"{base}/cooldown/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=10
    ).text
    assert "model_cooldown_waits_total 1.0" in text
    assert "model_cooldown_waits_served_total 1.0" in text
    assert "model_cooldown_exhausted_total 0.0" in text  # no client got a 429
    assert 'model_cooldown_wait_seconds_bucket{le="0.5"} 0.0' in text
    assert 'model_cooldown_wait_seconds_bucket{le="2.0"} 1.0' in text
    assert "model_cooldown_wait_seconds_count 1.0" in text


def test_exhausted_counts_the_429s_clients_get_not_those_a_wait_outlived() -> None:
    cool_every_key(1)
    served: list[object] = []
    threads = [
        threading.Thread(
            target=lambda: served.append(
                CredentialPool.dispatch(P, lambda key: Answer(200), model="m", wait=5)
            )
        )
        for _ in range(10)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(BOUND)
    assert len(served) == 10
    assert model_cooldown.stats()["exhausted_total"] == 0
    cool_every_key(30)
    for _ in range(3):
        with pytest.raises(ModelCooldownExhausted):
            CredentialPool.dispatch(P, lambda key: Answer(200), model="m", wait=1)
    assert model_cooldown.stats()["exhausted_total"] == 3


async def waiting_task(send: Callable[[str], Any], wait: float) -> asyncio.Task[Any]:
    """An `adispatch` with `wait` as a task of its own, returned once it waits for a key."""
    task = asyncio.ensure_future(CredentialPool.adispatch(P, send, model="m", wait=wait))
    deadline = time.monotonic() + BOUND
    while model_cooldown.waiters.waiting == 0:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.005)
    return task


@pytest.mark.parametrize("how", ["cancel", "wait_for"])
def test_a_cancelled_async_waiter_leaves_at_once_and_takes_no_key(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_MAX_WAITERS", "1")
    CredentialPool.register(P, keys=KEYS[:1])
    CredentialPool.record(P, KEYS[0], 429, model="m", retry_after_seconds=1)
    sent: list[str] = []

    async def send(key: str) -> Answer:
        sent.append(key)
        return Answer(200)

    async def scenario() -> None:
        if how == "cancel":
            task = await waiting_task(send, wait=5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        else:  # a client gone: the server's timeout cancels the request
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(
                    CredentialPool.adispatch(P, send, model="m", wait=5), timeout=0.2
                )
        deadline = time.monotonic() + 0.5
        while model_cooldown.waiters.waiting:  # its place is given back at once
            assert time.monotonic() < deadline, "the gone waiter still holds its place"
            await asyncio.sleep(0.005)
        live = await waiting_task(send, wait=5)  # the cap (1) takes a live caller now
        answer = await live
        assert answer.status_code == 200
        assert sent == [KEYS[0]]  # sent once, for the live caller: nothing for the gone one
        again = await CredentialPool.adispatch(P, send, model="m")
        assert again.status_code == 200  # no probe stranded on the key

    asyncio.run(scenario())


def test_an_answer_reaches_its_caller_at_once_with_4096_waiters_of_other_providers() -> None:
    pools = [CredentialPool() for _ in range(2)]
    waited = [(pool, f"crowded-{index}") for pool in pools for index in range(32)]
    for pool, provider in waited:
        pool.register(provider, keys=KEYS[:1])
        pool.record(provider, KEYS[0], 429, model="m", retry_after_seconds=15)
    answered_at: list[float] = []

    async def send(key: str) -> Answer:
        return Answer(200)

    async def measured(key: str) -> Answer:
        answered_at.append(time.monotonic())
        return Answer(200)

    def waiting() -> int:
        return sum(pool.store.waiters.waiting for pool in pools)

    async def scenario() -> float:
        crowd = [
            asyncio.ensure_future(pool.adispatch(provider, send, model="m", wait=20))
            for pool, provider in waited
            for _ in range(64)  # each provider's default cap
        ]
        deadline = time.monotonic() + 60
        while waiting() < 4096:
            assert time.monotonic() < deadline, waiting()
            await asyncio.sleep(0.01)
        called_at = time.monotonic()
        answer = await CredentialPool.adispatch(P, measured, model="m", wait=5)
        received = time.monotonic() - answered_at[0]
        assert answered_at[0] - called_at < 0.5  # its free key taken at once, no thread waited
        for task in crowd:
            task.cancel()
        await asyncio.gather(*crowd, return_exceptions=True)
        assert answer.status_code == 200
        return received

    assert asyncio.run(scenario()) < 0.05

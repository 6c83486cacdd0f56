"""In-flight attempts with real threads and blocking sends: in flight, spread, one probe, budgets,
stale successes. Waits are bounded events; time is passed as `now=` where it matters."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cooldown import (
    CredentialPool,
    ModelCooldown,
    ModelCooldownExhausted,
    classify_upstream_outcome,
    model_cooldown,
)
from cooldown.store.admission import MAX_TRACKED, RECENT_THROTTLES, Admission

P = "ce-gpt-pro"
BASE = "CODEX_EVERYWHERE_API_KEY_GPT_PRO_POOL"
KEYS = ["sk-conc-one", "sk-conc-two", "sk-conc-three"]
MODEL = "gpt-conc"
WAIT = 5.0  # seconds any event is waited for at most
THROTTLED, ACCEPTED = classify_upstream_outcome(429), classify_upstream_outcome(200)


class Reply:
    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.status_code = status
        self.headers = headers or {}


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch, enabled: None) -> list[str]:
    monkeypatch.setenv(BASE, KEYS[0])
    monkeypatch.setenv(f"{BASE}_1", KEYS[1])
    monkeypatch.setenv(f"{BASE}_2", KEYS[2])
    return KEYS


class Upstream:
    """`send` blocks until the test answers for that call: a request in flight, for real."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.arrived = threading.Semaphore(0)
        self._answers: list[tuple[threading.Event, list[Reply]]] = []
        self._lock = threading.Lock()

    def send(self, key: str) -> Reply:
        gate, slot = threading.Event(), []
        with self._lock:
            self.calls.append(key)
            self._answers.append((gate, slot))
        self.arrived.release()
        assert gate.wait(WAIT), "the test never answered"
        return slot[0]

    def wait_for_calls(self, count: int) -> None:
        """Until `count` dispatches in all have arrived."""
        while self._arrivals < count:
            assert self.arrived.acquire(timeout=WAIT), "no dispatch arrived"
            self._arrivals += 1

    _arrivals = 0

    def answer(self, call: int, reply: Reply) -> None:
        gate, slot = self._answers[call]
        slot.append(reply)
        gate.set()


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    served = Upstream()
    yield served
    for gate, slot in served._answers:  # never leave a thread blocked
        if not gate.is_set():
            slot.append(Reply(200))
            gate.set()


def in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(call())
        except Exception as error:
            result.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def dispatch(upstream: Upstream, **keywords: Any) -> Any:
    return CredentialPool.dispatch(P, upstream.send, model=MODEL, **keywords)


def test_concurrent_dispatches_spread_over_the_keys(keys: list[str], upstream: Upstream) -> None:
    for _ in KEYS:  # every key dispatched once at the same instant: recency ties everywhere
        CredentialPool.dispatch(P, lambda key: Reply(200), model=MODEL, now=5.0)
    threads = [in_thread(lambda: dispatch(upstream, now=5.0)) for _ in range(3)]
    upstream.wait_for_calls(3)
    assert sorted(upstream.calls) == sorted(KEYS)  # fewest in flight first: one each
    for call in range(3):
        upstream.answer(call, Reply(200))
    for thread, _ in threads:
        thread.join(WAIT)


def test_sequential_dispatches_rotate_least_recently_used_first(
    keys: list[str], upstream: Upstream
) -> None:
    seen = []
    for call in range(4):
        thread, _ = in_thread(lambda: dispatch(upstream))
        upstream.wait_for_calls(call + 1)
        upstream.answer(call, Reply(200))
        thread.join(WAIT)
        seen.append(upstream.calls[-1])
    assert seen == [KEYS[0], KEYS[1], KEYS[2], KEYS[0]]


def test_configured_order_keeps_filling_the_first_key(keys: list[str], upstream: Upstream) -> None:
    for call in range(2):
        thread, _ = in_thread(lambda: dispatch(upstream, order="configured"))
        upstream.wait_for_calls(call + 1)
        upstream.answer(call, Reply(200))
        thread.join(WAIT)
    assert upstream.calls == [KEYS[0], KEYS[0]]


def in_flight() -> int:
    admission: Admission = model_cooldown._state.admission
    return sum(admission._in_flight.values())


def test_the_count_is_released_when_send_raises(keys: list[str]) -> None:
    def refused(key: str) -> Reply:
        assert in_flight() == 1
        raise ConnectionError("refused")

    with pytest.raises(ConnectionError):
        CredentialPool.dispatch(P, refused, model=MODEL)
    assert in_flight() == 0


def test_the_count_is_released_when_our_429_is_raised(keys: list[str]) -> None:
    with pytest.raises(ModelCooldownExhausted):
        CredentialPool.dispatch(P, lambda key: Reply(429, {"Retry-After": "30"}), model=MODEL)
    assert in_flight() == 0


def test_a_lease_is_forgotten_after_its_seconds(keys: list[str]) -> None:
    admitted = model_cooldown.admit(P, KEYS, model=MODEL, now=0.0, lease_seconds=300)
    assert admitted is not None  # a worker took it and crashed: never finished
    assert in_flight() == 1
    again = model_cooldown.admit(P, KEYS, model=MODEL, now=10.0, lease_seconds=300)
    assert again is not None
    assert again[0] != admitted[0]  # the crashed attempt still counts
    model_cooldown.finish(again[1], served=True)
    model_cooldown.admit(P, KEYS[:1], model=MODEL, now=301.0, order="spread", exclude=KEYS)
    assert in_flight() == 0  # forgotten: the key is not pinned
    model_cooldown.finish(admitted[1], served=True)  # a late finish changes nothing
    assert in_flight() == 0


def test_one_probe_after_a_release(keys: list[str], upstream: Upstream) -> None:
    for key in KEYS[1:]:
        CredentialPool.record(P, key, 429, model=MODEL, retry_after_seconds=3600, now=0.0)
    CredentialPool.record(P, KEYS[0], 429, model=MODEL, retry_after_seconds=1, now=0.0)
    probe, _ = in_thread(lambda: dispatch(upstream, now=2.0))  # released at 1.0
    upstream.wait_for_calls(1)
    with pytest.raises(ModelCooldownExhausted) as raised:  # the probe holds the key
        dispatch(upstream, now=2.0)
    assert raised.value.retry_after == 1
    assert upstream.calls == [KEYS[0]]
    upstream.answer(0, Reply(200))
    probe.join(WAIT)
    follow, _ = in_thread(lambda: dispatch(upstream, now=3.0))
    other, _ = in_thread(lambda: dispatch(upstream, now=3.0))
    upstream.wait_for_calls(3)  # served: the key is open to everyone again
    assert upstream.calls == [KEYS[0]] * 3
    upstream.answer(1, Reply(200))
    upstream.answer(2, Reply(200))
    follow.join(WAIT)
    other.join(WAIT)


def test_a_throttled_probe_keeps_the_key_probing(keys: list[str], upstream: Upstream) -> None:
    CredentialPool.record(P, KEYS[0], 429, model=MODEL, retry_after_seconds=1, now=0.0)
    for key in KEYS[1:]:
        CredentialPool.record(P, key, 429, model=MODEL, retry_after_seconds=3600, now=0.0)
    with pytest.raises(ModelCooldownExhausted):  # the probe meets a throttle: cooling again
        CredentialPool.dispatch(
            P, lambda key: Reply(429, {"Retry-After": "1"}), model=MODEL, now=2.0
        )
    probe, _ = in_thread(lambda: dispatch(upstream, now=4.0))  # released again: one probe
    upstream.wait_for_calls(1)
    with pytest.raises(ModelCooldownExhausted):
        dispatch(upstream, now=4.0)
    upstream.answer(0, Reply(200))
    probe.join(WAIT)


def test_a_budget_holds_a_key_while_its_remaining_requests_are_in_flight(
    keys: list[str], upstream: Upstream
) -> None:
    budget = {"x-ratelimit-remaining-requests": "1", "x-ratelimit-reset-requests": "30s"}
    first, _ = in_thread(lambda: dispatch(upstream, order="configured"))
    upstream.wait_for_calls(1)
    upstream.answer(0, Reply(200, budget))  # one request left on key one
    first.join(WAIT)
    threads = [in_thread(lambda: dispatch(upstream, order="configured")) for _ in range(2)]
    upstream.wait_for_calls(3)
    assert upstream.calls[1:] == [KEYS[0], KEYS[1]]  # the second would overdraw key one
    upstream.answer(1, Reply(200))
    upstream.answer(2, Reply(200))
    for thread, _ in threads:
        thread.join(WAIT)


def test_a_spread_prefers_the_largest_share_of_its_budget_left(keys: list[str]) -> None:
    for key, remaining in ((KEYS[0], 2), (KEYS[1], 9)):
        model_cooldown.record_budget(
            P, key, model=MODEL, remaining=remaining, reset_seconds=50.0, limit=10
        )
    order = CredentialPool.available(P, model=MODEL, order="spread")
    assert order == [KEYS[2], KEYS[1], KEYS[0]]  # no budget counts as full, then 9 of 10
    assert CredentialPool.available(P, model=MODEL) == KEYS  # the default stays configured


def test_a_budget_for_a_non_string_key_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="credential must be a str"):
        model_cooldown.record_budget(P, 42, model=MODEL, remaining=9, reset_seconds=5.0)  # type: ignore[arg-type]


def test_a_budget_from_the_headers_of_a_dispatched_answer(keys: list[str]) -> None:
    headers = {
        "x-ratelimit-limit-requests": "10",
        "x-ratelimit-remaining-requests": "3",
        "x-ratelimit-reset-requests": "50s",
    }
    CredentialPool.dispatch(P, lambda key: Reply(200, headers), model=MODEL, order="configured")
    assert CredentialPool.available(P, model=MODEL, order="spread")[-1] == KEYS[0]  # 3 of 10
    spent = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "50s"}
    CredentialPool.dispatch(P, lambda key: Reply(200, spent), model=MODEL, order="configured")
    assert CredentialPool.available(P, model=MODEL, order="spread") == KEYS[1:]  # cooled


def test_a_stale_success_does_not_reopen_a_fresh_throttle(
    keys: list[str], upstream: Upstream
) -> None:
    for key in KEYS[1:]:
        CredentialPool.record(P, key, 429, model=MODEL, retry_after_seconds=3600)
    slow, result = in_thread(lambda: dispatch(upstream))
    upstream.wait_for_calls(1)  # in flight on key one
    CredentialPool.record(P, KEYS[0], 429, model=MODEL, retry_after_seconds=60)  # meanwhile
    upstream.answer(0, Reply(200))  # the slow request answers 200 after the throttle
    slow.join(WAIT)
    assert result[0].status_code == 200
    with pytest.raises(ModelCooldownExhausted):  # still cooling: the 200 was sent before
        CredentialPool.select(P, model=MODEL)


def test_record_takes_sent_at(keys: list[str]) -> None:
    CredentialPool.record(P, KEYS[0], 429, model=MODEL, retry_after_seconds=60, now=100.0)
    CredentialPool.record(P, KEYS[0], 200, model=MODEL, now=101.0, sent_at=99.0)
    assert CredentialPool.available(P, model=MODEL, now=102.0) == KEYS[1:]
    CredentialPool.record(P, KEYS[0], 200, model=MODEL, now=103.0, sent_at=102.0)
    assert CredentialPool.available(P, model=MODEL, now=104.0) == KEYS


def test_the_bookkeeping_stays_bounded_and_keeps_the_newest() -> None:
    """Past its bound a map drops its oldest entries (everything is bounded), and
    what the newest attempts and throttles left still counts."""
    store = ModelCooldown()
    throttled = [f"sk-bound-{index}" for index in range(RECENT_THROTTLES + 100)]
    for key in throttled:
        store.record(P, key, THROTTLED, model=MODEL, retry_after_seconds=60, now=100.0)
    store.record(P, throttled[-1], ACCEPTED, model=MODEL, now=101.0, sent_at=99.0)
    assert store.available(P, throttled[-1:], model=MODEL, now=102.0) == []  # stale: ignored
    dispatched = [f"sk-sent-{index}" for index in range(MAX_TRACKED + 100)]
    for key in dispatched:
        taken = store.admit(P, [key], model=MODEL, now=200.0)
        assert taken is not None
        store.finish(taken[1], served=True)
    admission = store._state.admission
    assert len(admission._throttled_at) <= RECENT_THROTTLES
    assert len(admission._last_dispatch) <= MAX_TRACKED
    # All were sent at 200: the newest is remembered, the oldest forgotten, so it goes first.
    taken = store.admit(P, [dispatched[-1], dispatched[0]], model=MODEL, now=201.0)
    assert taken is not None
    assert taken[0] == dispatched[0]


def test_affinity_keeps_its_order_but_skips_a_held_key(keys: list[str], upstream: Upstream) -> None:
    from cooldown.pools._common import by_affinity

    favourite = by_affinity(list(KEYS), "conversation-1")
    CredentialPool.record(P, favourite[0], 429, model=MODEL, retry_after_seconds=1, now=0.0)
    probe, _ = in_thread(lambda: dispatch(upstream, affinity="conversation-1", now=2.0))
    upstream.wait_for_calls(1)
    follower, _ = in_thread(lambda: dispatch(upstream, affinity="conversation-1", now=2.0))
    upstream.wait_for_calls(2)
    assert upstream.calls == [favourite[0], favourite[1]]  # the probe held the favourite
    upstream.answer(0, Reply(200))
    upstream.answer(1, Reply(200))
    probe.join(WAIT)
    follower.join(WAIT)


def test_an_unknown_order_is_a_value_error(keys: list[str]) -> None:
    with pytest.raises(ValueError, match="order"):
        CredentialPool.available(P, model=MODEL, order="random")  # type: ignore[arg-type]


AMPLE = {  # what OpenAI says on every answer: ample room left
    "x-ratelimit-limit-requests": "10000",
    "x-ratelimit-remaining-requests": "9990",
    "x-ratelimit-reset-requests": "8.64s",
}


def counting_sender(sent: dict[str, int]) -> Callable[[str], Reply]:
    """A `send` answering with ample budgets, counting the requests each key gets."""

    def send(key: str) -> Reply:
        sent[key] += 1
        return Reply(200, AMPLE)

    return send


def test_spread_spreads_sequential_requests_once_budgets_are_known(keys: list[str]) -> None:
    sent = dict.fromkeys(KEYS, 0)
    for _ in range(100):
        CredentialPool.dispatch(P, counting_sender(sent), model=MODEL)
    assert all(26 <= count <= 40 for count in sent.values()), sent


def test_spread_spreads_through_redis_once_budgets_are_known(
    keys: list[str], process: Callable[[], ModelCooldown]
) -> None:
    pools = [CredentialPool(store=process()) for _ in range(2)]
    for pool in pools:
        pool.register(P, keys=KEYS)
    sent = dict.fromkeys(KEYS, 0)
    for index in range(60):  # two gateway processes taking turns
        pools[index % 2].dispatch(P, counting_sender(sent), model=MODEL)
    assert all(13 <= count <= 27 for count in sent.values()), sent

"""A state machine of concurrent dispatch attempts against a plain reference.

Attempts start (`admit`) and end (`finish`) in any interleaving, throttles arrive, leases run
out and time moves on; after every step the store's bookkeeping must match the reference:
the in-flight counts, one probe at most per key, no key admitted while its probe is out.
The same machine runs with two stores sharing one Redis (two processes): the fleet-wide
counts in Redis must match the same reference.
"""

from __future__ import annotations

import os
import uuid

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from cooldown import ModelCooldown, ModelCooldownExhausted, classify_upstream_outcome
from cooldown.store.admission import Attempt

from ..conftest import TEST_REDIS_URL, delete_prefix

P, MODEL, LEASE = "p", "m", 30.0
KEYS = ["k0", "k1", "k2"]
THROTTLED = classify_upstream_outcome(429)


class Attempts(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.stores = self.make_stores()
        self.now = 100.0
        self.open: list[tuple[str, Attempt, ModelCooldown]] = []  # the reference: not finished
        self.cooling: dict[str, float] = {}  # key -> deadline
        self.released: set[str] = set()  # keys whose cooldown ended and await a probe

    def make_stores(self) -> list[ModelCooldown]:
        return [ModelCooldown()]

    def _expire(self) -> None:
        for key, deadline in list(self.cooling.items()):
            if deadline <= self.now:
                del self.cooling[key]
                self.released.add(key)
        self.open = [item for item in self.open if item[1].started + LEASE > self.now]

    def _probing(self) -> set[str]:
        return {key for key, attempt, _ in self.open if attempt.probe}

    @rule(seconds=st.sampled_from([0.0, 0.5, 3.0, 11.0, 31.0]))
    def advance(self, seconds: float) -> None:
        self.now += seconds
        self._expire()

    @rule(exclude=st.sets(st.sampled_from(KEYS), max_size=2), which=st.integers(0, 1))
    def admit(self, exclude: set[str], which: int) -> None:
        self._expire()
        store = self.stores[which % len(self.stores)]
        exclude = exclude if len(self.stores) == 1 else set()  # exclusion: the local machine
        free = [k for k in KEYS if k not in self.cooling and k not in self._probing()]
        try:
            admitted = store.admit(
                P, KEYS, model=MODEL, now=self.now, exclude=exclude, lease_seconds=LEASE
            )
        except ModelCooldownExhausted:
            assert not free
            return
        assert free
        if admitted is None:
            assert set(free) <= exclude
            return
        key, attempt = admitted
        assert key in free
        assert key not in exclude
        loads = {k: sum(1 for o, _, _ in self.open if o == k) for k in free if k not in exclude}
        assert loads[key] == min(loads.values())  # fewest in flight first
        assert attempt.probe == (key in self.released)
        self.open.append((key, attempt, store))

    @precondition(lambda self: self.open)
    @rule(index=st.integers(0, 10), served=st.booleans())
    def finish(self, index: int, served: bool) -> None:
        key, attempt, store = self.open.pop(index % len(self.open))
        with store.ending(attempt):
            if not served:
                store.record(P, key, THROTTLED, model=MODEL, retry_after_seconds=10, now=self.now)
                self.cooling[key] = max(self.cooling.get(key, 0.0), self.now + 10)
        store.finish(attempt, served=served)
        if attempt.probe and served:
            self.released.discard(key)

    @invariant()
    def counts_match(self) -> None:
        self._expire()
        admission = self.stores[0]._state.admission
        admission.expire(self.now)
        expected: dict[bytes, int] = {}
        for _, attempt, _ in self.open:
            expected[attempt.entry] = expected.get(attempt.entry, 0) + 1
        assert admission._in_flight == expected
        assert len(set(admission._probing)) == len(admission._probing)


Attempts.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestAttempts = Attempts.TestCase


class SharedAttempts(Attempts):
    """Two processes' stores on one Redis: every count is the fleet's."""

    def make_stores(self) -> list[ModelCooldown]:
        from cooldown.shared.observations import RedisObservations

        self.prefix = f"mc-model-{uuid.uuid4().hex[:12]}"
        stores = []
        for _ in range(2):
            store = ModelCooldown()
            backend = RedisObservations(TEST_REDIS_URL, prefix=self.prefix)
            store.attach_shared(backend, secret=b"model-based-" + b"s" * 32)
            stores.append(store)
        return stores

    @invariant()
    def counts_match(self) -> None:
        import redis

        self._expire()
        expected: dict[bytes, int] = {}
        for _, attempt, _ in self.open:
            assert attempt.shared is not None
            entry = attempt.shared.entry.encode()
            expected[entry] = expected.get(entry, 0) + 1
        backend = self.stores[0].shared
        now_ms = backend._to_wall_ms(self.now)  # type: ignore[attr-defined]
        client = redis.Redis.from_url(TEST_REDIS_URL)
        counted = client.hgetall(f"{{{self.prefix}}}:inflight")
        leases = client.zrange(f"{{{self.prefix}}}:leases", 0, -1, withscores=True)
        client.close()
        live: dict[bytes, int] = {}
        for lease, deadline in leases:  # leases are pruned lazily, by the next script
            entry = lease.partition(b":")[2]
            if deadline > now_ms:
                live[entry] = live.get(entry, 0) + 1
            else:
                counted[entry] = str(int(counted[entry]) - 1).encode()
        assert live == expected
        assert {k: int(v) for k, v in counted.items() if int(v)} == expected
        for store in self.stores:
            assert store.stats()["shared_errors_total"] == 0

    def teardown(self) -> None:
        delete_prefix(TEST_REDIS_URL, self.prefix)
        for store in self.stores:
            backend = store.detach_shared()
            if backend is not None:
                backend.close()  # type: ignore[attr-defined]


SharedAttempts.TestCase.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)


def test_shared_attempts_match_the_reference(redis_url: str) -> None:
    if os.environ.get("MODEL_COOLDOWN_TEST_REDIS_URL", redis_url) != TEST_REDIS_URL:
        pytest.skip("the machine reads MODEL_COOLDOWN_TEST_REDIS_URL itself")
    SharedAttempts.TestCase().runTest()

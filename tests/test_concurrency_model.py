"""A state machine of concurrent dispatch attempts against a plain reference (SPEC §15).

Attempts start (`admit`) and end (`finish`) in any interleaving, throttles arrive, leases run
out and time moves on; after every step the store's bookkeeping must match the reference:
the in-flight counts, one probe at most per key, no key admitted while its probe is out.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from cooldown import ModelCooldown, ModelCooldownExhausted, classify_upstream_outcome
from cooldown.admission import Attempt

P, MODEL, LEASE = "p", "m", 30.0
KEYS = ["k0", "k1", "k2"]
THROTTLED = classify_upstream_outcome(429)


class Attempts(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.store = ModelCooldown()
        self.now = 100.0
        self.open: list[tuple[str, Attempt]] = []  # the reference: attempts not yet finished
        self.cooling: dict[str, float] = {}  # key -> deadline
        self.released: set[str] = set()  # keys whose cooldown ended and await a probe

    def _expire(self) -> None:
        for key, deadline in list(self.cooling.items()):
            if deadline <= self.now:
                del self.cooling[key]
                self.released.add(key)
        self.open = [(k, a) for k, a in self.open if a.started + LEASE > self.now]

    def _probing(self) -> set[str]:
        return {key for key, attempt in self.open if attempt.probe}

    @rule(seconds=st.sampled_from([0.0, 0.5, 3.0, 11.0, 31.0]))
    def advance(self, seconds: float) -> None:
        self.now += seconds
        self._expire()

    @rule(exclude=st.sets(st.sampled_from(KEYS), max_size=2))
    def admit(self, exclude: set[str]) -> None:
        self._expire()
        free = [k for k in KEYS if k not in self.cooling and k not in self._probing()]
        try:
            admitted = self.store.admit(
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
        loads = {k: sum(1 for o, _ in self.open if o == k) for k in free if k not in exclude}
        assert loads[key] == min(loads.values())  # fewest in flight first
        assert attempt.probe == (key in self.released)
        self.open.append((key, attempt))

    @precondition(lambda self: self.open)
    @rule(index=st.integers(0, 10), served=st.booleans())
    def finish(self, index: int, served: bool) -> None:
        key, attempt = self.open.pop(index % len(self.open))
        if not served:
            self.store.record(P, key, THROTTLED, model=MODEL, retry_after_seconds=10, now=self.now)
            self.cooling[key] = max(self.cooling.get(key, 0.0), self.now + 10)
        self.store.finish(attempt, served=served)
        if attempt.probe and served:
            self.released.discard(key)

    @invariant()
    def counts_match(self) -> None:
        self._expire()
        admission = self.store._admission
        admission._expire(self.now)
        expected: dict[bytes, int] = {}
        for _, attempt in self.open:
            expected[attempt.entry] = expected.get(attempt.entry, 0) + 1
        assert admission._in_flight == expected
        assert len(set(admission._probing)) == len(admission._probing)


Attempts.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestAttempts = Attempts.TestCase

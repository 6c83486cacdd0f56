"""The real store against a plain reference model of its rules (docs/pools.md), by hypothesis."""

from __future__ import annotations

import math

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from cooldown import (
    ModelCooldown,
    ModelCooldownCapacity,
    ModelCooldownExhausted,
    UpstreamOutcome,
    classify_upstream_outcome,
)

CAPACITY = 4
SCOPE_BUDGET = 2
KEYS = ["k1", "k2", "k3"]
PROVIDERS = ["p", "q"]
OUTCOMES = [
    classify_upstream_outcome(status) for status in (200, 401, 403, 429, 402, 500, None)
] + [
    classify_upstream_outcome(transport_failure="timeout"),
    classify_upstream_outcome(429, cancelled=True),
    UpstreamOutcome(False, "neutral", "throttled", "quota_exhausted"),
]
names = st.sampled_from([None, "", "m1", "m2", "b1"])
advice = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=5000),
    st.floats(allow_nan=True, allow_infinity=True, min_value=None, max_value=None),
)


def scope_of(model: str | None, bucket: str | None) -> tuple[str, str] | None:
    if bucket:
        return ("bucket", bucket)
    if model:
        return ("model", model)
    return None


class Reference:
    """The store's rules, written as plainly as possible."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str, tuple[str, str] | None], float] = {}
        self.overflow = 0.0
        self.escalated = 0
        self.latest_now = -math.inf

    def prune(self, now: float, ceiling: float) -> None:
        """Drop what expired, then cap what is left at the latest `now` seen + `ceiling` (a
        lowered maximum; a caller whose clock lags cuts nothing)."""
        self.latest_now = max(self.latest_now, now)
        limit = self.latest_now + ceiling
        self.entries = {k: min(d, limit) for k, d in self.entries.items() if d > now}
        if self.overflow <= now:
            self.overflow = 0.0
        self.overflow = min(self.overflow, limit)

    def scopes_held(self, provider: str, key: str) -> int:
        return sum(1 for p, k, s in self.entries if (p, k) == (provider, key) and s is not None)

    def record(self, provider, key, outcome, model, bucket, wide, advice, fallback, ceiling, now):  # type: ignore[no-untyped-def]
        self.prune(now, ceiling)
        scope = scope_of(model, bucket)
        health = outcome.credential_health
        if health == "accepted":
            if scope is not None:
                self.entries.pop((provider, key, scope), None)
            return None
        if health == "rejected" and wide:
            entry = (provider, key, None)
        elif health == "throttled" and scope is not None:
            entry = (provider, key, scope)
            if entry not in self.entries and self.scopes_held(provider, key) >= SCOPE_BUDGET:
                entry = (provider, key, None)  # over budget: the credential cools everywhere
                self.escalated += 1
        else:
            return None
        usable = (
            isinstance(advice, (int, float))
            and not isinstance(advice, bool)
            and math.isfinite(advice)
            and advice >= 0
        )
        delay = min(ceiling, max(1, advice if usable else fallback))
        deadline = now + delay
        if entry in self.entries:
            self.entries[entry] = max(self.entries[entry], deadline)
            return self.entries[entry]
        if len(self.entries) >= CAPACITY:
            self.overflow = max(self.overflow, deadline)
            return deadline
        self.entries[entry] = deadline
        return deadline

    def select(self, provider, keys, model, bucket, legacy, ceiling, now, *, raise_empty):  # type: ignore[no-untyped-def]
        """(free keys, or the error as (kind, retry_after))."""
        self.prune(now, ceiling)
        scope = scope_of(model, bucket)
        free, releases = [], []
        for key in keys:
            release = max(
                self.entries.get((provider, key, None), 0.0),
                self.entries.get((provider, key, scope), 0.0) if scope else 0.0,
                legacy.get(key, 0.0),
            )
            if release <= now:
                free.append(key)
            else:
                releases.append(release)
        if not free:
            if raise_empty and keys:
                return ("exhausted", min(ceiling, max(1, math.ceil(min(releases) - now))))
            return []
        if self.overflow > now:
            return ("capacity", min(ceiling, max(1, math.ceil(self.overflow - now))))
        return free


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.store = ModelCooldown(max_entries=CAPACITY, scopes_per_credential=SCOPE_BUDGET)
        self.reference = Reference()
        self.now = 1000.0

    @rule(seconds=st.one_of(st.floats(min_value=0, max_value=400), st.sampled_from([0.5, 1, 60])))
    def advance(self, seconds: float) -> None:
        self.now += seconds

    @rule(
        provider=st.sampled_from(PROVIDERS),
        key=st.sampled_from(KEYS),
        outcome=st.sampled_from(OUTCOMES),
        model=names,
        bucket=names,
        wide=st.booleans(),
        advice=advice,
        fallback=st.sampled_from([0, 1, 60, 300]),
        ceiling=st.sampled_from([1, 30, 3600]),
    )
    def record(self, provider, key, outcome, model, bucket, wide, advice, fallback, ceiling):  # type: ignore[no-untyped-def]
        expected = self.reference.record(
            provider, key, outcome, model, bucket, wide, advice, fallback, ceiling, self.now
        )
        actual = self.store.record(
            provider,
            key,
            outcome,
            model=model,
            quota_bucket=bucket,
            credential_wide_auth=wide,
            retry_after_seconds=advice,
            fallback_seconds=fallback,
            max_seconds=ceiling,
            now=self.now,
        )
        assert actual == expected

    def _call(self, method, provider, keys, model, bucket, legacy, ceiling, now):  # type: ignore[no-untyped-def]
        try:
            return method(
                provider,
                keys,
                model=model,
                quota_bucket=bucket,
                max_seconds=ceiling,
                now=now,
                legacy_rest_until=legacy,
            )
        except ModelCooldownExhausted as error:
            return ("exhausted", error.retry_after)
        except ModelCooldownCapacity as error:
            return ("capacity", error.retry_after)

    @rule(
        provider=st.sampled_from(PROVIDERS),
        keys=st.lists(st.sampled_from(KEYS), unique=True, max_size=3),
        model=names,
        bucket=names,
        legacy_offsets=st.dictionaries(st.sampled_from(KEYS), st.floats(-50, 50), max_size=2),
        ceiling=st.sampled_from([1, 30, 3600]),
        how=st.sampled_from(["available", "eligible", "select"]),
        lag=st.sampled_from([0.0, 0.0, 0.0, 1e-6, 2.0]),  # a caller whose clock was read earlier
    )
    def choose(self, provider, keys, model, bucket, legacy_offsets, ceiling, how, lag):  # type: ignore[no-untyped-def]
        now = self.now - lag
        legacy = {key: now + offset for key, offset in legacy_offsets.items()}
        expected = self.reference.select(
            provider,
            keys,
            model,
            bucket,
            legacy,
            ceiling,
            now,
            raise_empty=how != "available",
        )
        if how == "select" and isinstance(expected, list):
            expected = expected[0] if expected else None
        actual = self._call(
            getattr(self.store, how), provider, keys, model, bucket, legacy, ceiling, now
        )
        assert actual == expected

    @invariant()
    def same_entry_count_and_cap(self) -> None:
        assert self.store.entry_count == len(self.reference.entries) <= CAPACITY
        assert self.store.stats()["overflow_active"] == (self.reference.overflow != 0.0)
        assert self.store.stats()["escalated_total"] == self.reference.escalated


StoreMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
test_store_matches_reference_model = StoreMachine.TestCase

"""8 threads x 10^4 mixed operations on the one shared store, through both pool kinds."""

from __future__ import annotations

import random
import threading

import pytest

from cooldown import (
    MAX_ENTRIES,
    CredentialPool,
    ModelCooldownCapacity,
    ModelCooldownExhausted,
    NanoGPTKeyPool,
    NanoGPTUnifiedKeyPool,
    model_cooldown,
)
from cooldown.pools.provider import Provider

THREADS = 8
OPERATIONS = 10_000
TICK = 0.0001


class SharedClock:
    """One fake monotonic clock for every thread: each operation advances it a little."""

    def __init__(self) -> None:
        self._now = 1000.0
        self._lock = threading.Lock()

    def tick(self) -> float:
        with self._lock:
            self._now += TICK
            return self._now

    def read(self) -> float:
        with self._lock:
            return self._now


@pytest.fixture
def stress_pools(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "true")
    providers = []
    for thread in range(THREADS):
        provider = f"stress-{thread}"
        base = f"STRESS_KEY_{thread}"
        monkeypatch.setitem(CredentialPool._providers, provider, Provider(provider, base))
        for index in range(4):
            name = base if index == 0 else f"{base}_{index}"
            monkeypatch.setenv(name, f"sk-stress-{thread}-{index}")
        providers.append(provider)
    return providers


def test_no_cooling_key_is_ever_selected(stress_pools: list[str]) -> None:
    clock = SharedClock()
    failures: list[str] = []
    counts = {"selected": 0, "exhausted": 0, "capacity": 0, "recorded": 0}
    counts_lock = threading.Lock()
    start = threading.Barrier(THREADS)

    def worker(thread: int) -> None:
        rng = random.Random(thread)
        provider = stress_pools[thread]
        keys = CredentialPool.keys(provider)
        nano = NanoGPTKeyPool if thread % 2 else NanoGPTUnifiedKeyPool
        nano_keys = [f"nano-stress-{thread}-{index}" for index in range(3)]
        # What this thread recorded: the latest deadline per (pool, key, scope); None = wide.
        ledger: dict[tuple[str, str, str | None], float] = {}
        local = dict.fromkeys(counts, 0)
        start.wait()
        for _ in range(OPERATIONS):
            use_nano = rng.random() < 0.3
            pool_name, pool_keys = ("nano", nano_keys) if use_nano else ("cred", keys)
            model = f"m{rng.randrange(5000)}"  # enough scopes to reach the global cap
            now = clock.tick()
            if rng.random() < 0.5:
                local["recorded"] += 1
                key = rng.choice(pool_keys)
                status = rng.choices([200, 429, 401, 403, 500], weights=[30, 55, 1, 5, 9])[0]
                advice = rng.choice([None, 0, 1.5, 30.0, 59.0])
                if use_nano:
                    nano.record_result(
                        key, status, model=model, retry_after_seconds=advice, now=now
                    )
                else:
                    CredentialPool.record(
                        provider, key, status, model=model, retry_after_seconds=advice, now=now
                    )
                fallback = 60.0 if status == 429 else 300.0  # both pools: 300 s auth TTL
                delay = min(3600.0, max(1.0, advice if advice is not None else fallback))
                if status == 200:  # success clears this scope, never the wide entry
                    ledger.pop((pool_name, key, model), None)
                    continue
                if status == 429:
                    entry = (pool_name, key, model)
                elif status == 401:
                    entry = (pool_name, key, None)
                else:
                    continue
                ledger[entry] = max(ledger.get(entry, 0.0), now + delay)
                continue
            try:
                if use_nano:
                    chosen = nano.select_available_key(nano_keys, model=model, now=now)
                else:
                    chosen = CredentialPool.select(provider, model=model, now=now)
            except ModelCooldownExhausted:
                local["exhausted"] += 1
                continue
            except ModelCooldownCapacity:
                local["capacity"] += 1
                continue
            after = clock.read()  # no prune can have used a later time than this
            local["selected"] += 1
            assert chosen is not None
            for scope in (model, None):
                if ledger.get((pool_name, chosen, scope), 0.0) > after:
                    failures.append(f"thread {thread} got a cooling key for scope {scope}")
            if model_cooldown.entry_count > MAX_ENTRIES:
                failures.append("cap exceeded")
        with counts_lock:
            for name, value in local.items():
                counts[name] += value

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert sum(counts.values()) == THREADS * OPERATIONS
    assert counts["selected"] > 0
    assert counts["exhausted"] > 0
    stats = model_cooldown.stats()
    assert stats["live_observations"] <= MAX_ENTRIES
    # 5000 models through 40 keys: the scope budget, not the global cap, bounds the table.
    assert stats["escalated_total"] > 0
    assert stats["dropped_at_capacity_total"] == 0
    print(f"stress: {THREADS * OPERATIONS} operations, {counts}, store {stats}")

from __future__ import annotations

import contextlib
import random
import threading

from cooldown import (
    ModelCooldown,
    ModelCooldownCapacity,
    ModelCooldownExhausted,
    classify_upstream_outcome,
)

OUTCOMES = [classify_upstream_outcome(status) for status in (200, 401, 429, 500)]


def test_threads_recording_and_selecting_leave_a_consistent_store() -> None:
    store = ModelCooldown(max_entries=50)
    failures: list[BaseException] = []
    start = threading.Barrier(8)

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        start.wait()
        try:
            for step in range(3000):
                now = step * 0.01
                keys = [f"k{rng.randrange(40)}" for _ in range(3)]
                model = f"m{rng.randrange(5)}"
                if rng.random() < 0.5:
                    store.record(
                        "p",
                        keys[0],
                        rng.choice(OUTCOMES),
                        model=model,
                        credential_wide_auth=rng.random() < 0.2,
                        retry_after_seconds=rng.uniform(0, 30),
                        now=now,
                    )
                else:
                    with contextlib.suppress(ModelCooldownExhausted, ModelCooldownCapacity):
                        store.select("p", keys, model=model, now=now)
                assert store.entry_count <= 50
        except BaseException as error:  # pragma: no cover - reported below
            failures.append(error)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    stats = store.stats()
    assert stats["live_observations"] == store.entry_count <= 50
    assert stats["recorded_total"] > 0
    # Every live entry is scheduled, so a prune far in the future empties the table.
    store.available("p", [], now=10_000)
    assert store.entry_count == 0

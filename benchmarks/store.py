"""Time one select + record pair against the store at several fills, and its memory.

Run by hand: `python benchmarks/store.py`. Prints a table; docs/benchmarks.md records it.
"""

from __future__ import annotations

import hmac
import os
import statistics
import time
import tracemalloc
from collections.abc import Callable

from cooldown import ModelCooldown, classify_upstream_outcome

THROTTLED = classify_upstream_outcome(429)
FILLS = (10, 1000, 10000)
PAIRS = 2000
REPEATS = 9
KEYS = ["sk-bench-key-a", "sk-bench-key-b"]


def fill(store: ModelCooldown, live_entries: int) -> None:
    """Leave `live_entries` live once the two benchmark keys hold their own two entries."""
    for index in range(live_entries - len(KEYS)):
        store.record(
            "filler",
            f"key-{index}",
            THROTTLED,
            model="m",
            now=0.0,
            retry_after_seconds=3000 + index / 1000,
        )


def pair_loop(store: ModelCooldown) -> Callable[[], None]:
    """Each pair selects a key and throttles it for one second, so entries churn every call."""
    clock = [1.0]

    def run() -> None:
        for _ in range(PAIRS):
            now = clock[0]
            key = store.select("bench", KEYS, model="gpt-bench", now=now)
            assert key is not None
            store.record(
                "bench", key, THROTTLED, model="gpt-bench", retry_after_seconds=1.0, now=now
            )
            clock[0] = now + 0.5

    return run


def median_microseconds(run: Callable[[], None], per_run: int) -> float:
    samples = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        run()
        samples.append((time.perf_counter() - started) / per_run * 1e6)
    return statistics.median(samples)


def digest_floor() -> float:
    """Five one-shot HMACs: the digests a two-key select + record pair cannot avoid."""
    salt, message = os.urandom(32), b"x" * 64

    def run() -> None:
        for _ in range(PAIRS):
            for _ in range(5):
                hmac.digest(salt, message, "sha256")

    return median_microseconds(run, PAIRS)


def memory_at(live_entries: int) -> int:
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    store = ModelCooldown()
    fill(store, live_entries + len(KEYS))
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return used


def main() -> None:
    timings = {}
    for live in FILLS:
        store = ModelCooldown()
        fill(store, live)
        timings[live] = median_microseconds(pair_loop(store), PAIRS)
        assert store.entry_count <= live
        print(f"select+record pair at {live:>5} live entries: {timings[live]:6.2f} us")
    floor = digest_floor()
    growth = timings[FILLS[-1]] / timings[FILLS[0]]
    print(f"growth 10000/10: {growth:.2f} (target <= 1.3)")
    print(f"floor, five one-shot hmac digests: {floor:6.2f} us")
    print(f"pair / floor at 10000: {timings[FILLS[-1]] / floor:.2f} (target <= 1.5)")
    memory = memory_at(10000)
    print(
        f"tracemalloc for 10000 live entries: {memory} bytes "
        f"({memory / 2**20:.2f} MiB, target <= 2 MB)"
    )


if __name__ == "__main__":
    main()

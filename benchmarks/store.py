"""Time one select + record pair against the store at several fills, and its memory.

Run by hand: `python benchmarks/store.py`. Prints a table; docs/benchmarks.md records it.
"""

from __future__ import annotations

import gc
import hmac
import os
import statistics
import threading
import time
import tracemalloc
from collections.abc import Callable, Sequence

from flask import Flask

from cooldown import (
    MAX_ENTRIES,
    CredentialPool,
    ModelCooldown,
    classify_upstream_outcome,
    init_app,
    model_cooldown,
)
from cooldown.config import settings
from cooldown.digests import PreparedHmac, credential_message, credential_prefix, scope_message
from cooldown.store.schedule import DeadlineSchedule

THROTTLED = classify_upstream_outcome(429)
FILLS = (10, 1000, 10000)
PAIRS = 2000
REPEATS = 15
KEYS = ["sk-bench-key-a", "sk-bench-key-b"]
MAX_SECONDS = 86400
"""The churn's clock runs 0.5 s a pair, 15000 s over a measurement: the filler cooldowns must
outlast it, so both the fill and the churn allow a day (the maximum changes no cost)."""


def fill(store: ModelCooldown, live_entries: int, now: float = 0.0) -> None:
    """Leave `live_entries` live once the two benchmark keys hold their own two entries."""
    for index in range(live_entries - len(KEYS)):
        store.record(
            "filler",
            f"key-{index}",
            THROTTLED,
            model="m",
            now=now,
            retry_after_seconds=20000 + index / 1000,
            max_seconds=MAX_SECONDS,
        )


def pair_loop(store: ModelCooldown) -> Callable[[], None]:
    """Each pair selects a key and throttles it for one second, so entries churn every call."""
    clock = [1.0]

    def run() -> None:
        for _ in range(PAIRS):
            now = clock[0]
            key = store.select("bench", KEYS, model="gpt-bench", now=now, max_seconds=MAX_SECONDS)
            assert key is not None
            store.record(
                "bench",
                key,
                THROTTLED,
                model="gpt-bench",
                retry_after_seconds=1.0,
                now=now,
                max_seconds=MAX_SECONDS,
            )
            clock[0] = now + 0.5

    return run


def fastest_interleaved(runs: dict[str, Callable[[], None]], per_run: int) -> dict[str, float]:
    """Microseconds per call: the fastest of REPEATS runs of each. The runs alternate, so a
    slow spell of the shared host slows every variant alike and a ratio between them holds."""
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(REPEATS):
        for name, run in runs.items():
            gc.disable()  # as timeit does: collection pauses are not the code under test
            started = time.perf_counter()
            run()
            samples[name].append((time.perf_counter() - started) / per_run * 1e6)
            gc.enable()
    return {name: min(values) for name, values in samples.items()}


def fastest_microseconds(run: Callable[[], None], per_run: int) -> float:
    return fastest_interleaved({"run": run}, per_run)["run"]


def digest_floor() -> Callable[[], None]:
    """Five one-shot HMACs per pair: the digests a two-key select + record pair cannot avoid."""
    salt, message = os.urandom(32), b"x" * 64

    def run() -> None:
        for _ in range(PAIRS):
            for _ in range(5):
                hmac.digest(salt, message, "sha256")

    return run


class MinimalStore:
    """The least a select + record can do with the store's digests and deadline table: no
    argument checks, scope budget, in-flight bookkeeping or capacity guard. A yardstick that
    moves with the host, against which the targets can be read; not a design."""

    def __init__(self) -> None:
        self._digest = PreparedHmac(os.urandom(32))
        self._lock = threading.Lock()
        self._schedule = DeadlineSchedule(MAX_ENTRIES, forget=lambda entry: None)

    def select(self, provider: str, keys: Sequence[str], model: str, now: float) -> str | None:
        prefix, scope = credential_prefix(provider), scope_message(model, None)
        assert scope is not None
        with self._lock:
            self._schedule.advance(now, MAX_SECONDS)
            deadlines = self._schedule.deadlines
            if not deadlines:  # as the store does: an empty table needs no digest
                return keys[0] if keys else None
            scope_digest = self._digest(scope)
            for key in keys:
                credential = self._digest(credential_message(prefix, key))
                scoped = deadlines.get(credential + scope_digest, 0.0)
                if max(deadlines.get(credential, 0.0), scoped) <= now:
                    return key
        return None

    def record(
        self, provider: str, key: str, model: str, now: float, seconds: float | None
    ) -> None:
        """A throttle for `seconds`, or with `None` a success that clears the scope."""
        credential = credential_message(credential_prefix(provider), key)
        scope = scope_message(model, None)
        assert scope is not None
        with self._lock:
            self._schedule.advance(now, MAX_SECONDS)
            if seconds is not None or self._schedule.deadlines:
                entry = self._digest(credential) + self._digest(scope)
                if seconds is None:
                    self._schedule.discard(entry)
                else:
                    self._schedule.put(entry, now + seconds)

    def fill(self, live_entries: int, now: float) -> None:
        for index in range(live_entries):
            self.record("filler", f"key-{index}", "m", now, 20000 + index / 1000)


def minimal_pair_loop() -> Callable[[], None]:
    """`pair_loop`'s churn through `MinimalStore`, at 10000 live entries."""
    store, clock = MinimalStore(), [1.0]
    store.fill(FILLS[-1], 0.0)

    def run() -> None:
        for _ in range(PAIRS):
            now = clock[0]
            key = store.select("bench", KEYS, "gpt-bench", now)
            assert key is not None
            store.record("bench", key, "gpt-bench", now, 1.0)
            clock[0] = now + 0.5

    return run


def memory_at(live_entries: int) -> int:
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    store = ModelCooldown()
    fill(store, live_entries + len(KEYS))
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return used


def pool_loop() -> Callable[[], None]:
    """The same churn through `CredentialPool` on its scoped path (settings read per call)."""
    os.environ["MODEL_COOLDOWN_ENABLED"] = "true"
    os.environ["BENCH_POOL_KEY"], os.environ["BENCH_POOL_KEY_1"] = KEYS
    CredentialPool.register("bench-pool", "BENCH_POOL_KEY")
    clock = [1.0]

    def run() -> None:
        for _ in range(PAIRS):
            now = clock[0]
            key = CredentialPool.select("bench-pool", model="gpt-bench", now=now)
            CredentialPool.record(
                "bench-pool", key, 429, model="gpt-bench", now=now, retry_after_seconds=1.0
            )
            clock[0] = now + 0.5

    return run


def flask_request_times() -> dict[str, float]:
    """Microseconds per successful Flask test-client request, idle and busy store."""
    model_cooldown.reset()  # the churn loops ran on a fake clock ahead of the real one
    app = Flask("bench")
    init_app(app)

    @app.post("/pool/<model>")
    def with_pool(model: str) -> str:
        key = CredentialPool.select("bench-pool", model=model)
        CredentialPool.record("bench-pool", key, 200, model=model)  # a successful request
        return "ok"

    minimal = MinimalStore()

    @app.post("/minimal/<model>")
    def with_minimal_store(model: str) -> str:
        """What the pool's route could cost at the least: the same settings read and key
        discovery per call, the same digests and table, nothing else."""
        settings()
        key = minimal.select(
            "bench-pool", CredentialPool.keys("bench-pool"), model, time.monotonic()
        )
        assert key is not None
        settings()
        minimal.record("bench-pool", key, model, time.monotonic(), None)
        return "ok"

    @app.post("/no-pool/<model>")
    def without(model: str) -> str:  # the same route shape, so routing is not "pool work"
        return "ok"

    in_view: dict[str, list[float]] = {"first": [], "second": []}

    @app.post("/pool-twice/<model>")
    def twice(model: str) -> str:
        """Two select + record pairs, each timed: what the first one of a request costs."""
        for pair in in_view.values():
            started = time.perf_counter()
            key = CredentialPool.select("bench-pool", model=model)
            CredentialPool.record("bench-pool", key, 200, model=model)
            pair.append((time.perf_counter() - started) * 1e6)
        return "ok"

    client = app.test_client()

    def interleaved(variants: dict[str, tuple[str, str]]) -> dict[str, float]:
        """Fastest repeat per request, as timeit advises on a shared machine (noise only ever
        adds time); variants alternate, so drift hits every variant alike."""
        requests = 200
        samples: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(3 * REPEATS):
            for name, (path, enabled) in variants.items():
                os.environ["MODEL_COOLDOWN_ENABLED"] = enabled
                gc.disable()
                started = time.perf_counter()
                for _ in range(requests):
                    assert client.post(path).status_code == 200
                samples[name].append((time.perf_counter() - started) / requests * 1e6)
                gc.enable()
        return {name: min(values) for name, values in samples.items()}

    pool = "/pool/gpt-bench"
    times = interleaved(
        {
            "none": ("/no-pool/gpt-bench", "false"),
            "legacy": (pool, "false"),
            "scoped": (pool, "true"),
        }
    )
    # A busy gateway: 10000 live observations, so every call computes its digests.
    fill(model_cooldown, MAX_ENTRIES, now=time.monotonic())
    minimal.fill(MAX_ENTRIES, time.monotonic())
    busy = interleaved(
        {
            "none": ("/no-pool/gpt-bench", "false"),
            "legacy": (pool, "false"),
            "scoped": (pool, "true"),
            "minimal": ("/minimal/gpt-bench", "true"),
        }
    )
    os.environ["MODEL_COOLDOWN_ENABLED"] = "true"
    gc.disable()
    for _ in range(2000):
        assert client.post("/pool-twice/gpt-bench").status_code == 200
    gc.enable()
    medians = {name: statistics.median(pairs) for name, pairs in in_view.items()}
    return {
        **times,
        **{f"busy {name}": value for name, value in busy.items()},
        **{f"busy {name} pair in the view": value for name, value in medians.items()},
    }


def main() -> None:
    timings = {}
    for live in FILLS:
        store = ModelCooldown()
        fill(store, live)
        runs = {"pair": pair_loop(store)}
        if live == FILLS[-1]:  # interleaved with the pair they are compared with
            runs["floor"] = digest_floor()
            runs["minimal"] = minimal_pair_loop()
        timed = fastest_interleaved(runs, PAIRS)
        timings[live] = timed["pair"]
        assert live - 2 <= store.entry_count <= live  # every filler outlived the churn
        print(f"select+record pair at {live:>5} live entries: {timings[live]:6.2f} us")
    floor = timed["floor"]
    growth = timings[FILLS[-1]] / timings[FILLS[0]]
    print(f"growth 10000/10: {growth:.2f} (target <= 1.3)")
    print(f"floor, five one-shot hmac digests: {floor:6.2f} us")
    print(f"pair / floor at 10000: {timings[FILLS[-1]] / floor:.2f} (target <= 1.5)")
    print(
        "the same churn through a minimal store (same digests and table; no checks, budget "
        f"or bookkeeping): {timed['minimal']:6.2f} us, {timed['minimal'] / floor:.2f}x the floor"
    )
    pool_pair = fastest_microseconds(pool_loop(), PAIRS)
    print(f"select+record through CredentialPool (scoped): {pool_pair:6.2f} us")
    times = flask_request_times()
    print(
        f"Flask test-client request: {times['none']:6.1f} us without the pool, "
        f"{times['legacy']:6.1f} us with the legacy pool, {times['scoped']:6.1f} us scoped"
    )
    for label, legacy, scoped in (
        ("empty store", times["legacy"], times["scoped"]),
        ("10000 live entries", times["busy legacy"], times["busy scoped"]),
    ):
        share = (scoped - legacy) / scoped
        print(
            f"cooldown work (scoped minus legacy), {label}: {scoped - legacy:5.1f} us, "
            f"{share:.1%} of the request (target <= 10%)"
        )
    for label, none, scoped in (
        ("empty store", times["none"], times["scoped"]),
        ("10000 live", times["busy none"], times["busy scoped"]),
    ):
        pool_share = (scoped - none) / scoped  # against the same phase's route without the pool
        print(f"all pool work (key discovery included), {label}: {pool_share:.1%} (target <= 12%)")
    minimal_share = (times["busy minimal"] - times["busy none"]) / times["busy minimal"]
    print(f"the same route with the minimal store, 10000 live: {minimal_share:.1%} of its request")
    print(
        "select+record timed inside the view, 10000 live, median of 2000 requests: "
        f"the request's first pair {times['busy first pair in the view']:5.1f} us, "
        f"a second pair right after it {times['busy second pair in the view']:5.1f} us"
    )
    memory = memory_at(10000)
    print(
        f"tracemalloc for 10000 live entries: {memory} bytes "
        f"({memory / 2**20:.2f} MiB, target <= 2 MB)"
    )


if __name__ == "__main__":
    main()

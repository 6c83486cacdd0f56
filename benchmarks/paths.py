"""What each wave-2 path costs: dispatch, rate-limit headers, affinity, status, learning off.

Run by hand: `python benchmarks/paths.py`. Plain `time.perf_counter`, the fastest of 15 runs,
garbage collection paused while timing (as benchmarks/store.py does). docs/benchmarks.md
records the figures and their targets.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from store import fastest_interleaved, fastest_microseconds  # benchmarks/store.py

from cooldown import (
    MAX_ENTRIES,
    CredentialPool,
    classify_upstream_outcome,
    model_cooldown,
    rate_limit_advice,
    recording_context,
    selection_scope,
)
from cooldown.store import ORDERS, Order
from cooldown.store.admission import MAX_TRACKED

RUNS = 2000
PROVIDER = "bench-paths"
BASE = "BENCH_PATHS_KEY"
THROTTLED = classify_upstream_outcome(429)

OPENAI_HEADERS = {  # a typical chat completion answer: 20 headers, one window spent
    "date": "Mon, 30 Nov 2026 06:00:00 GMT",
    "content-type": "application/json",
    "transfer-encoding": "chunked",
    "connection": "keep-alive",
    "access-control-expose-headers": "X-Request-ID",
    "openai-organization": "org-bench",
    "openai-processing-ms": "412",
    "openai-version": "2020-10-01",
    "strict-transport-security": "max-age=31536000; includeSubDomains; preload",
    "x-ratelimit-limit-requests": "500",
    "x-ratelimit-limit-tokens": "30000",
    "x-ratelimit-remaining-requests": "0",
    "x-ratelimit-remaining-tokens": "29120",
    "x-ratelimit-reset-requests": "6m0s",
    "x-ratelimit-reset-tokens": "1.76s",
    "x-request-id": "req_0123456789abcdef",
    "cf-cache-status": "DYNAMIC",
    "server": "cloudflare",
    "cf-ray": "8e0f0f0f0f0f0f0f-AMS",
    "alt-svc": 'h3=":443"; ma=86400',
}


@dataclass
class Reply:
    status_code: int = 200
    headers: dict[str, str] = field(default_factory=dict)


def configure(keys: int) -> None:
    os.environ["MODEL_COOLDOWN_ENABLED"] = "true"
    for name in [name for name in os.environ if name.startswith(BASE)]:
        del os.environ[name]
    os.environ[BASE] = "sk-bench-0"
    for index in range(1, keys):
        os.environ[f"{BASE}_{index}"] = f"sk-bench-{index}"
    CredentialPool.register(PROVIDER, BASE)
    CredentialPool.reset()
    model_cooldown.reset()


def loop(body: Callable[[], object]) -> Callable[[], None]:
    def run() -> None:
        for _ in range(RUNS):
            body()

    return run


def us(body: Callable[[], object]) -> float:
    return fastest_microseconds(loop(body), RUNS)


def attempt_bookkeeping() -> None:
    """What counting an attempt in flight costs: admit + finish against the plain
    `select` a hand-written loop makes, and against a `select` in the same order (spread
    order's digests and loads are the order's cost, not the attempt's), on an idle store and
    with 10000 live entries. All four interleaved, so a slow spell hits them alike."""
    keys = CredentialPool.keys(PROVIDER)

    def admitted(order: Order) -> Callable[[], None]:
        def run() -> None:
            taken = model_cooldown.admit(PROVIDER, keys, model="gpt-bench", order=order)
            assert taken is not None
            model_cooldown.finish(taken[1], served=True)

        return loop(run)

    def selected(order: Order) -> Callable[[], None]:
        return loop(lambda: model_cooldown.select(PROVIDER, keys, model="gpt-bench", order=order))

    for label in ("idle store", "10000 live entries"):
        if label != "idle store":
            for index in range(MAX_ENTRIES - 10):
                model_cooldown.record(
                    "filler", f"key-{index}", THROTTLED, model="m", retry_after_seconds=3000
                )
        runs = {
            f"{kind} {order}": (admitted if kind == "admit" else selected)(order)
            for kind in ("select", "admit")
            for order in ORDERS
        }
        timed = fastest_interleaved(runs, RUNS)
        plain = timed["select configured"]
        for order in ORDERS:
            admit, same = timed[f"admit {order}"], timed[f"select {order}"]
            print(
                f"attempt bookkeeping, {label}, {order} order: admit + finish {admit:5.2f} us; "
                f"against select {plain:5.2f} us: {admit - plain:5.2f} us, against select in "
                f"{order} order {same:5.2f} us: {admit - same:5.2f} us per attempt "
                "(target <= 5 us)"
            )
    model_cooldown.reset()


def bookkeeping_at_its_bounds() -> None:
    """An attempt once the bookkeeping maps are full (they are bounded, the oldest
    dropped first): admit + finish cycling over more distinct key-model entries than the maps
    keep, against the same loop over few enough that nothing is dropped. A run is twice the
    maps' bound, so it spans the dict's own resizes rather than the quiet spell after one."""
    model_cooldown.reset()
    per_run = 2 * MAX_TRACKED

    def cycling(entries: int) -> Callable[[], None]:
        pairs = [(f"sk-bench-{index}", f"model-{index % 100}") for index in range(entries)]
        position = [0]

        def run() -> None:
            for _ in range(per_run):
                key, model = pairs[position[0] % entries]
                position[0] += 1
                taken = model_cooldown.admit(PROVIDER, [key], model=model, order="configured")
                assert taken is not None
                model_cooldown.finish(taken[1], served=True)

        return run

    timed = fastest_interleaved(
        {"within": cycling(MAX_TRACKED // 10), "beyond": cycling(3 * MAX_TRACKED)}, per_run
    )
    print(
        f"admit + finish over {MAX_TRACKED // 10} distinct entries {timed['within']:5.2f} us; "
        f"over {3 * MAX_TRACKED}, the maps full and dropping their oldest, "
        f"{timed['beyond']:5.2f} us"
    )
    model_cooldown.reset()


def main() -> None:
    configure(keys=2)
    reply = Reply()

    def by_hand() -> None:
        scope = selection_scope(PROVIDER, "gpt-bench")
        key = CredentialPool.select(PROVIDER, **scope)
        answer = reply
        CredentialPool.record(
            PROVIDER, key, answer.status_code, **scope, **recording_context(200, answer.headers)
        )

    def with_dispatch() -> None:
        CredentialPool.dispatch(PROVIDER, lambda key: reply, model="gpt-bench")

    hand, dispatched = us(by_hand), us(with_dispatch)
    print(f"select+send+record by hand: {hand:6.2f} us; dispatch: {dispatched:6.2f} us")
    print(f"dispatch adds {dispatched - hand:5.2f} us (target <= 2 us)")
    attempt_bookkeeping()
    bookkeeping_at_its_bounds()

    plain_context = us(lambda: recording_context(200, {}))
    full_context = us(lambda: recording_context(200, OPENAI_HEADERS))
    print(
        f"recording_context, no headers: {plain_context:5.2f} us; a 20-header OpenAI answer "
        f"with a spent window: {full_context:5.2f} us (target <= 10 us)"
    )
    advice = us(lambda: rate_limit_advice(OPENAI_HEADERS))
    print(f"rate_limit_advice alone on those headers: {advice:5.2f} us")

    configure(keys=8)
    plain = us(lambda: CredentialPool.select(PROVIDER, model="gpt-bench"))
    sticky = us(lambda: CredentialPool.select(PROVIDER, model="gpt-bench", affinity="conv-42"))
    print(
        f"select over 8 keys: {plain:6.2f} us plain, {sticky:6.2f} us with affinity "
        f"({sticky / plain:.2f}x, target <= 2x)"
    )

    configure(keys=100)
    for index in range(0, 100, 3):
        CredentialPool.record(PROVIDER, f"sk-bench-{index}", 429, model="gpt-bench")
    status = us(lambda: CredentialPool.status(PROVIDER, model="gpt-bench"))
    print(f"status() for 100 configured keys, 34 cooling: {status:7.1f} us (target <= 1000 us)")

    configure(keys=2)
    results: dict[str, float] = {}
    for mode in ("off", "shadow", "apply"):
        os.environ["MODEL_COOLDOWN_LEARN"] = mode

        def throttle_and_succeed() -> None:
            CredentialPool.record(PROVIDER, "sk-bench-0", 429, model="gpt-bench", now=1.0)
            CredentialPool.record(PROVIDER, "sk-bench-0", 200, model="gpt-bench", now=2.0)

        results[mode] = us(throttle_and_succeed)
    os.environ["MODEL_COOLDOWN_LEARN"] = "off"
    print(
        "a throttle + a success through the pool: "
        + ", ".join(f"learning {mode} {value:5.2f} us" for mode, value in results.items())
    )


if __name__ == "__main__":
    main()

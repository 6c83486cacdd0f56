"""What sharing observations through Redis costs, and what it saves.

Run by hand with a Redis on 127.0.0.1:6379: `python benchmarks/shared.py`.
Prints the select + record latency, process-local vs shared, and how many times N worker
processes dispatch a throttled key before all of them stop using it.
"""

from __future__ import annotations

import multiprocessing
import os
import uuid
from collections.abc import Callable
from multiprocessing.connection import Connection

import redis
from store import KEYS, PAIRS, median_microseconds, pair_loop  # benchmarks/store.py

from cooldown import CredentialPool, ModelCooldown
from cooldown.shared import RedisObservations

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
SECRET = "benchmark-secret-" + "x" * 32
WORKERS = 4
BASE = "BENCH_SHARED_KEY"


def pair_microseconds(store: ModelCooldown) -> float:
    return median_microseconds(pair_loop(store), PAIRS)


def worker(connection: Connection) -> None:
    """One gateway process: on each message, select a key for the model and dispatch."""
    CredentialPool.register("bench-provider", BASE)
    while (now := connection.recv()) is not None:
        key = CredentialPool.select("bench-provider", model="gpt-bench", now=now)
        if key == KEYS[0]:  # the upstream throttles this key for this model
            CredentialPool.record(
                "bench-provider", key, 429, model="gpt-bench", retry_after_seconds=60, now=now
            )
        connection.send(key)


def throttled_dispatches(shared: bool) -> int:
    """Requests arrive round-robin at the workers; count dispatches of the throttled key."""
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    env = {"MODEL_COOLDOWN_ENABLED": "true", BASE: KEYS[0], f"{BASE}_1": KEYS[1]}
    if shared:
        env.update(
            {
                "MODEL_COOLDOWN_REDIS_URL": REDIS_URL,
                "MODEL_COOLDOWN_REDIS_SECRET": SECRET,
                "MODEL_COOLDOWN_REDIS_PREFIX": prefix,
            }
        )
    else:
        os.environ.pop("MODEL_COOLDOWN_REDIS_URL", None)
    os.environ.update(env)
    context = multiprocessing.get_context("spawn")
    pipes, processes = [], []
    for _ in range(WORKERS):
        ours, theirs = context.Pipe()
        process = context.Process(target=worker, args=(theirs,))
        process.start()
        pipes.append(ours)
        processes.append(process)
    dispatches = 0
    now = 1000.0
    for request in range(WORKERS * 3):
        pipe = pipes[request % WORKERS]
        pipe.send(now)
        dispatches += pipe.recv() == KEYS[0]
        now += 0.1
    for pipe, process in zip(pipes, processes, strict=True):
        pipe.send(None)
        process.join()
    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(f"{{{prefix}}}:*"):
        client.delete(key)
    return dispatches


def measure(label: str, make: Callable[[], ModelCooldown]) -> float:
    value = pair_microseconds(make())
    print(f"select+record pair, {label}: {value:7.1f} us")
    return value


def main() -> None:
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    local = measure("process-local", ModelCooldown)

    def shared_store() -> ModelCooldown:
        store = ModelCooldown()
        store.attach_shared(RedisObservations(REDIS_URL, prefix=prefix), secret=SECRET.encode())
        return store

    shared = measure("shared through Redis on loopback", shared_store)
    print(f"added per pair: {shared - local:7.1f} us (two round trips)")
    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(f"{{{prefix}}}:*"):
        client.delete(key)
    print(
        f"dispatches of a throttled key across {WORKERS} workers: "
        f"process-local {throttled_dispatches(shared=False)}, "
        f"shared {throttled_dispatches(shared=True)}"
    )


if __name__ == "__main__":
    main()

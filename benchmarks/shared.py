"""What sharing observations through Redis costs, and what it saves.

Run by hand with a Redis (`MODEL_COOLDOWN_TEST_REDIS_URL`, default 127.0.0.1:6379; keys under a
prefix of its own, deleted afterwards) and gunicorn installed (the `dev` extra):
`python benchmarks/shared.py`. Prints the select + record latency, process-local vs
shared; how many times N worker processes dispatch a throttled key before all of them stop
using it; and the same through real gunicorn sync and gthread workers over loopback, for
requests sent one at a time and for a burst of concurrent ones.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import select
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from pathlib import Path
from threading import Barrier

import redis
from store import KEYS, PAIRS, fastest_microseconds, pair_loop  # benchmarks/store.py

from cooldown import CredentialPool, ModelCooldown
from cooldown.shared.observations import RedisObservations

REDIS_URL = os.environ.get("MODEL_COOLDOWN_TEST_REDIS_URL") or "redis://127.0.0.1:6379/0"
SECRET = "benchmark-secret-" + "x" * 32
WORKERS = 4
BASE = "BENCH_SHARED_KEY"


def pair_microseconds(store: ModelCooldown) -> float:
    return fastest_microseconds(pair_loop(store), PAIRS)


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


UPSTREAM_LATENCY = 0.05  # seconds per answer: what keeps requests in flight together
BURST = 32


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start_upstream(log: Path) -> tuple[subprocess.Popen[str], str]:
    """The simulator throttles every request (quota 0): every dispatch is a wasted one."""
    process = subprocess.Popen(
        [sys.executable, "-m", "cooldown.demo.upstream", "--port", "0", "--quota", "0",
         "--window", "600", "--delay", str(UPSTREAM_LATENCY), "--log", str(log)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], 20)
    line = process.stdout.readline() if ready else ""
    assert line.startswith("Serving on "), line
    return process, line.split()[-1]


def _post(url: str) -> int:
    request = urllib.request.Request(
        url, data=json.dumps({"model": "gpt-bench"}).encode(),
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return error.code


def gunicorn_dispatches(worker_class: str, *, shared: bool, burst: bool) -> int:
    """Dispatches of one throttled key through 4 gunicorn workers (gthread: 4 threads each)."""
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "dispatches.log"
        upstream, upstream_url = _start_upstream(log)
        port = _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("MODEL_COOLDOWN")}
        env["MODEL_COOLDOWN_ENABLED"] = "true"
        env["COOLDOWN_DEMO_UPSTREAM"] = upstream_url + "/v1"
        env["COOLDOWN_DEMO_API_KEY"] = "sk-bench-throttled"
        prefix = f"bench-{uuid.uuid4().hex[:8]}"
        if shared:
            env["MODEL_COOLDOWN_REDIS_URL"] = REDIS_URL
            env["MODEL_COOLDOWN_REDIS_SECRET"] = SECRET
            env["MODEL_COOLDOWN_REDIS_PREFIX"] = prefix
        threads = ["--threads", "4"] if worker_class == "gthread" else []
        server = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-w", str(WORKERS), "-k", worker_class, *threads,
             "-b", f"127.0.0.1:{port}", "--log-level", "warning", "cooldown.demo.wsgi:app"],
            env=env,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "gunicorn did not start"
                    time.sleep(0.1)
            time.sleep(1.0)  # every worker booted
            if burst:
                barrier = Barrier(BURST)

                def together(_: int) -> int:
                    barrier.wait()
                    return _post(url)

                with ThreadPoolExecutor(BURST) as pool:
                    list(pool.map(together, range(BURST)))
            else:
                for _ in range(BURST):
                    _post(url)
            return len(log.read_text().splitlines()) if log.exists() else 0
        finally:
            server.terminate()
            server.wait(timeout=30)
            upstream.terminate()
            upstream.wait(timeout=30)
            client = redis.Redis.from_url(REDIS_URL)
            for key in client.scan_iter(f"{{{prefix}}}:*"):
                client.delete(key)


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
    print(
        f"\ngunicorn, {WORKERS} workers, one throttled key, upstream latency "
        f"{UPSTREAM_LATENCY * 1000:.0f} ms, {BURST} requests: dispatches of the throttled key"
    )
    print("| workers | requests | process-local | shared |")
    print("|---|---|---|---|")
    for worker_class in ("sync", "gthread"):
        for burst in (False, True):
            local = gunicorn_dispatches(worker_class, shared=False, burst=burst)
            shared_count = gunicorn_dispatches(worker_class, shared=True, burst=burst)
            label = f"{worker_class}{' (4 threads)' if worker_class == 'gthread' else ''}"
            pattern = f"{BURST} at once" if burst else "one at a time"
            print(f"| {label} | {pattern} | {local} | {shared_count} |")


if __name__ == "__main__":
    main()

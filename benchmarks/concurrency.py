"""Wasted dispatches under concurrency: 32 client threads, real HTTP over loopback.

Run by hand: `python benchmarks/concurrency.py [--latency 0.05] [--seconds 20] [--window 10]`;
with `--gunicorn`, the gateway runs as 4 gunicorn gthread workers (8 threads each, so all 32
requests are in flight) sharing state through Redis (`MODEL_COOLDOWN_TEST_REDIS_URL`, default
127.0.0.1:6379, under a prefix of each run's own, deleted afterwards); `--gunicorn local` runs
the same workers each with its own state, for comparison.
A loopback upstream gives each (key, model) `--quota` requests per fixed `--window`; it
answers after `--latency` seconds and, by mode, advertises OpenAI-style rate-limit headers
with the limit, as a fixed window that announces it (`headers`; the library reads a limit
as continuous refill until one early 429 teaches it the window), only `Retry-After` on its
429s (`retry-after`), or nothing at all (`silent`).
4 keys x 3 models; clients offer 0.7x and 1.5x of the upstream's capacity, open loop, from
32 threads. Strategies: naive round-robin with no cooldown, fill-first (`order="configured"`,
wave 2's `dispatch`) and the wave-3 default (`order="spread"`: in flight, one probe after a
release, budgets). For `silent` the learner runs (`MODEL_COOLDOWN_LEARN=apply`).
Prints one table row per run: served, provider 429s per key-model window, client 429s, the
most dispatches that reached a key-model in a window after a throttled one before the first
of them was answered (1: a single probe; more: a herd), and the added latency (p50/p99 over
the upstream's own).
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import requests
from flask import Flask, Response, request
from fleet import THREADS, WORKERS, gunicorn_gateway, open_loop, p50_p99_ms, serve_upstream

from cooldown import CredentialPool, ModelCooldownExhausted, model_cooldown
from cooldown.evidence.learn import window_learner

KEYS = [f"sk-bench-conc-{index}" for index in range(4)]
MODELS = ["model-a", "model-b", "model-c"]
CLIENTS = 32
PROVIDER = "bench-concurrency"
STRATEGIES = ("naive round-robin", "fill-first (wave 2)", "spread (wave 3)")


@dataclass
class Upstream:
    quota: int
    window: float
    mode: str
    latency: float
    started: float = 0.0
    used: dict[tuple[str, str, int], int] = field(default_factory=dict)
    arrivals: dict[tuple[str, str, int], list[float]] = field(default_factory=dict)
    throttled: set[tuple[str, str, int]] = field(default_factory=set)
    throttles: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, key: str, model: str) -> tuple[int, dict[str, str]]:
        arrived = time.monotonic() - self.started
        with self.lock:
            index = math.floor(arrived / self.window)
            self.arrivals.setdefault((key, model, index), []).append(arrived)
        time.sleep(self.latency)
        now = time.monotonic() - self.started
        index = math.floor(now / self.window)
        reset = (index + 1) * self.window - now
        with self.lock:
            count = self.used.get((key, model, index), 0)
            if count >= self.quota:
                self.throttles += 1
                self.throttled.add((key, model, index))
                headers = {} if self.mode == "silent" else {"Retry-After": str(math.ceil(reset))}
                if self.mode == "headers":
                    headers.update(self._limits(0, reset))
                return 429, headers
            self.used[(key, model, index)] = count + 1
        return 200, self._limits(self.quota - count - 1, reset) if self.mode == "headers" else {}

    def before_first_answer(self) -> list[int]:
        """Per key-model window that follows a throttled one: the dispatches that arrived
        before the window's first dispatch was answered (1 means one probe, no herd)."""
        counts = []
        for key, model, index in self.throttled:
            arrivals = sorted(self.arrivals.get((key, model, index + 1), []))
            if arrivals:
                first_answer = arrivals[0] + self.latency
                counts.append(sum(1 for moment in arrivals if moment < first_answer))
        return counts

    def _limits(self, remaining: int, reset: float) -> dict[str, str]:
        return {  # a fixed window that announces its limit, as many providers do
            "x-ratelimit-limit-requests": str(self.quota),
            "x-ratelimit-remaining-requests": str(remaining),
            "x-ratelimit-reset-requests": f"{reset:.3f}s",
        }


def serve(upstream: Upstream) -> tuple[str, Callable[[], None]]:
    app = Flask("bench-upstream")

    @app.post("/v1/chat/completions")
    def chat() -> Response:
        key = request.headers.get("Authorization", "").removeprefix("Bearer ")
        model = (request.get_json(silent=True) or {}).get("model", "")
        status, headers = upstream.answer(key, model)
        return Response("{}", status=status, headers=headers, mimetype="application/json")

    base, stop = serve_upstream(app)
    return f"{base}/v1/chat/completions", stop


def one_request(
    strategy: str, url: str, model: str, session: requests.Session, counter: itertools.count[int]
) -> int:
    """The status the client sees."""

    def send(key: str) -> requests.Response:
        return session.post(
            url, json={"model": model}, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )

    if strategy == "naive round-robin":
        return send(KEYS[next(counter) % len(KEYS)]).status_code
    order = "configured" if strategy == "fill-first (wave 2)" else "spread"
    try:
        answer = CredentialPool.dispatch(PROVIDER, send, model=model, order=order)  # type: ignore[arg-type]
    except ModelCooldownExhausted:
        return 429
    return 429 if answer is None else answer.status_code


def run(strategy: str, mode: str, load: float, args: argparse.Namespace) -> dict[str, float]:
    learn = "apply" if mode == "silent" else "off"
    os.environ["MODEL_COOLDOWN_LEARN"] = learn
    model_cooldown.reset()
    CredentialPool.reset()
    window_learner.reset()
    upstream = Upstream(args.quota, args.window, mode, args.latency)
    upstream_url, stop = serve(upstream)
    if args.gunicorn:
        env = {
            "MODEL_COOLDOWN_LEARN": learn,
            "BENCH_UPSTREAM_URL": upstream_url,
            "BENCH_STRATEGY": strategy,
        }
        shared = args.gunicorn == "redis"
        with gunicorn_gateway("concurrency_gateway:app", env, shared=shared) as base:
            gateway = f"{base}/v1/chat/completions"
            return offer(upstream, load, args, lambda model, session, counter: session.post(
                gateway, json={"model": model}, timeout=60).status_code, stop)  # fmt: skip
    return offer(
        upstream,
        load,
        args,
        lambda model, session, counter: one_request(
            strategy, upstream_url, model, session, counter
        ),
        stop,
    )


def offer(
    upstream: Upstream,
    load: float,
    args: argparse.Namespace,
    request: Callable[[str, requests.Session, itertools.count[int]], int],
    stop: Callable[[], None],
) -> dict[str, float]:
    """Open-loop traffic from 32 client threads; the figures of one run."""
    capacity = len(KEYS) * len(MODELS) * args.quota / args.window  # requests per second
    total = int(capacity * load * args.seconds)
    counter = itertools.count()
    upstream.started = start = time.monotonic()
    answered = open_loop(
        total,
        capacity * load,
        CLIENTS,
        lambda index, session: request(MODELS[index % len(MODELS)], session, counter),
    )
    stop()
    windows = math.ceil((time.monotonic() - start) / args.window)
    pairs = len(KEYS) * len(MODELS)
    added = [took - args.latency for status, took in answered if status == 200]
    p50, p99 = p50_p99_ms(added)
    herd = upstream.before_first_answer() or [0]
    return {
        "before first answer, max": max(herd),
        "offered": total,
        "served": len(added),
        "capacity share": len(added) / (capacity * args.seconds),
        "provider 429s per key-model window": upstream.throttles / (pairs * windows),
        "client 429s": total - len(added),
        "p50 added ms": p50,
        "p99 added ms": p99,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.05, help="upstream seconds per answer")
    parser.add_argument("--seconds", type=float, default=20.0, help="offered traffic per run")
    parser.add_argument("--window", type=float, default=10.0, help="the upstream's window")
    parser.add_argument("--quota", type=int, default=5, help="requests per key, model, window")
    parser.add_argument("--modes", default="headers,retry-after,silent")
    parser.add_argument("--loads", default="0.7,1.5")
    parser.add_argument(
        "--gunicorn",
        nargs="?",
        const="redis",
        choices=("redis", "local"),
        help="4 gthread workers sharing Redis (or each with its own state), not 1 process",
    )
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    args = parser.parse_args()
    os.environ["MODEL_COOLDOWN_ENABLED"] = "true"
    os.environ["BENCH_CONCURRENCY_KEY"] = KEYS[0]
    for index, key in enumerate(KEYS[1:], start=1):
        os.environ[f"BENCH_CONCURRENCY_KEY_{index}"] = key
    CredentialPool.register(PROVIDER, "BENCH_CONCURRENCY_KEY")
    where = "one process"
    if args.gunicorn:
        state = "sharing Redis" if args.gunicorn == "redis" else "each with its own state"
        where = f"gunicorn, {WORKERS} gthread workers x {THREADS} threads, {state}"
    print(
        f"{len(KEYS)} keys x {len(MODELS)} models, quota {args.quota} per {args.window:g} s "
        f"window, latency {args.latency * 1000:g} ms, {CLIENTS} client threads, "
        f"{args.seconds:g} s per run, {where}"
    )
    print(
        "| mode | load | strategy | served / offered | capacity served | provider 429s per "
        "key-model window | client 429s | dispatches before the first answer after a throttled "
        "window, max | added p50 / p99 ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for mode in args.modes.split(","):
        for load in map(float, args.loads.split(",")):
            for strategy in args.strategies.split(","):
                figures = run(strategy, mode, load, args)
                print(
                    f"| {mode} | {load:g}x | {strategy} | {figures['served']:.0f} / "
                    f"{figures['offered']:.0f} | {figures['capacity share']:.0%} | "
                    f"{figures['provider 429s per key-model window']:.2f} | "
                    f"{figures['client 429s']:.0f} | {figures['before first answer, max']:.0f} | "
                    f"{figures['p50 added ms']:.1f} / "
                    f"{figures['p99 added ms']:.1f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()

"""Accounts and token budgets: a provider whose limits belong to accounts.

Run by hand: `python benchmarks/providers.py [--seconds 60] [--load 1.2] [--modes ...]
[--gunicorn] [--bursty] [--waits 0,2]`. A provider keeps continuous request and token
buckets per (account, model), refilled at their limit per minute and empty when the run
starts; 6 keys in 3 accounts of three tiers, 2 models; request sizes and latencies drawn
from log-normal distributions with a fixed seed (latency median 0.8 s, p99 about 8 s, as
non-streamed completions take). The
provider decides each request, and computes its rate-limit headers, when it arrives, and
sends the answer after the request's latency: the headers a gateway reads are as old as
that. Half-way through, one key is revoked (it answers 401 from then on); one account
answers 503 for one second in every ten. Modes: `openai` (`x-ratelimit-*-requests`/`-tokens`
with the limit, remaining and the time until full, and `Retry-After` on 429s), `anthropic`
(`anthropic-ratelimit-*` with RFC 3339 resets), `retry-after` (only `Retry-After` on 429s)
and `silent` (nothing: the library learns the window, `MODEL_COOLDOWN_LEARN=apply`).
Strategies: naive round-robin (one attempt, no cooldown), this library (`dispatch`, spread
order, `rotate_on=(503,)`), and this library with `cost=` and the accounts registered.
One process: 32 client threads call `dispatch` in-process, `send` sleeps for the request's
latency. `--gunicorn`: the gateway is 4 gunicorn gthread workers (8 threads each) sharing
state through Redis (`MODEL_COOLDOWN_TEST_REDIS_URL`, default 127.0.0.1:6379, a prefix of
each run's own, deleted afterwards), the provider a loopback HTTP server, 32 client threads.
`--bursty`: arrivals doubled for 5 s in every 30 (run it below capacity, `--load 0.8`);
`--waits`: each run again for each `MODEL_COOLDOWN_WAIT_SECONDS` given (`dispatch`'s wait
for the earliest free key instead of the 429 at once).
`openai-window`, `anthropic-window`: the same headers, limits announced, from fixed windows
that refill all at once at the end of each minute (full when the run starts), as many
providers count; the library reads limits as refilling continuously until one early 429
teaches it otherwise. Half-way through, one more key runs out of credit: it answers 429 with
OpenAI's `insufficient_quota` error, which the library's strategies read with an `advice=`
reader returning `QuotaSpent()`.
Prints per run: served, provider 429s per account-model-minute (all, and those to requests
that arrived after their account-model's first answer came back: the buckets start empty,
and what is sent before any answer cannot be foreseen), in the window modes the 429s per
account-model window after the first window, the requests sent to the out-of-quota key
after the answer that said so, 429s that met a sibling of a key throttled before the
request was sent and within its advice (with how long after that 429 the latest of them was
sent), 429s that met a token budget too small for the request, and the added latency
(p50/p99 of served requests, over the upstream's own latency).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import requests
from flask import Flask, Response, request
from fleet import THREADS, WORKERS, gunicorn_gateway, open_loop, p50_p99_ms, serve_upstream

from cooldown import CredentialPool, ModelCooldownExhausted, QuotaSpent, model_cooldown
from cooldown.evidence.learn import window_learner

PROVIDER = "bench-providers"
ACCOUNTS = {"tier-1": (60, 40_000), "tier-2": (120, 80_000), "tier-3": (240, 160_000)}
"""Per account and model: requests and tokens per minute."""
KEYS = [f"sk-bench-{account}-{n}" for account in ACCOUNTS for n in (1, 2)]
ACCOUNT_OF = {key: key.split("-")[2] + "-" + key.split("-")[3] for key in KEYS}
REVOKED = KEYS[-1]  # answers 401 from half-way through
OUT_OF_QUOTA = KEYS[0]  # out of credit from half-way through: OpenAI's insufficient_quota
QUOTA_BODY = json.dumps(
    {"error": {"code": "insufficient_quota", "type": "insufficient_quota", "message": "quota"}}
).encode()
FLAKY = "tier-2"  # answers 503 for one second in every ten
MODELS = ["model-a", "model-b"]
CLIENTS = 32
MEDIAN_TOKENS, TOKEN_SIGMA, MOST_TOKENS = 800, 1.0, 20_000
MEDIAN_LATENCY, LATENCY_SIGMA, LONGEST_LATENCY = 0.8, 0.99, 20.0  # p99 about 8 s
STRATEGIES = ("naive round-robin", "library", "library + cost + accounts")
ROTATE_ON = (503,)


@dataclass
class Bucket:
    """Refilled continuously at its limit per minute, or (`window`) all at once at the end
    of each minute since `origin`."""

    limit: float
    level: float
    at: float
    window: bool = False
    origin: float = 0.0

    def refill(self, now: float) -> float:
        if self.window:
            if int((now - self.origin) // 60) != int((self.at - self.origin) // 60):
                self.level = self.limit
        else:
            self.level = min(self.limit, self.level + (now - self.at) * self.limit / 60.0)
        self.at = now
        return self.level

    def full_in(self) -> float:
        """Seconds until it is full: the window's end, or as it refills."""
        if self.window:
            return 60.0 - (self.at - self.origin) % 60
        return (self.limit - self.level) * 60.0 / self.limit

    def window_index(self, now: float) -> int:
        return int((now - self.origin) // 60)


@dataclass
class Provider:
    mode: str
    start: float
    revoke_at: float
    window: bool = False  # fixed windows instead of continuous buckets
    buckets: dict[tuple[str, str, str], Bucket] = field(default_factory=dict)
    throttles: int = 0
    first_throttled: dict[tuple[str, str], float] = field(default_factory=dict)
    first_answered: dict[tuple[str, str], float] = field(default_factory=dict)
    late_throttles: int = 0  # 429s to requests that arrived after their pair's first answer
    later_window_throttles: int = 0  # 429s in a pair's windows after its first (`window`)
    quota_answered: float = math.inf  # when the out-of-quota key's first such answer landed
    after_quota: int = 0  # requests to that key that arrived after it
    sibling_gaps: list[float] = field(default_factory=list)  # arrival after the sibling's 429
    token_shortfalls: int = 0
    rejected: int = 0
    unavailable: int = 0
    advised: dict[tuple[str, str], tuple[str, float, float]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        """Continuous buckets start empty (the run begins at the limit); windows start full,
        each minute from the run's start."""
        for account, (requests_limit, tokens_limit) in ACCOUNTS.items():
            for model in MODELS:
                for kind, limit in (("r", requests_limit), ("t", tokens_limit)):
                    level = float(limit) if self.window else 0.0
                    bucket = Bucket(limit, level, self.start, self.window, self.start)
                    self.buckets[(account, model, kind)] = bucket

    def serve(
        self, key: str, model: str, tokens: int, latency: float
    ) -> tuple[int, dict[str, str], bytes]:
        """The answer to one request, decided (its headers too) when it arrives, as
        providers admit a request, and sent after its service time, as a non-streamed
        completion comes back: headers are as old as the request's latency when they land."""
        arrived = time.monotonic()
        answer = self.answer(key, model, tokens, arrived)
        time.sleep(latency)
        account = ACCOUNT_OF.get(key)
        with self.lock:
            if account is not None:
                self.first_answered.setdefault((account, model), time.monotonic())
            if answer[0] == 429 and answer[2] == QUOTA_BODY:
                self.quota_answered = min(self.quota_answered, time.monotonic())
        return answer

    def answer(
        self, key: str, model: str, tokens: int, arrived: float
    ) -> tuple[int, dict[str, str], bytes]:
        account = ACCOUNT_OF.get(key)
        now = time.monotonic()
        if account is None or model not in MODELS or (key == REVOKED and now >= self.revoke_at):
            with self.lock:
                self.rejected += 1
            return 401, {}, b"{}"
        if key == OUT_OF_QUOTA and now >= self.revoke_at:  # its credit ran out half-way
            with self.lock:
                self.after_quota += 1 if arrived > self.quota_answered else 0
            return 429, {}, QUOTA_BODY
        if account == FLAKY and (now - self.start) % 10 >= 9:
            with self.lock:
                self.unavailable += 1
            return 503, {}, b"{}"
        with self.lock:
            requests_bucket = self.buckets[(account, model, "r")]
            budget = self.buckets[(account, model, "t")]
            requests_bucket.refill(now)
            budget.refill(now)
            if requests_bucket.level >= 1 and budget.level >= tokens:
                requests_bucket.level -= 1
                budget.level -= tokens
                return 200, self._headers(requests_bucket, budget, None), b"{}"
            self.throttles += 1
            if arrived > self.first_answered.get((account, model), math.inf):
                self.late_throttles += 1
            if self.window and requests_bucket.window_index(arrived) > 0:
                self.later_window_throttles += 1
            if requests_bucket.level >= 1:
                self.token_shortfalls += 1
            earlier = self.advised.get((account, model))
            if earlier is not None and earlier[0] != key and earlier[1] <= arrived < earlier[2]:
                self.sibling_gaps.append(arrived - earlier[1])  # within the sibling's advice
            levels = requests_bucket.level, budget.level
            if self.window:
                short = requests_bucket.full_in()
            else:
                short = (1 - levels[0]) * 60.0 / requests_bucket.limit if levels[0] < 1 else 0.0
                short = max(short, (tokens - levels[1]) * 60.0 / budget.limit)
            advice = max(1, math.ceil(short))
            self.advised[(account, model)] = (key, now, now + advice)
            return 429, self._headers(requests_bucket, budget, advice), b"{}"

    def _headers(
        self, requests_bucket: Bucket, budget: Bucket, advice: int | None
    ) -> dict[str, str]:
        headers: dict[str, str] = {}
        if advice is not None and self.mode != "silent":
            headers["Retry-After"] = str(advice)
        buckets = (("requests", requests_bucket), ("tokens", budget))
        if self.mode == "openai":
            for kind, bucket in buckets:
                headers[f"x-ratelimit-limit-{kind}"] = str(int(bucket.limit))
                headers[f"x-ratelimit-remaining-{kind}"] = str(int(bucket.level))
                headers[f"x-ratelimit-reset-{kind}"] = f"{bucket.full_in():.3f}s"
        elif self.mode == "anthropic":
            wall = time.time()
            for kind, bucket in buckets:
                reset = datetime.fromtimestamp(wall + bucket.full_in(), tz=timezone.utc)
                headers[f"anthropic-ratelimit-{kind}-limit"] = str(int(bucket.limit))
                headers[f"anthropic-ratelimit-{kind}-remaining"] = str(int(bucket.level))
                headers[f"anthropic-ratelimit-{kind}-reset"] = reset.isoformat()
        return headers


@dataclass
class Reply:
    status_code: int
    headers: dict[str, str]
    content: bytes


def openai_quota_spent(answer: Any) -> QuotaSpent | None:
    """What a gateway sending with `requests` reads in a throttle's body: OpenAI's
    `insufficient_quota` (the SDKs' exceptions say it without any reader)."""
    try:
        error = json.loads(answer.content).get("error") or {}
    except (AttributeError, TypeError, ValueError):
        return None
    return QuotaSpent() if error.get("code") == "insufficient_quota" else None


def register(strategy: str) -> None:
    """The pool as the strategy runs it: with the accounts registered, or without."""
    accounts = None
    if strategy == "library + cost + accounts":
        positions: dict[str, list[int]] = {}
        for position, key in enumerate(KEYS, start=1):
            positions.setdefault(ACCOUNT_OF[key], []).append(position)
        accounts = positions
    CredentialPool.register(PROVIDER, keys=KEYS, accounts=accounts)


def gateway(strategy: str, model: str, tokens: int, send: Callable[[str], Any], turn: int) -> int:
    """What one gateway request answers its client: naive sends once to the next key; the
    library dispatches (with the request's cost in the third strategy)."""
    if strategy == "naive round-robin":
        return int(send(KEYS[turn % len(KEYS)]).status_code)
    cost = tokens if strategy == "library + cost + accounts" else None
    try:
        answer = CredentialPool.dispatch(
            PROVIDER, send, model=model, cost=cost, rotate_on=ROTATE_ON, advice=openai_quota_spent
        )
    except ModelCooldownExhausted:
        return 429
    return 429 if answer is None else int(answer.status_code)


def capacity_per_second() -> float:
    """What the provider can serve: per account and model, the scarcer of its two limits."""
    mean_tokens = min(MOST_TOKENS, MEDIAN_TOKENS * math.exp(TOKEN_SIGMA**2 / 2))
    per_minute = sum(
        min(requests, tokens / mean_tokens) for requests, tokens in ACCOUNTS.values()
    ) * len(MODELS)
    return per_minute / 60.0


def serve_http(provider: Provider) -> tuple[str, Callable[[], None]]:
    """The provider on a loopback port, for gateways in other processes."""
    app = Flask("bench-provider")

    @app.post("/v1/chat/completions")
    def chat() -> Response:
        key = request.headers.get("Authorization", "").removeprefix("Bearer ")
        body = request.get_json(silent=True) or {}
        status, headers, content = provider.serve(
            key, str(body.get("model")), int(body.get("tokens", 1)), float(body.get("latency", 0))
        )
        return Response(content, status=status, headers=headers, mimetype="application/json")

    base, stop = serve_upstream(app)
    return f"{base}/v1/chat/completions", stop


def bursty(rate: float, seconds: float) -> list[float]:
    """Arrival offsets at `rate` a second, doubled for the first 5 s of every 30."""
    offsets, at = [], 0.0
    while at < seconds:
        offsets.append(at)
        at += 1.0 / (rate * (2 if at % 30 < 5 else 1))
    return offsets


def run(strategy: str, mode: str, args: argparse.Namespace, wait: str) -> dict[str, float]:
    learn = "apply" if mode == "silent" else "off"
    os.environ["MODEL_COOLDOWN_LEARN"] = learn
    os.environ["MODEL_COOLDOWN_WAIT_SECONDS"] = wait
    model_cooldown.reset()
    CredentialPool.reset()
    window_learner.reset()
    register(strategy)
    rate = capacity_per_second() * args.load
    due = bursty(rate, args.seconds) if args.bursty else None
    total = int(rate * args.seconds) if due is None else len(due)
    generator = random.Random(7)
    sizes = [
        min(
            MOST_TOKENS, max(1, int(generator.lognormvariate(math.log(MEDIAN_TOKENS), TOKEN_SIGMA)))
        )
        for _ in range(total)
    ]
    latencies = [
        min(LONGEST_LATENCY, generator.lognormvariate(math.log(MEDIAN_LATENCY), LATENCY_SIGMA))
        for _ in range(total)
    ]
    window = mode.endswith("-window")
    provider = Provider(mode.removesuffix("-window"), time.monotonic(), math.inf, window)
    if not args.gunicorn:

        def in_process(index: int, session: requests.Session) -> int:
            model, tokens = MODELS[index % len(MODELS)], sizes[index]

            def send(key: str) -> Reply:
                return Reply(*provider.serve(key, model, tokens, latencies[index]))

            return gateway(strategy, model, tokens, send, index)

        return offer(provider, total, rate, latencies, in_process, due)
    upstream_url, stop = serve_http(provider)
    try:
        env = {
            "MODEL_COOLDOWN_LEARN": learn,
            "BENCH_UPSTREAM_URL": upstream_url,
            "BENCH_STRATEGY": strategy,
            "MODEL_COOLDOWN_WAIT_SECONDS": wait,
        }
        with gunicorn_gateway("providers_gateway:app", env) as base:
            url = f"{base}/v1/chat/completions"

            def over_http(index: int, session: requests.Session) -> int:
                body: dict[str, Any] = {
                    "model": MODELS[index % len(MODELS)],
                    "tokens": sizes[index],
                    "latency": latencies[index],
                    "turn": index,
                }
                return session.post(url, json=body, timeout=60).status_code

            return offer(provider, total, rate, latencies, over_http, due)
    finally:
        stop()


def offer(
    provider: Provider,
    total: int,
    rate: float,
    latencies: list[float],
    request_one: Callable[[int, requests.Session], int],
    due: list[float] | None = None,
) -> dict[str, float]:
    """Open-loop traffic from 32 client threads; the figures of one run."""
    start = time.monotonic()
    length = total / rate if due is None else due[-1]
    provider.start, provider.revoke_at = start, start + length / 2
    with provider.lock:
        for bucket in provider.buckets.values():
            bucket.at = bucket.origin = start
    answered = open_loop(total, rate, CLIENTS, request_one, due)
    took = time.monotonic() - start
    pair_minutes = len(ACCOUNTS) * len(MODELS) * took / 60.0
    later_windows = len(ACCOUNTS) * len(MODELS) * max(1, math.ceil(took / 60.0) - 1)
    added = [
        took - latencies[index] for index, (status, took) in enumerate(answered) if status == 200
    ]
    p50, p99 = p50_p99_ms(added)
    return {
        "offered": total,
        "served": len(added),
        "429s per account-model-minute": provider.throttles / pair_minutes,
        "after the first": provider.late_throttles / pair_minutes,
        "per later window": provider.later_window_throttles / later_windows,
        "after quota": provider.after_quota,
        "sibling 429s": len(provider.sibling_gaps),
        "sibling gap ms": 1000 * max(provider.sibling_gaps, default=0.0),
        "token 429s": provider.token_shortfalls,
        "client 429s": sum(1 for status, _ in answered if status == 429),
        "p50 added ms": p50,
        "p99 added ms": p99,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="offered traffic per run")
    parser.add_argument("--load", type=float, default=1.2, help="offered load / capacity")
    parser.add_argument(
        "--modes", default="openai,anthropic,retry-after,silent,openai-window,anthropic-window"
    )
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--gunicorn", action="store_true", help="4 workers sharing Redis")
    parser.add_argument("--bursty", action="store_true", help="arrivals doubled 5 s in 30")
    parser.add_argument("--waits", default="0", help="MODEL_COOLDOWN_WAIT_SECONDS per run")
    args = parser.parse_args()
    os.environ["MODEL_COOLDOWN_ENABLED"] = "true"
    where = f"gunicorn, {WORKERS} gthread workers x {THREADS} threads, sharing Redis"
    print(
        f"6 keys in 3 accounts (two each), 2 models, {args.load}x load, {args.seconds:.0f} s"
        f" per run, {CLIENTS} client threads, {where if args.gunicorn else 'one process'}"
        + (", arrivals doubled for 5 s in every 30" if args.bursty else "")
    )
    print(
        "| mode | strategy | wait s | served / offered | provider 429s per account-model-minute"
        " (after its first answer) | per later window | sent after out of quota | sibling 429s"
        " | token 429s | client 429s | added ms p50/p99 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    runs = [
        (mode, strategy, wait)
        for mode in args.modes.split(",")
        for strategy in args.strategies.split(",")
        for wait in args.waits.split(",")
    ]
    for mode, strategy, wait in runs:
        figures = run(strategy, mode, args, wait)
        print(
            f"| {mode} | {strategy} | {wait} | {figures['served']} / {figures['offered']} | "
            f"{figures['429s per account-model-minute']:.2f}"
            f" ({figures['after the first']:.2f}) | "
            + (f"{figures['per later window']:.2f}" if mode.endswith("-window") else "-")
            + f" | {figures['after quota']:.0f} | "
            f"{figures['sibling 429s']:.0f}"
            + (f" (<= {figures['sibling gap ms']:.0f} ms)" if figures["sibling 429s"] else "")
            + f" | {figures['token 429s']:.0f} | "
            f"{figures['client 429s']:.0f} | "
            f"{figures['p50 added ms']:.0f} / {figures['p99 added ms']:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()

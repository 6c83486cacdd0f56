"""Accounts and token budgets (SPEC §21): a provider whose limits belong to accounts.

Run by hand: `python benchmarks/providers.py [--seconds 30] [--load 1.2] [--modes ...]`.
An in-process provider (no HTTP: `send` sleeps for the request's latency, so attempts really
overlap in 32 client threads) keeps continuous request and token buckets per (account,
model), refilled at their limit per minute; 6 keys in 3 accounts of three tiers, 2 models;
request sizes and latencies drawn from log-normal distributions with a fixed seed. Modes:
`openai` (`x-ratelimit-*-requests`/`-tokens` with the limit, remaining and the time until
full, and `Retry-After` on 429s), `anthropic` (`anthropic-ratelimit-*` with RFC 3339 resets),
`retry-after` (only `Retry-After` on 429s) and `silent`. Strategies: naive round-robin (one
attempt, no cooldown), this library (`dispatch`, spread order), and this library with
`cost=` and the accounts registered. One process only (the gunicorn run of §21 is not here).
Prints per run: served, provider 429s per account-model-minute, 429s that met a sibling of a
key throttled within its advice, and 429s that met a token budget too small for the request.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from cooldown import CredentialPool, ModelCooldownExhausted, model_cooldown

PROVIDER = "bench-providers"
ACCOUNTS = {"tier-1": (60, 40_000), "tier-2": (120, 80_000), "tier-3": (240, 160_000)}
"""Per account and model: requests and tokens per minute."""
KEYS = [f"sk-bench-{account}-{n}" for account in ACCOUNTS for n in (1, 2)]
ACCOUNT_OF = {key: key.split("-")[2] + "-" + key.split("-")[3] for key in KEYS}
MODELS = ["model-a", "model-b"]
CLIENTS = 32
MEDIAN_TOKENS, TOKEN_SIGMA, MOST_TOKENS = 800, 1.0, 20_000
MEDIAN_LATENCY, LATENCY_SIGMA, LONGEST_LATENCY = 0.3, 0.5, 3.0
STRATEGIES = ("naive round-robin", "library", "library + cost + accounts")


@dataclass
class Bucket:
    limit: float
    level: float
    at: float

    def refill(self, now: float) -> float:
        self.level = min(self.limit, self.level + (now - self.at) * self.limit / 60.0)
        self.at = now
        return self.level

    def full_in(self) -> float:
        return (self.limit - self.level) * 60.0 / self.limit


@dataclass
class Provider:
    mode: str
    start: float
    buckets: dict[tuple[str, str, str], Bucket] = field(default_factory=dict)
    throttles: int = 0
    sibling_hits: int = 0
    token_shortfalls: int = 0
    advised: dict[tuple[str, str], tuple[str, float]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        for account, (requests_limit, tokens_limit) in ACCOUNTS.items():
            for model in MODELS:  # buckets start empty: the run begins at the limit
                self.buckets[(account, model, "r")] = Bucket(requests_limit, 0.0, self.start)
                self.buckets[(account, model, "t")] = Bucket(tokens_limit, 0.0, self.start)

    def answer(self, key: str, model: str, tokens: int) -> tuple[int, dict[str, str]]:
        account = ACCOUNT_OF[key]
        now = time.monotonic()
        with self.lock:
            requests = self.buckets[(account, model, "r")]
            budget = self.buckets[(account, model, "t")]
            requests.refill(now)
            budget.refill(now)
            if requests.level >= 1 and budget.level >= tokens:
                requests.level -= 1
                budget.level -= tokens
                return 200, self._headers(requests, budget, None)
            self.throttles += 1
            if requests.level >= 1:
                self.token_shortfalls += 1
            earlier = self.advised.get((account, model))
            if earlier is not None and earlier[0] != key and now < earlier[1]:
                self.sibling_hits += 1
            short = (1 - requests.level) * 60.0 / requests.limit if requests.level < 1 else 0.0
            short = max(short, (tokens - budget.level) * 60.0 / budget.limit)
            advice = max(1, math.ceil(short))
            self.advised[(account, model)] = (key, now + advice)
            return 429, self._headers(requests, budget, advice)

    def _headers(self, requests: Bucket, budget: Bucket, advice: int | None) -> dict[str, str]:
        headers: dict[str, str] = {}
        if advice is not None and self.mode != "silent":
            headers["Retry-After"] = str(advice)
        if self.mode == "openai":
            for kind, bucket in (("requests", requests), ("tokens", budget)):
                headers[f"x-ratelimit-limit-{kind}"] = str(int(bucket.limit))
                headers[f"x-ratelimit-remaining-{kind}"] = str(int(bucket.level))
                headers[f"x-ratelimit-reset-{kind}"] = f"{bucket.full_in():.3f}s"
        elif self.mode == "anthropic":
            wall = time.time()
            for kind, bucket in (("requests", requests), ("tokens", budget)):
                reset = datetime.fromtimestamp(wall + bucket.full_in(), tz=timezone.utc)
                headers[f"anthropic-ratelimit-{kind}-limit"] = str(int(bucket.limit))
                headers[f"anthropic-ratelimit-{kind}-remaining"] = str(int(bucket.level))
                headers[f"anthropic-ratelimit-{kind}-reset"] = reset.isoformat()
        return headers


@dataclass
class Reply:
    status_code: int
    headers: dict[str, str]


def capacity_per_second() -> float:
    """What the provider can serve: per account and model, the scarcer of its two limits."""
    mean_tokens = min(MOST_TOKENS, MEDIAN_TOKENS * math.exp(TOKEN_SIGMA**2 / 2))
    per_minute = sum(
        min(requests, tokens / mean_tokens) for requests, tokens in ACCOUNTS.values()
    ) * len(MODELS)
    return per_minute / 60.0


def run(strategy: str, mode: str, args: argparse.Namespace) -> dict[str, float]:
    model_cooldown.reset()
    CredentialPool.reset()
    accounts = None
    if strategy == "library + cost + accounts":
        positions: dict[str, list[int]] = {}
        for position, key in enumerate(KEYS, start=1):
            positions.setdefault(ACCOUNT_OF[key], []).append(position)
        accounts = positions
    CredentialPool.register(PROVIDER, keys=KEYS, accounts=accounts)
    provider = Provider(mode, time.monotonic())
    rate = capacity_per_second() * args.load
    total = int(rate * args.seconds)
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
    served = client_429s = 0
    lock = threading.Lock()
    next_index = iter(range(total))
    round_robin = iter(range(10**9))
    start = time.monotonic()

    def one(index: int) -> int:
        model, tokens = MODELS[index % len(MODELS)], sizes[index]

        def send(key: str) -> Reply:
            time.sleep(latencies[index])
            status, headers = provider.answer(key, model, tokens)
            return Reply(status, headers)

        if strategy == "naive round-robin":
            return send(KEYS[next(round_robin) % len(KEYS)]).status_code
        cost = tokens if strategy == "library + cost + accounts" else None
        try:
            answer = CredentialPool.dispatch(PROVIDER, send, model=model, cost=cost)
        except ModelCooldownExhausted:
            return 429
        return 429 if answer is None else answer.status_code

    def client() -> None:
        nonlocal served, client_429s
        for index in next_index:
            time.sleep(max(0.0, start + index / rate - time.monotonic()))
            status = one(index)
            with lock:
                if status == 200:
                    served += 1
                else:
                    client_429s += 1

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    minutes = (time.monotonic() - start) / 60.0
    pairs = len(ACCOUNTS) * len(MODELS)
    return {
        "offered": total,
        "served": served,
        "provider 429s per account-model-minute": provider.throttles / (pairs * minutes),
        "429s on a sibling within its advice": provider.sibling_hits,
        "429s that met too few tokens": provider.token_shortfalls,
        "client 429s": client_429s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="offered traffic per run")
    parser.add_argument("--load", type=float, default=1.2, help="offered load / capacity")
    parser.add_argument("--modes", default="openai,anthropic,retry-after,silent")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    args = parser.parse_args()
    os.environ["MODEL_COOLDOWN_ENABLED"] = "true"
    print(
        f"6 keys in 3 accounts (two each), 2 models, {args.load}x load, {args.seconds:.0f} s"
        f" per run, {CLIENTS} client threads, one process"
    )
    columns = (
        "served",
        "provider 429s per account-model-minute",
        "429s on a sibling within its advice",
        "429s that met too few tokens",
        "client 429s",
    )
    print("| mode | strategy | served / offered | " + " | ".join(columns[1:]) + " |")
    print("|---|---|---|" + "---|" * (len(columns) - 1))
    for mode in args.modes.split(","):
        for strategy in args.strategies.split(","):
            figures = run(strategy, mode, args)
            print(
                f"| {mode} | {strategy} | {figures['served']} / {figures['offered']} | "
                f"{figures['provider 429s per account-model-minute']:.2f} | "
                f"{figures['429s on a sibling within its advice']:.0f} | "
                f"{figures['429s that met too few tokens']:.0f} | "
                f"{figures['client 429s']:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()

"""Goodput in simulated time: what each strategy serves, and the 429s it costs.

Run by hand: `python benchmarks/goodput.py` (seconds, no sleeps). docs/benchmarks.md records
the tables; tests/system/test_goodput.py holds the simulator to its claims on smaller runs.

A simulated provider gives each key a quota of requests per fixed window, per model (or per
key across models), and may announce the window in OpenAI-style rate-limit headers and/or a
`Retry-After` on its 429s. Clients send requests through `CredentialPool.dispatch`, the
whole rotation loop, with `now=` driven by the simulation clock.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from cooldown import CredentialPool, ModelCooldownExhausted, model_cooldown
from cooldown.evidence.learn import window_learner

PROVIDER = "goodput-sim"
KEYS_ENV = "GOODPUT_SIM_KEY"
HOUR = 3600.0


@dataclass
class Reply:
    """Enough of a response for `dispatch`: a status and headers."""

    status_code: int
    headers: dict[str, str]


@dataclass
class Provider:
    """Fixed windows of `window` seconds; `quota` requests per key and model in each."""

    window: float
    quota: int
    rate_limit_headers: bool = True
    retry_after: bool = True
    shared_across_models: bool = False  # one quota per key for every model
    window_after: float | None = None  # the window changes to this at `change_at`
    change_at: float = math.inf
    used: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    throttled: list[float] = field(default_factory=list)  # times of the 429s it sent

    def _window(self, now: float) -> tuple[int, float]:
        """(window index, seconds until it resets)."""
        if now < self.change_at or self.window_after is None:
            index = math.floor(now / self.window)
            return index, (index + 1) * self.window - now
        since = now - self.change_at
        index = math.floor(since / self.window_after)
        return 1_000_000 + index, (index + 1) * self.window_after - since

    def _quota_key(self, key: str, model: str, now: float) -> tuple[tuple[str, str, int], float]:
        index, reset = self._window(now)
        return (key, "*" if self.shared_across_models else model, index), reset

    def has_quota(self, key: str, model: str, now: float) -> bool:
        counter, _ = self._quota_key(key, model, now)
        return self.used[counter] < self.quota

    def answer(self, key: str, model: str, now: float) -> Reply:
        counter, reset = self._quota_key(key, model, now)
        headers: dict[str, str] = {}
        if self.used[counter] >= self.quota:
            self.throttled.append(now)
            if self.retry_after:
                headers["Retry-After"] = str(math.ceil(reset))
            return Reply(429, headers)
        self.used[counter] += 1
        if self.rate_limit_headers:  # a fixed window: no limit header (that means refill)
            headers["x-ratelimit-remaining-requests"] = str(self.quota - self.used[counter])
            headers["x-ratelimit-reset-requests"] = f"{reset:.3f}s"
        return Reply(200, headers)


@dataclass(frozen=True)
class Strategy:
    name: str
    enabled: bool = True
    read_rate_limit_headers: bool = True
    learn: str = "off"
    affinity: bool = False
    order: str = "configured"  # wave 1 and 2 dispatched fill-first; wave 3 spreads


LEGACY = Strategy("legacy provider-wide rests", enabled=False)
REACTIVE = Strategy("per-model reactive (wave 1)", read_rate_limit_headers=False)
HEADERS = Strategy("+ rate-limit headers")
LEARNED = Strategy("+ learned windows", learn="apply")
AFFINITY = Strategy("+ affinity", learn="apply", affinity=True)
SPREAD = Strategy("+ spread order, probes, budgets (wave 3)", learn="apply", order="spread")
STRATEGIES = (LEGACY, REACTIVE, HEADERS, LEARNED, AFFINITY, SPREAD)


@dataclass(frozen=True)
class Request:
    at: float
    model: str
    conversation: str


def steady(models: list[str], interval: float, duration: float) -> Iterator[Request]:
    """One request every `interval` seconds, models in turn, 40 conversations in turn."""
    for index in range(int(duration / interval)):
        yield Request(index * interval, models[index % len(models)], f"c{index % 40}")


def bursty(models: list[str], burst: int, every: float, duration: float) -> Iterator[Request]:
    """`burst` requests at once every `every` seconds."""
    for wave in range(int(duration / every)):
        for index in range(burst):
            yield Request(wave * every, models[index % len(models)], f"c{index % 40}")


@dataclass
class Result:
    served: int = 0
    provider_429s: int = 0
    client_429s: int = 0
    idle_key_seconds: float = 0.0
    first_key_share: float = 0.0  # of a conversation's served requests, by its first key
    provider_429_times: list[float] = field(default_factory=list)
    served_times: list[float] = field(default_factory=list)


def _configure(strategy: Strategy, keys: list[str]) -> None:
    for name in [name for name in os.environ if name.startswith(KEYS_ENV)]:
        del os.environ[name]
    os.environ[KEYS_ENV] = keys[0]
    for number, key in enumerate(keys[1:], start=1):
        os.environ[f"{KEYS_ENV}_{number}"] = key
    os.environ["MODEL_COOLDOWN_ENABLED"] = "true" if strategy.enabled else "false"
    os.environ["MODEL_COOLDOWN_LEARN"] = strategy.learn
    CredentialPool.register(PROVIDER, KEYS_ENV)
    CredentialPool.reset()
    model_cooldown.reset()
    window_learner.reset()


def simulate(
    strategy: Strategy,
    provider: Provider,
    requests: list[Request],
    *,
    keys: list[str],
    models: list[str],
    duration: float,
    tick: float = 1.0,
) -> Result:
    """Run the requests in time order; every `tick`, count keys idle while quota is left."""
    _configure(strategy, keys)
    result = Result()
    first_key: dict[str, str] = {}
    by_first_key: Counter[str] = Counter()
    served_by: Counter[str] = Counter()
    upcoming = iter(sorted(requests, key=lambda request: request.at))
    pending = next(upcoming, None)
    clock = 0.0
    while clock < duration:
        while pending is not None and pending.at <= clock:
            _serve(strategy, provider, pending, result, first_key, by_first_key, served_by)
            pending = next(upcoming, None)
        result.idle_key_seconds += tick * _idle_keys(strategy, provider, keys, models, clock)
        clock += tick
    result.provider_429s = len(provider.throttled)
    result.provider_429_times = list(provider.throttled)
    served = sum(served_by.values())
    result.first_key_share = sum(by_first_key.values()) / served if served else 0.0
    return result


def _serve(
    strategy: Strategy,
    provider: Provider,
    request: Request,
    result: Result,
    first_key: dict[str, str],
    by_first_key: Counter[str],
    served_by: Counter[str],
) -> None:
    used: list[str] = []

    def send(key: str) -> Reply:
        used.append(key)
        reply = provider.answer(key, request.model, request.at)
        if not strategy.read_rate_limit_headers:
            reply.headers = {k: v for k, v in reply.headers.items() if not k.startswith("x-")}
        return reply

    try:
        reply = CredentialPool.dispatch(
            PROVIDER,
            send,
            model=request.model,
            affinity=request.conversation if strategy.affinity else None,
            now=request.at,
            order=strategy.order,  # type: ignore[arg-type]
        )
    except ModelCooldownExhausted:
        result.client_429s += 1
        return
    if reply is None or reply.status_code != 200:
        result.client_429s += 1
        return
    result.served += 1
    result.served_times.append(request.at)
    key = used[-1]
    first_key.setdefault(request.conversation, key)
    served_by[request.conversation] += 1
    if first_key[request.conversation] == key:
        by_first_key[request.conversation] += 1


def _idle_keys(
    strategy: Strategy, provider: Provider, keys: list[str], models: list[str], now: float
) -> int:
    """Keys the gateway would not use although the provider would serve them."""
    idle = 0
    for model in models:
        free = set(CredentialPool.available(PROVIDER, keys, model=model, now=now))
        idle += sum(1 for key in keys if key not in free and provider.has_quota(key, model, now))
    return idle


def per_window(times: list[float], start: float, end: float, window: float) -> float:
    """Events per window between `start` and `end`."""
    return sum(1 for time in times if start <= time < end) / ((end - start) / window)


# -- scenarios ---------------------------------------------------------------------------------


def headers_scenario(strategy: Strategy, *, traffic: str = "steady", hours: float = 1.0) -> Result:
    """3 keys, 2 models with separate quotas (10 per key and model per minute), full advice."""
    keys, models = ["k1", "k2", "k3"], ["model-a", "model-b"]
    duration = hours * HOUR
    if traffic == "steady":
        requests = list(steady(models, 1.0, duration))  # 30 per model per minute: at capacity
    else:
        requests = list(bursty(models, 40, 60.0, duration))  # 20 per model at once per minute
    provider = Provider(window=60.0, quota=10)
    return simulate(strategy, provider, requests, keys=keys, models=models, duration=duration)


def uneven_scenario(strategy: Strategy, *, hours: float = 1.0) -> Result:
    """Separate quotas per model; model-a wants three times its quota, model-b exactly its own."""
    keys, models = ["k1", "k2", "k3"], ["model-a", "model-b"]
    duration = hours * HOUR
    requests = [
        *(Request(at, "model-a", f"a{index % 40}") for index, at in _times(1 / 1.5, duration)),
        *(Request(at, "model-b", f"b{index % 40}") for index, at in _times(2.0, duration)),
    ]
    provider = Provider(window=60.0, quota=10)
    return simulate(strategy, provider, requests, keys=keys, models=models, duration=duration)


def _times(interval: float, duration: float) -> Iterator[tuple[int, float]]:
    return ((index, index * interval) for index in range(int(duration / interval)))


def no_advice_scenario(
    strategy: Strategy, *, hours: float = 6.0, window_after: float | None = None
) -> tuple[Result, Provider]:
    """1 key, quota 5 per 300 s window, a request every second, no headers, no Retry-After."""
    duration = hours * HOUR
    provider = Provider(
        window=300.0,
        quota=5,
        rate_limit_headers=False,
        retry_after=False,
        window_after=window_after,
        change_at=duration / 2 if window_after else math.inf,
    )
    requests = list(steady(["model-a"], 1.0, duration))
    result = simulate(
        strategy, provider, requests, keys=["k1"], models=["model-a"], duration=duration
    )
    return result, provider


def affinity_scenario(strategy: Strategy, *, hours: float = 1.0) -> Result:
    """4 keys, one model, 40 conversations; keys cool and return as their quotas run out."""
    keys, models = ["k1", "k2", "k3", "k4"], ["model-a"]
    duration = hours * HOUR
    requests = list(steady(models, 0.5, duration))  # 120 per minute against 4 x 25
    provider = Provider(window=60.0, quota=25)
    return simulate(strategy, provider, requests, keys=keys, models=models, duration=duration)


def table(title: str, rows: list[tuple[str, Result]], note: str = "") -> None:
    print(f"\n{title}")
    print(
        f"| strategy | served | provider 429s (wasted dispatches) | 429s to clients "
        f"| key-seconds idle with quota left |{' first-key share |' if note else ''}"
    )
    print(f"|---|---|---|---|---|{'---|' if note else ''}")
    for name, result in rows:
        extra = f" {result.first_key_share:.0%} |" if note else ""
        print(
            f"| {name} | {result.served} | {result.provider_429s} | {result.client_429s} "
            f"| {result.idle_key_seconds:.0f} |{extra}"
        )


def main() -> None:
    for traffic in ("steady", "bursty"):
        table(
            f"Advice sent (headers + Retry-After), {traffic} traffic, 3 keys x 2 models, 1 hour",
            [
                (strategy.name, headers_scenario(strategy, traffic=traffic))
                for strategy in STRATEGIES
            ],
        )
    table(
        "Separate quotas: model-a asks 3x its quota, model-b exactly its own (3 keys, 1 hour)",
        [(strategy.name, uneven_scenario(strategy)) for strategy in STRATEGIES],
    )
    rows = []
    learned_figures = {}
    for strategy in (LEGACY, REACTIVE, LEARNED):
        result, _ = no_advice_scenario(strategy)
        rows.append((strategy.name, result))
        learned_figures[strategy.name] = (
            per_window(result.provider_429_times, HOUR, 6 * HOUR, 300.0),
            per_window(result.served_times, HOUR, 6 * HOUR, 300.0) / 5,
        )
    table("No advice at all, 1 key, quota 5 per 300 s, 1 request/s, 6 hours", rows)
    for name, (throttles, served_share) in learned_figures.items():
        print(
            f"  {name}: after the first hour {throttles:.2f} provider 429s per window, "
            f"{served_share:.0%} of what the window allows served"
        )
    result, _ = no_advice_scenario(LEARNED, window_after=600.0)
    print("\nWindow grows from 300 s to 600 s at 3 h (learned windows): provider 429s per window")
    change = 3 * HOUR
    for number in range(8):
        start = change + number * 600.0
        count = sum(1 for time in result.provider_429_times if start <= time < start + 600.0)
        print(f"  window {number + 1} after the change: {count}")
    table(
        "Prompt-cache affinity: 4 keys, 1 model, 40 conversations, 2 requests/s, 1 hour",
        [(strategy.name, affinity_scenario(strategy)) for strategy in (LEARNED, AFFINITY)],
        note="share",
    )


if __name__ == "__main__":
    main()

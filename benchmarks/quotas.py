"""Quotas beyond the minute: a provider with per-minute and per-day limits, and credit.

Run by hand: `python benchmarks/quotas.py [--seconds 240] [--load 1.2] [--strategies ...]`.
A loopback OpenAI-compatible provider limits each of its 4 keys to 20 requests a minute and
30 a "day", both rolling, the day shortened to 120 s so a run stays short (the library's
day is shortened to match: its `day_zone="rolling"` day becomes 120 s in this process). A
429 carries `Retry-After` until the window has room, as Gemini's and Groq's do. One key has
no credit until half-way through the run: it answers 402 until then, and OpenRouter's
`GET /api/v1/key` on the same server says `limit_remaining` 0, then 10 once topped up.
Strategies: this library as a gateway runs it today (`dispatch`, a 402 read as a spent quota
by `advice=`), this library with the limits declared and `usage=openrouter(...)`
(`MODEL_COOLDOWN_USAGE_SECONDS=10`), and LiteLLM's router (`rpm` per deployment, its
usage-based routing; it has no per-day limit nor usage reader) when `litellm` is installed.
32 client threads, open loop, one process (`--gunicorn`: the library's strategies as 4
gunicorn gthread workers sharing Redis, `MODEL_COOLDOWN_TEST_REDIS_URL`). Prints per
strategy: served / offered, the provider's 429s (those of the day limit, of the minute
limit), 402s, and how long after the top-up the topped-up key served again.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import requests
from flask import Flask, Response, request
from fleet import gunicorn_gateway, open_loop, serve_upstream

from cooldown import CredentialPool, ModelCooldownExhausted, QuotaSpent, model_cooldown
from cooldown.store import declared
from cooldown.usage import openrouter

PROVIDER = "bench-quotas"
MODEL = "model-q"
KEYS = [f"sk-bench-quota-{n}" for n in range(1, 5)]
OUT_OF_CREDIT = KEYS[-1]
PER_MINUTE, PER_DAY, DAY_SECONDS = 20, 30, 120
CLIENTS = 32
LATENCY = 0.2
STRATEGIES = ("library", "library + limits + usage", "litellm router")
LIMITS = {"requests": {"minute": PER_MINUTE, "day": PER_DAY}}
GATEWAY = [""]  # the gunicorn gateway's base URL, with --gunicorn
COMPLETION = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
)


class QuotaProvider:
    """Rolling minute and day limits per key; one key without credit until `topped_up`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.served: dict[str, deque[float]] = {key: deque() for key in KEYS}
        self.topped_up = float("inf")
        self.day_throttles = self.minute_throttles = self.payment_required = 0
        self.back_after: float | None = None  # the topped-up key's first serve, after the top-up

    def answer(self, key: str) -> tuple[int, dict[str, str], str]:
        now = time.monotonic()
        with self.lock:
            if key not in self.served:
                return 401, {}, "{}"
            if key == OUT_OF_CREDIT and now < self.topped_up:
                self.payment_required += 1
                return 402, {}, json.dumps({"error": {"message": "Insufficient credits"}})
            served = self.served[key]
            while served and served[0] <= now - DAY_SECONDS:
                served.popleft()
            in_minute = [at for at in served if at > now - 60]
            if len(served) >= PER_DAY:
                self.day_throttles += 1
                return 429, {"Retry-After": str(int(served[0] + DAY_SECONDS - now) + 1)}, "{}"
            if len(in_minute) >= PER_MINUTE:
                self.minute_throttles += 1
                return 429, {"Retry-After": str(int(in_minute[0] + 60 - now) + 1)}, "{}"
            served.append(now)
            if key == OUT_OF_CREDIT and self.back_after is None:
                self.back_after = now - self.topped_up
        return 200, {}, COMPLETION

    def usage(self, key: str) -> dict[str, Any]:
        """OpenRouter's `GET /api/v1/key` data for the key."""
        spent = key == OUT_OF_CREDIT and time.monotonic() < self.topped_up
        return {"limit": 10, "limit_remaining": 0 if spent else 10, "limit_reset": None}


def serve(provider: QuotaProvider) -> tuple[str, Callable[[], None]]:
    app = Flask("bench-quota-provider")

    @app.post("/v1/chat/completions")
    def chat() -> Response:
        key = request.headers.get("Authorization", "").removeprefix("Bearer ")
        status, headers, body = provider.answer(key)
        time.sleep(LATENCY)
        return Response(body, status=status, headers=headers, mimetype="application/json")

    @app.get("/api/v1/key")
    def key_usage() -> Response:
        key = request.headers.get("Authorization", "").removeprefix("Bearer ")
        body = json.dumps({"data": provider.usage(key)})
        return Response(body, mimetype="application/json")

    return serve_upstream(app)


def register_library(strategy: str, base: str) -> None:
    """The pool as the strategy runs it: with the limits declared and a usage reader, or
    as a gateway runs it today."""
    declared.UNIT_SECONDS["day"] = DAY_SECONDS  # type: ignore[index]  # the shortened day
    model_cooldown.reset()
    CredentialPool.reset()
    if strategy == "library":
        CredentialPool.register(PROVIDER, keys=KEYS)
    else:
        CredentialPool.register(
            PROVIDER,
            keys=KEYS,
            limits=LIMITS,
            day_zone="rolling",
            usage=openrouter(base_url=f"{base}/api/v1"),
        )


def _spent(answer: Any) -> QuotaSpent | None:
    return QuotaSpent() if answer.status_code == 402 else None


def dispatch_one(base: str, session: requests.Session) -> int:
    """One gateway request through the library: its status for the client."""

    def send(key: str) -> requests.Response:
        return session.post(
            f"{base}/v1/chat/completions",
            json={"model": MODEL},
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
        )

    try:
        answer = CredentialPool.dispatch(PROVIDER, send, model=MODEL, advice=_spent)
    except ModelCooldownExhausted:
        return 429
    return 429 if answer is None else answer.status_code


def library(strategy: str, base: str, gunicorn: bool) -> Callable[[int, requests.Session], int]:
    """A gateway dispatching through the library: in this process, or 4 gunicorn workers
    sharing Redis (then the client posts to them)."""
    if not gunicorn:
        register_library(strategy, base)
        return lambda index, session: dispatch_one(base, session)
    return lambda index, session: (
        session.post(f"{GATEWAY[0]}/v1/chat/completions", json={}, timeout=60).status_code
    )


def litellm_router(base: str) -> Callable[[int, requests.Session], int]:
    """LiteLLM's router over the same keys, each a deployment with its `rpm`."""
    from litellm import Router

    router = Router(
        model_list=[
            {
                "model_name": MODEL,
                "litellm_params": {
                    "model": f"openai/{MODEL}",
                    "api_key": key,
                    "api_base": f"{base}/v1",
                    "rpm": PER_MINUTE,
                },
            }
            for key in KEYS
        ],
        routing_strategy="usage-based-routing-v2",
        num_retries=len(KEYS),
    )

    def request_one(index: int, session: requests.Session) -> int:
        try:
            router.completion(model=MODEL, messages=[{"role": "user", "content": "hi"}])
        except Exception as error:  # LiteLLM raises its own classes; the status is what counts
            return int(getattr(error, "status_code", 500) or 500)
        return 200

    return request_one


def run(strategy: str, args: argparse.Namespace) -> dict[str, float]:
    provider = QuotaProvider()
    base, stop = serve(provider)
    try:
        rate = len(KEYS) * PER_DAY / DAY_SECONDS * args.load
        total = int(rate * args.seconds)
        with contextlib.ExitStack() as stack:
            if strategy == "litellm router":
                request_one = litellm_router(base)
            else:
                if args.gunicorn:
                    env = {"BENCH_UPSTREAM_URL": base, "BENCH_STRATEGY": strategy}
                    GATEWAY[0] = stack.enter_context(gunicorn_gateway("quotas_gateway:app", env))
                request_one = library(strategy, base, args.gunicorn)
            start = time.monotonic()
            provider.topped_up = start + args.seconds / 2
            answered = open_loop(total, rate, CLIENTS, request_one)
    finally:
        CredentialPool.reset()
        stop()
    return {
        "offered": total,
        "served": sum(1 for status, _ in answered if status == 200),
        "day 429s": provider.day_throttles,
        "minute 429s": provider.minute_throttles,
        "402s": provider.payment_required,
        "back after s": -1.0 if provider.back_after is None else provider.back_after,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=240.0, help="offered traffic per run")
    parser.add_argument("--load", type=float, default=1.2, help="offered load / capacity")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--gunicorn", action="store_true", help="4 workers sharing Redis")
    args = parser.parse_args()
    os.environ["MODEL_COOLDOWN_ENABLED"] = "true"
    os.environ["MODEL_COOLDOWN_USAGE_SECONDS"] = "10"
    print(
        f"4 keys, {PER_MINUTE}/minute and {PER_DAY}/day each (a {DAY_SECONDS} s day), one key"
        f" out of credit until half-way, {args.load}x load, {args.seconds:.0f} s per run,"
        f" {CLIENTS} client threads, "
        + ("4 gunicorn gthread workers sharing Redis" if args.gunicorn else "one process")
    )
    print(
        "| strategy | served / offered | provider 429s: day limit | minute limit | 402s"
        " | topped-up key serving again after |"
    )
    print("|---|---|---|---|---|---|")
    for strategy in args.strategies.split(","):
        figures = run(strategy, args)
        back = figures["back after s"]
        print(
            f"| {strategy} | {figures['served']:.0f} / {figures['offered']:.0f} | "
            f"{figures['day 429s']:.0f} | {figures['minute 429s']:.0f} | {figures['402s']:.0f} | "
            + ("never" if back < 0 else f"{back:.1f} s")
            + " |",
            flush=True,
        )


if __name__ == "__main__":
    main()

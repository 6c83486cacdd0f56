"""The gateway `benchmarks/concurrency.py --gunicorn` runs under gunicorn: one route that sends
each request upstream with the strategy in `BENCH_STRATEGY`, sharing state through the Redis
in `MODEL_COOLDOWN_REDIS_URL`. Not for use on its own."""

from __future__ import annotations

import itertools
import os

import redis  # noqa: F401  # imported now, so the first request does not pay for it
from concurrency import KEYS, PROVIDER, one_request  # benchmarks/concurrency.py
from flask import Flask, Response, request
from fleet import thread_session  # benchmarks/fleet.py

from cooldown import CredentialPool

UPSTREAM = os.environ["BENCH_UPSTREAM_URL"]
STRATEGY = os.environ["BENCH_STRATEGY"]

os.environ["BENCH_CONCURRENCY_KEY"] = KEYS[0]
for index, key in enumerate(KEYS[1:], start=1):
    os.environ[f"BENCH_CONCURRENCY_KEY_{index}"] = key
CredentialPool.register(PROVIDER, "BENCH_CONCURRENCY_KEY")

app = Flask(__name__)
_counter = itertools.count()


@app.post("/v1/chat/completions")
def chat() -> Response:
    model = (request.get_json(silent=True) or {}).get("model", "")
    status = one_request(STRATEGY, UPSTREAM, model, thread_session(), _counter)
    return Response("{}", status=status, mimetype="application/json")

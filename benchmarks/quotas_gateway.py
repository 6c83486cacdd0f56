"""The gateway `benchmarks/quotas.py --gunicorn` runs under gunicorn: one route that sends each
request upstream through the library with the strategy in `BENCH_STRATEGY`, sharing state
through the Redis in `MODEL_COOLDOWN_REDIS_URL`. Not for use on its own."""

from __future__ import annotations

import os

import redis  # noqa: F401  # imported now, so the first request does not pay for it
from flask import Flask, Response
from fleet import thread_session  # benchmarks/fleet.py
from quotas import dispatch_one, register_library  # benchmarks/quotas.py

UPSTREAM = os.environ["BENCH_UPSTREAM_URL"]
os.environ["MODEL_COOLDOWN_USAGE_SECONDS"] = "10"
register_library(os.environ["BENCH_STRATEGY"], UPSTREAM)
app = Flask(__name__)


@app.post("/v1/chat/completions")
def chat() -> Response:
    status = dispatch_one(UPSTREAM, thread_session())
    return Response("{}", status=status, mimetype="application/json")

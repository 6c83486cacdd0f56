"""The gateway `benchmarks/providers.py --gunicorn` runs under gunicorn: one route that sends
each request upstream with the strategy in `BENCH_STRATEGY`, sharing state through the Redis
in `MODEL_COOLDOWN_REDIS_URL`. Not for use on its own."""

from __future__ import annotations

import os

import redis  # noqa: F401  # imported now, so the first request does not pay for it
import requests
from flask import Flask, Response, request
from fleet import thread_session  # benchmarks/fleet.py
from providers import gateway, register  # benchmarks/providers.py

UPSTREAM = os.environ["BENCH_UPSTREAM_URL"]
STRATEGY = os.environ["BENCH_STRATEGY"]

register(STRATEGY)
app = Flask(__name__)


@app.post("/v1/chat/completions")
def chat() -> Response:
    session = thread_session()
    body = request.get_json(silent=True) or {}
    model, tokens = str(body["model"]), int(body["tokens"])

    def send(key: str) -> requests.Response:
        return session.post(
            UPSTREAM, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )

    status = gateway(STRATEGY, model, tokens, send, int(body["turn"]))
    return Response("{}", status=status, mimetype="application/json")

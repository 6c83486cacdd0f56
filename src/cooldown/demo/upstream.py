"""A simulated OpenAI-compatible upstream with per-key, per-model quotas.

It stands in for a provider: the demo gateway calls it in-process by default, and
`python -m cooldown.demo.upstream` serves it over HTTP for loopback tests. Being the
provider, it sees raw keys; it never runs inside the gateway's cooldown state.
"""

from __future__ import annotations

import argparse
import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flask import Flask, Response, request

from .serving import serve

__all__ = ["SimulatedUpstream", "UpstreamReply", "create_upstream_app", "main"]


@dataclass(frozen=True)
class UpstreamReply:
    """One upstream answer; `status` is `None` when the request never got one."""

    status: int | None
    headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] = field(default_factory=dict)
    transport_failure: str | None = None


@dataclass
class SimulatedUpstream:
    """Each key may call each model `quota` times per sliding `window` seconds."""

    quota: int = 3
    window: float = 20.0
    revoked: frozenset[str] = frozenset()
    clock: Callable[[], float] = time.monotonic
    _calls: dict[tuple[str, str], list[float]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def answer(self, key: str, model: str) -> UpstreamReply:
        if key in self.revoked:
            return UpstreamReply(401, body={"error": {"message": "Invalid API key."}})
        now = self.clock()
        with self._lock:
            recent = [t for t in self._calls.get((key, model), []) if t > now - self.window]
            if len(recent) >= self.quota:
                self._calls[(key, model)] = recent
                oldest = recent[0] if recent else now  # a quota of 0 throttles every call
                wait = max(1, math.ceil(oldest + self.window - now))
                return UpstreamReply(
                    429,
                    headers={"Retry-After": str(wait)},
                    body={"error": {"message": "Rate limit reached for this model."}},
                )
            self._calls[(key, model)] = [*recent, now]
        return UpstreamReply(
            200,
            body={
                "object": "chat.completion",
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "Hello from the simulator."},
                        "finish_reason": "stop",
                    }
                ],
            },
        )


def create_upstream_app(upstream: SimulatedUpstream, log_path: str | None = None) -> Flask:
    """Serve `upstream` at `POST /v1/chat/completions`; optionally log every dispatch."""
    app = Flask(__name__)
    log_lock = threading.Lock()

    @app.post("/v1/chat/completions")
    def chat_completions() -> Response:
        authorization = request.headers.get("Authorization", "")
        key = authorization.removeprefix("Bearer ").strip()
        body = request.get_json(silent=True)
        model = body.get("model") if isinstance(body, dict) else None
        arrived = time.time()
        reply = upstream.answer(key, model if isinstance(model, str) else "")
        if log_path is not None:
            entry = {
                "key": key,
                "model": model,
                "time": arrived,
                "status": reply.status,
                "retry_after": reply.headers.get("Retry-After"),
            }
            with log_lock, open(log_path, "a", encoding="utf-8") as log:
                log.write(json.dumps(entry) + "\n")
        return Response(
            json.dumps(reply.body),
            status=reply.status or 502,
            headers=reply.headers,
            mimetype="application/json",
        )

    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m cooldown.demo.upstream",
        description="Serve a simulated OpenAI-compatible upstream with per-key quotas.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (loopback)")
    parser.add_argument("--port", type=int, default=8090, help="port to bind; 0 picks one")
    parser.add_argument("--quota", type=int, default=3, help="requests per key and model")
    parser.add_argument("--window", type=float, default=20.0, help="quota window in seconds")
    parser.add_argument(
        "--revoke", action="append", default=[], metavar="KEY", help="answer 401 for KEY"
    )
    parser.add_argument("--log", metavar="FILE", help="append one JSON line per dispatch")
    args = parser.parse_args(argv)
    upstream = SimulatedUpstream(args.quota, args.window, frozenset(args.revoke))
    serve(create_upstream_app(upstream, args.log), args.host, args.port, [])


if __name__ == "__main__":
    main()

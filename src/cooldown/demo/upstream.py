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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from flask import Flask, Response, request

from .serving import serve

__all__ = [
    "SimulatedUpstream",
    "UpstreamReply",
    "UpstreamUnreachable",
    "create_upstream_app",
    "main",
]


JSON = {"Content-Type": "application/json"}


class UpstreamUnreachable(ConnectionError):
    """The request never got an answer (refused, timed out or cut off)."""


@dataclass(frozen=True)
class UpstreamReply:
    """One simulated answer, shaped like an HTTP client's response: `dispatch` reads its
    status and headers, `relay` streams its body.

    `chunks` is set for a streamed answer: server-sent event lines, read only by the client.
    """

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] = field(default_factory=dict)
    chunks: Iterator[bytes] | None = None

    def iter_bytes(self) -> Iterator[bytes]:
        """The body as an HTTP client streams it, so `cooldown.relay` passes it on."""
        if self.chunks is not None:
            yield from self.chunks
        else:
            yield json.dumps(self.body).encode()


@dataclass
class SimulatedUpstream:
    """Each key may call each model `quota` times per sliding `window` seconds."""

    quota: int = 3
    window: float = 20.0
    revoked: frozenset[str] = frozenset()
    clock: Callable[[], float] = time.monotonic
    rate_limit_headers: bool = False  # announce the window as OpenAI does
    _calls: dict[tuple[str, str], list[float]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def answer(self, key: str, model: str, *, stream: bool = False) -> UpstreamReply:
        if key in self.revoked:
            return UpstreamReply(401, dict(JSON), body={"error": {"message": "Invalid API key."}})
        now = self.clock()
        with self._lock:
            recent = [t for t in self._calls.get((key, model), []) if t > now - self.window]
            oldest = recent[0] if recent else now  # a quota of 0 throttles every call
            wait = max(1, math.ceil(oldest + self.window - now))
            if len(recent) >= self.quota:
                self._calls[(key, model)] = recent
                return UpstreamReply(
                    429,
                    headers={**JSON, "Retry-After": str(wait)},
                    body={"error": {"message": "Rate limit reached for this model."}},
                )
            self._calls[(key, model)] = [*recent, now]
            remaining = self.quota - len(recent) - 1
        headers = {}
        if self.rate_limit_headers:
            headers = {  # a window, not a refilling bucket: no limit header
                "x-ratelimit-remaining-requests": str(remaining),
                "x-ratelimit-reset-requests": f"{wait}s",
            }
        if stream:
            return UpstreamReply(
                200, {**headers, "Content-Type": "text/event-stream"}, chunks=_events(model)
            )
        return UpstreamReply(
            200,
            headers={**JSON, **headers},
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


def _events(model: str) -> Iterator[bytes]:
    """A streamed completion as OpenAI sends it: one server-sent event per token, then DONE."""
    for word in ("Hello", " from", " the", " simulator."):
        chunk = {
            "object": "chat.completion.chunk",
            "model": model,
            "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}],
        }
        yield f"data: {json.dumps(chunk)}\n\n".encode()
    yield b"data: [DONE]\n\n"


def create_upstream_app(
    upstream: SimulatedUpstream, log_path: str | None = None, *, delay: float = 0.0
) -> Flask:
    """Serve `upstream` at `POST /v1/chat/completions`; optionally log every dispatch.

    `delay` seconds of latency per answer make concurrency visible (requests in flight).
    """
    app = Flask(__name__)
    log_lock = threading.Lock()

    @app.post("/v1/chat/completions")
    def chat_completions() -> Response:
        authorization = request.headers.get("Authorization", "")
        key = authorization.removeprefix("Bearer ").strip()
        body = request.get_json(silent=True)
        model = body.get("model") if isinstance(body, dict) else None
        stream = isinstance(body, dict) and body.get("stream") is True
        arrived = time.time()
        time.sleep(delay)
        reply = upstream.answer(key, model if isinstance(model, str) else "", stream=stream)
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
        return Response(reply.iter_bytes(), status=reply.status, headers=reply.headers)

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
    parser.add_argument(
        "--rate-limit-headers", action="store_true", help="announce the window as OpenAI does"
    )
    parser.add_argument("--delay", type=float, default=0.0, help="seconds of latency per answer")
    args = parser.parse_args(argv)
    upstream = SimulatedUpstream(
        args.quota, args.window, frozenset(args.revoke), rate_limit_headers=args.rate_limit_headers
    )
    app = create_upstream_app(upstream, args.log, delay=args.delay)
    serve(app, args.host, args.port, [])


if __name__ == "__main__":
    main()

"""The demo gateway: an OpenAI-style route that rotates keys with `CredentialPool.dispatch`.

Read `chat_completions` top to bottom: it is the integration the README describes (resolve
the model, let `dispatch` select, send, record and rotate, pass the answer through).
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from flask import Flask, Response, request

from ..errors import APIError
from ..pools import CredentialPool
from ..web import init_app, status_blueprint
from .upstream import SimulatedUpstream, UpstreamReply, UpstreamUnreachable

__all__ = ["KEY_INDEX_HEADER", "PROVIDER", "DemoConfig", "Dispatch", "create_app", "http_dispatch"]

PROVIDER = "demo"
KEYS_ENV = "COOLDOWN_DEMO_API_KEY"
KEY_INDEX_HEADER = "X-Upstream-Key-Index"

Dispatch = Callable[[str, str, Mapping[str, Any]], UpstreamReply]
"""(key, model, request body) -> the upstream's reply; raises `UpstreamUnreachable`."""


@dataclass(frozen=True)
class DemoConfig:
    dispatch: Dispatch
    keys_env: str = KEYS_ENV
    cors_origins: frozenset[str] = frozenset()
    quota_buckets: Mapping[str, str | Mapping[str, str]] = field(default_factory=dict)
    error_format: str = "openai"
    status_token: str | None = None


def simulated_dispatch(upstream: SimulatedUpstream) -> Dispatch:
    return lambda key, model, body: upstream.answer(key, model, stream=body.get("stream") is True)


def http_dispatch(base_url: str, *, timeout: float = 30.0) -> Dispatch:
    """POST to `<base_url>/chat/completions` of a real OpenAI-compatible upstream."""
    endpoint = base_url.rstrip("/") + "/chat/completions"

    def dispatch(key: str, model: str, body: Mapping[str, Any]) -> UpstreamReply:
        upstream_request = urllib.request.Request(
            endpoint,
            data=json.dumps(dict(body)).encode(),
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
            method="POST",
        )
        try:
            answer = urllib.request.urlopen(upstream_request, timeout=timeout)
        except urllib.error.HTTPError as failure:
            with failure:
                return UpstreamReply(failure.code, dict(failure.headers), _json(failure.read()))
        except (OSError, http.client.HTTPException) as failure:
            raise UpstreamUnreachable(type(failure).__name__) from failure
        headers = dict(answer.headers)
        if headers.get("Content-Type", "").startswith("text/event-stream"):
            return UpstreamReply(answer.status, headers, chunks=_lines(answer))
        with answer:
            return UpstreamReply(answer.status, headers, _json(answer.read()))

    return dispatch


def _lines(answer: http.client.HTTPResponse) -> Iterator[bytes]:
    """Relay a streamed body line by line, as the upstream sends it."""
    with answer:
        yield from iter(answer.readline, b"")


def _json(raw: bytes) -> dict[str, Any]:
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {"error": {"message": "The upstream answered with a body that is not JSON."}}
    return parsed if isinstance(parsed, dict) else {"data": parsed}


def _passthrough(reply: UpstreamReply) -> Response:
    if reply.chunks is not None:  # recorded on the status line; the body streams on
        return Response(reply.chunks, status=reply.status, mimetype="text/event-stream")
    response = Response(json.dumps(reply.body), status=reply.status, mimetype="application/json")
    if "Retry-After" in reply.headers:
        response.headers["Retry-After"] = reply.headers["Retry-After"]
    return response


def _affinity(body: Mapping[str, Any]) -> str | None:
    """OpenAI's `prompt_cache_key` (or `user`): requests that share a prompt prefix."""
    for name in ("prompt_cache_key", "user"):
        value = body.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def create_app(config: DemoConfig) -> Flask:
    app = Flask(__name__)
    app.config["MODEL_COOLDOWN_QUOTA_BUCKETS"] = config.quota_buckets
    if config.status_token:
        app.config["MODEL_COOLDOWN_STATUS_TOKEN"] = config.status_token
    CredentialPool.register(PROVIDER, config.keys_env)
    init_app(app, error_format=config.error_format)
    app.register_blueprint(status_blueprint())

    @app.post("/v1/chat/completions")
    def chat_completions() -> Response:
        body = request.get_json(silent=True)
        if (
            not isinstance(body, dict)
            or not isinstance(body.get("model"), str)
            or not body["model"]
        ):
            raise APIError("The JSON body needs a model.", 400, {"error": "invalid_request"})
        model = body["model"]
        used: list[str] = []

        def send(key: str) -> UpstreamReply:
            used.append(key)
            return config.dispatch(key, model, body)

        try:
            # Raises ModelCooldownExhausted (429) when every key cools for this model.
            reply = CredentialPool.dispatch(PROVIDER, send, model=model, affinity=_affinity(body))
        except UpstreamUnreachable:
            raise APIError(
                "The upstream could not be reached.", 502, {"error": "upstream_unreachable"}
            ) from None
        if reply is None:
            raise APIError("No upstream key is configured.", 503, {"error": "no_upstream_key"})
        response = _passthrough(reply)
        # The position of the key that answered (never the key), so rotation shows in curl.
        response.headers[KEY_INDEX_HEADER] = str(CredentialPool.keys(PROVIDER).index(used[-1]) + 1)
        return response

    @app.after_request
    def allow_configured_origins(response: Response) -> Response:
        origin = request.headers.get("Origin")
        if origin and (origin in config.cors_origins or "*" in config.cors_origins):
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Allow-Methods"] = "GET, POST, OPTIONS"
            response.headers["Access-Control-Allow-Headers"] = "Content-Type, Authorization"
            response.headers["Access-Control-Expose-Headers"] = KEY_INDEX_HEADER
            response.vary.add("Origin")
        return response

    return app

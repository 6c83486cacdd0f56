"""The demo gateway: an OpenAI-style route that rotates keys with `CredentialPool.dispatch`.

Read `chat_completions` top to bottom: it is the integration the README describes (resolve
the model, let `dispatch` select, send, record and rotate, pass the answer through).
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from flask import Flask, Response, request

from ..errors import APIError
from ..pools import CredentialPool
from ..web import init_app, relay, status_blueprint
from .upstream import SimulatedUpstream, UpstreamUnreachable

__all__ = ["KEY_INDEX_HEADER", "PROVIDER", "DemoConfig", "Dispatch", "create_app", "http_dispatch"]

PROVIDER = "demo"
KEYS_ENV = "COOLDOWN_DEMO_API_KEY"
KEY_INDEX_HEADER = "X-Upstream-Key-Index"

Dispatch = Callable[[str, str, Mapping[str, Any]], Any]
"""(key, model, request body) -> an upstream response `relay` can stream (an `UpstreamReply`
from the simulator, an `http.client` response from a real upstream); raises
`UpstreamUnreachable`."""


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

    def dispatch(key: str, model: str, body: Mapping[str, Any]) -> Any:
        upstream_request = urllib.request.Request(
            endpoint,
            data=json.dumps(dict(body)).encode(),
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
            method="POST",
        )
        try:
            return urllib.request.urlopen(upstream_request, timeout=timeout)
        except urllib.error.HTTPError as failure:
            return failure  # a 4xx or 5xx answer: status, headers and a body to relay
        except (OSError, http.client.HTTPException) as failure:
            raise UpstreamUnreachable(type(failure).__name__) from failure

    return dispatch


def _request_body() -> dict[str, Any] | None:
    """The JSON object the client sent, or `None` for anything else (even 5000 `[`)."""
    try:
        body = request.get_json(silent=True)
    except RecursionError:  # nesting deeper than the JSON parser goes
        return None
    return body if isinstance(body, dict) else None


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
        body = _request_body()
        if body is None or not isinstance(body.get("model"), str) or not body["model"]:
            raise APIError("The JSON body needs a model.", 400, {"error": "invalid_request"})
        model = body["model"]
        used: list[str] = []

        def send(key: str) -> Any:
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
        response = relay(reply)
        # The position of the key that answered (never the key), so rotation shows in curl;
        # left out when that key was rotated away from the environment meanwhile.
        keys = CredentialPool.keys(PROVIDER)
        if used[-1] in keys:
            response.headers[KEY_INDEX_HEADER] = str(keys.index(used[-1]) + 1)
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

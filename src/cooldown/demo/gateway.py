"""The demo gateway: an OpenAI-style route that rotates keys with `CredentialPool`.

Read `chat_completions` top to bottom: it is the integration pattern the README describes
(resolve the model, select, dispatch, record, rotate only on a definite key rejection).
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from flask import Flask, Response, jsonify, request

from ..advice import recording_context, selection_scope
from ..errors import APIError
from ..headers import header_value
from ..outcome import classify_upstream_outcome
from ..pools import CredentialPool
from ..store import model_cooldown
from ..web import init_app
from .upstream import SimulatedUpstream, UpstreamReply

__all__ = ["PROVIDER", "DemoConfig", "Dispatch", "create_app", "http_dispatch"]

PROVIDER = "demo"
KEYS_ENV = "COOLDOWN_DEMO_API_KEY"

Dispatch = Callable[[str, str, Mapping[str, Any]], UpstreamReply]
"""(key, model, request body) -> the upstream's reply."""


@dataclass(frozen=True)
class DemoConfig:
    dispatch: Dispatch
    keys_env: str = KEYS_ENV
    cors_origins: frozenset[str] = frozenset()
    quota_buckets: Mapping[str, str | Mapping[str, str]] = field(default_factory=dict)


def simulated_dispatch(upstream: SimulatedUpstream) -> Dispatch:
    return lambda key, model, body: upstream.answer(key, model)


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
            with urllib.request.urlopen(upstream_request, timeout=timeout) as answer:
                return UpstreamReply(answer.status, dict(answer.headers), _json(answer.read()))
        except urllib.error.HTTPError as failure:
            return UpstreamReply(failure.code, dict(failure.headers), _json(failure.read()))
        except TimeoutError:
            return UpstreamReply(None, transport_failure="timeout")
        except urllib.error.URLError as failure:
            timed_out = isinstance(failure.reason, TimeoutError)
            return UpstreamReply(None, transport_failure="timeout" if timed_out else "connect")
        except (ConnectionError, http.client.HTTPException):
            return UpstreamReply(None, transport_failure="interrupted")

    return dispatch


def _json(raw: bytes) -> dict[str, Any]:
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {"error": {"message": "The upstream answered with a body that is not JSON."}}
    return parsed if isinstance(parsed, dict) else {"data": parsed}


def _definite_key_rejection(reply: UpstreamReply) -> bool:
    """Only a rejected or throttled key is worth another key; anything else is final."""
    if reply.status is None:
        return False
    return classify_upstream_outcome(reply.status).credential_health in ("rejected", "throttled")


def _passthrough(reply: UpstreamReply) -> Response:
    if reply.status is None:
        raise APIError("The upstream could not be reached.", 502, {"error": "upstream_unreachable"})
    response = Response(json.dumps(reply.body), status=reply.status, mimetype="application/json")
    retry_after = header_value(reply.headers, "Retry-After")
    if isinstance(retry_after, str):
        response.headers["Retry-After"] = retry_after
    return response


def create_app(config: DemoConfig) -> Flask:
    app = Flask(__name__)
    CredentialPool.register(PROVIDER, config.keys_env)
    init_app(app)

    @app.post("/v1/chat/completions")
    def chat_completions() -> Response:
        body = request.get_json(silent=True)
        model = body.get("model") if isinstance(body, dict) else None
        if not isinstance(body, dict) or not isinstance(model, str) or not model:
            raise APIError("The JSON body needs a model.", 400, {"error": "invalid_request"})
        scope = selection_scope(PROVIDER, model, quota_buckets=config.quota_buckets)
        tried: set[str] = set()
        reply = UpstreamReply(None)
        while True:
            # Raises ModelCooldownExhausted (429) when every key cools for this model.
            key = CredentialPool.select(PROVIDER, **scope)
            if key is None:
                raise APIError("No upstream key is configured.", 503, {"error": "no_upstream_key"})
            if key in tried:  # the legacy fallback hands back a key that already failed
                return _passthrough(reply)
            tried.add(key)
            reply = config.dispatch(key, model, body)
            if reply.status is not None:
                evidence = recording_context(reply.status, reply.headers)
                CredentialPool.record(PROVIDER, key, reply.status, **scope, **evidence)
            if not _definite_key_rejection(reply):
                return _passthrough(reply)

    @app.get("/cooldown/status")
    def cooldown_status() -> Response:
        return jsonify(model_cooldown.stats())

    @app.after_request
    def allow_configured_origins(response: Response) -> Response:
        origin = request.headers.get("Origin")
        if origin and (origin in config.cors_origins or "*" in config.cors_origins):
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Allow-Methods"] = "GET, POST, OPTIONS"
            response.headers["Access-Control-Allow-Headers"] = "Content-Type, Authorization"
            response.vary.add("Origin")
        return response

    return app

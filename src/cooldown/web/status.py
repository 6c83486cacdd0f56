"""The operator status surface: JSON, Prometheus metrics and one page, behind a bearer token."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from importlib import resources
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request

from ..config import STATUS_TOKEN_ENV, warn_once
from ..pools import CredentialPool
from ..store import model_cooldown

__all__ = ["MIN_TOKEN_LENGTH", "overview", "status_blueprint", "status_token"]

MIN_TOKEN_LENGTH = 32
METRICS_MISSING = (
    "Prometheus metrics need the prometheus_client package: pip install 'model-cooldown[metrics]'\n"
)
GAUGES = ("live_observations", "capacity", "overflow_active", "shared", "shared_degraded")
_PAGE = resources.files(__package__).joinpath("page.html").read_text(encoding="utf-8")


def _inline_hash(tag: str) -> str:
    """The CSP source for the page's one inline `<tag>` block, so nothing else may run."""
    body = _PAGE.split(f"<{tag}>", 1)[1].split(f"</{tag}>", 1)[0]
    digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
    return f"'sha256-{digest}'"


PAGE_POLICY = (
    "default-src 'none'; "
    f"script-src {_inline_hash('script')}; "
    f"style-src {_inline_hash('style')}; "
    "connect-src 'self'; img-src 'none'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)


def status_token() -> str | None:
    """`app.config` first, then the environment; shorter than 32 characters is no token."""
    token = current_app.config.get(STATUS_TOKEN_ENV) or os.environ.get(STATUS_TOKEN_ENV)
    if not token:
        return None
    if not isinstance(token, str) or len(token) < MIN_TOKEN_LENGTH:
        warn_once(STATUS_TOKEN_ENV, "%s is malformed (32 characters at least); status is off")
        return None
    return token


def overview() -> dict[str, Any]:
    """The store's counters, and ready/cooling counts per provider for unscoped selection."""
    providers = {}
    for provider in CredentialPool.providers():
        status = CredentialPool.status(provider)
        providers[provider] = {"ready": status["ready"], "cooling": status["cooling"]}
    return {**model_cooldown.stats(), "providers": providers}


def _authorized(token: str) -> bool:
    scheme, _, offered = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        offered.strip().encode("utf-8", "surrogatepass"), token.encode("utf-8", "surrogatepass")
    )


def _metrics() -> Response:
    try:
        from prometheus_client import CollectorRegistry, generate_latest
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        from prometheus_client.exposition import CONTENT_TYPE_LATEST
    except ImportError:
        return Response(METRICS_MISSING, status=501, mimetype="text/plain")
    summary = overview()

    class Collector:
        def collect(self) -> Any:
            for name in GAUGES:
                yield GaugeMetricFamily(
                    f"model_cooldown_{name}", name.replace("_", " "), value=float(summary[name])
                )
            for name, value in summary.items():
                if name.endswith("_total"):
                    yield CounterMetricFamily(
                        f"model_cooldown_{name.removesuffix('_total')}",
                        name.replace("_", " "),
                        value=value,
                    )
            keys = GaugeMetricFamily(
                "model_cooldown_keys",
                "configured keys by provider and state",
                labels=["provider", "state"],
            )
            for provider, counts in summary["providers"].items():
                for state in ("ready", "cooling"):
                    keys.add_metric([provider, state], counts[state])
            yield keys

    registry = CollectorRegistry()
    registry.register(Collector())
    return Response(generate_latest(registry), mimetype=CONTENT_TYPE_LATEST)


def status_blueprint(*, url_prefix: str = "/cooldown") -> Blueprint:
    """`GET <prefix>/` (page), `/status`, `/status/<provider>` and `/metrics`.

    Every data endpoint needs `Authorization: Bearer <MODEL_COOLDOWN_STATUS_TOKEN>`; with no
    token configured every endpoint answers 404, so the surface does not exist at all.
    """
    blueprint = Blueprint("cooldown_status", __name__, url_prefix=url_prefix)

    @blueprint.before_request
    def require_token() -> Response | None:
        token = status_token()
        if token is None:
            return _error(404, "not_found", "Not found.")
        if request.endpoint == f"{blueprint.name}.page" or _authorized(token):
            return None
        response = _error(401, "unauthorized", "A valid bearer token is required.")
        response.headers["WWW-Authenticate"] = 'Bearer realm="model-cooldown"'
        return response

    @blueprint.after_request
    def never_cache(response: Response) -> Response:
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    @blueprint.get("/")
    def page() -> Response:
        response = Response(_PAGE, mimetype="text/html")
        response.headers["Content-Security-Policy"] = PAGE_POLICY
        response.headers["Referrer-Policy"] = "no-referrer"
        return response

    @blueprint.get("/status")
    def summary() -> Response:
        return jsonify(overview())

    @blueprint.get("/status/<provider>")
    def provider_status(provider: str) -> Response:
        if not CredentialPool.pooled(provider):
            return _error(404, "unknown_provider", "No such provider is registered.")
        model = request.args.get("model") or None
        bucket = request.args.get("quota_bucket") or None
        return jsonify(CredentialPool.status(provider, model=model, quota_bucket=bucket))

    blueprint.add_url_rule("/metrics", "metrics", _metrics)
    return blueprint


def _error(status: int, code: str, message: str) -> Response:
    response = jsonify({"error": code, "message": message})
    response.status_code = status
    return response

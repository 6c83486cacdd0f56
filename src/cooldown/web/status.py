"""The operator status surface: JSON, Prometheus metrics and one page, behind a bearer token."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from collections.abc import Callable
from importlib import resources
from typing import Any, TypeGuard

from flask import Blueprint, Flask, Response, current_app, request

from ..config import STATUS_TOKEN_ENV, warn_once
from ..pools.actions import KEY_ACTIONS
from .metrics import metrics_response
from .summary import Pools, app_pools, checked_pools, matrix, overview

__all__ = ["MIN_TOKEN_LENGTH", "check_token", "status_blueprint", "status_token"]

MIN_TOKEN_LENGTH = 32
_EVERY_METHOD = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
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


def _configured_token(app: Any) -> object:
    return app.config.get(STATUS_TOKEN_ENV) or os.environ.get(STATUS_TOKEN_ENV)


def _long_enough(token: object) -> TypeGuard[str]:
    """32 characters at least, all ASCII: a header arrives as latin-1, so a token with other
    characters could never match."""
    return isinstance(token, str) and len(token) >= MIN_TOKEN_LENGTH and token.isascii()


def check_token(app: Any) -> None:
    """A configured token shorter than 32 characters (or not ASCII) is a startup error, not
    a silent 404."""
    token = _configured_token(app)
    if token and not _long_enough(token):
        raise ValueError(
            f"{STATUS_TOKEN_ENV} must be at least {MIN_TOKEN_LENGTH} characters, all ASCII"
        )


def status_token() -> str | None:
    """`app.config` first, then the environment; shorter than 32 characters is no token."""
    token = _configured_token(current_app)
    if not token:
        return None
    if not _long_enough(token):  # changed since startup
        warn_once(STATUS_TOKEN_ENV, "%s is malformed (32 ASCII characters at least); status is off")
        return None
    return token


def _authorized(token: str) -> bool:
    scheme, _, offered = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        offered.strip().encode("utf-8", "surrogatepass"), token.encode("utf-8", "surrogatepass")
    )


def _lookup() -> tuple[str | None, str | None, bool]:
    """(model, quota bucket, all) from a POST's JSON body, or a GET's query string.

    The page POSTs, so model and bucket names never appear in access logs.
    """
    if request.method == "POST":
        try:
            body = request.get_json(silent=True)
        except RecursionError:  # nested deeper than the parser goes: not a lookup
            body = None
        values: dict[str, Any] = body if isinstance(body, dict) else {}
    else:
        values = dict(request.args)
    model, bucket = values.get("model"), values.get("quota_bucket")
    everything = values.get("all") in (True, "1", "true")
    return (
        model if isinstance(model, str) and model else None,
        bucket if isinstance(bucket, str) and bucket else None,
        everything,
    )


def flask_only(app: object) -> Flask:
    if not isinstance(app, Flask):
        raise TypeError(
            "status_blueprint() is for Flask apps only; on Quart, init_app gives the error "
            "handlers and the status surface is not served"
        )
    return app


def status_blueprint(*, url_prefix: str = "/cooldown", pools: object = None) -> Blueprint:
    """`GET <prefix>/` (page), `/status`, `/status/<provider>` (GET or POST) and `/metrics`.

    `pools` is the pool object shown (a `CredentialPool()` of your own, or the class);
    `None` shows the one `init_app(app, pools=...)` named, else the default object.

    Every data endpoint needs `Authorization: Bearer <MODEL_COOLDOWN_STATUS_TOKEN>`; with no
    token configured every method and path under the prefix answers 404, so the surface does
    not exist at all. A configured token shorter than 32 characters is a `ValueError` when
    the blueprint is registered.
    """
    if not isinstance(url_prefix, str) or not url_prefix.startswith("/"):
        raise TypeError("url_prefix must be a str starting with '/'")
    chosen = None if pools is None else checked_pools(pools)
    blueprint = Blueprint("cooldown_status", __name__, url_prefix=url_prefix)
    blueprint.record_once(lambda state: check_token(flask_only(state.app)))
    prefixes: set[str] = set()
    blueprint.record(lambda state: prefixes.add((state.url_prefix or "").rstrip("/")))

    @blueprint.before_app_request
    def unrouted_under_the_prefix() -> Response | None:
        """A method or path routing refused under the prefix (TRACE, PROPFIND, `//status`):
        404, never 405 or a redirect, with or without a token; the app's own routes pass."""
        if request.routing_exception is None or not any(
            request.path == prefix or request.path.startswith(prefix + "/") for prefix in prefixes
        ):
            return None
        return never_cache(_error(404, "not_found", "Not found."))

    def route(rule: str, methods: list[str]) -> Callable[[Callable[..., Any]], Any]:
        return blueprint.route(rule, methods=methods, provide_automatic_options=False)

    @blueprint.before_request
    def require_token() -> Response | None:
        token = status_token()
        if token is None:
            return _error(404, "not_found", "Not found.")
        if current_app.view_functions.get(request.endpoint or "") is page or _authorized(token):
            return None
        response = _error(401, "unauthorized", "A valid bearer token is required.")
        response.headers["WWW-Authenticate"] = 'Bearer realm="model-cooldown"'
        return response

    @blueprint.after_request
    def never_cache(response: Response) -> Response:
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    @route("/", ["GET"])
    def page() -> Response:
        response = Response(_PAGE, mimetype="text/html")
        response.headers["Content-Security-Policy"] = PAGE_POLICY
        response.headers["Referrer-Policy"] = "no-referrer"
        return response

    def shown() -> Pools:
        return app_pools() if chosen is None else chosen

    @route("/status", ["GET"])
    def summary() -> Response:
        return _json(overview(shown()))

    @route("/status/<provider>", ["GET", "POST"])
    def provider_status(provider: str) -> Response:
        pool = shown()
        if not pool.pooled(provider):
            return _error(404, "unknown_provider", "No such provider is registered.")
        model, bucket, everything = _lookup()
        if everything:
            return _json(matrix(pool, provider))
        return _json(pool.status(provider, model=model, quota_bucket=bucket))

    @route("/keys/<provider>/<label>/<action>", ["POST"])
    def key_action(provider: str, label: str, action: str) -> Response:
        """An operator's drain, undrain or clear of one key, named by its status label."""
        pool = shown()
        offered = _OFFERED.get(action)
        if offered is None or not pool.pooled(provider):
            return _error(404, "not_found", "Not found.")
        scope = _action_scope() if offered.scoped else {}
        if scope is None:
            return _error(400, "bad_request", "model and quota_bucket must be strings.")
        try:
            row = getattr(pool, action)(provider, label, **scope)
        except KeyError:
            return _error(404, "unknown_key", "No key of this provider has that label.")
        return _json(row)

    @route("/metrics", ["GET"])
    def metrics() -> Response:
        return metrics_response(shown())

    @route("", _EVERY_METHOD)
    @route("/", [method for method in _EVERY_METHOD if method not in ("GET", "HEAD")])
    @route("/<path:anything>", _EVERY_METHOD)
    def elsewhere(anything: str = "") -> Response:
        """Any other method or path under the prefix: no 405, no redirect, nothing shown."""
        return _error(404, "not_found", "Not found.")

    return blueprint


_OFFERED = {action.name: action for action in KEY_ACTIONS}


def _action_scope() -> dict[str, str] | None:
    """A scoped action's optional JSON `{"model": ..., "quota_bucket": ...}` (a clear's);
    `None` when malformed
    (a junk scope must never widen into a clear of every scope)."""
    try:
        body = request.get_json(silent=True) if request.get_data() else {}
    except RecursionError:
        body = None
    if not isinstance(body, dict):
        return None
    scope = {name: body[name] for name in ("model", "quota_bucket") if body.get(name) is not None}
    if not all(isinstance(value, str) and value for value in scope.values()):
        return None
    return scope


def _json(value: object, status: int = 200) -> Response:
    """JSON in the order the fields were written (clients' first), as the CLI prints it too:
    an app's JSON provider may sort keys."""
    return Response(json.dumps(value), status=status, mimetype="application/json")


def _error(status: int, code: str, message: str) -> Response:
    return _json({"error": code, "message": message}, status)

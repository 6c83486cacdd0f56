"""Flask glue: error handlers, cross-origin exposure, the operator status surface and CLI."""

from __future__ import annotations

import logging
import sys
from typing import Any

from flask import Flask, current_app, has_app_context

from ..config import (
    ENABLED_ENV,
    apply_app_config,
    enabled_unset,
    read_app_settings_with,
    settings,
    warn_once,
)
from ..errors import APIError, ModelCooldownCapacity, ModelCooldownExhausted
from ..evidence.advice import QUOTA_BUCKETS_CONFIG, checked_quota_buckets
from ..pools.accounts import apply_app_accounts
from ..pools.limits import apply_app_limits
from .cli import cooldown_cli
from .errors import (
    FORMAT_EXTENSION,
    api_error_response,
    cooldown_error_response,
    expose_when_present,
    flask_upstream_handler,
)
from .errors import error_format as _error_format
from .metrics import publish_when_multiprocess
from .quart_app import quart_handlers
from .relay import arelay, relay
from .status import status_blueprint
from .summary import POOLS_EXTENSION, checked_pools
from .upstream import upstream_error_classes

UNSET_AT_INIT_APP = (
    "model cooldown is off because %s is unset: every pool keeps the legacy provider-wide "
    "behaviour; set it to true (environment or app.config) to turn cooldowns on"
)

__all__ = [
    "api_error_response",
    "arelay",
    "cooldown_error_response",
    "init_app",
    "relay",
    "status_blueprint",
]


def _flask_app_setting(name: str) -> object:
    """A setting of the Flask app handling this request (none outside an app context)."""
    return current_app.config.get(name) if has_app_context() else None


read_app_settings_with(_flask_app_setting)


def init_app(
    app: Any,
    *,
    error_format: str | None = None,
    upstream_errors: bool = False,
    pools: object = None,
) -> None:
    """Register the handlers, the CORS exposure and `flask cooldown`; a second call changes nothing.

    Reads the process settings (`MODEL_COOLDOWN_ENABLED`, `MAX_SECONDS`, `LEARN`, ...,
    `REDIS_*`) from `app.config`, where they override the environment. `error_format` is
    `"cooldown"` (the default), `"openai"` or `"anthropic"`; `None` reads
    `app.config["MODEL_COOLDOWN_ERROR_FORMAT"]`. An `APIError` handler the app already has
    is kept. `Access-Control-Allow-Origin` is left to the app's CORS layer, so this
    composes with Flask-CORS or a hand-written one. A Quart app gets the same handlers,
    answering with Quart responses; a Starlette or FastAPI app gets them as exception
    handlers (its settings come from the environment; call this before the app serves).
    The status blueprint and the CLI are Flask's only.

    `pools` is the pool object the app's status surface, CLI and metrics show (a
    `CredentialPool()` of your own, or the class); `None` is the default object.

    `upstream_errors=True` also answers an upstream's error that reaches the view (the
    SDKs' `APIStatusError`, `httpx.HTTPStatusError`, `requests.HTTPError`): 502 for an
    upstream 5xx, the upstream's status for a 4xx, a generic message in the chosen format
    and `Cache-Control: no-store`; nothing of the upstream's body or headers.
    """
    if not isinstance(upstream_errors, bool):
        raise TypeError("upstream_errors must be a bool")
    chosen_pools = checked_pools(pools)
    if _is_starlette(app):
        from .starlette import install_handlers

        chosen = _error_format(app, error_format)
        _say_when_off()
        install_handlers(app, chosen, upstream_errors=upstream_errors)
        return
    flask_app = isinstance(app, Flask)
    if not flask_app and not all(
        hasattr(app, name) for name in ("register_error_handler", "after_request", "config")
    ):
        raise TypeError("init_app needs a Flask or Quart app, or a Starlette or FastAPI one")
    chosen = _error_format(app, error_format)
    apply_app_config(app.config)
    apply_app_accounts(app.config)
    apply_app_limits(app.config)
    checked_quota_buckets(app.config.get(QUOTA_BUCKETS_CONFIG))  # malformed: said now, once
    _say_when_off()
    if "cooldown" in app.extensions:
        return
    app.extensions[FORMAT_EXTENSION] = chosen
    if flask_app:
        handlers = (cooldown_error_response, api_error_response, flask_upstream_handler)
    else:
        handlers = quart_handlers(chosen)
    cooldown_handler, api_handler, upstream_handler = handlers
    app.register_error_handler(ModelCooldownExhausted, cooldown_handler)
    app.register_error_handler(ModelCooldownCapacity, cooldown_handler)
    if APIError not in app.error_handler_spec.get(None, {}).get(None, {}):
        app.register_error_handler(APIError, api_handler)
    if upstream_errors:
        for error_class in upstream_error_classes():
            app.register_error_handler(error_class, upstream_handler)
    # Flask (and Quart) run after-request hooks last-registered first; going first in the
    # list makes this one run last, so it merges with whatever a CORS layer set before it.
    app.after_request_funcs.setdefault(None, []).insert(0, expose_when_present)
    if flask_app:
        app.cli.add_command(cooldown_cli)
    app.extensions["cooldown"] = chosen_pools.store
    app.extensions[POOLS_EXTENSION] = chosen_pools
    publish_when_multiprocess(
        chosen_pools
    )  # with PROMETHEUS_MULTIPROC_DIR set: every worker is scraped


def _is_starlette(app: object) -> bool:
    """A Starlette application (FastAPI's included), asked only when Starlette is imported."""
    if "starlette" not in sys.modules:
        return False
    from .starlette import is_starlette_app

    return is_starlette_app(app)


def _say_when_off() -> None:
    """Off is the default: an unset flag warns (a copied snippet silently takes the legacy
    path otherwise); an explicit false is a choice, said at INFO."""
    if settings().enabled:
        return
    if enabled_unset():
        warn_once(ENABLED_ENV, UNSET_AT_INIT_APP)
    else:
        warn_once(
            ENABLED_ENV,
            "model cooldown is off (%s is not true): pools keep the legacy provider-wide behaviour",
            level=logging.INFO,
        )

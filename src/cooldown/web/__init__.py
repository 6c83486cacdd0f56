"""Flask glue: error handlers, cross-origin exposure, the operator status surface and CLI."""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask

from ..config import apply_app_config, settings, warn_once
from ..errors import APIError, ModelCooldownCapacity, ModelCooldownExhausted
from ..pools.accounts import apply_app_accounts
from ..store import model_cooldown
from .cli import cooldown_cli
from .errors import (
    FORMAT_EXTENSION,
    api_error_response,
    cooldown_error_response,
    expose_when_present,
)
from .errors import error_format as _error_format
from .metrics import publish_when_multiprocess
from .quart_app import quart_handlers
from .relay import arelay, relay
from .status import status_blueprint

__all__ = [
    "api_error_response",
    "arelay",
    "cooldown_error_response",
    "init_app",
    "relay",
    "status_blueprint",
]


def init_app(app: Any, *, error_format: str | None = None) -> None:
    """Register the handlers, the CORS exposure and `flask cooldown`; a second call changes nothing.

    Reads the process settings (`MODEL_COOLDOWN_ENABLED`, `MAX_SECONDS`, `LEARN`, ...,
    `REDIS_*`) from `app.config`, where they override the environment. `error_format` is
    `"cooldown"` (the default) or `"openai"`; `None` reads
    `app.config["MODEL_COOLDOWN_ERROR_FORMAT"]`. An `APIError` handler the app already has
    is kept. `Access-Control-Allow-Origin` is left to the app's CORS layer, so this
    composes with Flask-CORS or a hand-written one. A Quart app gets the same handlers,
    answering with Quart responses; the status blueprint and the CLI are Flask's only.
    """
    flask_app = isinstance(app, Flask)
    if not flask_app and not all(
        hasattr(app, name) for name in ("register_error_handler", "after_request", "config")
    ):
        raise TypeError("init_app needs a Flask or Quart app")
    chosen = _error_format(app, error_format)
    apply_app_config(app.config)
    apply_app_accounts(app.config)
    if not settings().enabled:
        warn_once(
            "MODEL_COOLDOWN_ENABLED",
            "model cooldown is off (%s is not true): pools keep the legacy provider-wide behaviour",
            level=logging.INFO,
        )
    if "cooldown" in app.extensions:
        return
    app.extensions[FORMAT_EXTENSION] = chosen
    if flask_app:
        cooldown_handler, api_handler = cooldown_error_response, api_error_response
    else:
        cooldown_handler, api_handler = quart_handlers(chosen)
    app.register_error_handler(ModelCooldownExhausted, cooldown_handler)
    app.register_error_handler(ModelCooldownCapacity, cooldown_handler)
    if APIError not in app.error_handler_spec.get(None, {}).get(None, {}):
        app.register_error_handler(APIError, api_handler)
    # Flask (and Quart) run after-request hooks last-registered first; going first in the
    # list makes this one run last, so it merges with whatever a CORS layer set before it.
    app.after_request_funcs.setdefault(None, []).insert(0, expose_when_present)
    if flask_app:
        app.cli.add_command(cooldown_cli)
    app.extensions["cooldown"] = model_cooldown
    publish_when_multiprocess()  # with PROMETHEUS_MULTIPROC_DIR set: every worker is scraped

"""Flask glue: error handlers, cross-origin exposure, the operator status surface and CLI."""

from __future__ import annotations

from flask import Flask

from ..errors import APIError, ModelCooldownCapacity, ModelCooldownExhausted
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


def init_app(app: Flask, *, error_format: str | None = None) -> None:
    """Register the handlers, the CORS exposure and `flask cooldown`; a second call changes nothing.

    `error_format` is `"cooldown"` (the default) or `"openai"`; `None` reads
    `app.config["MODEL_COOLDOWN_ERROR_FORMAT"]`. An `APIError` handler the app already has
    is kept. `Access-Control-Allow-Origin` is left to the app's CORS layer, so this
    composes with Flask-CORS or a hand-written one.
    """
    if not isinstance(app, Flask):
        raise TypeError("init_app needs a Flask app")
    chosen = _error_format(app, error_format)
    if "cooldown" in app.extensions:
        return
    app.extensions[FORMAT_EXTENSION] = chosen
    app.register_error_handler(ModelCooldownExhausted, cooldown_error_response)
    app.register_error_handler(ModelCooldownCapacity, cooldown_error_response)
    if APIError not in app.error_handler_spec.get(None, {}).get(None, {}):
        app.register_error_handler(APIError, api_error_response)
    # Flask runs after-request hooks last-registered first; going first in the list makes
    # this one run last, so it merges with whatever a CORS layer set before it.
    app.after_request_funcs.setdefault(None, []).insert(0, expose_when_present)
    app.cli.add_command(cooldown_cli)
    app.extensions["cooldown"] = model_cooldown
    publish_when_multiprocess()  # with PROMETHEUS_MULTIPROC_DIR set: every worker is scraped

"""Flask glue: cooldown errors become real 429/503 responses a browser can read."""

from __future__ import annotations

import json
from typing import Literal, TypeAlias

from flask import Flask, Response, current_app, has_app_context

from .errors import APIError, CooldownError, ModelCooldownCapacity, ModelCooldownExhausted
from .store import model_cooldown

__all__ = ["api_error_response", "cooldown_error_response", "init_app"]

EXPOSE_HEADER = "Access-Control-Expose-Headers"
GENERIC_SERVER_ERROR = "The server could not complete the request."
ERROR_FORMAT_CONFIG = "MODEL_COOLDOWN_ERROR_FORMAT"
_FORMAT_EXTENSION = "cooldown.error_format"

ErrorFormat: TypeAlias = Literal["cooldown", "openai"]
ERROR_FORMATS: tuple[ErrorFormat, ...] = ("cooldown", "openai")


def _json_response(body: dict[str, object], status: int) -> Response:
    """Built without `jsonify`, so it works outside an application context."""
    return Response(json.dumps(body), status=status, mimetype="application/json")


def expose_retry_after(response: Response) -> Response:
    """Merge every `Access-Control-Expose-Headers` field into one, plus `Retry-After`.

    Flask-CORS adds a field of its own next to any the app set: every name already exposed
    is kept, once (case-insensitively).
    """
    names: dict[str, str] = {}
    for field in response.headers.getlist(EXPOSE_HEADER):
        for name in field.split(","):
            if name.strip():
                names.setdefault(name.strip().lower(), name.strip())
    names.setdefault("retry-after", "Retry-After")
    response.headers[EXPOSE_HEADER] = ", ".join(names.values())
    return response


def api_error_response(error: APIError) -> Response:
    """The generic handler: JSON body, no `Retry-After`, no internals in 5xx messages."""
    body = error.to_dict()
    if error.status_code >= 500 and not isinstance(error, CooldownError):
        body["message"] = GENERIC_SERVER_ERROR
    return _json_response(body, error.status_code)


def error_body(error: CooldownError, error_format: ErrorFormat) -> dict[str, object]:
    """The seed's flat body, or the nested one OpenAI-compatible clients parse."""
    if error_format == "cooldown":
        return error.to_dict()
    return {
        "error": {
            "message": error.message,
            "type": error.code,
            "code": error.code,
            "param": None,
            "retry_after": error.retry_after,
        }
    }


def cooldown_error_response(error: CooldownError) -> Response:
    """429 or 503 with the bounded `Retry-After` the error was raised with.

    The body has the format `init_app` chose for the current app (`"cooldown"` outside one),
    so registering this on a blueprint keeps the app's format.
    """
    error_format: ErrorFormat = "cooldown"
    if has_app_context():
        error_format = current_app.extensions.get(_FORMAT_EXTENSION, "cooldown")
    response = _json_response(error_body(error, error_format), error.status_code)
    response.headers["Retry-After"] = str(max(1, error.retry_after))
    return expose_retry_after(response)


def _expose_when_present(response: Response) -> Response:
    if "Retry-After" in response.headers:
        expose_retry_after(response)
    return response


def _error_format(app: Flask, error_format: str | None) -> ErrorFormat:
    chosen = (
        app.config.get(ERROR_FORMAT_CONFIG, "cooldown") if error_format is None else error_format
    )
    for known in ERROR_FORMATS:
        if chosen == known:
            return known
    raise ValueError(f"error_format must be one of {ERROR_FORMATS}")


def init_app(app: Flask, *, error_format: str | None = None) -> None:
    """Register the handlers and the CORS exposure; calling it twice changes nothing.

    `error_format` is `"cooldown"` (the default) or `"openai"`; `None` reads
    `app.config["MODEL_COOLDOWN_ERROR_FORMAT"]`. An `APIError` handler the app already has
    is kept. `Access-Control-Allow-Origin` is left to the app's CORS layer, so this
    composes with Flask-CORS or a hand-written one.
    """
    chosen = _error_format(app, error_format)
    if "cooldown" in app.extensions:
        return
    app.extensions[_FORMAT_EXTENSION] = chosen
    app.register_error_handler(ModelCooldownExhausted, cooldown_error_response)
    app.register_error_handler(ModelCooldownCapacity, cooldown_error_response)
    if APIError not in app.error_handler_spec.get(None, {}).get(None, {}):
        app.register_error_handler(APIError, api_error_response)
    # Flask runs after-request hooks last-registered first; going first in the list makes
    # this one run last, so it merges with whatever a CORS layer set before it.
    app.after_request_funcs.setdefault(None, []).insert(0, _expose_when_present)
    app.extensions["cooldown"] = model_cooldown

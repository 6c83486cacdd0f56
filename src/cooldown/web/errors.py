"""Cooldown errors as real 429/503 responses that browsers and OpenAI-compatible clients read."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from flask import Response, current_app, has_app_context

from ..errors import APIError, CooldownError
from .bodies import (
    ERROR_FORMATS,
    ErrorFormat,
    Reply,
    api_error_body,
    api_reply,
    cooldown_reply,
    error_body,
    upstream_reply,
)

__all__ = [
    "ERROR_FORMATS",
    "ErrorFormat",
    "api_error_body",
    "api_error_response",
    "cooldown_error_response",
    "error_body",
    "error_format",
    "expose_retry_after",
    "expose_when_present",
    "flask_upstream_handler",
]

EXPOSE_HEADER = "Access-Control-Expose-Headers"
ERROR_FORMAT_CONFIG = "MODEL_COOLDOWN_ERROR_FORMAT"
FORMAT_EXTENSION = "cooldown.error_format"

_R = TypeVar("_R", bound=Response)  # a Flask response, or a Quart one (same headers type)


def _json_response(reply: Reply) -> Response:
    """Built without `jsonify`, so it works outside an application context."""
    response = Response(json.dumps(reply.body), status=reply.status, mimetype="application/json")
    response.headers.update(reply.headers)
    return response


def expose_retry_after(response: _R) -> _R:
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
    return _json_response(api_reply(error))


def _app_format() -> ErrorFormat:
    if has_app_context():
        chosen: ErrorFormat = current_app.extensions.get(FORMAT_EXTENSION, "cooldown")
        return chosen
    return "cooldown"


def cooldown_error_response(error: CooldownError) -> Response:
    """429 or 503 with the bounded `Retry-After` the error was raised with, never cached.

    The body has the format `init_app` chose for the current app (`"cooldown"` outside one),
    so registering this on a blueprint keeps the app's format.
    """
    return expose_retry_after(_json_response(cooldown_reply(error, _app_format())))


def flask_upstream_handler(error: Exception) -> Response:
    """An upstream's error answer that reached the view, as a generic 502 or 4xx."""
    return _json_response(upstream_reply(error, _app_format()))


def expose_when_present(response: Response) -> Response:
    if "Retry-After" in response.headers:
        expose_retry_after(response)
    return response


def error_format(app: Any, chosen: str | None) -> ErrorFormat:
    """The format asked for, else the app's `MODEL_COOLDOWN_ERROR_FORMAT`, else `"cooldown"`."""
    if chosen is None:
        config = getattr(app, "config", None)
        chosen = config.get(ERROR_FORMAT_CONFIG, "cooldown") if config is not None else "cooldown"
    for known in ERROR_FORMATS:
        if chosen == known:
            return known
    raise ValueError(f"error_format must be one of {ERROR_FORMATS}")

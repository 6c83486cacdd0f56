"""Cooldown errors as real 429/503 responses that browsers and OpenAI-compatible clients read."""

from __future__ import annotations

import json
from typing import Any, Literal, TypeAlias, TypeVar

from flask import Response, current_app, has_app_context

from ..errors import APIError, CooldownError

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
]

EXPOSE_HEADER = "Access-Control-Expose-Headers"
GENERIC_SERVER_ERROR = "The server could not complete the request."
ERROR_FORMAT_CONFIG = "MODEL_COOLDOWN_ERROR_FORMAT"
FORMAT_EXTENSION = "cooldown.error_format"

ErrorFormat: TypeAlias = Literal["cooldown", "openai"]
_R = TypeVar("_R", bound=Response)  # a Flask response, or a Quart one (same headers type)
ERROR_FORMATS: tuple[ErrorFormat, ...] = ("cooldown", "openai")


def _json_response(body: dict[str, object], status: int) -> Response:
    """Built without `jsonify`, so it works outside an application context."""
    return Response(json.dumps(body), status=status, mimetype="application/json")


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


def api_error_body(error: APIError) -> dict[str, object]:
    """The generic body: no internals in 5xx messages."""
    if not isinstance(error, APIError):
        raise TypeError("api_error_response handles APIError instances")
    body = error.to_dict()
    if error.status_code >= 500 and not isinstance(error, CooldownError):
        body["message"] = GENERIC_SERVER_ERROR
    return body


def api_error_response(error: APIError) -> Response:
    """The generic handler: JSON body, no `Retry-After`, no internals in 5xx messages."""
    return _json_response(api_error_body(error), error.status_code)


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
    if not isinstance(error, CooldownError):
        raise TypeError("cooldown_error_response handles CooldownError instances")
    error_format: ErrorFormat = "cooldown"
    if has_app_context():
        error_format = current_app.extensions.get(FORMAT_EXTENSION, "cooldown")
    response = _json_response(error_body(error, error_format), error.status_code)
    response.headers["Retry-After"] = str(max(1, error.retry_after))
    return expose_retry_after(response)


def expose_when_present(response: Response) -> Response:
    if "Retry-After" in response.headers:
        expose_retry_after(response)
    return response


def error_format(app: Any, chosen: str | None) -> ErrorFormat:
    """The format asked for, else the app's `MODEL_COOLDOWN_ERROR_FORMAT`, else `"cooldown"`."""
    if chosen is None:
        chosen = app.config.get(ERROR_FORMAT_CONFIG, "cooldown")
    for known in ERROR_FORMATS:
        if chosen == known:
            return known
    raise ValueError(f"error_format must be one of {ERROR_FORMATS}")

"""The error handlers `init_app` gives a Quart app: the same 429/503 bodies, as Quart responses.

Imported only for an app that is not Flask's, so Quart stays an optional dependency.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..errors import APIError, CooldownError
from .errors import ErrorFormat, api_error_body, error_body, expose_retry_after

__all__ = ["quart_handlers"]


def quart_handlers(error_format: ErrorFormat) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(cooldown handler, `APIError` handler), answering with Quart responses."""
    import quart

    def respond(body: dict[str, object], status: int) -> Any:
        return quart.Response(json.dumps(body), status=status, mimetype="application/json")

    def cooldown_error(error: CooldownError) -> Any:
        response = respond(error_body(error, error_format), error.status_code)
        response.headers["Retry-After"] = str(max(1, error.retry_after))
        return expose_retry_after(response)

    def api_error(error: APIError) -> Any:
        return respond(api_error_body(error), error.status_code)

    return cooldown_error, api_error

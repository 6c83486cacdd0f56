"""The error handlers `init_app` gives a Quart app: the same bodies, as Quart responses.

Imported only for an app that is not Flask's, so Quart stays an optional dependency.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .bodies import ErrorFormat, Reply, error_replies
from .errors import expose_retry_after

__all__ = ["quart_handlers"]


def quart_handlers(
    error_format: ErrorFormat,
) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
    """(cooldown handler, `APIError` handler, upstream-error handler) with Quart responses."""
    import quart

    def respond(reply: Reply) -> Any:
        response: Any = quart.Response(
            json.dumps(reply.body), status=reply.status, mimetype="application/json"
        )
        response.headers.update(reply.headers)
        return expose_retry_after(response) if "Retry-After" in reply.headers else response

    return error_replies(error_format, respond)

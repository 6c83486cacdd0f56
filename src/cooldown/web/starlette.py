"""Starlette and FastAPI: the error handlers `init_app` installs, and `relay` as a stream.

Imported only for a Starlette application (FastAPI is one), so Starlette stays an optional
dependency (`pip install 'model-cooldown[starlette]'`). Settings come from the environment:
a Starlette app has no `app.config`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from starlette.applications import Starlette
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ..config import warn_once
from ..errors import APIError, CooldownError, ModelCooldownCapacity, ModelCooldownExhausted
from .bodies import ErrorFormat, Reply, error_replies
from .relay import RELAYED_HEADERS, answer_stream, starlette_stream
from .upstream import upstream_error_classes

__all__ = ["install_handlers", "is_starlette_app", "relay"]

INSTALLED = "cooldown_installed"
CORS_WARNING = (
    "%s: a CORSMiddleware exposes headers without Retry-After, so browsers cannot read the "
    "429's Retry-After: add it to expose_headers"
)

_Handler = Callable[[Request, Exception], Awaitable[Response]]


def is_starlette_app(app: object) -> bool:
    return isinstance(app, Starlette)


def _respond(reply: Reply) -> Response:
    headers = dict(reply.headers)
    if "Retry-After" in headers:  # kept unless a CORSMiddleware sets its own list
        headers["Access-Control-Expose-Headers"] = "Retry-After"
    return Response(
        json.dumps(reply.body), reply.status, headers=headers, media_type="application/json"
    )


def _hides_retry_after(app: Starlette) -> bool:
    """A CORSMiddleware with an exposed list replaces the answer's own; one without it
    leaves the answer's `Access-Control-Expose-Headers: Retry-After` in place."""
    for middleware in app.user_middleware:
        if getattr(middleware, "cls", None) is CORSMiddleware:
            exposed: Any = middleware.kwargs.get("expose_headers") or ()
            names = {str(name).strip().lower() for name in exposed}
            if names and "retry-after" not in names and "*" not in names:
                return True
    return False


def _warn_when_hidden(app: Starlette) -> None:
    if _hides_retry_after(app):
        warn_once("init_app", CORS_WARNING)


def install_handlers(app: Starlette, error_format: ErrorFormat, *, upstream_errors: bool) -> bool:
    """Add the exception handlers; `False` (and nothing added) when they are already there."""
    if getattr(app.state, INSTALLED, False):
        return False
    setattr(app.state, INSTALLED, True)
    cooldown, api, upstream = error_replies(error_format, _respond)

    def handler(answer: Callable[[Any], Response]) -> _Handler:
        async def handle(request: Request, error: Exception) -> Response:
            if isinstance(error, CooldownError):  # middleware added after init_app counts too
                _warn_when_hidden(request.app)
            return answer(error)

        return handle

    app.add_exception_handler(ModelCooldownExhausted, handler(cooldown))
    app.add_exception_handler(ModelCooldownCapacity, handler(cooldown))
    if APIError not in app.exception_handlers:
        app.add_exception_handler(APIError, handler(api))
    if upstream_errors:
        for error_class in upstream_error_classes():
            app.add_exception_handler(error_class, handler(upstream))
    _warn_when_hidden(app)
    return True


def relay(upstream: object, *, headers: Iterable[str] = RELAYED_HEADERS) -> StreamingResponse:
    """A `StreamingResponse` with the upstream's status, the named headers and its body,
    chunk by chunk (an httpx.AsyncClient or aiohttp response, or an SDK's async raw
    response); the upstream is closed when the stream ends or the client goes away."""
    response: StreamingResponse = starlette_stream(*answer_stream(upstream, headers))
    return response

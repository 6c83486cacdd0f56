"""Error answers in the shapes clients parse (ours, OpenAI's, Anthropic's), for any framework.

Each framework module only turns a `Reply` into its own response object, so Flask, Quart and
Starlette answer a cooldown, an `APIError` and an upstream failure with the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NamedTuple, TypeAlias, TypeVar

from ..errors import APIError, CooldownError, UpstreamError
from ..evidence.answers import answer_raised

__all__ = [
    "ERROR_FORMATS",
    "GENERIC_SERVER_ERROR",
    "ErrorFormat",
    "Reply",
    "api_error_body",
    "api_reply",
    "error_body",
    "error_replies",
    "upstream_reply",
]

GENERIC_SERVER_ERROR = "The server could not complete the request."
NO_STORE = {"Cache-Control": "no-store"}

ErrorFormat: TypeAlias = Literal["cooldown", "openai", "anthropic"]
ERROR_FORMATS: tuple[ErrorFormat, ...] = ("cooldown", "openai", "anthropic")

ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}
"""The `error.type` the `anthropic` SDK reads for each status; anything else is `api_error`."""


class Reply(NamedTuple):
    """A JSON error answer before any framework builds it."""

    body: dict[str, object]
    status: int
    headers: dict[str, str]


def api_error_body(error: APIError) -> dict[str, object]:
    """The generic body: no internals in 5xx messages (ours and upstream summaries excepted:
    their messages are fixed text of this package)."""
    if not isinstance(error, APIError):
        raise TypeError("api_error_response handles APIError instances")
    body = error.to_dict()
    if error.status_code >= 500 and not isinstance(error, (CooldownError, UpstreamError)):
        body["message"] = GENERIC_SERVER_ERROR
    return body


def error_body(error: APIError, error_format: ErrorFormat) -> dict[str, object]:
    """The seed's flat body, the nested one OpenAI-compatible clients parse, or Anthropic's."""
    flat = api_error_body(error)
    if error_format == "cooldown":
        return flat
    message = flat["message"]
    if error_format == "anthropic":
        kind = ANTHROPIC_ERROR_TYPES.get(error.status_code, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    code = getattr(error, "code", None) or "api_error"
    nested: dict[str, object] = {"message": message, "type": code, "code": code, "param": None}
    if isinstance(error, CooldownError):
        nested["retry_after"] = error.retry_after
    return {"error": nested}


def api_reply(error: APIError) -> Reply:
    """An `APIError`'s status and flat body, without `Retry-After`."""
    return Reply(api_error_body(error), error.status_code, {})


def cooldown_reply(error: CooldownError, error_format: ErrorFormat) -> Reply:
    """429 or 503 with the bounded `Retry-After` the error was raised with; never cached."""
    if not isinstance(error, CooldownError):
        raise TypeError("cooldown_error_response handles CooldownError instances")
    headers = {"Retry-After": str(max(1, error.retry_after)), **NO_STORE}
    return Reply(error_body(error, error_format), error.status_code, headers)


UPSTREAM_FAILED = "The upstream provider failed to answer this request."
UPSTREAM_REFUSED = "The upstream provider refused this request."


def upstream_summary(error: BaseException) -> UpstreamError:
    """502 for an upstream 5xx (or an answer without a status), the upstream's own status
    for a 4xx; the message is ours, never the upstream's (it may quote the key)."""
    answer = answer_raised(error) if isinstance(error, Exception) else None
    status = None if answer is None else answer.status
    if status is not None and 400 <= status <= 499:
        return UpstreamError(UPSTREAM_REFUSED, status)
    return UpstreamError(UPSTREAM_FAILED, 502)


def upstream_reply(error: BaseException, error_format: ErrorFormat) -> Reply:
    """An upstream's error answer as a generic one: nothing of its body or headers."""
    summary = upstream_summary(error)
    return Reply(error_body(summary, error_format), summary.status_code, dict(NO_STORE))


_Response = TypeVar("_Response")


def error_replies(
    error_format: ErrorFormat, respond: Callable[[Reply], _Response]
) -> tuple[
    Callable[[CooldownError], _Response],
    Callable[[APIError], _Response],
    Callable[[BaseException], _Response],
]:
    """(cooldown handler, `APIError` handler, upstream-error handler) for one framework."""

    def cooldown(error: CooldownError) -> _Response:
        return respond(cooldown_reply(error, error_format))

    def api(error: APIError) -> _Response:
        return respond(api_reply(error))

    def upstream(error: BaseException) -> _Response:
        return respond(upstream_reply(error, error_format))

    return cooldown, api, upstream

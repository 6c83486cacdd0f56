"""What `send(key)` gave back, read the same way whichever client made the request.

A gateway's `send` may return a plain HTTP response, an SDK raw response, an SDK stream or a
parsed result, or raise an exception that carries the upstream's answer (`raise_for_status()`,
the SDKs' `APIStatusError`). Each is read here into one `Answer`: the status and headers to
record, and whether the client retried inside `send`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import APIError
from .headers import lowered_headers

__all__ = [
    "Answer",
    "answer_raised",
    "answer_returned",
    "response_headers",
    "response_status",
    "safe_attribute",
]

SDK_RETRY_HEADER = "x-stainless-retry-count"
"""Both official SDKs number each try of one call in this request header; 0 is the first."""


def response_status(response: object) -> int | None:
    """`.status_code` (requests, httpx, werkzeug, the SDKs' raw responses) or `.status`
    (urllib3, `http.client`, aiohttp) when it is an int; `None` for anything else."""
    for name in ("status_code", "status"):
        status = safe_attribute(response, name)
        if isinstance(status, int) and not isinstance(status, bool):
            return status
    return None


def response_headers(response: object) -> dict[str, object]:
    """The headers by lower-cased name; `{}` when they are missing or cannot be read (a
    throttle with unreadable headers is still a throttle)."""
    try:
        return lowered_headers(safe_attribute(response, "headers"))
    except Exception:  # an odd headers object must never lose the status it came with
        return {}


@dataclass(frozen=True)
class Answer:
    """One attempt's answer: what to record, and what to hand back (or raise) at the end."""

    value: object
    """What `send` returned, or the exception it raised."""
    raised: bool
    status: int
    headers: dict[str, object]
    retried: bool
    """The client retried inside `send` (an SDK built with `max_retries` above 0)."""
    http: object
    """The HTTP response behind `value`, closed when the loop rotates away from it."""

    def deliver(self) -> object:
        """The caller gets what `send` gave: the same object, or the same exception raised."""
        if self.raised:
            raise self.value  # type: ignore[misc]
        return self.value


def answer_returned(value: object) -> Answer:
    """A returned value: a response, an SDK stream (read by its `.response`), or a parsed
    result (a success with no headers)."""
    if value is None:
        raise TypeError("send() returned None: return the upstream's response or result")
    http = value if response_status(value) is not None else safe_attribute(value, "response")
    status = response_status(http)
    if status is None:  # a parsed result: the upstream answered 2xx and the SDK parsed it
        return Answer(value, False, 200, {}, False, None)
    return Answer(value, False, status, response_headers(http), _retried(value, http), http)


def answer_raised(error: Exception) -> Answer | None:
    """An exception's answer: `.response` when it is a response, else an int `.status_code`
    (or `.status`, as aiohttp's `ClientResponseError` has) with `.headers`; `None` when it
    carries none (a transport failure), and for this package's own errors: a nested
    `dispatch`'s 429 or an application's `APIError` is not what the upstream said."""
    if isinstance(error, APIError):
        return None
    http = safe_attribute(error, "response")
    status = response_status(http)
    if status is not None:
        return Answer(error, True, status, response_headers(http), _retried(error, http), http)
    status = response_status(error)
    if status is not None:
        return Answer(error, True, status, response_headers(error), _retried(error, None), None)
    return None


def _retried(value: object, http: object) -> bool:
    """Whether the request behind this answer was an SDK's retry; never fails on its absence."""
    for request in (
        safe_attribute(value, "http_request"),  # the SDKs' raw responses
        safe_attribute(value, "request"),  # the SDKs' and httpx's exceptions, httpx responses
        safe_attribute(http, "request"),  # requests' and httpx's responses
    ):
        count = response_headers(request).get(SDK_RETRY_HEADER)
        digits = count.strip() if isinstance(count, str) else ""
        if digits.isascii() and digits.isdigit() and digits.strip("0"):
            return True
    return False


def safe_attribute(value: object, name: str) -> Any:
    """`getattr` that treats a raising property as missing (httpx's `Response.request` raises
    when unset)."""
    try:
        return getattr(value, name, None)
    except Exception:
        return None

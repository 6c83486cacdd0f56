"""The loop behind `dispatch`: send with one key, learn from the answer, rotate on key trouble."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from ..advice import RecordingContext, recording_context
from ..errors import CooldownError
from ..headers import Headers
from ..outcome import classify_status

__all__ = ["response_headers", "response_status", "rotate"]

_Response = TypeVar("_Response")


class Record(Protocol):
    def __call__(self, key: str, status: int, evidence: RecordingContext) -> None: ...


def response_status(response: object) -> int:
    """`.status_code` (requests, httpx, werkzeug) or `.status` (urllib3, `http.client`)."""
    for name in ("status_code", "status"):
        status = getattr(response, name, None)
        if isinstance(status, int) and not isinstance(status, bool):
            return status
    raise TypeError("send() must return a response with an int .status_code or .status")


def response_headers(response: object) -> Headers:
    headers = getattr(response, "headers", None)
    return headers if headers is not None else {}


def rotate(
    *,
    first: Callable[[], str | None],
    rest: Callable[[], list[str]],
    send: Callable[[str], _Response],
    record: Record,
) -> _Response | None:
    """Every key at most once; the last response when keys run out or start cooling."""
    key = first()  # a CooldownError here propagates: nothing has been sent
    if key is None:
        return None
    tried: set[str] = set()
    while True:
        tried.add(key)
        response = send(key)  # an exception cools nothing and goes to the caller
        status = response_status(response)
        evidence = recording_context(status, response_headers(response))
        record(key, status, evidence)
        outcome = evidence.get("outcome") or classify_status(status)
        served = outcome.provider_health == "success"  # even if its window is now spent
        if served or outcome.credential_health not in ("throttled", "rejected"):
            return response
        try:
            free = rest()
        except CooldownError:
            return response
        key = next((candidate for candidate in free if candidate not in tried), None)
        if key is None:
            return response

"""Advice some providers put in a throttle's body, for a gateway's `dispatch(..., advice=...)`.

The library never reads a body by itself: a body may be streamed, large, or the caller's to
consume. These readers are for the caller, who knows when a body is there to read.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping

from .quota import QuotaSpent

__all__ = ["google_quota_spent", "google_retry_delay"]

_LARGEST_BODY = 64 * 1024
"""An error body is small; anything longer is not read (nor parsed) at all."""
_DURATION = re.compile(r"(\d{1,12}(?:\.\d{1,9})?)s")
"""A protobuf `Duration` in JSON: seconds with up to nine fractional digits and an `s`."""
_RETRY_INFO = "google.rpc.RetryInfo"
_QUOTA_FAILURE = "google.rpc.QuotaFailure"


def google_retry_delay(body: object) -> float | None:
    """Seconds from Google's error JSON (`error.details[]` of type `google.rpc.RetryInfo`,
    `"retryDelay": "30s"`), as the Gemini API sends with a 429.

    `body` is the response body as bytes, str, or the parsed dict (or the one-element list
    some Google endpoints wrap it in); anything else, or junk, is `None`. Never raises.
    """
    for detail in _details(body):
        if str(detail.get("@type", "")).endswith(_RETRY_INFO):
            return _duration(detail.get("retryDelay"))
    return None


def google_quota_spent(body: object) -> QuotaSpent | None:
    """`QuotaSpent` when Google's error JSON says a per-day quota is gone: a
    `RESOURCE_EXHAUSTED` whose `google.rpc.QuotaFailure` names a quota whose `quotaId`
    contains `PerDay` (its `RetryInfo` delay as the seconds, when given); a per-minute
    limit, anything else or junk is `None`. The body is read as `google_retry_delay` reads it.
    """
    parsed = _parsed(body)  # parsed once for both readings
    for detail in _details(parsed, status="RESOURCE_EXHAUSTED"):
        if str(detail.get("@type", "")).endswith(_QUOTA_FAILURE) and _per_day(detail):
            delay = google_retry_delay(parsed)
            return QuotaSpent(delay if delay is not None and delay > 0 else None)
    return None


def _per_day(failure: Mapping[object, object]) -> bool:
    violations = failure.get("violations")
    return isinstance(violations, list) and any(
        isinstance(violation, Mapping)
        and isinstance(violation.get("quotaId"), str)
        and "PerDay" in violation["quotaId"]
        for violation in violations
    )


def _details(body: object, status: str | None = None) -> list[Mapping[object, object]]:
    """The mappings in `error.details[]` of Google's error JSON (with `error.status` equal
    to `status` when one is asked for)."""
    parsed = _parsed(body)
    if isinstance(parsed, list) and len(parsed) == 1:
        parsed = parsed[0]
    error = parsed.get("error") if isinstance(parsed, Mapping) else None
    if not isinstance(error, Mapping) or (status is not None and error.get("status") != status):
        return []
    details = error.get("details")
    if not isinstance(details, list):
        return []
    return [detail for detail in details if isinstance(detail, Mapping)]


def _parsed(body: object) -> object:
    if isinstance(body, (bytes, bytearray, str)):
        if len(body) > _LARGEST_BODY:
            return None
        try:
            return json.loads(body)
        except (ValueError, RecursionError):  # junk, bad UTF-8, or nested too deep
            return None
    return body


def _duration(value: object) -> float | None:
    if not isinstance(value, str):
        return None
    found = _DURATION.fullmatch(value.strip())
    if found is None:
        return None
    seconds = float(found.group(1))
    return seconds if math.isfinite(seconds) else None

"""Advice some providers put in a throttle's body, for a gateway's `dispatch(..., advice=...)`.

The library never reads a body by itself: a body may be streamed, large, or the caller's to
consume. These readers are for the caller, who knows when a body is there to read.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping

__all__ = ["google_retry_delay"]

_LARGEST_BODY = 64 * 1024
"""An error body is small; anything longer is not read (nor parsed) at all."""
_DURATION = re.compile(r"(\d{1,12}(?:\.\d{1,9})?)s")
"""A protobuf `Duration` in JSON: seconds with up to nine fractional digits and an `s`."""
_RETRY_INFO = "google.rpc.RetryInfo"


def google_retry_delay(body: object) -> float | None:
    """Seconds from Google's error JSON (`error.details[]` of type `google.rpc.RetryInfo`,
    `"retryDelay": "30s"`), as the Gemini API sends with a 429.

    `body` is the response body as bytes, str, or the parsed dict (or the one-element list
    some Google endpoints wrap it in); anything else, or junk, is `None`. Never raises.
    """
    parsed = _parsed(body)
    if isinstance(parsed, list) and len(parsed) == 1:
        parsed = parsed[0]
    error = parsed.get("error") if isinstance(parsed, Mapping) else None
    details = error.get("details") if isinstance(error, Mapping) else None
    if not isinstance(details, list):
        return None
    for detail in details:
        if isinstance(detail, Mapping) and str(detail.get("@type", "")).endswith(_RETRY_INFO):
            return _duration(detail.get("retryDelay"))
    return None


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

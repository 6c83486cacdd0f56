"""Built-in usage readers: `register(provider, ..., usage=openrouter())`.

A reader asks a provider's usage API what one key has left, off the request path; the pool
cools a key whose credit is spent and brings it back once a reading shows credit again.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from urllib.parse import urlsplit

from .evidence.usage import Usage, UsageReader

__all__ = ["Usage", "UsageUnavailable", "openrouter"]

OPENROUTER_URL = "https://openrouter.ai/api/v1"
TIMEOUT_SECONDS = 5.0


class UsageUnavailable(RuntimeError):
    """A usage API did not answer, or answered something unreadable (never with the key)."""


def openrouter(base_url: str = OPENROUTER_URL) -> UsageReader:
    """A reader of OpenRouter's `GET {base_url}/key`: `data.limit_remaining` and `data.limit`
    (`null`: an unlimited key) and `data.limit_reset` (`"daily"`, `"weekly"`, `"monthly"`:
    until the next UTC midnight, Monday or first of the month; `null`: no reset)."""
    if not isinstance(base_url, str):
        raise TypeError("base_url must be a str")
    if urlsplit(base_url).scheme not in ("http", "https") or not urlsplit(base_url).netloc:
        raise ValueError("base_url must be an http or https URL")
    url = base_url.rstrip("/") + "/key"

    def read(key: str) -> Usage | None:
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as answer:
                document = json.loads(answer.read())
        except urllib.error.HTTPError as refused:  # an error answer: its connection, closed
            refused.close()
            raise UsageUnavailable(f"OpenRouter's key endpoint answered {refused.code}") from None
        except (OSError, ValueError):  # the message of neither carries the key; drop it anyway
            raise UsageUnavailable("OpenRouter's key endpoint did not answer usably") from None
        return _openrouter_usage(document, datetime.now(timezone.utc))

    return read


def _openrouter_usage(document: object, now: datetime) -> Usage:
    data = document.get("data") if isinstance(document, Mapping) else None
    if not isinstance(data, Mapping):
        raise UsageUnavailable("OpenRouter's key endpoint answered without data")
    limit, remaining = data.get("limit"), data.get("limit_remaining")
    if limit is None:  # an unlimited key
        return Usage()
    if not (_number(limit) and (remaining is None or _number(remaining))):
        raise UsageUnavailable("OpenRouter's key endpoint answered junk")
    try:
        return Usage(
            remaining=None if remaining is None else max(0.0, remaining),
            limit=limit,
            resets_in=_until_reset(data.get("limit_reset"), now),
        )
    except ValueError:  # an infinite or negative limit
        raise UsageUnavailable("OpenRouter's key endpoint answered junk") from None


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _until_reset(reset: object, now: datetime) -> float | None:
    """Seconds until OpenRouter resets a key's limit, in UTC."""
    midnight = datetime(now.year, now.month, now.day, tzinfo=timezone.utc)
    if reset == "daily":
        upcoming = midnight + timedelta(days=1)
    elif reset == "weekly":
        upcoming = midnight + timedelta(days=7 - now.weekday())
    elif reset == "monthly":
        month = now.month % 12 + 1
        upcoming = midnight.replace(year=now.year + (now.month == 12), month=month, day=1)
    else:
        return None
    return (upcoming - now).total_seconds()

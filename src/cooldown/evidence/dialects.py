"""The header families providers announce their limits in, one row each: which headers name a
counter's remaining, its reset and its limit, and in what form the reset comes.

Four rows: OpenAI-style `x-ratelimit-*` (Go durations or plain seconds; also Groq,
DeepSeek, Azure OpenAI, Mistral), Anthropic's `anthropic-ratelimit-*` (RFC 3339 times), the
IETF `RateLimit-Remaining`/`RateLimit-Reset` fields (delta seconds), and the bare
`X-RateLimit-Remaining`/`X-RateLimit-Reset` pair (OpenRouter, Together, many gateways). A
plain number above 10^9 in a reset is an absolute Unix time instead, and in the bare pair one
above 10^12 is Unix milliseconds. A new family is one more row here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Literal, NamedTuple

from ..errors import LARGEST_RETRY_AFTER

__all__ = [
    "DIALECTS",
    "LONGEST_VALUE",
    "Counter",
    "Dialect",
    "count",
    "go_duration_seconds",
    "plain_seconds",
    "positive_limit",
    "rfc3339_timestamp",
    "until",
]

EPOCH_THRESHOLD = 1e9
"""Reset values above this many seconds (about 31 years) are absolute Unix times."""
EPOCH_MS_THRESHOLD = 1e12
"""Bare `X-RateLimit-Reset` values above this are Unix times in milliseconds (OpenRouter)."""
LONGEST_VALUE = 64  # longer header values are not numbers or times any provider sends
_NUMBER = re.compile(r"\d+(?:\.\d+)?|\.\d+")
_GO_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|us|µs|μs|ns|m|s)")
_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "μs": 1e-6}
_GO_UNITS["ns"] = 1e-9
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})"
)


def _text(value: object) -> str | None:
    if not isinstance(value, str) or len(value) > LONGEST_VALUE:
        return None
    return value.strip()


def _finite(seconds: float) -> float | None:
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def plain_seconds(value: object) -> float | None:
    text = _text(value)
    if text is None or not _NUMBER.fullmatch(text):
        return None
    return _finite(float(text))


def go_duration_seconds(value: object) -> float | None:
    """`1s`, `6m0s`, `20ms`, `1h2m3.5s`, `2m59.56s` or plain seconds, as float seconds."""
    plain = plain_seconds(value)
    if plain is not None:
        return plain
    text = _text(value)
    if not text:
        return None
    total, position = 0.0, 0
    for part in _GO_PART.finditer(text):
        if part.start() != position:
            return None
        total += float(part.group(1)) * _GO_UNITS[part.group(2)]
        position = part.end()
    return _finite(total) if position == len(text) else None


def rfc3339_timestamp(value: object) -> float | None:
    """A POSIX timestamp from an RFC 3339 date-time with a zone, else `None`."""
    text = _text(value)
    found = _RFC3339.fullmatch(text) if text else None
    if found is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = found.groups()
    offset = timedelta(0)
    if zone not in ("Z", "z"):
        sign = 1 if zone[0] == "+" else -1
        offset = sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6]))
    try:
        moment = datetime(
            int(year),
            int(month),
            int(day),
            int(hour),
            int(minute),
            min(int(second), 59),  # a leap second resets with the next one
            tzinfo=timezone(offset),
        )
    except ValueError:
        return None
    return moment.timestamp() + (float(fraction) if fraction else 0.0)


def _bounded(seconds: float | None) -> float | None:
    """No reset is longer than the largest maximum (99999999h, a date in year 9999): every
    later step computes with a number the settings can cap."""
    return None if seconds is None else min(seconds, LARGEST_RETRY_AFTER)


def until(moment: float, received_at: float) -> float:
    """Seconds from `received_at` until a reset date, bounded."""
    return min(max(0.0, moment - received_at), LARGEST_RETRY_AFTER)


def _from_epoch(seconds: float | None, received_at: float) -> float | None:
    """A reset above 10^9 is a Unix time (GitHub-style gateways send those): seconds from
    `received_at` until then, never below 0. Anything smaller is already a duration."""
    if seconds is None or seconds <= EPOCH_THRESHOLD:
        return seconds
    return _finite(until(seconds, received_at))


def _bare_reset(value: object, received_at: float) -> float | None:
    """Delta seconds up to 10^9, Unix seconds above, Unix milliseconds above 10^12."""
    seconds = plain_seconds(value)
    if seconds is not None and seconds > EPOCH_MS_THRESHOLD:
        seconds /= 1000.0
    return _from_epoch(seconds, received_at)


def _ietf_reset(value: object, received_at: float) -> float | None:
    return _from_epoch(plain_seconds(value), received_at)


def _openai_reset(value: object, received_at: float) -> float | None:
    """A Unix time (above 10^9), else a Go duration or plain seconds."""
    reset = _ietf_reset(value, received_at)
    return _bounded(go_duration_seconds(value) if reset is None else reset)


def _anthropic_reset(value: object, received_at: float) -> float | None:
    """An RFC 3339 date: seconds from `received_at` until then."""
    moment = rfc3339_timestamp(value)
    return None if moment is None else until(moment, received_at)


def count(value: object) -> int | None:
    if not isinstance(value, str) or len(value) > LONGEST_VALUE:
        return None
    text = value.strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else None


def positive_limit(value: object) -> int | None:
    found = count(value)
    return found if found else None


class Counter(NamedTuple):
    """One counter of a family: what it counts and the (lower-case) names of its headers;
    `limit` is `None` where the family never announces one."""

    kind: Literal["requests", "tokens"]
    remaining: str
    reset: str
    limit: str | None = None


class Dialect(NamedTuple):
    """One header family: its counters, and how a reset value reads as seconds from the
    moment the answer arrived (`None`: not a reset this family sends)."""

    name: str
    counters: tuple[Counter, ...]
    reset: Callable[[object, float], float | None]


def _named(form: str, *kinds: str) -> tuple[Counter, ...]:
    """A family's counters, their headers named by `form` (`{kind}`, `{part}` filled in)."""
    return tuple(
        Counter(
            "requests" if kind == "requests" else "tokens",
            form.format(kind=kind, part="remaining"),
            form.format(kind=kind, part="reset"),
            form.format(kind=kind, part="limit"),
        )
        for kind in kinds
    )


DIALECTS: tuple[Dialect, ...] = (
    Dialect("openai", _named("x-ratelimit-{part}-{kind}", "requests", "tokens"), _openai_reset),
    Dialect(
        "anthropic",
        _named(
            "anthropic-ratelimit-{kind}-{part}",
            "requests",
            "tokens",
            "input-tokens",
            "output-tokens",
        ),
        _anthropic_reset,
    ),
    Dialect("ietf", (Counter("requests", "ratelimit-remaining", "ratelimit-reset"),), _ietf_reset),
    Dialect(
        "bare", (Counter("requests", "x-ratelimit-remaining", "x-ratelimit-reset"),), _bare_reset
    ),
)
"""Every family read, in the order their budgets are compared (the first wins a tie)."""

"""Providers' rate-limit headers: how long until a spent window resets, before any 429.

Four families are read (names case-insensitive): OpenAI-style `x-ratelimit-*` with Go
durations, Anthropic's `anthropic-ratelimit-*` with RFC 3339 times, the IETF
`RateLimit-Remaining`/`RateLimit-Reset` fields with delta seconds, and the bare
`X-RateLimit-Remaining`/`X-RateLimit-Reset` pair (OpenRouter, Together, many gateways). A plain
number above 10^9 in a reset is an absolute Unix time instead, and in the bare pair one above
10^12 is Unix milliseconds. Bodies are never read.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone

from ..arguments import wall_clock
from ..errors import LARGEST_RETRY_AFTER
from .headers import Headers, lowered_headers

__all__ = [
    "go_duration_seconds",
    "lone_reset",
    "millisecond_advice",
    "rate_limit_advice",
    "request_budget",
    "requests_remaining",
    "rfc3339_timestamp",
    "spent_window_reset",
    "token_budget",
]

EPOCH_THRESHOLD = 1e9
"""Reset values above this many seconds (about 31 years) are absolute Unix times."""
EPOCH_MS_THRESHOLD = 1e12
"""Bare `X-RateLimit-Reset` values above this are Unix times in milliseconds (OpenRouter)."""
MILLISECOND_ADVICE = ("retry-after-ms", "x-ms-retry-after-ms")
"""Azure OpenAI's advice on a 429, in milliseconds."""
_LONGEST_VALUE = 64  # longer header values are not numbers or times any provider sends
_OPENAI_KINDS = ("requests", "tokens")
_ANTHROPIC_KINDS = ("requests", "tokens", "input-tokens", "output-tokens")
_NUMBER = re.compile(r"\d+(?:\.\d+)?|\.\d+")
_GO_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|us|µs|μs|ns|m|s)")
_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "μs": 1e-6}
_GO_UNITS["ns"] = 1e-9
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})"
)


def _text(value: object) -> str | None:
    if not isinstance(value, str) or len(value) > _LONGEST_VALUE:
        return None
    return value.strip()


def _finite(seconds: float) -> float | None:
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _plain_seconds(value: object) -> float | None:
    text = _text(value)
    if text is None or not _NUMBER.fullmatch(text):
        return None
    return _finite(float(text))


def go_duration_seconds(value: object) -> float | None:
    """`1s`, `6m0s`, `20ms`, `1h2m3.5s`, `2m59.56s` or plain seconds, as float seconds."""
    plain = _plain_seconds(value)
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


def _spent(value: object) -> bool:
    """A remaining count of zero (providers send whole numbers)."""
    if not isinstance(value, str) or len(value) > _LONGEST_VALUE:
        return False
    count = value.strip()
    return count.isascii() and count.isdigit() and not count.strip("0")


def _bounded(seconds: float | None) -> float | None:
    """No reset is longer than the largest maximum (99999999h, a date in year 9999): every
    later step computes with a number the settings can cap."""
    return None if seconds is None else min(seconds, LARGEST_RETRY_AFTER)


def _until(moment: float, received_at: float) -> float:
    """Seconds from `received_at` until a reset date, bounded."""
    return min(max(0.0, moment - received_at), LARGEST_RETRY_AFTER)


def _from_epoch(seconds: float | None, received_at: float) -> float | None:
    """A reset above 10^9 is a Unix time (GitHub-style gateways send those): seconds from
    `received_at` until then, never below 0. Anything smaller is already a duration."""
    if seconds is None or seconds <= EPOCH_THRESHOLD:
        return seconds
    return _finite(_until(seconds, received_at))


def _bare_reset(value: object, received_at: float) -> float | None:
    """Delta seconds up to 10^9, Unix seconds above, Unix milliseconds above 10^12."""
    seconds = _plain_seconds(value)
    if seconds is not None and seconds > EPOCH_MS_THRESHOLD:
        seconds /= 1000.0
    return _from_epoch(seconds, received_at)


def _ietf_reset(value: object, received_at: float) -> float | None:
    return _from_epoch(_plain_seconds(value), received_at)


_PLAIN_PAIRS = (
    ("ratelimit-remaining", "ratelimit-reset", _ietf_reset),
    ("x-ratelimit-remaining", "x-ratelimit-reset", _bare_reset),
)
"""Request counters whose reset is a number: the IETF fields and the bare pair."""


def _openai_reset(value: object, received_at: float) -> float | None:
    """A Unix time (above 10^9), else a Go duration or plain seconds."""
    reset = _ietf_reset(value, received_at)
    return _bounded(go_duration_seconds(value) if reset is None else reset)


def spent_window_reset(lowered: dict[str, object], received_at: float) -> float | None:
    """Seconds until the latest spent window lets one more unit through, from headers keyed by
    lower-case name. OpenAI's and Anthropic's limits refill continuously, and their reset is
    the time until the limit is full again: with the limit announced, one unit is back after
    `reset / limit`; without it, at the reset."""
    resets: list[float] = []
    for kind in _OPENAI_KINDS:
        if _spent(lowered.get(f"x-ratelimit-remaining-{kind}")):
            reset = _openai_reset(lowered.get(f"x-ratelimit-reset-{kind}"), received_at)
            if reset is not None:
                resets.append(_one_unit(reset, lowered.get(f"x-ratelimit-limit-{kind}")))
    for kind in _ANTHROPIC_KINDS:
        if _spent(lowered.get(f"anthropic-ratelimit-{kind}-remaining")):
            moment = rfc3339_timestamp(lowered.get(f"anthropic-ratelimit-{kind}-reset"))
            if moment is not None:
                limit = lowered.get(f"anthropic-ratelimit-{kind}-limit")
                resets.append(_one_unit(_until(moment, received_at), limit))
    for remaining_name, reset_name, read_reset in _PLAIN_PAIRS:
        if _spent(lowered.get(remaining_name)):
            reset = read_reset(lowered.get(reset_name), received_at)
            if reset is not None:
                resets.append(reset)
    return max(resets) if resets else None


def lone_reset(lowered: dict[str, object], received_at: float) -> float | None:
    """On a 429: the latest reset a header gives without its remaining counter
    (`X-RateLimit-Reset: 20` alone is 20 s; OpenAI's and Anthropic's resets too), since the
    throttle already says that window is spent; `None` without one."""
    resets: list[float | None] = []
    for kind in ("requests", "tokens"):
        if f"x-ratelimit-remaining-{kind}" not in lowered:
            resets.append(_openai_reset(lowered.get(f"x-ratelimit-reset-{kind}"), received_at))
    for remaining_name, reset_name, read_reset in _PLAIN_PAIRS:
        if remaining_name not in lowered:
            resets.append(read_reset(lowered.get(reset_name), received_at))
    for kind in _ANTHROPIC_KINDS:
        if f"anthropic-ratelimit-{kind}-remaining" not in lowered:
            moment = rfc3339_timestamp(lowered.get(f"anthropic-ratelimit-{kind}-reset"))
            resets.append(None if moment is None else _until(moment, received_at))
    found = [reset for reset in resets if reset is not None]
    return max(found) if found else None


def _one_unit(until_full: float, limit: object) -> float:
    """When a spent counter refilling continuously to `limit` over `until_full` has one unit."""
    units = _limit(limit)
    return until_full / units if units else until_full


def millisecond_advice(lowered: dict[str, object]) -> float | None:
    """Seconds from Azure's `retry-after-ms`/`x-ms-retry-after-ms`: the later of them."""
    advised = [_plain_seconds(lowered.get(name)) for name in MILLISECOND_ADVICE]
    found = [milliseconds / 1000.0 for milliseconds in advised if milliseconds is not None]
    return max(found) if found else None


def _count(value: object) -> int | None:
    if not isinstance(value, str) or len(value) > _LONGEST_VALUE:
        return None
    text = value.strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else None


def request_budget(
    lowered: dict[str, object], received_at: float
) -> tuple[int, float, int | None] | None:
    """(requests remaining, seconds until the window resets, the limit if announced) when a
    provider says both and some are left, or none are and the limit is announced (they refill
    continuously towards it: the budget says when the next request is back)."""
    found: list[tuple[int, float, int | None]] = []
    remaining = _count(lowered.get("x-ratelimit-remaining-requests"))
    reset = _openai_reset(lowered.get("x-ratelimit-reset-requests"), received_at)
    if remaining is not None and reset is not None:
        found.append((remaining, reset, _limit(lowered.get("x-ratelimit-limit-requests"))))
    remaining = _count(lowered.get("anthropic-ratelimit-requests-remaining"))
    moment = rfc3339_timestamp(lowered.get("anthropic-ratelimit-requests-reset"))
    if remaining is not None and moment is not None:
        limit = _limit(lowered.get("anthropic-ratelimit-requests-limit"))
        found.append((remaining, _until(moment, received_at), limit))
    for remaining_name, reset_name, read_reset in _PLAIN_PAIRS:
        remaining = _count(lowered.get(remaining_name))
        reset = read_reset(lowered.get(reset_name), received_at)
        if remaining is not None and reset is not None:
            found.append((remaining, reset, None))
    live = [budget for budget in found if budget[1] > 0 and (budget[0] > 0 or budget[2])]
    return min(live, key=lambda budget: (budget[0], budget[1])) if live else None


def _limit(value: object) -> int | None:
    count = _count(value)
    return count if count else None


def token_budget(
    lowered: dict[str, object], received_at: float
) -> tuple[int, float, int | None] | None:
    """(tokens remaining, seconds until their reset, the limit if announced) from OpenAI's
    `x-ratelimit-*-tokens` or Anthropic's `anthropic-ratelimit-*tokens-*`: the scarcest of
    the token counters an answer announces."""
    found: list[tuple[int, float, int | None]] = []
    remaining = _count(lowered.get("x-ratelimit-remaining-tokens"))
    reset = _openai_reset(lowered.get("x-ratelimit-reset-tokens"), received_at)
    if remaining is not None and reset is not None:
        found.append((remaining, reset, _limit(lowered.get("x-ratelimit-limit-tokens"))))
    for kind in _ANTHROPIC_KINDS[1:]:
        remaining = _count(lowered.get(f"anthropic-ratelimit-{kind}-remaining"))
        moment = rfc3339_timestamp(lowered.get(f"anthropic-ratelimit-{kind}-reset"))
        if remaining is not None and moment is not None:
            limit = _limit(lowered.get(f"anthropic-ratelimit-{kind}-limit"))
            found.append((remaining, _until(moment, received_at), limit))
    return min(found, key=lambda budget: budget[0]) if found else None


def requests_remaining(lowered: dict[str, object]) -> int | None:
    """Requests left in the window, as OpenAI's or Anthropic's headers say."""
    for name in ("x-ratelimit-remaining-requests", "anthropic-ratelimit-requests-remaining"):
        count = _count(lowered.get(name))
        if count is not None:
            return count
    return None


def rate_limit_advice(headers: Headers | None, *, received_at: float | None = None) -> float | None:
    """Seconds until an exhausted provider window resets, or `None` while none is spent.

    `received_at` is the wall-clock time (`time.time()`) the response arrived; Anthropic's
    resets are dates. Every spent window must reset, so the latest reset wins.
    """
    return spent_window_reset(lowered_headers(headers), wall_clock(received_at))

"""Callers' times, keys and delays, checked where they enter the store."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import TypeGuard

from .config import LARGEST_MAX_SECONDS

__all__ = [
    "LARGEST_NOW",
    "bounded_max_seconds",
    "check_cost",
    "delay",
    "finite_number",
    "require_keys",
    "require_str",
    "resolve_now",
    "retry_after",
    "seconds",
    "usable_advice",
    "wall_clock",
]

A_DAY = 24 * 3600.0
A_YEAR = 365 * A_DAY
_EXACT_INT = 2**53
LARGEST_NOW = 1e12
"""Monotonic seconds (about 31,700 years): a larger `now` is a caller's mistake, not a time."""


def require_str(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str")
    return value


def require_keys(keys: object) -> Sequence[str]:
    """A list or tuple of keys (any sequence); an iterator or a lone string is a mistake."""
    if type(keys) is list or type(keys) is tuple:
        return keys
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence):
        raise TypeError("keys must be a sequence of strings, such as a list")
    return keys


LARGEST_COST = 10**9
"""Tokens one request may announce: more is a caller's mistake, not a request."""


def check_cost(cost: object) -> int | None:
    """A request's cost in tokens: `None` (unknown) or an int from 0 to 10^9."""
    if cost is None:
        return None
    if isinstance(cost, bool) or not isinstance(cost, int):
        raise TypeError("cost must be an int number of tokens, or None")
    if not 0 <= cost <= LARGEST_COST:
        raise ValueError("cost must be between 0 and 10^9 tokens")
    return cost


def finite_number(value: object, name: str) -> float:
    # The common cases first: a finite float, an int a float holds exactly.
    if type(value) is float and -math.inf < value < math.inf:
        return value
    if type(value) is int and -_EXACT_INT <= value <= _EXACT_INT:
        return float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be an int or float")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise ValueError(f"{name} must be finite")
    return number


def seconds(value: float, name: str) -> float:
    """A finite duration, at least one second."""
    return max(1.0, finite_number(value, name))


_horizon = [time.monotonic() + A_DAY]
"""A day past the monotonic clock when last read: a `now` below it needs no clock read."""


def resolve_now(now: float | None, name: str = "now") -> float:
    """The caller's monotonic `now`, validated, or the clock when it is `None`.

    A `now` more than a day ahead of `time.monotonic()` is refused (milliseconds or the
    wall clock by mistake): it would expire every cooldown, the fleet's shared ones too. So
    is a negative one (no monotonic clock reads below 0).
    """
    if now is None:
        return time.monotonic()
    if type(now) is float and 0.0 <= now <= _horizon[0]:  # finite, and not ahead
        return now
    current = finite_number(now, name)
    if not -LARGEST_NOW <= current <= LARGEST_NOW:
        raise ValueError(f"{name} must be monotonic seconds (time.monotonic()), not a huge number")
    if current < 0:
        raise ValueError(f"{name} must be time.monotonic() seconds, never negative")
    if current > 1e9 and abs(current - time.time()) < A_YEAR < abs(current - time.monotonic()):
        # Within a year of the wall clock (over 10^9 s) and far from the monotonic clock:
        # time.time() by mistake, which would expire every other caller's cooldowns at once.
        raise ValueError(f"{name} must be time.monotonic(), not time.time()")
    if current > _horizon[0]:
        _horizon[0] = time.monotonic() + A_DAY
        if current > _horizon[0]:
            raise ValueError(
                f"{name} must be time.monotonic() seconds: it is more than a day ahead of it"
            )
    return current


def wall_clock(received_at: object) -> float:
    """`received_at` (wall-clock seconds, as `time.time()` gives) checked, or the clock now."""
    if received_at is None:
        return time.time()
    return finite_number(received_at, "received_at")


def bounded_max_seconds(max_seconds: int) -> int:
    if type(max_seconds) is int and 1 <= max_seconds <= LARGEST_MAX_SECONDS:
        return max_seconds
    if isinstance(max_seconds, bool) or not isinstance(max_seconds, int):
        raise TypeError("max_seconds must be an int")
    return min(LARGEST_MAX_SECONDS, max(1, max_seconds))


def usable_advice(advice: object) -> TypeGuard[int | float]:
    """Trusted advice is a finite, non-negative int or float (not a bool)."""
    if isinstance(advice, float):
        return math.isfinite(advice) and advice >= 0
    return isinstance(advice, int) and not isinstance(advice, bool) and advice >= 0


def delay(advice: object, fallback: float, max_seconds: int, *, exact: bool = False) -> float:
    """Trusted advice when it is usable; the caller's fallback otherwise. At least a second
    (no immediate redispatch), except that an `exact` delay (a budget's refill) below one
    second is kept as it is; a zero delay is a second either way."""
    if advice is None:
        chosen = fallback
    elif type(advice) is float and 0.0 <= advice < math.inf:  # usable_advice, the common case
        chosen = advice
    else:  # capped before any float(): an int may be too large for a float
        chosen = min(advice, max_seconds) if usable_advice(advice) else fallback
    if exact and chosen > 0:
        return min(float(max_seconds), float(chosen))
    return min(float(max_seconds), max(1.0, chosen))


def retry_after(release: float, now: float, max_seconds: int) -> int:
    """Whole seconds until `release`, never below 1 and never above the configured maximum."""
    return min(max_seconds, max(1, math.ceil(release - now)))

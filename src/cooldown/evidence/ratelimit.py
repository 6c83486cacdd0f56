"""Providers' rate-limit headers: how long until a spent window resets, before any 429, and
the budgets an answer announces; read over the families in `dialects.py`, names
case-insensitive. Bodies are never read."""

from __future__ import annotations

from ..arguments import wall_clock
from .dialects import (
    DIALECTS,
    LONGEST_VALUE,
    count,
    go_duration_seconds,
    plain_seconds,
    positive_limit,
    rfc3339_timestamp,
)
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

MILLISECOND_ADVICE = ("retry-after-ms", "x-ms-retry-after-ms")
"""Azure OpenAI's advice on a 429, in milliseconds."""

Budget = tuple[int, float, int | None]
"""(remaining, seconds until the reset, the limit if announced)."""


def _spent(value: object) -> bool:
    """A remaining count of zero (providers send whole numbers)."""
    if not isinstance(value, str) or len(value) > LONGEST_VALUE:
        return False
    remaining = value.strip()
    return remaining.isascii() and remaining.isdigit() and not remaining.strip("0")


def spent_window_reset(lowered: dict[str, object], received_at: float) -> float | None:
    """Seconds until the latest spent window lets one more unit through, from headers keyed by
    lower-case name. OpenAI's and Anthropic's limits refill continuously, and their reset is
    the time until the limit is full again: with the limit announced, one unit is back after
    `reset / limit`; without it, at the reset."""
    resets: list[float] = []
    for dialect in DIALECTS:
        for counter in dialect.counters:
            if counter.remaining in lowered and _spent(lowered[counter.remaining]):
                reset = dialect.reset(lowered.get(counter.reset), received_at)
                if reset is not None:
                    units = (
                        None
                        if counter.limit is None
                        else positive_limit(lowered.get(counter.limit))
                    )
                    resets.append(reset / units if units else reset)
    return max(resets) if resets else None


def lone_reset(lowered: dict[str, object], received_at: float) -> float | None:
    """On a 429: the latest reset a header gives without its remaining counter
    (`X-RateLimit-Reset: 20` alone is 20 s; OpenAI's and Anthropic's resets too), since the
    throttle already says that window is spent; `None` without one."""
    found = [
        reset
        for dialect in DIALECTS
        for counter in dialect.counters
        if counter.remaining not in lowered
        and (reset := dialect.reset(lowered.get(counter.reset), received_at)) is not None
    ]
    return max(found) if found else None


def millisecond_advice(lowered: dict[str, object]) -> float | None:
    """Seconds from Azure's `retry-after-ms`/`x-ms-retry-after-ms`: the later of them."""
    advised = [plain_seconds(lowered.get(name)) for name in MILLISECOND_ADVICE]
    found = [milliseconds / 1000.0 for milliseconds in advised if milliseconds is not None]
    return max(found) if found else None


def _budgets(lowered: dict[str, object], received_at: float, kind: str) -> list[Budget]:
    """Every counter of `kind` an answer announces with its reset, in the families' order."""
    found: list[Budget] = []
    for dialect in DIALECTS:
        for counter in dialect.counters:
            if counter.kind != kind or counter.remaining not in lowered:
                continue
            remaining = count(lowered[counter.remaining])
            reset = dialect.reset(lowered.get(counter.reset), received_at)
            if remaining is not None and reset is not None:
                limit = (
                    None if counter.limit is None else positive_limit(lowered.get(counter.limit))
                )
                found.append((remaining, reset, limit))
    return found


def request_budget(lowered: dict[str, object], received_at: float) -> Budget | None:
    """(requests remaining, seconds until the window resets, the limit if announced) when a
    provider says both and some are left, or none are and the limit is announced (they refill
    continuously towards it: the budget says when the next request is back)."""
    found = _budgets(lowered, received_at, "requests")
    live = [budget for budget in found if budget[1] > 0 and (budget[0] > 0 or budget[2])]
    return min(live, key=lambda budget: (budget[0], budget[1])) if live else None


def token_budget(lowered: dict[str, object], received_at: float) -> Budget | None:
    """(tokens remaining, seconds until their reset, the limit if announced) from OpenAI's
    `x-ratelimit-*-tokens` or Anthropic's `anthropic-ratelimit-*tokens-*`: the scarcest of
    the token counters an answer announces."""
    found = _budgets(lowered, received_at, "tokens")
    return min(found, key=lambda budget: budget[0]) if found else None


def requests_remaining(lowered: dict[str, object]) -> int | None:
    """Requests left in the window, as the first family announcing a limit says."""
    for dialect in DIALECTS:
        for counter in dialect.counters:
            if counter.kind == "requests" and counter.limit is not None:
                remaining = count(lowered.get(counter.remaining))
                if remaining is not None:
                    return remaining
    return None


def rate_limit_advice(headers: Headers | None, *, received_at: float | None = None) -> float | None:
    """Seconds until an exhausted provider window resets, or `None` while none is spent.

    `received_at` is the wall-clock time (`time.time()`) the response arrived; Anthropic's
    resets are dates. Every spent window must reset, so the latest reset wins.
    """
    return spent_window_reset(lowered_headers(headers), wall_clock(received_at))

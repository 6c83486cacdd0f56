"""What one announced budget says about how its counter refills, whoever spent from it.

A counter that refills continuously at its limit per period, announcing the time until it is
full (OpenAI's and Anthropic's reset), always reads `remaining = limit - limit * reset /
period`: every reading of it implies the same period, however many keys (or other callers)
spend from it. A fixed window's readings do not: its reset runs down to the window's end
while its remaining falls with each request, so the periods they imply soon disagree. Two
readings of one counter that no single period explains prove windows; a collision with a
sibling that shares the counter cannot, since it only moves a reading along the same line.
"""

from __future__ import annotations

import math

__all__ = ["RESET_PRECISION_SECONDS", "Periods", "refill_periods"]

RESET_PRECISION_SECONDS = 2.0
"""How far an announced reset may be from the counter's true one: a reset given to the
second (Anthropic's dates), a provider's clock a second off ours."""

Periods = tuple[float, float]
"""The periods (seconds for a full limit to come back) a continuous counter could have."""


def refill_periods(remaining: int, reset: float, limit: int) -> Periods | None:
    """The periods one reading allows if its counter refills continuously: its remaining
    rounded down (or to the nearest), its reset off by up to `RESET_PRECISION_SECONDS`.
    `None` when the reading says nothing (the counter is full, or its reset is due)."""
    missing = limit - remaining
    if missing <= 0 or reset <= 0:
        return None
    low = limit * max(0.0, reset - RESET_PRECISION_SECONDS) / (missing + 0.5)
    high = math.inf if missing <= 1 else limit * (reset + RESET_PRECISION_SECONDS) / (missing - 1)
    return low, high

"""Answers that say a key's quota is spent (its credit, or a daily cap), not its rate.

A rate limit passes in seconds or a minute; a spent quota lasts until someone adds credit or
the day turns. Read as a throttle, it would send the key a request for every model every
minute, forever: so it cools the key, and its account, for every model, for an hour.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from .answers import safe_attribute
from .outcome import UpstreamOutcome

__all__ = ["QUOTA_SPENT", "QuotaSpent", "sdk_quota_spent"]

QUOTA_SPENT = UpstreamOutcome(False, "neutral", "rejected", "quota_spent")
"""The outcome of an answer that says the quota is gone: the key cannot be used, for any
model, until the quota is back (`record(..., outcome=QUOTA_SPENT)` says so by hand)."""

INSUFFICIENT_QUOTA = "insufficient_quota"
"""OpenAI's error code (and type) when an account is out of credit; it comes with a 429."""


@dataclass(frozen=True)
class QuotaSpent:
    """What an `advice=` reader returns for an answer saying the quota is gone: `seconds`
    until it is back when the answer says, else `None` (`MODEL_COOLDOWN_QUOTA_SECONDS`)."""

    seconds: float | None = None

    def __post_init__(self) -> None:
        seconds = self.seconds
        if seconds is None:
            return
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise TypeError("seconds must be a number or None")
        if not (math.isfinite(seconds) and seconds > 0):
            raise ValueError("seconds must be positive and finite")


def sdk_quota_spent(error: object) -> bool:
    """Whether an SDK exception says `insufficient_quota`: its `.code`, or the error JSON the
    SDK already parsed into `.body` (the `error` object itself, or the whole answer)."""
    if _named(safe_attribute(error, "code")):
        return True
    body = safe_attribute(error, "body")
    if isinstance(body, Mapping):
        inner = body.get("error")
        for reported in (body, inner if isinstance(inner, Mapping) else None):
            if reported is not None and (
                _named(reported.get("code")) or _named(reported.get("type"))
            ):
                return True
    return False


def _named(value: object) -> bool:
    return isinstance(value, str) and value == INSUFFICIENT_QUOTA

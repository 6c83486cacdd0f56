"""What one attempt's answer proved, as one value the store settles the attempt with."""

from __future__ import annotations

from typing import NamedTuple

from ..evidence.learn import LearnedWindow
from ..evidence.outcome import UpstreamOutcome
from .backend import Announced
from .refills import Refill, RefillSetting
from .scope import CallScope

__all__ = ["Verdict"]


class Verdict(NamedTuple):
    """One answer, read once by the pool: its key's outcome and advice (`fallback_seconds`
    when it advised none, already the learned window where learning applies), the request
    and token budgets its headers announced (remaining, reset seconds, limit), whether it was
    a token shortfall of this request (the key's tokens are kept, nothing cools), the
    siblings of its account a throttle or a spent quota cools too, the refill it taught, and
    the fleet's learned window after it, and how `register` fixed the provider's refill
    (`"auto"`: as learned; in windows, the budgets are kept without their limit)."""

    scope: CallScope
    key: str
    outcome: UpstreamOutcome
    credential_wide_auth: bool = False
    retry_after_seconds: float | None = None
    fallback_seconds: float = 60.0
    requests: Announced | None = None
    tokens: Announced | None = None
    token_shortfall: bool = False
    siblings: tuple[str, ...] = ()
    refill: Refill | None = None
    learned: LearnedWindow | None = None
    fixed: RefillSetting = "auto"

"""An attempt's ending: the shared attempt whose answer the store is recording (its writes
ride on the attempt's release), and the checks of what an answer announced."""

from __future__ import annotations

from contextvars import ContextVar

from ..arguments import finite_number
from ..config import LARGEST_MAX_SECONDS
from .admission import Attempt
from .backend import SharedAttempt

__all__ = ["ENDING", "checked_budget", "ending_attempt", "require_attempt"]

ENDING: ContextVar[SharedAttempt | None] = ContextVar("cooldown_ending", default=None)


def require_attempt(attempt: object) -> Attempt:
    if not isinstance(attempt, Attempt):
        raise TypeError("attempt must be what admit() returned")
    return attempt


def ending_attempt() -> SharedAttempt | None:
    """The shared attempt whose answer is being recorded here, if any (see `ending`)."""
    return ENDING.get()


def checked_budget(remaining: object, reset_seconds: object) -> tuple[int, float]:
    if isinstance(remaining, bool) or not isinstance(remaining, int):
        raise TypeError("remaining must be an int")
    if remaining < 0:
        raise ValueError("remaining must be 0 or more")
    reset = finite_number(reset_seconds, "reset_seconds")
    if not 0 <= reset <= LARGEST_MAX_SECONDS:
        raise ValueError("reset_seconds must be between 0 and the largest maximum")
    return remaining, reset

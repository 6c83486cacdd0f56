"""What changed in a store that may free a key: one event, handed to one path."""

from __future__ import annotations

from typing import Literal, NamedTuple

__all__ = ["Event", "EventKind"]

EventKind = Literal["released", "recorded", "undrained", "cleared", "quota_lifted"]
"""An attempt ended; an answer was recorded (a success may reopen a key); an operator put
a key back, or cleared it (here, or another process, followed here); a usage reading lifted
a spent quota."""


class Event(NamedTuple):
    """One change that may free a key of `provider` (`None`: of any provider: an attempt
    ended by a caller that did not say whose it was)."""

    kind: EventKind
    provider: str | None = None

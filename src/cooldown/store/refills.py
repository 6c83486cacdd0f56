"""How each provider's announced limits refill: continuously (the default reading), or in
windows, once one of its answers proved it. Mixed into `ModelCooldown`.

A reading is kept per provider and scope (model or bucket), as a digest, and for the provider
as a whole (what its status shows); with sharing, the fleet's readings arrive with its drains.
Windows are learned from the shape of a counter's own readings (`evidence/refill_shape.py`),
never from a 429 that a sibling sharing the counter could explain.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from ..arguments import resolve_now
from ..digests import credential_prefix, refill_message, scope_message
from ..evidence.refill_shape import Periods, refill_periods
from .backend import Announced
from .parts import StoreState

__all__ = [
    "MAX_READINGS",
    "REFILL_SETTINGS",
    "ProviderRefill",
    "Refill",
    "RefillReadings",
    "RefillSetting",
]

MAX_READINGS = 10000
"""Readings one store keeps at most; beyond it nothing more is learned (the default stands)."""

Refill = Literal["continuous", "window"]
"""How a provider's announced limit comes back: continuously, or all at once at its reset."""
RefillSetting = Literal["auto", "continuous", "window"]
"""How `register` fixes a provider's reading; `"auto"` learns it from the answers."""
REFILL_SETTINGS: tuple[RefillSetting, ...] = ("auto", "continuous", "window")
ProviderRefill = Literal["continuous", "window", "unknown"]


class RefillReadings:
    """Learned refill readings, under the store's lock; the fleet's read outside it."""

    def __init__(self, state: StoreState) -> None:
        self._state = state
        self._refills: dict[bytes, Refill] = {}  # local digest of a refill message -> reading
        self._periods: dict[bytes, tuple[int, Periods]] = {}  # owner + counter -> limit,
        # the periods still possible

    def clear(self) -> None:
        """Forget every reading; the store's lock held by the caller."""
        self._refills.clear()
        self._periods.clear()

    def refill_reading(
        self,
        provider: str,
        model: str | None,
        quota_bucket: str | None,
        *,
        now: float | None = None,
    ) -> Refill:
        """`"window"` once an answer proved this provider refills this scope in windows (here,
        or anywhere in the fleet), else `"continuous"`. Without any reading, no digest."""
        fleet = self._fleet_refills(now)
        if not (self._refills or fleet):
            return "continuous"
        message = refill_message(credential_prefix(provider), scope_message(model, quota_bucket))
        if self._refills.get(self._state.digest(message)) == "window":
            return "window"
        sharing = self._state.shared
        if fleet and sharing is not None and fleet.get(sharing.digest(message).hex()) == "window":
            return "window"
        return "continuous"

    def provider_refill(self, provider: str, *, now: float | None = None) -> ProviderRefill:
        """What the provider's answers have shown: `"window"` once any of its scopes learned
        it, `"continuous"` once an admission only its refill allowed was served, else
        `"unknown"`."""
        message = refill_message(credential_prefix(provider), None)
        readings: list[str | None] = [self._refills.get(self._state.digest(message))]
        fleet, sharing = self._fleet_refills(now), self._state.shared
        if fleet and sharing is not None:
            readings.append(fleet.get(sharing.digest(message).hex()))
        if "window" in readings:
            return "window"
        return "continuous" if "continuous" in readings else "unknown"

    def learn_refill(
        self,
        provider: str,
        model: str | None,
        quota_bucket: str | None,
        reading: Refill,
        *,
        now: float | None = None,
    ) -> None:
        """Keep what an answer proved: `"window"` for this scope (and so for the provider),
        `"continuous"` for the provider only (it never replaces a window). Fleet-wide with
        sharing."""
        prefix = credential_prefix(provider)
        messages = [refill_message(prefix, None)]
        if reading == "window":
            messages.append(refill_message(prefix, scope_message(model, quota_bucket)))
        learned = []
        with self._state.lock:
            for message in messages:
                digest = self._state.digest(message)
                known = self._refills.get(digest)
                if known == "window" or known == reading:
                    continue
                if digest not in self._refills and len(self._refills) >= MAX_READINGS:
                    continue
                self._refills[digest] = reading
                learned.append(message)
        sharing = self._state.shared
        if sharing is not None and learned:  # once per reading per process
            ids = {sharing.digest(message).hex(): reading for message in learned}
            sharing.backend.note_refill(ids, resolve_now(now))  # no lock across the round trip

    def windows_shown(
        self, owner: bytes, requests: Announced | None, tokens: Announced | None
    ) -> bool:
        """Do the budgets an answer announced for this owner (a key and scope, or an account
        and scope), with its earlier readings, show that its counters refill in windows: no
        period explains them all? A counter whose limit changes starts again."""
        shown = False
        with self._state.lock:
            for tag, announced in ((b"r", requests), (b"t", tokens)):
                if announced is None:
                    continue
                remaining, reset, limit = announced
                if limit is None:
                    continue
                periods = refill_periods(remaining, reset, limit)
                if periods is None:
                    continue
                counter = owner + tag
                known = self._periods.get(counter)
                if known is not None and known[0] == limit:
                    low, high = max(known[1][0], periods[0]), min(known[1][1], periods[1])
                    if low > high:  # no one period: windows (and this reading starts again)
                        shown = True
                    else:
                        periods = low, high
                elif known is None and len(self._periods) >= MAX_READINGS:
                    continue
                self._periods[counter] = (limit, periods)
        return shown

    def _fleet_refills(self, now: float | None) -> Mapping[str, str] | None:
        """The fleet's readings, from the drains' read (reused for a quarter second)."""
        sharing = self._state.shared
        if sharing is None:
            return None
        marks = sharing.backend.operator_marks(resolve_now(now))
        return None if marks is None else marks.refills

"""How each provider's announced limits refill: continuously (the default reading), or in
windows, once one of its answers proved it. Mixed into `ModelCooldown`.

A reading is kept per provider and scope (model or bucket), as a digest, and for the provider
as a whole (what its status shows); with sharing, the fleet's readings arrive with its drains.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from ..arguments import resolve_now
from ..digests import credential_prefix, refill_message, scope_message
from .parts import StoreParts

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


class RefillReadings(StoreParts):
    """Learned refill readings, under the store's lock; the fleet's read outside it."""

    _refills: dict[bytes, Refill]  # local digest of a refill message -> its reading

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
        if self._refills.get(self._digest(message)) == "window":
            return "window"
        sharing = self._shared
        if fleet and sharing is not None and fleet.get(sharing.digest(message).hex()) == "window":
            return "window"
        return "continuous"

    def provider_refill(self, provider: str, *, now: float | None = None) -> ProviderRefill:
        """What the provider's answers have shown: `"window"` once any of its scopes learned
        it, `"continuous"` once an admission only its refill allowed was served, else
        `"unknown"`."""
        message = refill_message(credential_prefix(provider), None)
        readings: list[str | None] = [self._refills.get(self._digest(message))]
        fleet, sharing = self._fleet_refills(now), self._shared
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
        with self._lock:
            for message in messages:
                digest = self._digest(message)
                known = self._refills.get(digest)
                if known == "window" or known == reading:
                    continue
                if digest not in self._refills and len(self._refills) >= MAX_READINGS:
                    continue
                self._refills[digest] = reading
                learned.append(message)
        sharing = self._shared
        if sharing is not None and learned:  # once per reading per process
            ids = {sharing.digest(message).hex(): reading for message in learned}
            sharing.backend.note_refill(ids, resolve_now(now))  # no lock across the round trip

    def _fleet_refills(self, now: float | None) -> Mapping[str, str] | None:
        """The fleet's readings, from the drains' read (reused for a quarter second)."""
        sharing = self._shared
        if sharing is None:
            return None
        marks = sharing.backend.operator_marks(resolve_now(now))
        return None if marks is None else marks.refills

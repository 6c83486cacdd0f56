"""Deadlines that expire in order, within a capacity, without scanning the table per call."""

from __future__ import annotations

import math
from collections.abc import Callable
from heapq import heappop, heappush

__all__ = ["DeadlineSchedule"]


class DeadlineSchedule:
    """`{entry: deadline}` with a min-heap of distinct deadlines and the entries due at each.

    Expiry pops the heap's head while it is due, so a call costs the entries that expired,
    not the table's size. Stale heap items (an entry extended or removed) are skipped and
    dropped in one rebuild once they outnumber the live entries. The schedule knows nothing
    of credentials or scopes: `forget` hears of every entry that leaves the table.
    """

    __slots__ = (
        "_due",
        "_expired",
        "_expiry",
        "_forget",
        "_scheduled",
        "capacity",
        "deadlines",
        "dropped_at_capacity_total",
        "high_water",
        "latest",
        "overflow_until",
        "recorded_total",
    )

    def __init__(
        self,
        capacity: int,
        forget: Callable[[bytes], None],
        expired: Callable[[bytes], None] = lambda entry: None,
    ) -> None:
        self.capacity = capacity
        self.deadlines: dict[bytes, float] = {}
        self._expiry: list[float] = []  # distinct deadlines, a min-heap
        self._due: dict[float, bytes | list[bytes]] = {}  # deadline -> the entries due then
        self._scheduled = 0  # entries listed in _due, stale ones included
        self._forget = forget
        self._expired = expired  # hears of entries that left because their deadline passed
        self.latest = 0.0  # no live deadline is later: truncation needs no scan below it
        self.high_water = -math.inf  # the latest `now` any call passed
        self.overflow_until = 0.0  # the capacity guard: new entries were refused until then
        self.recorded_total = 0
        self.dropped_at_capacity_total = 0

    def __len__(self) -> int:
        return len(self.deadlines)

    @property
    def scheduled(self) -> int:
        """Heap items held, stale ones included (bounded by twice the live entries, plus 64)."""
        return self._scheduled

    def _schedule(self, entry: bytes, deadline: float) -> None:
        due = self._due.get(deadline)
        if due is None:
            self._due[deadline] = entry
            heappush(self._expiry, deadline)
        elif isinstance(due, list):
            due.append(entry)
        else:
            self._due[deadline] = [due, entry]
        self._scheduled += 1

    def advance(self, now: float, max_seconds: int) -> None:
        """Drop what expired, then hold every deadline within this call's maximum."""
        expiry, deadlines = self._expiry, self.deadlines
        while expiry and expiry[0] <= now:
            deadline = heappop(expiry)
            due = self._due.pop(deadline)
            entries = due if isinstance(due, list) else (due,)
            self._scheduled -= len(entries)
            for entry in entries:
                if deadlines.get(entry) == deadline:
                    del deadlines[entry]
                    self._forget(entry)
                    self._expired(entry)
        if self.overflow_until and self.overflow_until <= now:
            self.overflow_until = 0.0
        if now > self.high_water:
            self.high_water = now
        # Against the latest `now` seen: a caller whose clock was read a moment ago (or a
        # caller passing 0) cannot cut everyone's cooldowns; a lowered maximum still does.
        if self.latest > self.high_water + max_seconds:
            self._truncate(self.high_water + max_seconds)
        if self._scheduled > 2 * len(deadlines) + 64:
            self._reschedule()

    def _truncate(self, limit: float) -> None:
        """A lowered maximum shortens every live cooldown, once (an operator's incident lever)."""
        deadlines = self.deadlines
        for entry, deadline in deadlines.items():
            if deadline > limit:
                deadlines[entry] = limit
        if self.overflow_until > limit:
            self.overflow_until = limit
        self.latest = limit
        self._reschedule()

    def _reschedule(self) -> None:
        """Drop stale schedule items once they outnumber live entries; amortised O(1)."""
        self._expiry.clear()
        self._due.clear()
        self._scheduled = 0
        for entry, deadline in self.deadlines.items():
            self._schedule(entry, deadline)

    def full(self) -> bool:
        return len(self.deadlines) >= self.capacity

    def put(self, entry: bytes, deadline: float) -> float:
        """Keep the later deadline; when full, add nothing and raise the guard instead.

        Returns the entry's deadline (the guard's, for an entry refused at capacity).
        """
        deadlines = self.deadlines
        current = deadlines.get(entry)
        if current is not None and current >= deadline:
            return current
        if current is None and len(deadlines) >= self.capacity:
            self.overflow_until = max(self.overflow_until, deadline)
            self.latest = max(self.latest, deadline)
            self.dropped_at_capacity_total += 1
            return deadline
        deadlines[entry] = deadline
        self._schedule(entry, deadline)
        if deadline > self.latest:
            self.latest = deadline
        self.recorded_total += 1
        return deadline

    def discard(self, entry: bytes) -> None:
        """Remove an entry now (its heap item goes stale and is skipped later)."""
        if self.deadlines.pop(entry, None) is not None:
            self._forget(entry)

    def clear(self) -> None:
        self.deadlines.clear()
        self._expiry.clear()
        self._due.clear()
        self._scheduled = 0
        self.latest = 0.0
        self.high_water = -math.inf
        self.overflow_until = 0.0
        self.recorded_total = 0
        self.dropped_at_capacity_total = 0

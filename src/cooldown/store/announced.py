"""Budgets providers announce, as of when they decided, and the attempts they have not seen.

A provider computes its rate-limit headers when it admits a request; a completion carries
them back seconds later. So a budget is as of its stamp (when its attempt was sent), and
every attempt started on its owner at or after that stamp, in flight or finished, still
spends from it until a budget stamped after it arrives; so does every attempt still in
flight (one sent just before the stamp may reach the provider after the request that made
it). An attempt that never reached the provider (no answer) spends nothing.
"""

from __future__ import annotations

from itertools import islice
from typing import NamedTuple

__all__ = ["MAX_STARTS_PER_OWNER", "Budget", "Unseen"]

MAX_STARTS_PER_OWNER = 1024
"""Attempts remembered per budget owner; beyond it the oldest go (they are the first that a
newer budget covers)."""
MAX_OWNERS = 10000
"""Budget owners remembered; beyond it the least recently started go."""
HORIZON_SECONDS = 600.0
"""An attempt started this long ago counts against no budget: its answer has arrived or
its lease has ended, and the provider's own count has moved on."""


class Budget(NamedTuple):
    """Requests or tokens a provider announced for a key and scope. With the limit announced,
    they refill continuously towards it until the reset (OpenAI's reset is the time until
    the limit is full again): `t` seconds after its stamp there are
    `min(L, R + (L - R) t / T)`. Without it, the announced remaining holds until the reset."""

    remaining: int
    reset: float
    largest: int  # the limit, or the largest remaining ever announced
    limit: int | None
    announced: float

    def level(self, now: float) -> float:
        if self.limit is None or self.limit <= self.remaining or self.reset <= self.announced:
            return float(self.remaining)
        share = min(1.0, (now - self.announced) / (self.reset - self.announced))
        return self.remaining + (self.limit - self.remaining) * share

    def ends(self, maximum: float) -> float:
        """Its reset, but never more than the call's maximum after the answer that said it
        (a reset of 31 years holds a key no longer than a cooldown could)."""
        return min(self.reset, self.announced + maximum)

    def moment(self, need: float, in_flight: int) -> float:
        """When `need` units beyond those in flight are there: as they refill, or at the
        reset without a limit."""
        if self.limit is None or self.limit <= self.remaining:
            return self.reset
        missing = need + in_flight - self.remaining
        span = self.reset - self.announced
        return min(self.reset, self.announced + missing * span / (self.limit - self.remaining))


class Unseen:
    """Per budget owner (a key's entry, or its account's), the attempts started on it, by
    token: (when it started, its cost, still in flight). Pure bookkeeping under the store's
    lock, bounded: a finished attempt is kept only while some budget may still count it."""

    def __init__(self) -> None:
        self._starts: dict[bytes, dict[int, tuple[float, int, bool]]] = {}

    def clear(self) -> None:
        self._starts.clear()

    def started(self, owner: bytes, token: int, at: float, cost: int) -> None:
        starts = self._starts.get(owner)
        if starts is None:
            starts = self._starts[owner] = {}
            if len(self._starts) > MAX_OWNERS:  # the least recently started owners go
                for oldest in list(islice(self._starts, len(self._starts) - MAX_OWNERS)):
                    del self._starts[oldest]
        starts[token] = (at, cost, True)
        if len(starts) > MAX_STARTS_PER_OWNER:
            for first in list(islice(starts, len(starts) - MAX_STARTS_PER_OWNER)):
                del starts[first]

    def finished(self, owner: bytes, token: int, *, counted: bool) -> None:
        """An attempt ended. It still spends from a budget when it got an answer and a
        budget may count it (`counted`: one is stamped no later than its start), or an
        earlier attempt still in flight may bring one stamped before it; else it is gone."""
        starts = self._starts.get(owner)
        if starts is None or token not in starts:
            return
        at, cost, _ = starts[token]
        if counted or any(live and then < at for then, _, live in starts.values()):
            starts[token] = (at, cost, False)
        else:
            self.forget(owner, token)

    def forget(self, owner: bytes, token: int) -> None:
        """An attempt that never reached the provider, or whose own answer is the budget."""
        starts = self._starts.get(owner)
        if starts is not None:
            starts.pop(token, None)
            if not starts:
                del self._starts[owner]

    def covered(self, owner: bytes, stamp: float) -> None:
        """A budget stamped `stamp` arrived: what finished before it started it has seen
        (attempts in flight stay until they end)."""
        starts = self._starts.get(owner)
        if starts is None:
            return
        for token, (at, _, live) in list(starts.items()):
            if at < stamp and not live:
                del starts[token]
        if not starts:
            del self._starts[owner]

    def since(self, owner: bytes, stamp: float, now: float) -> tuple[int, int]:
        """(attempts, their cost) a budget stamped `stamp` has not seen: those started at or
        after it (within the horizon), and every one still in flight, since one sent just
        before the stamp may reach the provider after the request that made it."""
        starts = self._starts.get(owner)
        if not starts:
            return 0, 0
        floor = max(stamp, now - HORIZON_SECONDS)
        count = cost = 0
        for at, spent, live in starts.values():
            if live or at >= floor:
                count += 1
                cost += spent
        return count, cost

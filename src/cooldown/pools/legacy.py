"""The legacy pools' provider-wide rests by (provider, key), never outgrowing the live ones."""

from __future__ import annotations

from collections.abc import Sequence
from heapq import heapify, heappop, heappush

from ..forksafe import new_lock
from ..store.foreign import ForeignEntries

__all__ = ["MAX_LIVE_RESTS", "LegacyRests"]

MAX_LIVE_RESTS = 10000
"""Live rests held at most: beyond, a new key's rest is dropped and counted (a caller
recording 10^6 distinct keys cannot grow the map; configured keys are a few dozen)."""
_Entry = tuple[str, str]  # (provider, key)


class LegacyRests:
    """Rests by (provider, key), with a min-heap of deadlines that drops expired rests.

    Every write first drops the rests that expired by its `now` (amortised O(log n)), so
    after any write the map holds no more than `max(1024, 2 x live rests)` entries.
    Reads drop the expired rests they meet. One lock; nothing here does I/O.
    """

    def __init__(self) -> None:
        self._lock = new_lock(self)
        self._rests: dict[_Entry, float] = {}
        self._expiry: list[tuple[float, str, str]] = []  # stale items are skipped, then rebuilt
        self._foreign: ForeignEntries[str, _Entry] = ForeignEntries()  # keys not held
        self.dropped_total = 0

    def __len__(self) -> int:
        return len(self._rests)

    def snapshot(self) -> dict[_Entry, float]:
        """A copy of the map (tests and status)."""
        with self._lock:
            return dict(self._rests)

    def _drop_expired(self, now: float) -> None:
        expiry, rests = self._expiry, self._rests
        while expiry and expiry[0][0] <= now:
            deadline, provider, key = heappop(expiry)
            if rests.get((provider, key)) == deadline:
                del rests[(provider, key)]
        if len(expiry) > 2 * len(rests) + 64:  # stale items outnumber live ones: rebuild
            self._expiry = [(rest, provider, key) for (provider, key), rest in rests.items()]
            heapify(self._expiry)

    def rest(
        self,
        provider: str,
        key: str,
        until: float,
        now: float,
        *,
        keep_later: bool,
        foreign: bool = False,
    ) -> None:
        """Rest a key until `until`; a new rest replaces the old one unless `keep_later`.
        A `foreign` key's rest (one its pool does not hold) is bounded apart: at most 1,024
        per provider, and it gives way to a held key's when the map is full."""
        entry = (provider, key)
        with self._lock:
            self._drop_expired(now)
            rests = self._rests
            current = rests.get(entry)
            if current is None and not foreign:
                while len(rests) >= MAX_LIVE_RESTS:  # a foreign rest gives way to a held key's
                    oldest = self._foreign.oldest()
                    if oldest is None:
                        break
                    rests.pop(oldest, None)
            if current is None and len(rests) >= MAX_LIVE_RESTS:
                self.dropped_total += 1
                return
            if keep_later and current is not None and current >= until:
                return
            rests[entry] = until
            heappush(self._expiry, (until, provider, key))
            if foreign:
                pushed_out = self._foreign.added(provider, entry)
                if pushed_out is not None:
                    rests.pop(pushed_out, None)
            elif self._foreign:
                self._foreign.forget(entry)

    def clear(self, provider: str, key: str) -> None:
        with self._lock:
            self._rests.pop((provider, key), None)
            self._foreign.forget((provider, key))

    def live(
        self, provider: str, keys: Sequence[str], now: float, max_seconds: int | None = None
    ) -> dict[str, float]:
        """Live rests of these keys; expired ones are dropped on the way. With `max_seconds`
        (the scoped path), a rest beyond `now + max_seconds` is cut to it for good: a lowered
        maximum shortens the mirror of a credential-wide rejection as it does the store's."""
        rests: dict[str, float] = {}
        if not self._rests:  # the common case: nothing rests, no lock needed to say so
            return rests
        limit = None if max_seconds is None else now + max_seconds
        with self._lock:
            for key in keys:
                rest = self._rests.get((provider, key))
                if rest is None:
                    continue
                if limit is not None and rest > limit:
                    rest = self._rests[(provider, key)] = limit
                    heappush(self._expiry, (limit, provider, key))
                if rest > now:
                    rests[key] = rest
                else:
                    del self._rests[(provider, key)]
        return rests

    def reset(self) -> None:
        with self._lock:
            self._rests.clear()
            self._expiry.clear()
            self._foreign.clear()
            self.dropped_total = 0

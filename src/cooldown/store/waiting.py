"""Dispatches waiting briefly for a key: first come, first served per provider and scope,
woken by every release and record of the store, never holding its lock while they wait."""

from __future__ import annotations

import bisect
import time
from collections import deque
from collections.abc import Callable
from typing import TypeVar

from ..errors import ModelCooldownExhausted
from ..forksafe import new_condition

__all__ = ["SHARED_RECHECK_SECONDS", "WAIT_BUCKETS", "WAIT_COUNTERS", "KeyWaiters"]

SHARED_RECHECK_SECONDS = 0.25
"""With sharing, a waiter re-checks at least this often: another process's release is not
heard here."""

WAIT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
"""The upper bounds (seconds) of the histogram of seconds waited."""

WAIT_COUNTERS = (
    "waits_total",
    "waits_served_total",
    "waits_timed_out_total",
    "waits_refused_total",
)
"""Waits started, served, timed out, and refused over the cap: `stats()` shows each."""

_T = TypeVar("_T")


class KeyWaiters:
    """The waiters of one store. `wait` runs `admit` again each time the waiter is first in
    its queue and something may have freed a key, until it admits or the deadline passes."""

    def __init__(self) -> None:
        self._changed = new_condition(self, "_changed")
        self._queues: dict[tuple[str, bytes | None], deque[object]] = {}
        self._per_provider: dict[str, int] = {}
        self.waiting = 0  # read without the lock on every release: a stale read only delays
        self.counts = dict.fromkeys(WAIT_COUNTERS, 0)
        self._buckets = [0] * (len(WAIT_BUCKETS) + 1)
        self._seconds_total = 0.0

    def reset_counts(self) -> None:
        with self._changed:
            self.counts = dict.fromkeys(WAIT_COUNTERS, 0)
            self._buckets = [0] * len(self._buckets)
            self._seconds_total = 0.0

    def notify(self) -> None:
        """A release or a record: every waiter re-checks (cheap while none waits)."""
        if self.waiting:
            with self._changed:
                self._changed.notify_all()

    def wait(
        self,
        provider: str,
        scope: bytes | None,
        refusal: ModelCooldownExhausted,
        admit: Callable[[], _T],
        *,
        seconds: float,
        max_waiters: int,
        recheck: float | None,
    ) -> _T:
        """`admit()` once a key frees within `seconds`; else `refusal` (or the then-current
        one, with its then-remaining `Retry-After`). Over `max_waiters` waiters of the
        provider, or with the earliest key free only beyond `seconds`: `refusal` at once."""
        started = time.monotonic()
        deadline = started + seconds
        if _free_in(refusal) > seconds and not refusal.awaits_attempts:
            raise refusal
        ticket = object()
        key = (provider, scope)
        with self._changed:
            if self._per_provider.get(provider, 0) >= max_waiters:
                self.counts["waits_refused_total"] += 1
                raise refusal
            self._queues.setdefault(key, deque()).append(ticket)
            self._per_provider[provider] = self._per_provider.get(provider, 0) + 1
            self.waiting += 1
            self.counts["waits_total"] += 1
        try:
            return self._until_admitted(key, ticket, refusal, admit, deadline, recheck, started)
        finally:
            with self._changed:
                queue = self._queues[key]
                queue.remove(ticket)
                if not queue:
                    del self._queues[key]
                self._per_provider[provider] -= 1
                if not self._per_provider[provider]:
                    del self._per_provider[provider]
                self.waiting -= 1
                self._changed.notify_all()  # the next in the queue may try now

    def _until_admitted(
        self,
        key: tuple[str, bytes | None],
        ticket: object,
        refusal: ModelCooldownExhausted,
        admit: Callable[[], _T],
        deadline: float,
        recheck: float | None,
        started: float,
    ) -> _T:
        ready = True  # first in the queue: try at once, then after each wake
        while True:
            with self._changed:
                while True:
                    left = deadline - time.monotonic()
                    head = self._queues[key][0] is ticket
                    if left <= 0 or (head and ready):
                        break
                    pause = min(left, recheck or left)
                    if head and not refusal.awaits_attempts:  # unless a release comes first,
                        pause = min(pause, max(0.0, _free_in(refusal)) + 0.001)  # it frees then
                    self._changed.wait(pause)
                    ready = True
            ready = False
            timed_out = deadline - time.monotonic() <= 0
            try:
                taken = admit()  # no lock held: it may reach Redis
            except ModelCooldownExhausted as again:
                refusal = again
                beyond = _free_in(again) > deadline - time.monotonic()
                if timed_out or (beyond and not again.awaits_attempts):
                    self._count("waits_timed_out_total", started)
                    raise
                continue
            self._count("waits_served_total", started)
            return taken

    def _count(self, outcome: str, started: float) -> None:
        waited = time.monotonic() - started
        with self._changed:
            self.counts[outcome] += 1
            self._buckets[bisect.bisect_left(WAIT_BUCKETS, waited)] += 1
            self._seconds_total += waited

    def histogram(self) -> tuple[list[tuple[str, int]], float]:
        """Cumulative (upper bound, count) pairs, `+Inf` last, and the seconds waited in all."""
        with self._changed:
            counts, total = list(self._buckets), self._seconds_total
        cumulative, running = [], 0
        for bound, count in zip((*map(str, WAIT_BUCKETS), "+Inf"), counts, strict=True):
            running += count
            cumulative.append((bound, running))
        return cumulative, total


def _free_in(refusal: ModelCooldownExhausted) -> float:
    free_in = refusal.free_in_seconds
    return float(refusal.retry_after) if free_in is None else free_in

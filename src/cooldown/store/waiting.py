"""Dispatches waiting briefly for a key: first come, first served per provider and scope,
woken by every release and record of the store, never holding its lock while they wait."""

from __future__ import annotations

import bisect
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import NamedTuple, TypeVar

from ..digests import scope_message
from ..errors import ModelCooldownExhausted
from ..forksafe import new_lock
from .scope import CallScope

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


class _Deadline(NamedTuple):
    """One waiter's bounds: until when, how often it re-checks, since when, and whether its
    caller left."""

    at: float
    recheck: float | None
    started: float
    gone: threading.Event | None


class KeyWaiters:
    """The waiters of one store. `wait` runs `admit` again each time the waiter is first in
    its queue and something may have freed a key, until it admits or the deadline passes.

    Each waiter sleeps on a condition of its own (over one lock): an event wakes only the
    first waiter of each queue of its provider, and a waiter that leaves wakes the next, so
    thousands of waiters cost a release no more than a few."""

    def __init__(self) -> None:
        self._lock = new_lock(self)
        self._queues: dict[tuple[str, bytes | None], deque[threading.Condition]] = {}
        self._per_provider: dict[str, int] = {}
        self._gone: dict[threading.Event, threading.Condition] = {}
        self.recheck: float | None = None  # with sharing: another process's release is not
        # signalled here, so a waiter re-checks this often
        self.waiting = 0  # read without the lock on every release: a stale read only delays
        self.counts = dict.fromkeys(WAIT_COUNTERS, 0)
        self._buckets = [0] * (len(WAIT_BUCKETS) + 1)
        self._seconds_total = 0.0

    def reset_counts(self) -> None:
        with self._lock:
            self.counts = dict.fromkeys(WAIT_COUNTERS, 0)
            self._buckets = [0] * len(self._buckets)
            self._seconds_total = 0.0

    def notify(self, provider: str | None = None) -> None:
        """Something may have freed a key of `provider` (of any, for `None`): the first
        waiter of each of its queues re-checks (cheap while none waits)."""
        if self.waiting:
            with self._lock:
                for (waiting_for, _), queue in self._queues.items():
                    if provider is None or waiting_for == provider:
                        queue[0].notify()

    def leave(self, gone: threading.Event) -> None:
        """The waiter whose caller set `gone` wakes, to leave its queue at once."""
        with self._lock:
            ticket = self._gone.get(gone)
            if ticket is not None:
                ticket.notify()

    def wait(
        self,
        scope: CallScope,
        refusal: ModelCooldownExhausted,
        admit: Callable[[], _T],
        *,
        seconds: float,
        max_waiters: int,
        gone: threading.Event | None = None,
    ) -> _T:
        """`admit()` once a key frees within `seconds`; else `refusal` (or the then-current
        one, with its then-remaining `Retry-After`). Over `max_waiters` waiters of the
        provider, or with the earliest key free only beyond `seconds`: `refusal` at once.
        Waiters queue per provider and model (or bucket) of `scope`, first come first
        served; no lock is held while waiting. Once `gone` is set (its caller left),
        `refusal` at once, its place given to the next."""
        started = time.monotonic()
        deadline = started + seconds
        if _free_in(refusal) > seconds and not refusal.awaits_attempts:
            raise refusal
        ticket = threading.Condition(self._lock)
        provider, recheck = scope.provider, self.recheck
        key = (provider, scope_message(scope.model, scope.quota_bucket))
        with self._lock:
            if self._per_provider.get(provider, 0) >= max_waiters:
                self.counts["waits_refused_total"] += 1
                raise refusal
            self._queues.setdefault(key, deque()).append(ticket)
            self._per_provider[provider] = self._per_provider.get(provider, 0) + 1
            if gone is not None:
                self._gone[gone] = ticket
            self.waiting += 1
            self.counts["waits_total"] += 1
        try:
            return self._until_admitted(
                key, ticket, refusal, admit, _Deadline(deadline, recheck, started, gone)
            )
        finally:
            with self._lock:
                tickets = self._queues[key]
                was_first = tickets[0] is ticket
                tickets.remove(ticket)
                if not tickets:
                    del self._queues[key]
                elif was_first:
                    tickets[0].notify()  # the next in the queue may try now
                self._per_provider[provider] -= 1
                if not self._per_provider[provider]:
                    del self._per_provider[provider]
                if gone is not None:
                    self._gone.pop(gone, None)
                self.waiting -= 1

    def _until_admitted(
        self,
        key: tuple[str, bytes | None],
        ticket: threading.Condition,
        refusal: ModelCooldownExhausted,
        admit: Callable[[], _T],
        until: _Deadline,
    ) -> _T:
        deadline, recheck, started, gone = until
        ready = True  # first in the queue: try at once, then after each wake
        while True:
            with self._lock:
                while True:
                    left = deadline - time.monotonic()
                    head = self._queues[key][0] is ticket
                    if gone is not None and gone.is_set():
                        raise refusal  # its caller left: its place goes to the next
                    if left <= 0 or (head and ready):
                        break
                    pause = min(left, recheck or left)
                    if head and not refusal.awaits_attempts:  # unless a release comes first,
                        pause = min(pause, max(0.0, _free_in(refusal)) + 0.001)  # it frees then
                    ticket.wait(pause)
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
        with self._lock:
            self.counts[outcome] += 1
            self._buckets[bisect.bisect_left(WAIT_BUCKETS, waited)] += 1
            self._seconds_total += waited

    def histogram(self) -> tuple[list[tuple[str, int]], float]:
        """Cumulative (upper bound, count) pairs, `+Inf` last, and the seconds waited in all."""
        with self._lock:
            counts, total = list(self._buckets), self._seconds_total
        cumulative, running = [], 0
        for bound, count in zip((*map(str, WAIT_BUCKETS), "+Inf"), counts, strict=True):
            running += count
            cumulative.append((bound, running))
        return cumulative, total


def _free_in(refusal: ModelCooldownExhausted) -> float:
    free_in = refusal.free_in_seconds
    return float(refusal.retry_after) if free_in is None else free_in

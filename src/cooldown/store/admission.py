"""Attempts in flight, one probe after a release, and providers' request budgets.

Pure bookkeeping over digests and the caller's monotonic `now`, guarded by the store's lock
(the store calls it only while holding that lock). Everything here is bounded: leases expire,
budgets end at their reset, and the maps that only order keys are capped.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from heapq import heapify, heappop, heappush
from itertools import islice
from typing import Any, Literal, NamedTuple, TypeVar

from .announced import Budget, Unseen
from .backend import Refilled, SharedAttempt
from .declared import DeclaredWindows

__all__ = ["ORDERS", "Admission", "Admitted", "Attempt", "Load", "Order", "Refilled"]

_Value = TypeVar("_Value")

MAX_TRACKED = 10000
"""Entries each ordering or marking map may hold; beyond it the oldest are dropped (they only
order keys or mark a release: dropping one costs at most one extra concurrent dispatch)."""
RECENT_THROTTLES = 1024
"""Throttle times kept to tell a stale success from a fresh one."""


class Attempt(NamedTuple):
    """One dispatch in flight: the key's entries, when it started, whether it is the probe,
    and, when the shared state admitted it, its shared half."""

    token: int
    entry: bytes  # credential digest + scope digest
    started: float
    probe: bool
    shared: SharedAttempt | None = None
    account: bytes | None = None  # account digest + scope digest, for a key in an account
    refilled: Refilled | None = None  # the counter only its continuous refill had room in
    reading: Literal["continuous", "window"] = "continuous"  # the refill, as of its admission


Load = tuple[float, int, float]
"""How a free key ranks for a scope in spread order: minus the share of its announced budget
left (the smaller of its requests' and its tokens', each less what is in flight; a key with
no announced budget counts as full), its attempts in flight, its last dispatch. Tuples
compare in that order: the largest share left first, then fewest in flight, then least
recently used. For an oversize request the first item is minus its token limit instead."""


class Admission:
    """In-flight counts per (credential, scope) with expiring leases; the probe claim after a
    cooldown ends; request and token budgets from rate-limit headers.

    A key in an account spends the account's budgets: they live under the
    account's entry (account digest + scope digest), where the in-flight counts and costs of
    all its keys are summed; a key in no account is its own account."""

    def __init__(self) -> None:
        self._next_token = 0
        # token -> (entry, lease deadline, account entry or None)
        self._leases: dict[int, tuple[bytes, float, bytes | None]] = {}
        self._lease_expiry: list[tuple[float, int]] = []  # (lease deadline, token), a heap
        self._in_flight: dict[bytes, int] = {}  # per entry, and summed per account entry
        self._probing: dict[bytes, int] = {}  # entry -> the token of its probe
        self._released: dict[bytes, None] = {}  # entries (or credentials) whose cooldown ended
        self._budgets: dict[bytes, Budget] = {}  # requests
        self._token_budgets: dict[bytes, Budget] = {}  # tokens
        self._last_dispatch: dict[bytes, float] = {}
        self._throttled_at: dict[bytes, float] = {}
        self._unseen = Unseen()  # attempts each budget has not seen yet
        self.declared = DeclaredWindows()  # what started in each window declared at register

    def clear(self) -> None:
        for table in (
            self._leases,
            self._in_flight,
            self._probing,
            self._released,
            self._budgets,
            self._token_budgets,
            self._last_dispatch,
            self._throttled_at,
        ):
            table.clear()
        self._lease_expiry.clear()
        self._unseen.clear()
        self.declared.clear()

    def forget(self, matches: Callable[[bytes], bool]) -> None:
        """An operator's clear: the matching entries' probes, releases and budgets."""
        tables: list[dict[bytes, Any]] = [self._probing, self._released, self._budgets]
        for table in [*tables, self._token_budgets]:
            for entry in [entry for entry in table if matches(entry)]:
                del table[entry]

    # -- the store tells -------------------------------------------------------------------

    def released(self, entry: bytes) -> None:
        """A cooldown ended (its deadline passed): the next dispatch to it is a probe."""
        _bounded_set(self._released, entry, None)

    def throttled(self, entry: bytes, now: float) -> None:
        _bounded_set(self._throttled_at, entry, now, limit=RECENT_THROTTLES)

    def stale(self, entry: bytes, sent_at: float) -> bool:
        """Did this attempt start before the entry's cooldown was recorded?"""
        throttled_at = self._throttled_at.get(entry)
        return throttled_at is not None and sent_at < throttled_at

    def budget(
        self,
        entry: bytes,
        remaining: int,
        reset: float,
        limit: int | None = None,
        now: float = 0.0,
        seen: int | None = None,
    ) -> None:
        """A request budget as of `now`, its stamp (when the attempt `seen`, whose answer
        said it, was sent): it replaces one stamped no later; it ends at its reset and, with
        the limit announced, refills towards it from the stamp meanwhile."""
        self._keep(self._budgets, entry, Budget(remaining, reset, 0, limit, now), seen)

    def token_budget(
        self,
        entry: bytes,
        remaining: int,
        reset: float,
        limit: int | None,
        now: float,
        seen: int | None = None,
    ) -> None:
        """Tokens left as of `now`, until the reset; the limit (else the largest remaining
        ever announced) tells a request no budget of this key could ever hold."""
        self._keep(self._token_budgets, entry, Budget(remaining, reset, 0, limit, now), seen)

    def _keep(
        self, table: dict[bytes, Budget], owner: bytes, told: Budget, seen: int | None
    ) -> None:
        """Newer by stamp, not by arrival: an older answer may raise the known limit, never
        change the remaining. Attempts started since the stamp spend from it."""
        if seen is not None:
            self._unseen.forget(owner, seen)  # its own request is in the count it announced
        known = table.get(owner)
        largest = max(told.limit or 0, told.remaining, 0 if known is None else known.largest)
        if known is not None and told.announced < known.announced:
            limit = told.limit if known.limit is None else max(known.limit, told.limit or 0)
            table[owner] = known._replace(limit=limit, largest=largest)
            return
        self._unseen.covered(owner, told.announced)
        _bounded_set(table, owner, told._replace(largest=largest))

    # -- selection -------------------------------------------------------------------------

    def expire(self, now: float) -> None:
        """Forget the attempts whose lease ran out (a crashed worker's, or a lost `finish`)."""
        expiry = self._lease_expiry
        while expiry and expiry[0][0] <= now:
            _, token = heappop(expiry)
            if token in self._leases:
                self._end(token)

    def probing(self, entry: bytes) -> bool:
        return entry in self._probing

    def in_flight_on(self, entry: bytes, account: bytes | None) -> bool:
        """Are attempts of this process in flight on the key's budget (its own, or its
        account's)? Their ends may free it before its hold says."""
        return self._in_flight.get(entry if account is None else account, 0) > 0

    def weigh(
        self,
        entry: bytes,
        now: float,
        cost: int | None = None,
        *,
        oversize: bool = False,
        account: bytes | None = None,
        maximum: float = math.inf,
    ) -> tuple[float, Load]:
        """Until when the key is held back for this scope (0.0: it may be dispatched now;
        `now + 1` while its probe is out; while its budget's requests, or its tokens less
        those in flight, are fewer than one request or `cost` needs, until enough is back),
        and how busy it is. The budgets are the `account`'s when the key is in one. An
        `oversize` request (larger than every candidate's token limit) is held by no token
        budget and ranks keys by their limit: the provider decides. No hold outlasts `maximum`
        seconds from the answer that made it. Call `expire` first."""
        in_flight = self._in_flight.get(entry, 0)
        last = self._last_dispatch.get(entry, -math.inf)
        if entry in self._probing:
            return now + 1.0, (0.0, in_flight, last)
        owner = entry if account is None else account
        hold, rank = 0.0, -1.0
        if self._token_budgets:  # the common case has none: nothing to look up
            need = 1 if cost is None else cost
            hold, rank = self._token_hold(owner, now, need, oversize, maximum)
        budget = self._budgets.get(owner)
        if budget is None:
            return hold, (rank, in_flight, last)
        ends = budget.ends(maximum)
        if ends <= now:
            del self._budgets[owner]
            return hold, (rank, in_flight, last)
        spending, _ = self._unseen.since(owner, budget.announced, now)
        left = budget.level(now) - spending
        if left < 1:  # no request left until one more refills
            hold = max(hold, min(ends, budget.moment(1, spending)))
        if not oversize:
            rank = max(rank, -max(0.0, left) / max(1, budget.largest))
        return hold, (rank, in_flight, last)

    def _token_hold(
        self, owner: bytes, now: float, need: int, oversize: bool, maximum: float
    ) -> tuple[float, float]:
        """(until when the key's tokens cannot hold `need` beyond those in flight, minus the
        share of its token budget left for the spread order); (0.0, -1.0) without a token
        budget (it counts as full). For an oversize request nothing holds and the key's
        limit ranks it: the provider decides."""
        budget = self._token_budgets.get(owner)
        if budget is None:
            return 0.0, -1.0
        ends = budget.ends(maximum)
        if ends <= now:
            del self._token_budgets[owner]
            return 0.0, -1.0
        if oversize:
            return 0.0, -float(budget.largest)
        _, in_flight = self._unseen.since(owner, budget.announced, now)
        headroom = budget.level(now) - in_flight
        hold = min(ends, budget.moment(need, in_flight)) if headroom < need else 0.0
        return hold, -max(0.0, headroom) / max(1, budget.largest)

    @property
    def knows_tokens(self) -> bool:
        return bool(self._token_budgets)

    def oversize(self, owners: list[bytes], cost: int | None, now: float) -> bool:
        """Is `cost` larger than every one of these budgets' known token limits (or, without
        a limit header, the largest remaining each ever announced)? `owners`: each key's
        entry, or its account's."""
        if cost is None or not owners:
            return False
        for owner in owners:
            tokens = self._token_budgets.get(owner)
            if tokens is None or tokens.reset <= now or cost <= tokens.largest:
                return False
        return True

    # -- attempts --------------------------------------------------------------------------

    def start(
        self,
        admitted: Admitted,
        now: float,
        lease: float,
        shared: tuple[bool, SharedAttempt, Refilled | None] | None = None,
        cost: int | None = None,
    ) -> Attempt:
        """Count one attempt on the `admitted` key in flight (and in its account's count); it
        is the probe when the key's cooldown just ended (or, when the shared state admitted
        it, when the shared state says so)."""
        _, credential, entry, account = admitted
        self._next_token += 1
        token = self._next_token
        self._leases[token] = (entry, now + lease, account)
        expiry = self._lease_expiry
        heappush(expiry, (now + lease, token))
        if len(expiry) > 2 * len(self._leases) + 64:  # finished attempts' items: drop them
            expiry[:] = [(held[1], token) for token, held in self._leases.items()]
            heapify(expiry)
        owner = entry if account is None else account
        refilled = self._refilled(owner, now, cost)  # before this attempt counts
        if shared is not None and shared[2] is not None:  # the fleet's budgets say so
            refilled = shared[2]
        self._in_flight[entry] = self._in_flight.get(entry, 0) + 1
        if account is not None:
            self._in_flight[account] = self._in_flight.get(account, 0) + 1
        self._unseen.started(owner, token, now, cost or 0)
        _bounded_set(self._last_dispatch, entry, now)
        if shared is None:
            probe = entry in self._released or credential in self._released
        else:
            probe = shared[0]
        if probe:
            self._probing[entry] = token
        attempt_shared = None if shared is None else shared[1]
        return Attempt(token, entry, now, probe, attempt_shared, account, refilled)

    def _refilled(self, owner: bytes, now: float, cost: int | None) -> Refilled | None:
        """The counter whose announced remaining, less what started since its stamp, had no
        room for this attempt: only its refill (with the limit announced) admits it."""
        budget = self._budgets.get(owner)
        if budget is not None and budget.limit is not None and budget.reset > now:
            spending, _ = self._unseen.since(owner, budget.announced, now)
            if budget.remaining - spending < 1:
                return "requests"
        tokens = self._token_budgets.get(owner)
        if tokens is not None and tokens.limit is not None and tokens.reset > now:
            _, in_flight = self._unseen.since(owner, tokens.announced, now)
            if tokens.remaining - in_flight < (1 if cost is None else cost):
                return "tokens"
        return None

    def finish(self, attempt: Attempt, *, served: bool, answered: bool = True) -> None:
        """The attempt's answer was recorded (or `send` raised): release its count and probe.
        One that never reached the provider (`answered=False`) spends no budget."""
        owner = attempt.entry if attempt.account is None else attempt.account
        if answered:
            self._unseen.finished(owner, attempt.token, counted=self._stamped_by(owner, attempt))
        else:
            self._unseen.forget(owner, attempt.token)
        if attempt.token not in self._leases:
            return  # already forgotten: its lease expired
        self._end(attempt.token)
        if attempt.probe and served:  # the key is back: no more probing until it cools again
            entry = attempt.entry
            self._released.pop(entry, None)
            self._released.pop(entry[: len(entry) // 2], None)  # its credential's digest

    def _stamped_by(self, owner: bytes, attempt: Attempt) -> bool:
        """Is a budget of the owner stamped no later than the attempt's start (so it counts
        the attempt until a newer one covers it)?"""
        return any(
            budget is not None and budget.announced <= attempt.started
            for budget in (self._budgets.get(owner), self._token_budgets.get(owner))
        )

    def _end(self, token: int) -> None:
        entry, _, account = self._leases.pop(token)
        _subtract(self._in_flight, entry, 1)
        if account is not None:
            _subtract(self._in_flight, account, 1)
        if self._probing.get(entry) == token:
            del self._probing[entry]


Admitted = tuple[str, bytes, bytes, bytes | None]
"""A key a dispatch may use: the key, its credential digest, its entry, its account's entry."""

Order = Literal["configured", "spread"]
ORDERS: tuple[Order, ...] = ("configured", "spread")


def _subtract(counts: dict[bytes, int], entry: bytes, amount: int) -> None:
    """Take `amount` off a count; a count that reaches 0 leaves the map."""
    left = counts.get(entry, 0) - amount
    if left > 0:
        counts[entry] = left
    else:
        counts.pop(entry, None)


def _bounded_set(
    table: dict[bytes, _Value], entry: bytes, value: _Value, *, limit: int = MAX_TRACKED
) -> None:
    """Set; beyond `limit` entries drop the oldest inserted sixteenth (an approximation of LRU
    that costs one dict write on the hot path). A dict leaves a hole where it deleted, and
    finding its oldest entry walks the holes at its front: dropping one entry per write would
    walk up to `limit` of them on every write, a batch walks them once."""
    table[entry] = value
    if len(table) > limit:
        for oldest in list(islice(table, len(table) - limit + limit // 16)):
            del table[oldest]

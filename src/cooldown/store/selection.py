"""Which keys a selection may use, read from the deadline table under the store's lock."""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Literal, TypeAlias, TypeVar

from ..arguments import (
    check_cost,
    retry_after,
)
from ..digests import credential_message
from ..errors import CooldownError, ModelCooldownCapacity, ModelCooldownExhausted
from .accounts import account_entries
from .admission import Admitted, Load, Order
from .claims import Claim
from .lookup import Lookup, gather
from .parts import StoreState
from .refusals import Holds, exhausted
from .scope import CallScope

__all__ = ["Reason", "Selection", "admissible", "scan"]

_NO_LOAD: Load = (0.0, 0, 0.0)  # configured order: every key weighs the same

Reason: TypeAlias = Literal[
    "credential", "quota", "scope", "legacy", "probe", "budget", "limit", "capacity"
]
"""Why a key is not selectable: the observation that holds it longest (see `explain`)."""
_Entry = TypeVar("_Entry", bytes, str)  # a local digest, or a shared hex id


def scan(
    state: StoreState, lookup: Lookup, now: float, *, first_only: bool
) -> tuple[list[str], float]:
    """The keys free at `now` for a call without a scope (a scoped one goes through
    `admissible`), and the earliest release among the others. `gather` checked the keys
    and the legacy rests."""
    _, prefix, keys, _, legacy, _, _, _, _, _ = lookup
    deadlines, digest = state.deadlines, state.digest
    free: list[str] = []
    earliest = math.inf
    for key in keys:
        # A key returns only when its auth and legacy rests have both expired; with an
        # empty table (a healthy gateway) no digest can match: none is computed.
        release = deadlines.get(digest(credential_message(prefix, key)), 0.0) if deadlines else 0.0
        if key in legacy:
            release = max(release, legacy[key])
        if release <= now:
            free.append(key)
            if first_only:
                break
        elif release < earliest:
            earliest = release
    return free, earliest


def admissible(
    state: StoreState,
    lookup: Lookup,
    now: float,
    *,
    spread: bool,
    stop_at_free_outside: Collection[str] | None = None,
    cost: int | None = None,
) -> tuple[list[Admitted], float, bool, Holds | None]:
    """The keys a dispatch may use now, as (key, credential digest, entry, account entry),
    in the order asked for; the earliest moment another key is free (a release, a
    budget's reset, or one second for a probe in flight); and whether a key is held only
    while attempts of this process are in flight on it (their ends may free it sooner). In
    configured order, `stop_at_free_outside` ends the scan at the first free key not in it:
    a dispatch needs no more. `cost` is the request's tokens, held against each key's (or
    its account's) token budget and the `limits` declared for it; and, once a key is not
    free, why each such key is held (`Holds`)."""
    ceiling, prefix, keys, scope, legacy, _, _, _, labels, limits = lookup
    assert scope is not None  # dispatch admits on the scoped path only
    deadlines, digest, admission = state.deadlines, state.digest, state.admission
    scope_digest = digest(scope)
    accounts = account_entries(digest, prefix, keys, labels, scope_digest)
    admission.expire(now)
    # Whether a cost is oversize depends on every key's token limit: then every digest comes
    # first. Otherwise they are computed as the scan goes (configured order may stop at its
    # first free key). `gather` checked the keys and the legacy rests.
    digested: list[tuple[bytes, bytes]] = []
    oversize = False
    if cost is not None and admission.knows_tokens:
        for key in keys:
            credential = digest(credential_message(prefix, key))
            digested.append((credential, credential + scope_digest))
        owners = [accounts.get(key, entry) for key, (_, entry) in zip(keys, digested, strict=True)]
        oversize = admission.oversize(owners, cost, now)
    if oversize:  # every key's limit is read first: the largest takes it
        stop_at_free_outside = None
    free: list[tuple[Load, int, str, bytes, bytes, bytes | None]] = []
    earliest = math.inf
    awaited = False
    holds: Holds | None = None
    for position, key in enumerate(keys):
        if digested:
            credential, entry = digested[position]
        else:
            credential = digest(credential_message(prefix, key))
            entry = credential + scope_digest
        release = 0.0
        if deadlines:
            release = max(deadlines.get(credential, 0.0), deadlines.get(entry, 0.0))
        if key in legacy:
            release = max(release, legacy[key])
        load = _NO_LOAD
        account = accounts.get(key) if accounts else None
        limited = False
        if release <= now:
            release, load = admission.weigh(
                entry, now, cost, oversize=oversize, account=account, maximum=ceiling
            )
            if limits is not None:
                owner = entry if account is None else account
                declared = min(now + ceiling, admission.declared.hold(owner, limits, now, cost))
                limited = declared > max(now, release)
                release = max(release, declared)
            if release > now and not awaited:
                awaited = admission.in_flight_on(entry, account)
        if release <= now:
            ranked = load if spread or oversize else _NO_LOAD
            free.append((ranked, position, key, credential, entry, account))
            if stop_at_free_outside is not None and key not in stop_at_free_outside:
                break
            continue
        if release < earliest:
            earliest = release
        if holds is None:
            holds = Holds()
        holds.held(credential, release, deadlines, limited=limited)
    if spread:
        free.sort()  # by load, then configured position (unique: nothing after it compares)
    elif oversize:  # by weight: minus the key's token limit
        free.sort(key=lambda item: (item[0][0], item[1]))
    return [item[2:] for item in free], earliest, awaited, holds


class Selection:
    """The one body `available`, `eligible`, `select` and `admit` share: the free keys, or
    the 429 (every key cools) or the 503 (the table is full) instead. Reads and counts the
    store's state under its lock.
    """

    def __init__(self, state: StoreState) -> None:
        self._state = state

    def choose(
        self,
        mode: Literal["available", "eligible", "select"],
        lookup: Lookup,
        order: Order,
        claim: Claim | None = None,
        cost: int | None = None,
    ) -> list[str]:
        """The shared body of `available`, `eligible`, `select` (which stops at one key) and
        `admit` (which also counts the chosen key in flight, under the same lock), over the
        checked arguments `gather` returned."""
        _, _, keys, scope, legacy, given_now, shared, _, _, _ = lookup
        if shared:  # the backend answered for every key
            legacy = {key: max(legacy.get(key, 0.0), *shared[key]) for key in keys}
            lookup = (*lookup[:4], legacy, *lookup[5:])
        if claim is not None and scope is None:
            raise ValueError("admit needs a model or a quota bucket")
        spread = order == "spread" and scope is not None
        try:
            return self._choose_locked(mode, lookup, order, claim, spread, cost)
        except ModelCooldownExhausted:  # a dispatch's admission: counted if it reaches a client
            if claim is None:
                self.count_exhausted(given_now)
            raise
        except CooldownError:  # the fleet counts it too (after the lock)
            self._tell_fleet("capacity_rejections_total", given_now)
            raise

    def count_exhausted(self, now: float | None = None) -> None:
        """One of our 429s reached a caller: `exhausted_total` counts exactly those (a
        dispatch counts the one it raises, not the refusals its waits and rotation met)."""
        with self._state.lock:
            self._state.exhausted_total += 1
        self._tell_fleet("exhausted_total", now)

    def _tell_fleet(self, counter: str, now: float | None) -> None:
        """Add to one of the fleet's counters, on the caller's clock (its backoff runs on
        it)."""
        sharing = self._state.shared
        if sharing is not None:
            sharing.backend.add_to_fleet(counter, time.monotonic() if now is None else now)

    def _choose_locked(
        self,
        mode: Literal["available", "eligible", "select"],
        lookup: Lookup,
        order: Order,
        claim: Claim | None,
        spread: bool,
        cost: int | None,
    ) -> list[str]:
        ceiling, _, keys, scope, _, given_now, _, shared_overflow, _, _ = lookup
        with self._state.lock:  # read the clock under the lock: no one prunes past our `now`
            current_time = time.monotonic() if given_now is None else given_now
            self._state.schedule.advance(current_time, ceiling)
            admitted: list[Admitted] = []
            awaited = False
            holds: Holds | None = None
            if scope is not None:  # in any order: a probe out or a spent budget holds a key
                stop_at_free_outside: Collection[str] | None = None
                if claim is not None and not spread:
                    stop_at_free_outside = claim.first_free_outside()
                elif mode == "select" and not spread:
                    stop_at_free_outside = ()
                admitted, earliest, awaited, holds = admissible(
                    self._state,
                    lookup,
                    current_time,
                    spread=spread,
                    stop_at_free_outside=stop_at_free_outside,
                    cost=cost,
                )
                free = [key for key, _, _, _ in admitted]
            else:
                free, earliest = scan(
                    self._state, lookup, current_time, first_only=mode == "select"
                )
            if keys and not free and mode != "available":
                reason, spent = (holds or Holds()).reason(self._state.quota)
                raise exhausted(
                    earliest,
                    current_time,
                    ceiling,
                    awaits_attempts=awaited,
                    reason=reason,
                    every_key_spent=spent,
                )
            overflow = max(self._state.schedule.overflow_until, shared_overflow)
            if free and overflow > current_time:  # an empty result never raises this
                self._state.capacity_rejections_total += 1
                raise ModelCooldownCapacity(retry_after(overflow, current_time, ceiling))
            if claim is not None:
                claim.holds = holds
                claim.take(admitted, self._state.admission, current_time, earliest, ceiling)
            return free

    def free(
        self,
        mode: Literal["available", "eligible", "select"],
        scope: CallScope,
        keys: Sequence[str],
        legacy_rest_until: Mapping[str, float] | None,
    ) -> list[str]:
        """The free keys of one scope, as `available`, `eligible` or `select` ask for them."""
        lookup = gather(self._state.shared, scope, keys, legacy_rest_until)
        return self.choose(mode, lookup, scope.order, cost=check_cost(scope.cost))

"""What operators may read of the store: why each key waits, how many models, the counters."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TypeVar

from ..arguments import check_cost, require_keys, require_str, resolve_now
from ..digests import credential_message, credential_prefix, scope_message
from .accounts import account_entries, checked_labels
from .budget import DIGEST_SIZE
from .declared import WindowReader, WindowStatus, hold_in, status_in, window_id
from .lookup import Lookup, gather
from .parts import StoreState
from .quota_marks import held_by_quota
from .scope import CallScope
from .selection import Reason

__all__ = ["Inspection"]

_LOCAL_ONLY = {
    "shared": False,
    "shared_errors_total": 0,
    "shared_degraded": False,
    "shared_split": False,
}


class Inspection:
    """The store's read-only questions for operators; counts nothing, raises no cooldown
    error. Reads the store's state under its lock."""

    def __init__(self, state: StoreState) -> None:
        self._state = state

    def explain(
        self,
        scope: CallScope,
        keys: Sequence[str],
        legacy_rest_until: Mapping[str, float] | None,
    ) -> list[tuple[Reason | None, float]]:
        """Per key, why it is not selectable and until when (see `ModelCooldown.explain`)."""
        checked_cost = check_cost(scope.cost)
        lookup = gather(self._state.shared, scope, keys, legacy_rest_until)
        ceiling, given_now, shared_overflow = lookup[0], lookup[5], lookup[7]
        with self._state.lock:
            current_time = time.monotonic() if given_now is None else given_now
            self._state.schedule.advance(current_time, ceiling)
            overflow = max(self._state.schedule.overflow_until, shared_overflow)
            self._state.admission.expire(current_time)
            explained = explain_keys(self._state, lookup, current_time, overflow, checked_cost)
        if any(reason == "credential" for reason, _ in explained):
            self._name_quotas(lookup[1], lookup[2], explained, current_time)
        fleet = self._fleet_windows(scope, lookup[2], current_time)
        if fleet is not None and scope.limits is not None:  # the fleet's counts, not ours
            for position, read in enumerate(fleet):
                hold = min(
                    ceiling + current_time, hold_in(read, scope.limits, current_time, checked_cost)
                )
                if hold > max(current_time, explained[position][1]):
                    explained[position] = ("limit", hold)
        return explained

    def _fleet_windows(
        self, scope: CallScope, keys: Sequence[str], now: float
    ) -> list[WindowReader] | None:
        """Each key's declared windows as the fleet counted them (its own owner's, or its
        account's), read in one round trip; `None` without sharing, limits or an answer."""
        sharing, limits = self._state.shared, scope.limits
        message = scope_message(scope.model, scope.quota_bucket)
        if sharing is None or limits is None or message is None or not keys:
            return None
        prefix, scope_id = credential_prefix(scope.provider), sharing.digest(message)
        labels = checked_labels(scope.accounts) if scope.accounts else {}
        accounts = account_entries(sharing.digest, prefix, keys, labels, scope_id)
        owners = [
            (accounts.get(key) or sharing.digest(credential_message(prefix, key)) + scope_id).hex()
            for key in keys
        ]
        ids = [window_id(counter, unit) for counter, unit, _ in limits.windows]
        slots = sharing.backend.declared_slots(
            [f"{owner}|{window}" for owner in owners for window in ids], now
        )
        if slots is None:
            return None

        def reader(owner: str) -> WindowReader:
            return lambda counter, unit: slots.get(f"{owner}|{window_id(counter, unit)}", [])

        return [reader(owner) for owner in owners]

    def _name_quotas(
        self,
        prefix: bytes,
        keys: Sequence[str],
        explained: list[tuple[Reason | None, float]],
        now: float,
    ) -> None:
        """A credential-wide hold that is a spent quota (here, or marked by another process)
        is named `"quota"`; the shared marks are read outside the lock."""
        sharing = self._state.shared
        shared = None if sharing is None else sharing.backend.quota_marks(now)
        with self._state.lock:
            for position, (reason, release) in enumerate(explained):
                if reason != "credential":
                    continue
                message = credential_message(prefix, keys[position])
                until = self._state.quota.until(self._state.digest(message))
                if sharing is not None and shared:
                    until = max(until, shared.get(sharing.digest(message).hex(), 0.0))
                if held_by_quota(until, release):
                    explained[position] = ("quota", release)

    def declared_counts(self, scope: CallScope, keys: Sequence[str]) -> list[list[WindowStatus]]:
        """Per key, each window declared in `scope.limits` as its count stands for the
        scope (its account's, for a key in one); nothing without limits or a scope."""
        limits, message = scope.limits, scope_message(scope.model, scope.quota_bucket)
        keys = require_keys(keys)
        if limits is None or message is None:
            return [[] for _ in keys]
        prefix, current_time = credential_prefix(scope.provider), resolve_now(scope.now)
        fleet = self._fleet_windows(scope, keys, current_time)
        if fleet is not None:  # the fleet's counts include this process's
            return [status_in(read, limits, current_time) for read in fleet]
        scope_digest = self._state.digest(message)
        labels = checked_labels(scope.accounts) if scope.accounts else {}
        accounts = account_entries(self._state.digest, prefix, keys, labels, scope_digest)
        with self._state.lock:
            return [
                self._state.admission.declared.status(
                    accounts.get(key)
                    or self._state.digest(credential_message(prefix, require_str(key, "each key")))
                    + scope_digest,
                    limits,
                    current_time,
                )
                for key in keys
            ]

    def scoped_counts(
        self, provider: str, keys: Sequence[str], *, now: float | None = None
    ) -> list[int]:
        """Per key, how many models or buckets it cools for right now (shared ones included).

        One pass over the table (and one shared round trip), whatever the number of keys;
        nothing is stored to answer it. For operators, not routes. With shared state, a key's
        count is the larger of the shared and the local one: this process's own cooldowns are
        in both, under different ids, so adding them would count each twice.
        """
        prefix = credential_prefix(provider)
        messages = [
            credential_message(prefix, require_str(key, "each key")) for key in require_keys(keys)
        ]
        current_time = resolve_now(now)
        counts = [0] * len(messages)
        if self._state.deadlines and messages:
            with self._state.lock:  # a C-speed copy; the counting runs without the lock
                held = list(self._state.deadlines.items())
            wanted_local = {self._state.digest(message): i for i, message in enumerate(messages)}
            live = [entry for entry, deadline in held if deadline > current_time]
            _count_by_prefix(live, wanted_local, counts, DIGEST_SIZE)
        sharing = self._state.shared
        if sharing is not None and messages:
            shared = sharing.backend.live_entries(current_time)
            if shared is not None:
                wanted = {sharing.digest(message).hex(): i for i, message in enumerate(messages)}
                shared_counts = [0] * len(messages)
                _count_by_prefix(shared, wanted, shared_counts, 2 * DIGEST_SIZE)
                counts = list(map(max, counts, shared_counts))
        return counts

    def all_cooling_scopes(
        self, provider: str, keys: Sequence[str], *, now: float | None = None
    ) -> int:
        """In how many models or buckets every one of these keys cools right now: where
        clients get 429. Counted from the live entries (the shared ones, when Redis answers),
        without a name; a key cooling credential-wide cools in every scope, and when every
        key does, that counts as one scope at least. For operators, not routes."""
        prefix = credential_prefix(provider)
        messages = [
            credential_message(prefix, require_str(key, "each key")) for key in require_keys(keys)
        ]
        current_time = resolve_now(now)
        if not messages:
            return 0
        sharing = self._state.shared
        shared = None if sharing is None else sharing.backend.live_entries(current_time)
        if sharing is not None and shared is not None:
            credentials = {sharing.digest(message).hex() for message in messages}
            return _every_key_cooling(shared, credentials, 2 * DIGEST_SIZE)
        with self._state.lock:  # a C-speed copy; the counting runs without the lock
            held = list(self._state.deadlines.items())
        live = [entry for entry, deadline in held if deadline > current_time]
        return _every_key_cooling(live, {self._state.digest(m) for m in messages}, DIGEST_SIZE)

    def fleet(self, *, now: float | None = None) -> dict[str, int] | None:
        """Every process's counters added up in the shared state; `None` without sharing (or
        while Redis does not answer)."""
        sharing = self._state.shared
        if sharing is None:
            return None
        return sharing.backend.fleet_counts(resolve_now(now))

    @property
    def entry_count(self) -> int:
        """Entries held as of the last prune; reading it does not prune."""
        return len(self._state.deadlines)

    @property
    def capacity(self) -> int:
        return self._state.schedule.capacity

    def stats(self) -> dict[str, int | bool]:
        """Counts only: safe to expose on a status endpoint."""
        with self._state.lock:
            return {
                "live_observations": len(self._state.deadlines),
                "capacity": self.capacity,
                "overflow_active": self._state.schedule.overflow_until != 0.0,
                "recorded_total": self._state.schedule.recorded_total,
                "dropped_at_capacity_total": self._state.schedule.dropped_at_capacity_total,
                "escalated_total": self._state.escalated_total,
                "exhausted_total": self._state.exhausted_total,
                "capacity_rejections_total": self._state.capacity_rejections_total,
                "probes_total": self._state.probes_total,
                **self._state.waiters.counts,
                **(
                    _LOCAL_ONLY
                    if self._state.shared is None
                    else self._state.shared.backend.stats()
                ),
            }


_Id = TypeVar("_Id", bytes, str)


def _every_key_cooling(entries: Sequence[_Id], credentials: set[_Id], size: int) -> int:
    """Scopes whose entries cover every credential (a credential-wide entry covers all)."""
    wide = {entry for entry in entries if len(entry) == size and entry in credentials}
    cooling_by_scope: dict[_Id, set[_Id]] = {}
    for entry in entries:
        if len(entry) > size and entry[:size] in credentials:
            cooling_by_scope.setdefault(entry[size:], set()).add(entry[:size])
    missing = credentials - wide
    every = sum(1 for cooling in cooling_by_scope.values() if missing <= cooling)
    return max(every, 1) if not missing else every


def _count_by_prefix(
    entries: Sequence[_Id], wanted: dict[_Id, int], counts: list[int], size: int
) -> None:
    """Add one to `counts[wanted[prefix]]` for each scope entry (longer than `size`)."""
    for entry in entries:
        if len(entry) > size:
            position = wanted.get(entry[:size])
            if position is not None:
                counts[position] += 1


def explain_keys(
    state: StoreState, lookup: Lookup, now: float, overflow: float, cost: int | None = None
) -> list[tuple[Reason | None, float]]:
    """Per key, the observation that holds it longest and until when; `(None, 0.0)` if free.

    A free key whose probe is out (`"probe"`) or whose announced budget is spent
    (`"budget"`) is held too, as `dispatch` sees it."""
    ceiling, prefix, keys, scope, legacy, _, shared, _, labels, limits = lookup
    deadlines, digest, admission = state.deadlines, state.digest, state.admission
    scope_digest = None if scope is None else digest(scope)
    accounts = {}
    if scope_digest is not None:
        accounts = account_entries(digest, prefix, keys, labels, scope_digest)
    explained: list[tuple[Reason | None, float]] = []
    for key in keys:
        credential = digest(credential_message(prefix, key))  # `gather` checked the keys
        shared_wide, shared_scope = shared.get(key, (0.0, 0.0))
        scope_release = 0.0
        if scope_digest is not None:
            scope_release = deadlines.get(credential + scope_digest, 0.0)
        held: tuple[tuple[Reason, float], ...] = (
            ("credential", max(deadlines.get(credential, 0.0), shared_wide)),
            ("scope", max(scope_release, shared_scope)),
            ("legacy", legacy.get(key, 0.0)),
        )
        reason, release = max(held, key=lambda pair: pair[1])  # the first on ties
        if release <= now and scope_digest is not None:
            entry, account = credential + scope_digest, accounts.get(key)
            release, _ = admission.weigh(entry, now, cost, account=account, maximum=ceiling)
            reason = "probe" if admission.probing(entry) else "budget"
            if limits is not None:
                owner = entry if account is None else account
                declared = min(now + ceiling, admission.declared.hold(owner, limits, now, cost))
                if declared > max(now, release):
                    reason, release = "limit", declared
        if release > now:
            explained.append((reason, release))  # retry advice caps it at the maximum
        elif overflow > now:
            explained.append(("capacity", overflow))
        else:
            explained.append((None, 0.0))
    return explained

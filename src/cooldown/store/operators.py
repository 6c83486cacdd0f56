"""An operator's hands on one key: its label, a drain, and a clear of what it was seen to do.

A part of `ModelCooldown`. A drain is kept as the key's credential digest (locally, and as
its shared id in Redis, where it outlives any worker); a clear removes the key's entries.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from ..arguments import require_str, resolve_now
from ..config import LARGEST_MAX_SECONDS
from ..digests import (
    credential_message,
    credential_prefix,
    label_message,
    scope_message,
)
from .backend import Reading, Sharing
from .budget import DIGEST_SIZE
from .events import Event
from .parts import StoreState
from .quota_marks import held_by_quota
from .scope import CallScope

__all__ = ["MAX_DRAINED", "KeyActions"]

MAX_DRAINED = 10000
"""Keys one store holds drained at most; a drain beyond it is a `ValueError`."""


def _key_message(provider: str, key: str) -> bytes:
    """What every digest of one of a provider's keys is taken over (the key checked)."""
    return credential_message(credential_prefix(provider), require_str(key, "key"))


class KeyActions:
    """An operator's label, drain and clear of one key, on the store's state."""

    def __init__(self, state: StoreState) -> None:
        self._state = state
        self._marks_followed: dict[str, object] = {}  # provider -> the last OperatorMarks
        # whose clears of its keys this store followed (each provider follows every read)
        self._clears_followed: dict[str, float] = {}  # shared credential id -> latest clear

    def clear(self) -> None:
        """Forget which of the fleet's clears were followed; the store's lock held."""
        self._marks_followed.clear()
        self._clears_followed.clear()

    def label(self, provider: str, key: str) -> str:
        """The key's operator label, `"k-"` and 8 hex digits: stable under the shared secret
        (so a fleet agrees on it), else within this store."""
        message = label_message(credential_prefix(provider), require_str(key, "key"))
        sharing = self._state.shared
        digest = self._state.digest if sharing is None else sharing.digest
        return "k-" + digest(message)[:4].hex()

    def drain(
        self, provider: str, key: str, *, drained: bool = True, now: float | None = None
    ) -> None:
        """Take the key out of rotation (`drained=False`: put it back), fleet-wide with sharing."""
        if not isinstance(drained, bool):
            raise TypeError("drained must be a bool")
        message = _key_message(provider, key)
        local = self._state.digest(message)
        with self._state.lock:
            if not drained:
                self._state.drained.discard(local)
            elif local not in self._state.drained and len(self._state.drained) >= MAX_DRAINED:
                raise ValueError("too many drained keys")
            else:
                self._state.drained.add(local)
        if not drained:
            self._state.changed(Event("undrained", provider))  # a waiter may take it now
        sharing = self._state.shared
        if sharing is not None:  # no lock across the round trip
            sharing.backend.drain(sharing.digest(message).hex(), resolve_now(now), drained=drained)

    def fleet_pending(self, provider: str, keys: list[str]) -> set[str]:
        """Which of `keys` have an operator's action Redis has not taken yet (it acted in
        this process and is retried against Redis)."""
        sharing = self._state.shared
        pending = set() if sharing is None else sharing.backend.pending_actions()
        if not pending or sharing is None:
            return set()
        prefix = credential_prefix(provider)
        return {
            key for key in keys if sharing.digest(credential_message(prefix, key)).hex() in pending
        }

    def drained_keys(
        self,
        provider: str,
        keys: list[str],
        *,
        now: float | None = None,
        cleared: list[str] | None = None,
    ) -> set[str]:
        """Which of `keys` are drained: the fleet's drains while Redis answers, else this
        store's own. Another process's clear of one of them reaches this store's own
        entries here (and is added to `cleared`, for the pool's own rests). Without any
        drain or clear, no digest is computed."""
        sharing = self._state.shared
        shared = None
        if sharing is not None:
            marks = sharing.backend.operator_marks(resolve_now(now))
            if marks is not None:
                shared = marks.drained
                if marks.clears and self._marks_followed.get(provider) is not marks:
                    followed = self._follow_clears(sharing, provider, keys, marks.clears)
                    if len(self._marks_followed) >= MAX_DRAINED:
                        self._marks_followed.clear()
                    self._marks_followed[provider] = marks
                    if cleared is not None:
                        cleared.extend(followed)
        if not (self._state.drained or shared):
            return set()
        prefix = credential_prefix(provider)
        drained = set()
        for key in keys:
            message = credential_message(prefix, key)
            if sharing is not None and shared is not None:
                if sharing.digest(message).hex() in shared:
                    drained.add(key)
            elif self._state.digest(message) in self._state.drained:
                drained.add(key)
        return drained

    def clear_key(self, scope: CallScope, key: str) -> None:
        """Forget the key's cooldowns, auth rests, budgets and probes; with the scope's model
        or bucket, only that scope's (its credential-wide rests stay). Fleet-wide with
        sharing."""
        provider, now = scope.provider, scope.now
        message = _key_message(provider, key)
        scoped = scope_message(scope.model, scope.quota_bucket)
        credential = self._state.digest(message)
        only = None if scoped is None else credential + self._state.digest(scoped)

        def matches(entry: bytes) -> bool:
            return entry == only if only is not None else entry[:DIGEST_SIZE] == credential

        self._forget_local(provider, matches)
        sharing = self._state.shared
        if sharing is not None:  # no lock across the round trip
            shared_scope = None if scoped is None else sharing.digest(scoped).hex()
            shared_id = sharing.digest(message).hex()
            sharing.backend.forget_credential(shared_id, shared_scope, resolve_now(now))
            if scoped is None:
                sharing.backend.forget_quota(shared_id, resolve_now(now))

    def lift_quota(self, provider: str, key: str, *, now: float | None = None) -> bool:
        """The key has credit again (a usage reading says so): the cooldown of its spent
        quota ends, here and fleet-wide; anything else it cools for stays. Whether one did."""
        message = _key_message(provider, key)
        credential = self._state.digest(message)
        current_time = resolve_now(now)
        lifted = False
        with self._state.lock:
            self._state.schedule.advance(current_time, LARGEST_MAX_SECONDS)
            release = self._state.deadlines.get(credential, 0.0)
            if release > current_time and held_by_quota(
                self._state.quota.until(credential), release
            ):
                self._state.schedule.discard(credential)
                self._state.quota.forget(credential.__eq__)
                lifted = True
        sharing = self._state.shared
        if sharing is not None:  # no lock across the round trips
            shared_id = sharing.digest(message).hex()
            if shared_id in (sharing.backend.quota_marks(current_time) or {}):
                sharing.backend.clear(shared_id, current_time, current_time)
                sharing.backend.forget_quota(shared_id, current_time)
                lifted = True
        if lifted:
            self._state.changed(Event("quota_lifted", provider))
        return lifted

    def share_reading(self, provider: str, key: str, reading: Reading) -> None:
        """A usage reading of the key, for every worker's status (with sharing)."""
        sharing = self._state.shared
        if sharing is not None:
            shared_id = sharing.digest(_key_message(provider, key)).hex()
            sharing.backend.keep_reading(shared_id, reading, reading.read_at)

    def fleet_readings(
        self, provider: str, keys: Sequence[str], *, now: float | None = None
    ) -> dict[str, Reading]:
        """The last usage reading of each key any worker shared, by key (one round trip);
        none without sharing."""
        sharing = self._state.shared
        if sharing is None or not keys:
            return {}
        ids = {sharing.digest(_key_message(provider, key)).hex(): key for key in keys}
        found = sharing.backend.readings(list(ids), resolve_now(now)) or {}
        return {ids[shared_id]: reading for shared_id, reading in found.items()}

    def take_usage_lease(
        self, provider: str, key: str, seconds: float, *, now: float | None = None
    ) -> bool:
        """May this process read the key's usage this period? Always without sharing (and
        while Redis does not answer); with it, when no other worker holds the key's lease."""
        sharing = self._state.shared
        if sharing is None:
            return True
        shared_id = sharing.digest(_key_message(provider, key)).hex()
        taken = sharing.backend.take_lease("usage:" + shared_id, seconds, resolve_now(now))
        return taken is not False

    def _forget_local(self, provider: str, matches: Callable[[bytes], bool]) -> None:
        with self._state.lock:
            for entry in [entry for entry in self._state.deadlines if matches(entry)]:
                self._state.schedule.discard(entry)
            self._state.admission.forget(matches)
            self._state.quota.forget(matches)
        self._state.changed(Event("cleared", provider))  # its waiters need not sleep it out

    def _follow_clears(
        self, sharing: Sharing, provider: str, keys: list[str], clears: Mapping[str, float]
    ) -> list[str]:
        """Drop this store's own entries of each key another process cleared since (every
        scope of it: the shared state keeps what that clear did not touch); the keys."""
        prefix = credential_prefix(provider)
        followed: set[bytes] = set()
        keys_followed = []
        for key in keys:
            message = credential_message(prefix, key)
            shared_id = sharing.digest(message).hex()
            latest = max(
                (at for cleared, at in clears.items() if cleared.startswith(shared_id)),
                default=None,
            )
            if latest is None or self._clears_followed.get(shared_id, -math.inf) >= latest:
                continue
            if len(self._clears_followed) >= MAX_DRAINED:
                self._clears_followed.clear()
            self._clears_followed[shared_id] = latest
            followed.add(self._state.digest(message))
            keys_followed.append(key)
        if followed:
            self._forget_local(provider, lambda entry: entry[:DIGEST_SIZE] in followed)
        return keys_followed

"""The bounded, lock-protected table of cooldown deadlines, keyed only by HMAC digests."""

from __future__ import annotations

import math
import secrets
import time
from array import array
from collections.abc import Mapping, Sequence
from heapq import heappop, heappush
from typing import Literal, NamedTuple, NoReturn, Protocol, TypeAlias, TypeGuard

from .config import LARGEST_MAX_SECONDS
from .digests import PreparedHmac, credential_message, frame, scope_message
from .errors import ModelCooldownCapacity, ModelCooldownExhausted
from .forksafe import new_lock
from .outcome import UpstreamOutcome

__all__ = [
    "MAX_ENTRIES",
    "SCOPES_PER_CREDENTIAL",
    "ModelCooldown",
    "SharedObservations",
    "model_cooldown",
    "require_keys",
    "usable_advice",
]

MAX_ENTRIES = 10000
SCOPES_PER_CREDENTIAL = 64
"""Live scope entries one credential may hold; a throttle for one more cools it everywhere."""
LARGEST_NOW = 1e12
"""Monotonic seconds (about 31,700 years): a larger `now` is a caller's mistake, not a time."""
_SCOPE_SLOTS = 1 << 14  # counters of scope entries, indexed by a credential digest's first bits
_DIGEST_SIZE = 32
_NO_LEGACY_RESTS: Mapping[str, float] = {}
_LOCAL_ONLY = {"shared": False, "shared_errors_total": 0, "shared_degraded": False}


class SharedObservations(Protocol):
    """What the store needs from a shared backend (`cooldown.shared.RedisObservations`).

    Entries are hex ids; times are the caller's monotonic seconds. A backend that cannot
    answer returns `None` from `lookup` and never raises.
    """

    def record(self, entry: str, deadline: float, now: float, max_seconds: int) -> None: ...

    def clear(self, entry: str, now: float) -> None: ...

    def lookup(
        self, entries: Sequence[str], now: float, max_seconds: int
    ) -> tuple[list[float | None], float] | None: ...

    def stats(self) -> dict[str, int | bool]: ...


_Lookup: TypeAlias = tuple[
    int,  # ceiling: the call's maximum, bounded
    bytes,  # the provider's frame
    Sequence[str],  # keys
    bytes | None,  # scope message
    Mapping[str, float],  # legacy rests
    float | None,  # the caller's `now`, checked
    dict[str, tuple[float, float]],  # Redis: key -> (credential-wide, scope) deadlines
    float,  # Redis: the overflow deadline
]
"""One selection-style call's checked arguments and Redis's answer; a plain tuple, cheap on
the hot path."""


class _Sharing(NamedTuple):
    backend: SharedObservations
    digest: PreparedHmac  # keyed by the shared secret, not this store's salt


def _require_str(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str")
    return value


def require_keys(keys: object) -> Sequence[str]:
    """A list or tuple of keys (any sequence); an iterator or a lone string is a mistake."""
    if type(keys) is list or type(keys) is tuple:
        return keys
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence):
        raise TypeError("keys must be a sequence of strings, such as a list")
    return keys


def _slot(credential: bytes) -> int:
    """Which scope counter a credential digest shares (a few credentials share each one)."""
    return (credential[0] << 6) | (credential[1] >> 2)


def finite_number(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be an int or float")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise ValueError(f"{name} must be finite")
    return number


def resolve_now(now: float | None) -> float:
    """The caller's monotonic `now`, validated, or the clock when it is `None`."""
    if now is None:
        return time.monotonic()
    current = finite_number(now, "now")
    if not -LARGEST_NOW <= current <= LARGEST_NOW:
        raise ValueError("now must be monotonic seconds (time.monotonic()), not a huge number")
    return current


def _bounded_max_seconds(max_seconds: int) -> int:
    if isinstance(max_seconds, bool) or not isinstance(max_seconds, int):
        raise TypeError("max_seconds must be an int")
    return min(LARGEST_MAX_SECONDS, max(1, max_seconds))


def usable_advice(advice: object) -> TypeGuard[int | float]:
    """Trusted advice is a finite, non-negative int or float (not a bool)."""
    if isinstance(advice, float):
        return math.isfinite(advice) and advice >= 0
    return isinstance(advice, int) and not isinstance(advice, bool) and advice >= 0


def _delay(advice: object, fallback: float, max_seconds: int) -> float:
    """Trusted advice when it is usable; the caller's fallback otherwise."""
    # Capped before any float(): an int may be too large for a float.
    chosen = min(advice, max_seconds) if usable_advice(advice) else fallback
    return min(float(max_seconds), max(1.0, chosen))


def retry_after(release: float, now: float, max_seconds: int) -> int:
    """Whole seconds until `release`, never below 1 and never above the configured maximum."""
    return min(max_seconds, max(1, math.ceil(release - now)))


class ModelCooldown:
    """Cooldown deadlines per (credential, model or bucket), bounded and safe to share.

    Keys, models and bucket names are reduced to HMAC digests under a salt that never
    leaves the process, so the table can be inspected, logged or dumped safely. Pass
    `secret` (32 bytes or more) only where two stores must agree on ids, as in tests.
    `scopes_per_credential` (1 to 64) exists for tests of the scope budget.
    """

    def __init__(
        self,
        *,
        max_entries: int = MAX_ENTRIES,
        secret: bytes | None = None,
        scopes_per_credential: int = SCOPES_PER_CREDENTIAL,
    ) -> None:
        for value, name in ((max_entries, "max_entries"), (scopes_per_credential, "scopes")):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int")
        if secret is not None and (not isinstance(secret, bytes) or len(secret) < 32):
            raise ValueError("secret must be at least 32 bytes")
        self._capacity = min(MAX_ENTRIES, max(1, max_entries))
        self._scope_budget = min(SCOPES_PER_CREDENTIAL, max(1, scopes_per_credential))
        # A random salt by default: ids are stable within this store and nowhere else.
        self._digest = PreparedHmac(secrets.token_bytes(32) if secret is None else secret)
        self._lock = new_lock(self)
        self._deadlines: dict[bytes, float] = {}
        self._expiry: list[float] = []  # distinct deadlines, a min-heap
        self._due: dict[float, bytes | list[bytes]] = {}  # deadline -> the entries due then
        self._scheduled = 0  # entries listed in _due, stale ones included
        self._scopes_in_slot = array("H", bytes(2 * _SCOPE_SLOTS))
        self._latest = 0.0  # no live deadline is later: truncation needs no scan below it
        self._overflow_until = 0.0
        self._recorded_total = 0
        self._dropped_at_capacity_total = 0
        self._escalated_total = 0
        self._exhausted_total = 0
        self._capacity_rejections_total = 0
        self._shared: _Sharing | None = None

    def __repr__(self) -> str:
        return f"<ModelCooldown entries={len(self._deadlines)} capacity={self._capacity}>"

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        raise TypeError("ModelCooldown holds a process-local secret and cannot be pickled")

    def __copy__(self) -> NoReturn:
        raise TypeError("ModelCooldown cannot be copied; share the one instance instead")

    def __deepcopy__(self, memo: object) -> NoReturn:
        raise TypeError("ModelCooldown cannot be copied; share the one instance instead")

    # -- identities ---------------------------------------------------------------------------

    def credential_id(self, provider: str, credential: str) -> str:
        """The stable, non-reversible id this store uses for a credential, as 64 hex chars."""
        provider_frame = frame(_require_str(provider, "provider"))
        message = credential_message(provider_frame, _require_str(credential, "credential"))
        return self._digest(message).hex()

    # -- expiry -------------------------------------------------------------------------------

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

    def _forget(self, entry: bytes) -> None:
        """Bookkeeping for an entry that just left the table (lock held)."""
        if len(entry) > _DIGEST_SIZE:
            self._scopes_in_slot[_slot(entry)] -= 1

    def _advance(self, now: float, max_seconds: int) -> None:
        """Prune what expired, then hold every deadline within this call's maximum."""
        expiry, deadlines = self._expiry, self._deadlines
        while expiry and expiry[0] <= now:
            deadline = heappop(expiry)
            due = self._due.pop(deadline)
            entries = due if isinstance(due, list) else (due,)
            self._scheduled -= len(entries)
            for entry in entries:
                if deadlines.get(entry) == deadline:
                    del deadlines[entry]
                    self._forget(entry)
        if self._overflow_until and self._overflow_until <= now:
            self._overflow_until = 0.0
        if self._latest > now + max_seconds:
            self._truncate(now + max_seconds)
        if self._scheduled > 2 * len(deadlines) + 64:
            self._reschedule()

    def _truncate(self, limit: float) -> None:
        """A lowered maximum shortens every live cooldown, once (an operator's incident lever)."""
        deadlines = self._deadlines
        for entry, deadline in deadlines.items():
            if deadline > limit:
                deadlines[entry] = limit
        if self._overflow_until > limit:
            self._overflow_until = limit
        self._latest = limit
        self._reschedule()

    def _reschedule(self) -> None:
        """Drop stale schedule items once they outnumber live entries; amortised O(1)."""
        self._expiry.clear()
        self._due.clear()
        self._scheduled = 0
        for entry, deadline in self._deadlines.items():
            self._schedule(entry, deadline)

    # -- recording ----------------------------------------------------------------------------

    def record(
        self,
        provider: str,
        credential: str,
        outcome: UpstreamOutcome,
        *,
        model: str | None = None,
        quota_bucket: str | None = None,
        credential_wide_auth: bool = False,
        retry_after_seconds: float | None = None,
        fallback_seconds: float = 60,
        max_seconds: int = 3600,
        now: float | None = None,
    ) -> float | None:
        """Store what one attempt proved about a credential; return the entry's deadline."""
        provider_frame = frame(_require_str(provider, "provider"))
        _require_str(credential, "credential")
        if not isinstance(outcome, UpstreamOutcome):
            raise TypeError("outcome must be an UpstreamOutcome")
        if not isinstance(credential_wide_auth, bool):
            raise TypeError("credential_wide_auth must be a bool")
        fallback = finite_number(fallback_seconds, "fallback_seconds")
        ceiling = _bounded_max_seconds(max_seconds)
        scope = scope_message(model, quota_bucket)
        given_now = None if now is None else resolve_now(now)  # a bad clock fails first
        health = outcome.credential_health
        parts: tuple[bytes, ...] = ()
        if health == "rejected" and credential_wide_auth:
            parts = (credential_message(provider_frame, credential),)
        elif health in ("throttled", "accepted") and scope is not None:
            parts = (credential_message(provider_frame, credential), scope)
        delay = _delay(retry_after_seconds, fallback, ceiling)
        with self._lock:  # read the clock under the lock: no one prunes past our `now`
            current_time = time.monotonic() if given_now is None else given_now
            self._advance(current_time, ceiling)
            if not parts:
                return None
            if health == "accepted":
                deadline = None
                if self._deadlines:  # an empty table has nothing to clear: skip the digests
                    entry = b"".join(map(self._digest, parts))
                    if self._deadlines.pop(entry, None) is not None:
                        self._forget(entry)
            else:
                entry, deadline = self._store(
                    b"".join(map(self._digest, parts)), current_time + delay
                )
                parts = parts[: len(entry) // _DIGEST_SIZE]  # one part less when escalated
        sharing = self._shared
        if sharing is not None:
            shared_entry = b"".join(map(sharing.digest, parts)).hex()
            if deadline is None:
                sharing.backend.clear(shared_entry, current_time)
            else:
                sharing.backend.record(shared_entry, current_time + delay, current_time, ceiling)
        return deadline

    def _store(self, entry: bytes, deadline: float) -> tuple[bytes, float]:
        """Keep the later deadline; at capacity keep every live entry and raise the guard.

        A new scope entry beyond its credential's budget is stored as a credential-wide
        entry instead; the entry actually written is returned with its deadline.
        """
        deadlines = self._deadlines
        current = deadlines.get(entry)
        if current is not None:
            if current >= deadline:
                return entry, current
        elif len(entry) > _DIGEST_SIZE:
            slot = _slot(entry)
            if self._scopes_in_slot[slot] >= self._scope_budget and self._over_budget(entry):
                self._escalated_total += 1
                return self._store(entry[:_DIGEST_SIZE], deadline)
            if len(deadlines) < self._capacity:
                self._scopes_in_slot[slot] += 1
        if current is None and len(deadlines) >= self._capacity:
            self._overflow_until = max(self._overflow_until, deadline)
            self._latest = max(self._latest, deadline)
            self._dropped_at_capacity_total += 1
            return entry, deadline
        deadlines[entry] = deadline
        self._schedule(entry, deadline)
        if deadline > self._latest:
            self._latest = deadline
        self._recorded_total += 1
        return entry, deadline

    def _over_budget(self, entry: bytes) -> bool:
        """Does this entry's credential hold its whole scope budget? (Its slot is shared.)"""
        credential = entry[:_DIGEST_SIZE]
        held = sum(
            1
            for other in self._deadlines
            if len(other) > _DIGEST_SIZE and other.startswith(credential)
        )
        return held >= self._scope_budget

    # -- selection ----------------------------------------------------------------------------

    @staticmethod
    def _shared_releases(
        sharing: _Sharing,
        provider_frame: bytes,
        keys: Sequence[str],
        scope: bytes | None,
        now: float,
        max_seconds: int,
    ) -> tuple[dict[str, tuple[float, float]], float]:
        """Per key, its shared credential-wide and scope deadlines; and the shared overflow.

        One round trip; when Redis does not answer, nothing (the local answer stands).
        """
        digest = sharing.digest
        scope_digest = b"" if scope is None else digest(scope)
        entries: list[str] = []
        for key in keys:
            credential = digest(credential_message(provider_frame, _require_str(key, "each key")))
            entries.append(credential.hex())
            if scope_digest:
                entries.append((credential + scope_digest).hex())
        answer = sharing.backend.lookup(entries, now, max_seconds)
        if answer is None:
            return {}, 0.0
        deadlines, overflow = answer
        per_key = 2 if scope_digest else 1
        releases = {}
        for index, key in enumerate(keys):
            wide = deadlines[index * per_key]
            scoped = deadlines[index * per_key + 1] if scope_digest else None
            releases[key] = (wide or 0.0, scoped or 0.0)
        return releases, overflow

    def _gather(
        self,
        provider: str,
        keys: Sequence[str],
        model: str | None,
        quota_bucket: str | None,
        max_seconds: int,
        now: float | None,
        legacy_rest_until: Mapping[str, float] | None,
    ) -> _Lookup:
        """Check the arguments, then ask Redis (one round trip, before any lock is taken)."""
        ceiling = _bounded_max_seconds(max_seconds)
        provider_frame = frame(_require_str(provider, "provider"))
        keys = require_keys(keys)
        scope = scope_message(model, quota_bucket)
        legacy = _NO_LEGACY_RESTS if legacy_rest_until is None else legacy_rest_until
        given_now = None if now is None else resolve_now(now)
        shared: dict[str, tuple[float, float]] = {}
        shared_overflow = 0.0
        sharing = self._shared
        if sharing is not None and keys:
            shared, shared_overflow = self._shared_releases(
                sharing, provider_frame, keys, scope, resolve_now(given_now), ceiling
            )
        return ceiling, provider_frame, keys, scope, legacy, given_now, shared, shared_overflow

    def _choose(
        self,
        provider: str,
        keys: Sequence[str],
        model: str | None,
        quota_bucket: str | None,
        max_seconds: int,
        now: float | None,
        legacy_rest_until: Mapping[str, float] | None,
        *,
        mode: Literal["available", "eligible", "select"],
    ) -> list[str]:
        """The shared body of `available`, `eligible` and `select` (which stops at one key)."""
        ceiling, provider_frame, keys, scope, legacy, given_now, shared, shared_overflow = (
            self._gather(provider, keys, model, quota_bucket, max_seconds, now, legacy_rest_until)
        )
        if shared:  # Redis answered for every key
            legacy = {key: max(legacy.get(key, 0.0), *shared[key]) for key in keys}
        with self._lock:  # read the clock under the lock: no one prunes past our `now`
            current_time = time.monotonic() if given_now is None else given_now
            self._advance(current_time, ceiling)
            free, earliest = self._scan(
                provider_frame,
                keys,
                scope,
                legacy,
                current_time,
                first_only=mode == "select",
            )
            if keys and not free and mode != "available":
                self._exhausted_total += 1
                raise ModelCooldownExhausted(retry_after(earliest, current_time, ceiling))
            overflow = max(self._overflow_until, shared_overflow)
            if free and overflow > current_time:  # an empty result never raises this
                self._capacity_rejections_total += 1
                raise ModelCooldownCapacity(retry_after(overflow, current_time, ceiling))
            return free

    def _scan(
        self,
        provider_frame: bytes,
        keys: Sequence[str],
        scope: bytes | None,
        legacy: Mapping[str, float],
        now: float,
        *,
        first_only: bool,
    ) -> tuple[list[str], float]:
        """The keys free at `now` and the earliest release among the others (lock held)."""
        deadlines = self._deadlines
        digest = self._digest
        # With an empty table (a healthy gateway) no digest can match: skip computing them.
        scope_digest = digest(scope) if deadlines and scope is not None else None
        free: list[str] = []
        earliest = math.inf
        for key in keys:
            if not isinstance(key, str):
                raise TypeError("each key must be a str")
            # A key returns only when its auth, scope and legacy rests have all expired.
            release = 0.0
            if deadlines:
                credential = digest(credential_message(provider_frame, key))
                release = deadlines.get(credential, 0.0)
                if scope_digest is not None:
                    release = max(release, deadlines.get(credential + scope_digest, 0.0))
            if key in legacy:
                release = max(release, finite_number(legacy[key], "legacy_rest_until value"))
            if release <= now:
                free.append(key)
                if first_only:
                    break
            elif release < earliest:
                earliest = release
        return free, earliest

    def explain(
        self,
        provider: str,
        keys: Sequence[str],
        *,
        model: str | None = None,
        quota_bucket: str | None = None,
        max_seconds: int = 3600,
        now: float | None = None,
        legacy_rest_until: Mapping[str, float] | None = None,
    ) -> list[tuple[str | None, float]]:
        """Per key, why it is not selectable and until when; `(None, 0.0)` when it is.

        The reason is the observation that holds the key longest: `"credential"`,
        `"scope"` or `"legacy"`; a free key during an overflow is held by `"capacity"`.
        Counts nothing and raises no cooldown error: this is for operators, not routes.
        """
        ceiling, provider_frame, keys, scope, legacy, given_now, shared, shared_overflow = (
            self._gather(provider, keys, model, quota_bucket, max_seconds, now, legacy_rest_until)
        )
        with self._lock:
            current_time = time.monotonic() if given_now is None else given_now
            self._advance(current_time, ceiling)
            overflow = max(self._overflow_until, shared_overflow)
            scope_digest = None if scope is None else self._digest(scope)
            explained: list[tuple[str | None, float]] = []
            for key in keys:
                credential = self._digest(
                    credential_message(provider_frame, _require_str(key, "each key"))
                )
                shared_wide, shared_scope = shared.get(key, (0.0, 0.0))
                scope_release = 0.0
                if scope_digest is not None:
                    scope_release = self._deadlines.get(credential + scope_digest, 0.0)
                held = (
                    ("credential", max(self._deadlines.get(credential, 0.0), shared_wide)),
                    ("scope", max(scope_release, shared_scope)),
                    ("legacy", finite_number(legacy.get(key, 0.0), "legacy_rest_until value")),
                )
                reason, release = max(held, key=lambda pair: pair[1])  # the first on ties
                if release > current_time:
                    explained.append((reason, release))  # retry advice caps it at the maximum
                elif overflow > current_time:
                    explained.append(("capacity", overflow))
                else:
                    explained.append((None, 0.0))
            return explained

    def available(
        self,
        provider: str,
        keys: Sequence[str],
        *,
        model: str | None = None,
        quota_bucket: str | None = None,
        max_seconds: int = 3600,
        now: float | None = None,
        legacy_rest_until: Mapping[str, float] | None = None,
    ) -> list[str]:
        """The keys not cooling for this scope, in the given order."""
        return self._choose(
            provider,
            keys,
            model,
            quota_bucket,
            max_seconds,
            now,
            legacy_rest_until,
            mode="available",
        )

    def eligible(
        self,
        provider: str,
        keys: Sequence[str],
        *,
        model: str | None = None,
        quota_bucket: str | None = None,
        max_seconds: int = 3600,
        now: float | None = None,
        legacy_rest_until: Mapping[str, float] | None = None,
    ) -> list[str]:
        """Like `available`, but an all-cooling non-empty key list raises the 429 `select` would."""
        return self._choose(
            provider,
            keys,
            model,
            quota_bucket,
            max_seconds,
            now,
            legacy_rest_until,
            mode="eligible",
        )

    def select(
        self,
        provider: str,
        keys: Sequence[str],
        *,
        model: str | None = None,
        quota_bucket: str | None = None,
        max_seconds: int = 3600,
        now: float | None = None,
        legacy_rest_until: Mapping[str, float] | None = None,
    ) -> str | None:
        """The first key not cooling; `None` without keys; a 429 when every key cools."""
        free = self._choose(
            provider,
            keys,
            model,
            quota_bucket,
            max_seconds,
            now,
            legacy_rest_until,
            mode="select",
        )
        return free[0] if free else None

    # -- sharing ------------------------------------------------------------------------------

    def attach_shared(self, shared: SharedObservations, *, secret: bytes) -> None:
        """Also record into, and select with, observations shared with other processes.

        Shared ids are HMACs under `secret`, so every process derives the same ones; local
        ids keep this store's own salt, so attaching never loses a local observation.
        """
        if not isinstance(secret, bytes) or len(secret) < 32:
            raise ValueError("secret must be at least 32 bytes")
        self._shared = _Sharing(shared, PreparedHmac(secret))

    def detach_shared(self) -> SharedObservations | None:
        """Back to process-local state; returns the detached backend for closing."""
        sharing, self._shared = self._shared, None
        return None if sharing is None else sharing.backend

    # -- inspection ---------------------------------------------------------------------------

    @property
    def entry_count(self) -> int:
        """Entries held as of the last prune; reading it does not prune."""
        return len(self._deadlines)

    @property
    def capacity(self) -> int:
        return self._capacity

    def stats(self) -> dict[str, int | bool]:
        """Counts only: safe to expose on a status endpoint."""
        with self._lock:
            return {
                "live_observations": len(self._deadlines),
                "capacity": self._capacity,
                "overflow_active": self._overflow_until != 0.0,
                "recorded_total": self._recorded_total,
                "dropped_at_capacity_total": self._dropped_at_capacity_total,
                "escalated_total": self._escalated_total,
                "exhausted_total": self._exhausted_total,
                "capacity_rejections_total": self._capacity_rejections_total,
                **(_LOCAL_ONLY if self._shared is None else self._shared.backend.stats()),
            }

    def reset(self) -> None:
        """Forget every observation and counter; the salt, and so every id, is kept."""
        with self._lock:
            self._deadlines.clear()
            self._expiry.clear()
            self._due.clear()
            self._scheduled = 0
            self._scopes_in_slot = array("H", bytes(2 * _SCOPE_SLOTS))
            self._latest = 0.0
            self._overflow_until = 0.0
            self._recorded_total = 0
            self._dropped_at_capacity_total = 0
            self._escalated_total = 0
            self._exhausted_total = 0
            self._capacity_rejections_total = 0


model_cooldown = ModelCooldown()
"""The one process-wide store every pool records into and selects from."""

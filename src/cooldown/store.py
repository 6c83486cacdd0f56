"""The bounded, lock-protected table of cooldown deadlines, keyed only by HMAC digests."""

from __future__ import annotations

import hashlib
import math
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from heapq import heappop, heappush
from typing import Literal, NamedTuple, NoReturn, Protocol

from .config import LARGEST_MAX_SECONDS
from .errors import ModelCooldownCapacity, ModelCooldownExhausted
from .outcome import UpstreamOutcome

__all__ = ["MAX_ENTRIES", "ModelCooldown", "SharedObservations", "model_cooldown"]

MAX_ENTRIES = 10000
_HASH_BLOCK_SIZE = 64  # SHA-256 block size, as RFC 2104 pads the key to it
_NO_LEGACY_RESTS: Mapping[str, float] = {}
_LOCAL_ONLY = {"shared": False, "shared_errors_total": 0, "shared_degraded": False}


class SharedObservations(Protocol):
    """What the store needs from a shared backend (`cooldown.shared.RedisObservations`).

    Entries are hex ids; times are the caller's monotonic seconds. A backend that cannot
    answer returns `None` from `lookup` and never raises.
    """

    def record(self, entry: str, deadline: float, now: float) -> None: ...

    def clear(self, entry: str, now: float) -> None: ...

    def lookup(
        self, entries: Sequence[str], now: float
    ) -> tuple[list[float | None], float] | None: ...

    def stats(self) -> dict[str, int | bool]: ...


def _frame(part: str) -> bytes:
    """Length-prefix one part, so ("ab", "c") and ("a", "bc") never hash alike."""
    data = part.encode("utf-8", "surrogatepass")
    return len(data).to_bytes(8, "big") + data


_CREDENTIAL_TAG = _frame("credential")
_MODEL_TAG = _frame("model")
_BUCKET_TAG = _frame("quota_bucket")


class _PreparedHmac:
    """HMAC-SHA-256 (RFC 2104) with the keyed inner and outer states computed once.

    Copying two prepared hashes costs well under half of `hmac.digest`, which re-keys on
    every call; digests are identical (tests compare them).
    """

    __slots__ = ("_inner", "_outer")

    def __init__(self, key: bytes) -> None:
        if len(key) > _HASH_BLOCK_SIZE:
            key = hashlib.sha256(key).digest()
        padded = key.ljust(_HASH_BLOCK_SIZE, b"\0")
        self._inner = hashlib.sha256(bytes(byte ^ 0x36 for byte in padded))
        self._outer = hashlib.sha256(bytes(byte ^ 0x5C for byte in padded))

    def __call__(self, message: bytes) -> bytes:
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()


def _credential_message(provider_frame: bytes, credential: str) -> bytes:
    """What a credential id is the HMAC of, locally and in shared state alike."""
    return _CREDENTIAL_TAG + provider_frame + _frame(credential)


def _scope_message(model: object, quota_bucket: object) -> bytes | None:
    """Bucket wins over model; the two live under different tags so names never collide."""
    bucket = _optional_str(quota_bucket, "quota_bucket")
    model_name = _optional_str(model, "model")
    if bucket:
        return _BUCKET_TAG + _frame(bucket)
    if model_name:
        return _MODEL_TAG + _frame(model_name)
    return None


class _Sharing(NamedTuple):
    backend: SharedObservations
    digest: _PreparedHmac  # keyed by the shared secret, not this store's salt


def _require_str(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str")
    return value


def _optional_str(value: object, name: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{name} must be a str or None")
    return value


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
    return time.monotonic() if now is None else finite_number(now, "now")


def _bounded_max_seconds(max_seconds: int) -> int:
    if isinstance(max_seconds, bool) or not isinstance(max_seconds, int):
        raise TypeError("max_seconds must be an int")
    return min(LARGEST_MAX_SECONDS, max(1, max_seconds))


def _delay(advice: object, fallback: float, max_seconds: int) -> float:
    """Trusted advice when it is a finite, non-negative number; the caller's fallback otherwise."""
    chosen = fallback
    if isinstance(advice, float) and math.isfinite(advice) and advice >= 0:
        chosen = advice
    elif isinstance(advice, int) and not isinstance(advice, bool) and advice >= 0:
        chosen = min(advice, max_seconds)  # an int may be too large for a float
    return min(float(max_seconds), max(1.0, chosen))


def retry_after(release: float, now: float, max_seconds: int) -> int:
    """Whole seconds until `release`, never below 1 and never above the configured maximum."""
    return min(max_seconds, max(1, math.ceil(release - now)))


class ModelCooldown:
    """Cooldown deadlines per (credential, model or bucket), bounded and safe to share.

    Keys, models and bucket names are reduced to HMAC digests under a salt that never
    leaves the process, so the table can be inspected, logged or dumped safely. Pass
    `secret` (32 bytes or more) only where two stores must agree on ids, as in tests.
    """

    def __init__(self, *, max_entries: int = MAX_ENTRIES, secret: bytes | None = None) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int):
            raise TypeError("max_entries must be an int")
        if secret is not None and (not isinstance(secret, bytes) or len(secret) < 32):
            raise ValueError("secret must be at least 32 bytes")
        self._capacity = min(MAX_ENTRIES, max(1, max_entries))
        # A random salt by default: ids are stable within this store and nowhere else.
        self._digest = _PreparedHmac(secrets.token_bytes(32) if secret is None else secret)
        self._lock = threading.Lock()
        self._deadlines: dict[bytes, float] = {}
        self._expiry: list[float] = []  # distinct deadlines, a min-heap
        self._due: dict[float, bytes | list[bytes]] = {}  # deadline -> the entries due then
        self._scheduled = 0  # entries listed in _due, stale ones included
        self._overflow_until = 0.0
        self._recorded_total = 0
        self._dropped_at_capacity_total = 0
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
        provider_frame = _frame(_require_str(provider, "provider"))
        credential_message = _credential_message(
            provider_frame, _require_str(credential, "credential")
        )
        return self._digest(credential_message).hex()

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

    def _prune(self, now: float) -> None:
        """Pop due deadlines from the heap head; entries extended or cleared since are skipped."""
        expiry, deadlines = self._expiry, self._deadlines
        while expiry and expiry[0] <= now:
            deadline = heappop(expiry)
            due = self._due.pop(deadline)
            entries = due if isinstance(due, list) else (due,)
            self._scheduled -= len(entries)
            for entry in entries:
                if deadlines.get(entry) == deadline:
                    del deadlines[entry]
        if self._overflow_until and self._overflow_until <= now:
            self._overflow_until = 0.0
        if self._scheduled > 2 * len(deadlines) + 64:
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
        provider_frame = _frame(_require_str(provider, "provider"))
        _require_str(credential, "credential")
        if not isinstance(outcome, UpstreamOutcome):
            raise TypeError("outcome must be an UpstreamOutcome")
        if not isinstance(credential_wide_auth, bool):
            raise TypeError("credential_wide_auth must be a bool")
        fallback = finite_number(fallback_seconds, "fallback_seconds")
        ceiling = _bounded_max_seconds(max_seconds)
        scope_message = _scope_message(model, quota_bucket)
        if now is not None:
            resolve_now(now)  # reject a bad clock before anything else
        health = outcome.credential_health
        credential_message = _credential_message(provider_frame, credential)
        parts: tuple[bytes, ...] = ()
        if health == "rejected" and credential_wide_auth:
            parts = (credential_message,)
        elif health in ("throttled", "accepted") and scope_message is not None:
            parts = (credential_message, scope_message)
        delay = _delay(retry_after_seconds, fallback, ceiling)
        with self._lock:  # read the clock under the lock: no one prunes past our `now`
            current_time = resolve_now(now)
            self._prune(current_time)
            if not parts:
                return None
            if health == "accepted":
                if self._deadlines:  # an empty table has nothing to clear: skip the digests
                    self._deadlines.pop(b"".join(map(self._digest, parts)), None)
                deadline = None
            else:
                deadline = self._store(b"".join(map(self._digest, parts)), current_time + delay)
        sharing = self._shared
        if sharing is not None:
            shared_entry = b"".join(map(sharing.digest, parts)).hex()
            if deadline is None:
                sharing.backend.clear(shared_entry, current_time)
            else:
                sharing.backend.record(shared_entry, current_time + delay, current_time)
        return deadline

    def _store(self, entry: bytes, deadline: float) -> float:
        """Keep the later deadline; at capacity keep every live entry and raise the guard."""
        current = self._deadlines.get(entry)
        if current is not None and current >= deadline:
            return current
        if current is None and len(self._deadlines) >= self._capacity:
            self._overflow_until = max(self._overflow_until, deadline)
            self._dropped_at_capacity_total += 1
            return deadline
        self._deadlines[entry] = deadline
        self._schedule(entry, deadline)
        self._recorded_total += 1
        return deadline

    # -- selection ----------------------------------------------------------------------------

    @staticmethod
    def _shared_releases(
        sharing: _Sharing,
        provider_frame: bytes,
        keys: Sequence[str],
        scope_message: bytes | None,
        now: float,
    ) -> tuple[dict[str, float], float]:
        """Per key, the later of its shared wide and scope deadlines; and the shared overflow.

        One round trip; when Redis does not answer, nothing (the local answer stands).
        """
        digest = sharing.digest
        scope = b"" if scope_message is None else digest(scope_message)
        entries: list[str] = []
        for key in keys:
            credential = digest(_credential_message(provider_frame, _require_str(key, "each key")))
            entries.append(credential.hex())
            if scope:
                entries.append((credential + scope).hex())
        answer = sharing.backend.lookup(entries, now)
        if answer is None:
            return {}, 0.0
        deadlines, overflow = answer
        per_key = 2 if scope else 1
        releases = {
            key: max(d or 0.0 for d in deadlines[index * per_key : (index + 1) * per_key])
            for index, key in enumerate(keys)
        }
        return releases, overflow

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
        ceiling = _bounded_max_seconds(max_seconds)
        provider_frame = _frame(_require_str(provider, "provider"))
        if isinstance(keys, (str, bytes)):
            raise TypeError("keys must be a sequence of strings, not a single string")
        scope_message = _scope_message(model, quota_bucket)
        legacy = _NO_LEGACY_RESTS if legacy_rest_until is None else legacy_rest_until
        shared_overflow = 0.0
        sharing = self._shared
        if sharing is not None and keys:
            shared, shared_overflow = self._shared_releases(
                sharing, provider_frame, keys, scope_message, resolve_now(now)
            )
            legacy = {key: max(legacy.get(key, 0.0), shared.get(key, 0.0)) for key in keys}
        with self._lock:  # read the clock under the lock: no one prunes past our `now`
            current_time = resolve_now(now)
            self._prune(current_time)
            free, earliest = self._scan(
                provider_frame,
                keys,
                scope_message,
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
        scope_message: bytes | None,
        legacy: Mapping[str, float],
        now: float,
        *,
        first_only: bool,
    ) -> tuple[list[str], float]:
        """The keys free at `now` and the earliest release among the others (lock held)."""
        deadlines = self._deadlines
        digest = self._digest
        # With an empty table (a healthy gateway) no digest can match: skip computing them.
        scope = digest(scope_message) if deadlines and scope_message is not None else None
        free: list[str] = []
        earliest = math.inf
        for key in keys:
            if not isinstance(key, str):
                raise TypeError("each key must be a str")
            # A key returns only when its auth, scope and legacy rests have all expired.
            release = 0.0
            if deadlines:
                credential = digest(_credential_message(provider_frame, key))
                release = deadlines.get(credential, 0.0)
                if scope is not None:
                    release = max(release, deadlines.get(credential + scope, 0.0))
            if key in legacy:
                release = max(release, finite_number(legacy[key], "legacy_rest_until value"))
            if release <= now:
                free.append(key)
                if first_only:
                    break
            elif release < earliest:
                earliest = release
        return free, earliest

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
        self._shared = _Sharing(shared, _PreparedHmac(secret))

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
            self._overflow_until = 0.0
            self._recorded_total = 0
            self._dropped_at_capacity_total = 0
            self._exhausted_total = 0
            self._capacity_rejections_total = 0


model_cooldown = ModelCooldown()
"""The one process-wide store every pool records into and selects from."""

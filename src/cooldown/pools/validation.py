"""Which NanoGPT key is validated and active, and the probes that validate one."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Sequence
from typing import ClassVar, NamedTuple

from ..arguments import resolve_now, seconds
from ..config import CooldownSettings
from ..errors import NanoGPTKeyPoolExhausted
from ..evidence.outcome import classify_upstream_outcome
from ..forksafe import new_lock, new_rlock
from ..store import model_cooldown
from ._common import ScopedRecording, scoped_settings, store_evidence, unique_stripped

__all__ = [
    "AUTH_STATUSES",
    "REJECTION_STATUSES",
    "NanoGPTKeyPoolExhausted",
    "ValidatedKeyPool",
]

logger = logging.getLogger("cooldown")

REJECTION_STATUSES = frozenset({401, 402, 403, 429})
AUTH_STATUSES = frozenset({401, 402, 403})
MAX_REJECTIONS = 10000
"""Live rejections a NanoGPT pool holds at most (10^6 junk keys cannot grow it further)."""
AMBIGUOUS_KEEP_SECONDS = 30.0
_PROBE_ERRORS = (OSError, RuntimeError, TypeError, ValueError)


class _Revalidation(NamedTuple):
    """How long a validated key stays trusted, and how long a probe's rejection lasts."""

    ttl: float
    request_budget: int
    throttle_seconds: float

    @classmethod
    def from_arguments(
        cls, check_ttl_seconds: float, check_every_requests: int, rejected_cooldown_seconds: float
    ) -> _Revalidation:
        if isinstance(check_every_requests, bool) or not isinstance(check_every_requests, int):
            raise TypeError("check_every_requests must be an int")
        return cls(
            seconds(check_ttl_seconds, "check_ttl_seconds"),
            max(1, check_every_requests),
            seconds(rejected_cooldown_seconds, "rejected_cooldown_seconds"),
        )


def _probe_status(probe: Callable[[str], int], key: str) -> int | None:
    """The probe's HTTP status, or `None` when the answer proves nothing about the key."""
    try:
        status = probe(key)
    except _PROBE_ERRORS as error:
        logger.warning("NanoGPT key probe failed (%s); result is ambiguous", type(error).__name__)
        return None
    if isinstance(status, bool) or not isinstance(status, int):
        logger.warning("NanoGPT key probe returned a non-integer status; result is ambiguous")
        return None
    return status


class ActiveKeyState:
    """The validated active key and the legacy rejections; each pool class that names a
    namespace gets its own state and locks."""

    namespace: ClassVar[str]
    active_key: ClassVar[str | None]
    active_until: ClassVar[float]
    active_requests: ClassVar[int]
    rejected_until: ClassVar[dict[str, float]]
    _recorded: ClassVar[dict[str, int]]  # rejections recorded per key, to spot one mid-probe
    rejections_dropped_total: ClassVar[int]
    _full_until: ClassVar[float]  # while full of live rests: the earliest of them
    _lock: ClassVar[threading.Lock]  # the state above; never held across a probe or Redis
    _validation: ClassVar[threading.RLock]  # one validation at a time (a probe may nest one)

    def __init_subclass__(cls, *, namespace: str | None = None, **kwargs: object) -> None:
        """A pool names its store namespace; a class that adds behaviour only names none."""
        super().__init_subclass__(**kwargs)
        if namespace is None:
            return
        cls.namespace = namespace
        cls._lock = new_lock(cls)
        cls._validation = new_rlock(cls, "_validation")
        cls.rejected_until = {}
        cls._recorded = {}
        cls.rejections_dropped_total = 0
        cls._full_until = -math.inf
        cls._clear_active()

    @classmethod
    def _clear_active(cls) -> None:
        cls.active_key = None
        cls.active_until = 0.0
        cls.active_requests = 0

    @classmethod
    def _activate(cls, key: str, ttl: float, now: float) -> str:
        cls.active_key = key
        cls.active_until = now + ttl
        cls.active_requests = 0
        return key

    @classmethod
    def _forget_stale(cls, configured: Sequence[str], now: float) -> None:
        """Drop expired or unconfigured rejections and an unconfigured active key."""
        cls.rejected_until = {
            key: until
            for key, until in cls.rejected_until.items()
            if until > now and key in configured
        }
        if cls.active_key not in configured:
            cls._clear_active()

    @classmethod
    def _rests_within(cls, max_seconds: int | None, now: float) -> dict[str, float]:
        """A copy of the rejections (lock held). With `max_seconds` (the scoped path), one
        beyond `now + max_seconds` is cut to it for good: a lowered maximum shortens the
        mirror of a credential-wide rejection as it does the store's own cooldowns."""
        if max_seconds is not None:
            limit = now + max_seconds
            rejected = cls.rejected_until
            for key in [key for key, until in rejected.items() if until > limit]:
                rejected[key] = limit
        return dict(cls.rejected_until)

    @classmethod
    def _active_first(cls, keys: Sequence[str]) -> list[str]:
        active = cls.active_key
        first = [active] if active is not None and active in keys else []
        return first + [key for key in keys if key != active]

    @classmethod
    def _note_recorded(cls, key: str) -> None:
        """Count a recorded rejection (lock held); bounded: a reset only makes a probe careful."""
        if len(cls._recorded) >= MAX_REJECTIONS:
            cls._recorded.clear()
        cls._recorded[key] = cls._recorded.get(key, 0) + 1

    @classmethod
    def _reject(
        cls, key: str, status: int, auth_seconds: float, throttle_seconds: float, now: float
    ) -> None:
        """Legacy rejection: a new one replaces the old deadline."""
        if status in AUTH_STATUSES:
            cls._rest(key, now + auth_seconds, now)
        elif status == 429:
            cls._rest(key, now + throttle_seconds, now)

    @classmethod
    def _rest(cls, key: str, until: float, now: float) -> None:
        """Set a rejection (lock held); the map never holds more than `MAX_REJECTIONS`.

        Full of live rests, the map is rebuilt only once the earliest of them has expired:
        until then a new key is dropped at once, not after a scan of every rest."""
        rejected = cls.rejected_until
        if key not in rejected and len(rejected) >= MAX_REJECTIONS:
            if now < cls._full_until:
                cls.rejections_dropped_total += 1
                return
            cls.rejected_until = rejected = {k: v for k, v in rejected.items() if v > now}
            if len(rejected) >= MAX_REJECTIONS:
                cls._full_until = min(rejected.values())
                cls.rejections_dropped_total += 1  # every rest is live: keep them, not this one
                return
        rejected[key] = until

    @classmethod
    def _record_scoped(
        cls,
        key: str,
        evidence: ScopedRecording,
        *,
        model: str | None,
        quota_bucket: str | None,
        retry_after_seconds: float | None,
        fallback_seconds: float,
        current: CooldownSettings,
        now: float,
        sent_at: float | None = None,
    ) -> None:
        """Record in the store (no pool lock: it may reach Redis), then mirror a wide auth."""
        deadline = store_evidence(
            cls.namespace,
            key,
            evidence,
            model=model,
            quota_bucket=quota_bucket,
            retry_after_seconds=retry_after_seconds,
            fallback_seconds=fallback_seconds,
            current=current,
            now=now,
            sent_at=sent_at,
        )
        if evidence.rejected_wide and deadline is not None:
            with cls._lock:
                cls._rest(key, max(cls.rejected_until.get(key, 0.0), deadline), now)
                if cls.active_key == key:
                    cls._clear_active()


class ValidatedKeyPool(ActiveKeyState):
    """Selection that validates: the active key while it is trusted, else probes in order.

    Recording and probe-free selection live in `cooldown.pools.nanogpt`.
    """

    @classmethod
    def _reusable(
        cls, configured: Sequence[str], candidates: Sequence[str], policy: _Revalidation, now: float
    ) -> str | None:
        """The key usable without a probe: a lone key, or the active one while still valid."""
        only_key = configured[0]
        if len(configured) == 1 and cls.active_key is None and only_key not in cls.rejected_until:
            return cls._activate(only_key, policy.ttl, now)
        active = cls.active_key
        if (
            active in candidates
            and cls.active_until > now
            and cls.active_requests < policy.request_budget
            and active not in cls.rejected_until
        ):
            return active
        return None

    @classmethod
    def _eligible(
        cls,
        keys: Sequence[str],
        model: str | None,
        quota_bucket: str | None,
        max_seconds: int,
        now: float,
    ) -> list[str]:
        """The store's filter with this pool's rejections as legacy rests; no pool lock held."""
        with cls._lock:
            rests = cls._rests_within(max_seconds, now)
        return model_cooldown.eligible(
            cls.namespace,
            keys,
            model=model,
            quota_bucket=quota_bucket,
            max_seconds=max_seconds,
            now=now,
            legacy_rest_until=rests,
        )

    @classmethod
    def select_key(
        cls,
        keys: Sequence[str],
        probe: Callable[[str], int],
        *,
        check_ttl_seconds: float = 300,
        check_every_requests: int = 50,
        rejected_cooldown_seconds: float = 60,
        now: float | None = None,
        model: str | None = None,
        quota_bucket: str | None = None,
    ) -> str | None:
        """The validated key to use; probes (catalog requests) only when revalidation is due.

        One validation runs at a time and concurrent callers wait for its result instead of
        each probing the upstream; callers that never probe (`record_result`, `invalidate`,
        `select_available_key`) are never blocked by a probe.
        """
        current = scoped_settings(model, quota_bucket)
        configured = unique_stripped(keys)
        if not configured:
            return None
        policy = _Revalidation.from_arguments(
            check_ttl_seconds, check_every_requests, rejected_cooldown_seconds
        )
        current_time = resolve_now(now)
        with cls._lock:
            cls._forget_stale(configured, current_time)
        candidates = configured
        if current is not None:  # cooling keys are never probed
            candidates = cls._eligible(
                configured, model, quota_bucket, current.max_seconds, current_time
            )
        with cls._lock:
            reusable = cls._reusable(configured, candidates, policy, current_time)
        if reusable is not None:
            return reusable
        with cls._validation:
            with cls._lock:  # another caller may have validated a key while we waited
                reusable = cls._reusable(configured, candidates, policy, current_time)
                previous = cls.active_key
            if reusable is not None:
                return reusable
            return cls._validate(
                configured,
                candidates,
                probe,
                policy,
                previous,
                model,
                quota_bucket,
                current,
                current_time,
            )

    @classmethod
    def _rejected_meanwhile(
        cls,
        key: str,
        recorded_before: int,
        model: str | None,
        quota_bucket: str | None,
        current: CooldownSettings | None,
        now: float,
    ) -> bool:
        """Was the key rejected, or cooled for this scope, while its probe was in flight?"""
        with cls._lock:
            if cls._recorded.get(key, 0) != recorded_before:
                return True
            rests = cls._rests_within(None if current is None else current.max_seconds, now)
        if current is None:
            return False
        return not model_cooldown.available(
            cls.namespace,
            [key],
            model=model,
            quota_bucket=quota_bucket,
            max_seconds=current.max_seconds,
            now=now,
            legacy_rest_until=rests,
        )

    @classmethod
    def _validate(
        cls,
        configured: Sequence[str],
        candidates: Sequence[str],
        probe: Callable[[str], int],
        policy: _Revalidation,
        previous: str | None,
        model: str | None,
        quota_bucket: str | None,
        current: CooldownSettings | None,
        now: float,
    ) -> str:
        """Probe candidates in order, active key first; no state lock is held while probing."""
        probed = False
        previous_ambiguous = False
        with cls._lock:
            order = cls._active_first(candidates)
        for key in order:
            with cls._lock:
                if key in cls.rejected_until:
                    continue
                recorded_before = cls._recorded.get(key, 0)
            probed = True
            status = _probe_status(probe, key)
            if status is not None and 200 <= status < 300:
                if cls._rejected_meanwhile(key, recorded_before, model, quota_bucket, current, now):
                    continue  # a 429 or 401 arrived while the probe ran: it wins
                with cls._lock:
                    if current is None:
                        cls.rejected_until.pop(key, None)
                    return cls._activate(key, policy.ttl, now)
            if current is None and status in REJECTION_STATUSES:
                with cls._lock:
                    cls._reject(key, status, policy.ttl, policy.throttle_seconds, now)
            elif current is not None and status == 401:
                # A probe carries no model evidence: only genuine auth cools the key.
                cls._record_scoped(
                    key,
                    ScopedRecording(classify_upstream_outcome(401), True),
                    model=None,
                    quota_bucket=None,
                    retry_after_seconds=None,
                    fallback_seconds=policy.ttl,
                    current=current,
                    now=now,
                )
            elif key == previous:
                previous_ambiguous = True
        with cls._lock:
            if previous is not None and previous_ambiguous and previous not in cls.rejected_until:
                return cls._activate(previous, min(policy.ttl, AMBIGUOUS_KEEP_SECONDS), now)
            cls._clear_active()
        if current is not None:  # every key cooling now is a 429, not a pool failure
            cls._eligible(configured, model, quota_bucket, current.max_seconds, now)
        if probed:
            raise NanoGPTKeyPoolExhausted("No configured NanoGPT API key passed validation")
        raise NanoGPTKeyPoolExhausted("All configured NanoGPT keys are cooling down")

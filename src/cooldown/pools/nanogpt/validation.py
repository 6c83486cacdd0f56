"""Which NanoGPT key is validated and active, and the probes that validate one."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import NamedTuple

from ...arguments import resolve_now, seconds
from ...config import CooldownSettings
from ...errors import NanoGPTKeyPoolExhausted
from ...evidence.outcome import classify_upstream_outcome
from ...store import CallScope
from .._common import CheckedEvidence, Observation, scoped_settings, unique_stripped
from ..default import pool_method
from .active_key import ActiveKeyState

__all__ = [
    "REJECTION_STATUSES",
    "NanoGPTKeyPoolExhausted",
    "ValidatedKeyPool",
]

logger = logging.getLogger("cooldown")

REJECTION_STATUSES = frozenset({401, 402, 403, 429})
AMBIGUOUS_KEEP_SECONDS = 30.0
_PROBE_ERRORS = (OSError, RuntimeError, TypeError, ValueError)


class _Revalidation(NamedTuple):
    """How a key is validated (`probe`), how long a validated key stays trusted, and how
    long a probe's rejection lasts."""

    probe: Callable[[str], int]
    ttl: float
    request_budget: int
    throttle_seconds: float

    @classmethod
    def from_arguments(
        cls,
        probe: Callable[[str], int],
        check_ttl_seconds: float,
        check_every_requests: int,
        rejected_cooldown_seconds: float,
    ) -> _Revalidation:
        if isinstance(check_every_requests, bool) or not isinstance(check_every_requests, int):
            raise TypeError("check_every_requests must be an int")
        return cls(
            probe,
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


class ValidatedKeyPool(ActiveKeyState):
    """Selection that validates: the active key while it is trusted, else probes in order.

    Recording and probe-free selection live in `cooldown.pools.nanogpt.pools`.
    """

    @pool_method
    def _reusable(
        self,
        configured: Sequence[str],
        candidates: Sequence[str],
        policy: _Revalidation,
        now: float,
    ) -> str | None:
        """The key usable without a probe: a lone key, or the active one while still valid."""
        only_key = configured[0]
        if len(configured) == 1 and self.active_key is None and only_key not in self.rejected_until:
            return self._activate(only_key, policy.ttl, now)
        active = self.active_key
        if (
            active in candidates
            and self.active_until > now
            and self.active_requests < policy.request_budget
            and active not in self.rejected_until
        ):
            return active
        return None

    @pool_method
    def _eligible(
        self,
        keys: Sequence[str],
        model: str | None,
        quota_bucket: str | None,
        max_seconds: int,
        now: float,
    ) -> list[str]:
        """The store's filter with this pool's rejections as legacy rests; no pool lock held."""
        with self._lock:
            rests = self._rests_within(max_seconds, now)
        scope = CallScope(self.namespace, model, quota_bucket, now, max_seconds)
        return self.store.eligible(scope, keys, legacy_rest_until=rests)

    @pool_method
    def select_key(
        self,
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
        current = scoped_settings(self.store, model, quota_bucket)
        configured = unique_stripped(keys)
        if not configured:
            return None
        policy = _Revalidation.from_arguments(
            probe, check_ttl_seconds, check_every_requests, rejected_cooldown_seconds
        )
        current_time = resolve_now(now)
        with self._lock:
            self._forget_stale(configured, current_time)
        candidates = configured
        if current is not None:  # cooling keys are never probed
            candidates = self._eligible(
                configured, model, quota_bucket, current.max_seconds, current_time
            )
        with self._lock:
            reusable = self._reusable(configured, candidates, policy, current_time)
        if reusable is not None:
            return reusable
        with self._validation:
            with self._lock:  # another caller may have validated a key while we waited
                reusable = self._reusable(configured, candidates, policy, current_time)
                previous = self.active_key
            if reusable is not None:
                return reusable
            asked = CallScope(self.namespace, model, quota_bucket, current_time)
            return self._validate(configured, candidates, policy, previous, asked, current)

    @pool_method
    def _rejected_meanwhile(
        self, key: str, recorded_before: int, asked: CallScope, current: CooldownSettings | None
    ) -> bool:
        """Was the key rejected, or cooled for the scope `asked`, while its probe was in
        flight?"""
        now = resolve_now(asked.now)
        with self._lock:
            if self._recorded.get(key, 0) != recorded_before:
                return True
            rests = self._rests_within(None if current is None else current.max_seconds, now)
        if current is None:
            return False
        scope = asked._replace(max_seconds=current.max_seconds)
        return not self.store.available(scope, [key], legacy_rest_until=rests)

    @pool_method
    def _validate(
        self,
        configured: Sequence[str],
        candidates: Sequence[str],
        policy: _Revalidation,
        previous: str | None,
        asked: CallScope,
        current: CooldownSettings | None,
    ) -> str:
        """Probe candidates in order, active key first, for the scope `asked` (its `now`
        resolved); no state lock is held while probing."""
        model, quota_bucket, now = asked.model, asked.quota_bucket, resolve_now(asked.now)
        probed = False
        previous_ambiguous = False
        with self._lock:
            order = self._active_first(candidates)
        for key in order:
            with self._lock:
                if key in self.rejected_until:
                    continue
                recorded_before = self._recorded.get(key, 0)
            probed = True
            status = _probe_status(policy.probe, key)
            if status is not None and 200 <= status < 300:
                if self._rejected_meanwhile(key, recorded_before, asked, current):
                    continue  # a 429 or 401 arrived while the probe ran: it wins
                with self._lock:
                    if current is None:
                        self.rejected_until.pop(key, None)
                    return self._activate(key, policy.ttl, now)
            if current is None and status in REJECTION_STATUSES:
                with self._lock:
                    self._reject(key, status, policy.ttl, policy.throttle_seconds, now)
            elif current is not None and status == 401:
                # A probe carries no model evidence: only genuine auth cools the key.
                wide_auth = CheckedEvidence(classify_upstream_outcome(401), True)
                scope = CallScope(self.namespace, now=now, max_seconds=current.max_seconds)
                self._record_scoped(scope, Observation(key, wide_auth), current, policy.ttl)
            elif key == previous:
                previous_ambiguous = True
        with self._lock:
            if previous is not None and previous_ambiguous and previous not in self.rejected_until:
                return self._activate(previous, min(policy.ttl, AMBIGUOUS_KEEP_SECONDS), now)
            self._clear_active()
        if current is not None:  # every key cooling now is a 429, not a pool failure
            self._eligible(configured, model, quota_bucket, current.max_seconds, now)
        if probed:
            raise NanoGPTKeyPoolExhausted("No configured NanoGPT API key passed validation")
        raise NanoGPTKeyPoolExhausted("All configured NanoGPT keys are cooling down")

"""NanoGPT pools: one validated active key at a time, revalidated by TTL and request count."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from ...arguments import resolve_now, seconds
from ...evidence.outcome import UpstreamOutcome
from ...store import CallScope
from .._common import (
    CheckedEvidence,
    Observation,
    check_evidence,
    scoped_max_seconds,
    scoped_settings,
    status_code,
    unique_stripped,
)
from ..default import pool_method
from ..discovery import configured_nanogpt_keys
from ..key_status import PoolStatus, keys_status
from .validation import REJECTION_STATUSES, NanoGPTKeyPoolExhausted, ValidatedKeyPool

__all__ = [
    "NanoGPTKeyPool",
    "NanoGPTKeyPoolExhausted",
    "NanoGPTUnifiedKeyPool",
    "configured_nanogpt_keys",
    "is_nanogpt_credential_rejection",
]


class _Report(NamedTuple):
    """What a caller reports of one NanoGPT answer, as `record_result` and `invalidate`
    take it (unchecked)."""

    check_ttl_seconds: float
    rejected_cooldown_seconds: float
    now: float | None
    model: str | None
    quota_bucket: str | None
    outcome: UpstreamOutcome | None
    credential_wide_auth: bool | None
    retry_after_seconds: float | None
    sent_at: float | None


def is_nanogpt_credential_rejection(status: object) -> bool:
    return isinstance(status, int) and not isinstance(status, bool) and status in REJECTION_STATUSES


class _ValidatedKeyPool(ValidatedKeyPool):
    """Shared algorithm of the NanoGPT pools: selection without probes, recording, status."""

    @pool_method
    def select_available_key(
        self,
        keys: Sequence[str],
        *,
        now: float | None = None,
        model: str | None = None,
        quota_bucket: str | None = None,
    ) -> str | None:
        """The active key if usable, else the first usable configured key, without probing."""
        max_seconds = scoped_max_seconds(self.store, model, quota_bucket)
        configured = unique_stripped(keys)
        current_time = resolve_now(now)
        with self._lock:
            self._forget_stale(configured, current_time)
            ordered = self._active_first(configured)
            if max_seconds is None:
                return next((key for key in ordered if key not in self.rejected_until), None)
        free = self._eligible(ordered, model, quota_bucket, max_seconds, current_time)
        return free[0] if free else None

    # -- recording ----------------------------------------------------------------------------

    @pool_method
    def record_result(
        self,
        key: str | None,
        status: int,
        *,
        check_ttl_seconds: float = 300,
        rejected_cooldown_seconds: float = 60,
        now: float | None = None,
        model: str | None = None,
        quota_bucket: str | None = None,
        outcome: UpstreamOutcome | None = None,
        credential_wide_auth: bool | None = None,
        retry_after_seconds: float | None = None,
        sent_at: float | None = None,
    ) -> None:
        """Learn from a dispatched request; counts it against the active key's budget.

        `sent_at` (monotonic, default now): when the request started; a success sent before
        a throttle was recorded reopens nothing."""
        report = _Report(
            check_ttl_seconds,
            rejected_cooldown_seconds,
            now,
            model,
            quota_bucket,
            outcome,
            credential_wide_auth,
            retry_after_seconds,
            sent_at,
        )
        self._observe(key, status, report, count_request=True)

    @pool_method
    def invalidate(
        self,
        key: str | None,
        status: int,
        *,
        check_ttl_seconds: float = 300,
        rejected_cooldown_seconds: float = 60,
        now: float | None = None,
        model: str | None = None,
        quota_bucket: str | None = None,
        outcome: UpstreamOutcome | None = None,
        credential_wide_auth: bool | None = None,
        retry_after_seconds: float | None = None,
        sent_at: float | None = None,
    ) -> None:
        """Stop using `key` after a rejection; legacy clears it as active whatever the status."""
        report = _Report(
            check_ttl_seconds,
            rejected_cooldown_seconds,
            now,
            model,
            quota_bucket,
            outcome,
            credential_wide_auth,
            retry_after_seconds,
            sent_at,
        )
        self._observe(key, status, report, count_request=False)

    @pool_method
    def _observe(
        self, key: str | None, status: int, report: _Report, *, count_request: bool
    ) -> None:
        """`record_result` and `invalidate`: what one answer with `key` says (`report`)."""
        (
            check_ttl_seconds,
            rejected_cooldown_seconds,
            now,
            model,
            quota_bucket,
            outcome,
            credential_wide_auth,
            retry_after_seconds,
            sent_at,
        ) = report
        status = status_code(status)
        check_evidence(outcome, credential_wide_auth)
        current = scoped_settings(self.store, model, quota_bucket)
        if key is not None and not isinstance(key, str):
            raise TypeError("key must be a str")
        key = (key or "").strip()
        if not key:
            return
        ttl = seconds(check_ttl_seconds, "check_ttl_seconds")
        throttle_seconds = seconds(rejected_cooldown_seconds, "rejected_cooldown_seconds")
        current_time = resolve_now(now)
        if current is not None:
            evidence = CheckedEvidence.from_call(status, outcome, credential_wide_auth)
            scope = CallScope(
                self.namespace, model, quota_bucket, current_time, current.max_seconds
            )
            fallback = evidence.fallback(current, rejected=ttl, otherwise=throttle_seconds)
            seen = Observation(key, evidence, retry_after_seconds, sent_at)
            self._record_scoped(scope, seen, current, fallback)
        with self._lock:
            if current is None and (not count_request or is_nanogpt_credential_rejection(status)):
                if is_nanogpt_credential_rejection(status):  # a probe of this key must see it
                    self._note_recorded(key)
                if self.active_key == key:
                    self._clear_active()
                self._reject(key, status, ttl, throttle_seconds, current_time)
                return
            if count_request and self.active_key == key:
                self.active_requests += 1

    @pool_method
    def status(
        self,
        keys: Sequence[str],
        *,
        model: str | None = None,
        quota_bucket: str | None = None,
        now: float | None = None,
    ) -> PoolStatus:
        """Per configured key position: ready or cooling, why and for how long."""
        current = scoped_settings(self.store, model, quota_bucket)
        configured = unique_stripped(keys)
        current_time = resolve_now(now)
        with self._lock:
            self._forget_stale(configured, current_time)
            rests = self._rests_within(
                None if current is None else current.max_seconds, current_time
            )
        scope = CallScope(self.namespace, model, quota_bucket, current_time)
        return keys_status(self.store, scope, configured, rests, current)

    @pool_method
    def reset(self) -> None:
        """Forget the active key, every rejection and the dropped count (tests)."""
        with self._lock:
            self.rejected_until = {}
            self._recorded = {}
            self._full_until = -math.inf
            self.rejections_dropped_total = 0
            self._clear_active()


class NanoGPTKeyPool(_ValidatedKeyPool, namespace="nanogpt"):
    """The raw NanoGPT pool, used on the class."""


class NanoGPTUnifiedKeyPool(_ValidatedKeyPool, namespace="nanogpt-unified"):
    """The unified NanoGPT pool: same algorithm, fully separate state."""

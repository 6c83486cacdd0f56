"""The validated active key and the legacy rejections a NanoGPT pool holds."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

from ...arguments import resolve_now
from ...config import CooldownSettings
from ...evidence.learn import WindowLearner, window_learner
from ...forksafe import new_lock, new_rlock
from ...store import CallScope, ModelCooldown, model_cooldown
from .._common import Observation, store_evidence
from ..default import own_store, pool_method

__all__ = ["AUTH_STATUSES", "MAX_REJECTIONS", "ActiveKeyState"]

AUTH_STATUSES = frozenset({401, 402, 403})
MAX_REJECTIONS = 10000
"""Live rejections a NanoGPT pool holds at most (10^6 junk keys cannot grow it further)."""


class ActiveKeyState:
    """The validated active key and the legacy rejections. Each pool class that names a
    namespace holds its own, as its default object; each object made from it, its own."""

    namespace: str
    active_key: str | None
    active_until: float
    active_requests: int
    rejected_until: dict[str, float]
    _recorded: dict[str, int]  # rejections recorded per key, to spot one mid-probe
    rejections_dropped_total: int
    _full_until: float  # while full of live rests: the earliest of them
    _lock: threading.Lock  # the state above; never held across a probe or Redis
    _validation: threading.RLock  # one validation at a time (a probe may nest one)
    store: ModelCooldown = model_cooldown
    _learner: WindowLearner = window_learner

    def __init_subclass__(cls, *, namespace: str | None = None, **kwargs: object) -> None:
        """A pool names its store namespace; a class that adds behaviour only names none."""
        super().__init_subclass__(**kwargs)
        if namespace is not None:
            cls.namespace = namespace
            cls._start(cls)

    def __init__(self, store: ModelCooldown | None = None) -> None:
        """A pool of its own: no active key, no rejection, and `store` for its scoped
        observations (default: a new `ModelCooldown()`), shared with no other pool."""
        if not hasattr(type(self), "namespace"):
            raise TypeError(f"{type(self).__name__} names no namespace; use a NanoGPT pool")
        self.store = own_store(store)
        self._learner = WindowLearner()
        self._start(self)

    @staticmethod
    def _start(pool: object) -> None:
        """Fresh state and locks on `pool` (a class, for its default object, or an object)."""
        state: Any = pool
        state._lock = new_lock(pool)
        state._validation = new_rlock(pool, "_validation")
        state.rejected_until = {}
        state._recorded = {}
        state.rejections_dropped_total = 0
        state._full_until = -math.inf
        state.active_key, state.active_until, state.active_requests = None, 0.0, 0

    @pool_method
    def _clear_active(self) -> None:
        self.active_key = None
        self.active_until = 0.0
        self.active_requests = 0

    @pool_method
    def _activate(self, key: str, ttl: float, now: float) -> str:
        self.active_key = key
        self.active_until = now + ttl
        self.active_requests = 0
        return key

    @pool_method
    def _forget_stale(self, configured: Sequence[str], now: float) -> None:
        """Drop expired or unconfigured rejections and an unconfigured active key."""
        self.rejected_until = {
            key: until
            for key, until in self.rejected_until.items()
            if until > now and key in configured
        }
        if self.active_key not in configured:
            self._clear_active()

    @pool_method
    def _rests_within(self, max_seconds: int | None, now: float) -> dict[str, float]:
        """A copy of the rejections (lock held). With `max_seconds` (the scoped path), one
        beyond `now + max_seconds` is cut to it for good: a lowered maximum shortens the
        mirror of a credential-wide rejection as it does the store's own cooldowns."""
        if max_seconds is not None:
            limit = now + max_seconds
            rejected = self.rejected_until
            for key in [key for key, until in rejected.items() if until > limit]:
                rejected[key] = limit
        return dict(self.rejected_until)

    @pool_method
    def _active_first(self, keys: Sequence[str]) -> list[str]:
        active = self.active_key
        first = [active] if active is not None and active in keys else []
        return first + [key for key in keys if key != active]

    @pool_method
    def _note_recorded(self, key: str) -> None:
        """Count a recorded rejection (lock held); bounded: a reset only makes a probe careful."""
        if len(self._recorded) >= MAX_REJECTIONS:
            self._recorded.clear()
        self._recorded[key] = self._recorded.get(key, 0) + 1

    @pool_method
    def _reject(
        self, key: str, status: int, auth_seconds: float, throttle_seconds: float, now: float
    ) -> None:
        """Legacy rejection: a new one replaces the old deadline."""
        if status in AUTH_STATUSES:
            self._rest(key, now + auth_seconds, now)
        elif status == 429:
            self._rest(key, now + throttle_seconds, now)

    @pool_method
    def _rest(self, key: str, until: float, now: float) -> None:
        """Set a rejection (lock held); the map never holds more than `MAX_REJECTIONS`.

        Full of live rests, the map is rebuilt only once the earliest of them has expired:
        until then a new key is dropped at once, not after a scan of every rest."""
        rejected = self.rejected_until
        if key not in rejected and len(rejected) >= MAX_REJECTIONS:
            if now < self._full_until:
                self.rejections_dropped_total += 1
                return
            self.rejected_until = rejected = {k: v for k, v in rejected.items() if v > now}
            if len(rejected) >= MAX_REJECTIONS:
                self._full_until = min(rejected.values())
                self.rejections_dropped_total += 1  # every rest is live: keep them, not this one
                return
        rejected[key] = until

    @pool_method
    def _record_scoped(
        self,
        scope: CallScope,
        seen: Observation,
        current: CooldownSettings,
        fallback_seconds: float,
    ) -> None:
        """Record in the store (no pool lock: it may reach Redis), then mirror a wide auth.
        `scope.now` is the caller's resolved clock."""
        now = resolve_now(scope.now)
        key, evidence = seen.key, seen.evidence
        deadline = store_evidence(self.store, self._learner, scope, seen, fallback_seconds, current)
        if evidence.rejected_wide and deadline is not None:
            with self._lock:
                self._rest(key, max(self.rejected_until.get(key, 0.0), deadline), now)
                if self.active_key == key:
                    self._clear_active()

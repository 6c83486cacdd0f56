"""Learned cooldowns for throttles that came without advice, from natural traffic only.

After a throttle without `Retry-After` or rate-limit headers (the start of an *episode*),
what happens next bounds the delay the provider really needs: another throttle at elapsed
`t` proves it is longer than `t`, a success at elapsed `t` proves it is at most `t`. The
next advice-less throttle of that (credential, scope) then cools for an estimate between
the bounds instead of a fixed fallback. Estimates are a bounded cache keyed by HMAC digests.
"""

from __future__ import annotations

import logging
import math
import secrets
from collections import OrderedDict
from dataclasses import dataclass
from typing import NamedTuple

from ..config import LearnMode
from ..digests import PreparedHmac, credential_message, credential_prefix
from ..forksafe import new_lock

__all__ = ["LearnPolicy", "LearnedWindow", "WindowLearner", "window_learner"]

logger = logging.getLogger("cooldown")

MAX_ESTIMATES = 1024
UNUSED_EXPIRY_SECONDS = 7 * 24 * 3600.0
CLOSE_ENOUGH = 0.2  # bounds this close (relative to the upper one) are trusted as they are
CLEAN_EPISODES_BEFORE_PROBING = 8  # then the lower bound is halved to find a shorter window


class LearnedWindow(NamedTuple):
    """One estimate as it travels between processes (monotonic seconds)."""

    lower: float
    upper: float | None
    episode_start: float | None
    throttles_in_episode: int
    clean_episodes: int


@dataclass
class _Estimate:
    """What the evidence says about one (credential, scope): the delay is in (lower, upper]."""

    lower: float = 0.0
    upper: float | None = None
    episode_start: float | None = None
    throttles_in_episode: int = 0
    clean_episodes: int = 0
    used: float = 0.0

    def target(self, elapsed: float, fallback: float, first_delay: float | None) -> float:
        """When, counted from the episode's start, the key should be tried again.

        With an estimate, bisect it. Without one: a short `first_delay` doubled at each
        further throttle of the episode (up to the fallback), or the upward search.
        """
        upper = self.upper
        if upper is not None and upper > elapsed:
            if upper - self.lower <= CLOSE_ENOUGH * upper:
                return upper
            middle = (self.lower + upper) / 2
            return middle if middle > elapsed else upper
        if first_delay is not None:
            doublings = min(self.throttles_in_episode - 1, 62)
            return elapsed + min(fallback, math.ldexp(first_delay, doublings))
        if elapsed == 0:
            return fallback
        return max(2 * max(self.lower, elapsed), elapsed + fallback)  # search upwards

    def throttled(self, now: float, fallback: float, first_delay: float | None) -> float:
        """An advice-less throttle; returns the delay from `now` the evidence suggests."""
        if self.episode_start is None:
            self.episode_start, self.throttles_in_episode = now, 1
            return self.target(0.0, fallback, first_delay)
        elapsed = max(0.0, now - self.episode_start)
        self.lower = max(self.lower, elapsed)
        if self.upper is not None and self.lower >= self.upper:
            self.upper = None  # contradiction: the window grew, search again
        self.throttles_in_episode += 1
        return self.target(elapsed, fallback, first_delay) - elapsed

    def succeeded(self, now: float) -> None:
        if self.episode_start is None:
            return
        elapsed = max(0.0, now - self.episode_start)
        if elapsed < self.lower:
            self.lower = 0.0  # contradiction: the window shrank, forget the old lower bound
        self.upper = elapsed if self.upper is None else min(self.upper, elapsed)
        clean = self.throttles_in_episode == 1
        self.clean_episodes = self.clean_episodes + 1 if clean else 0
        if self.clean_episodes >= CLEAN_EPISODES_BEFORE_PROBING:
            self.lower /= 2  # now and then, look for a shorter window
            self.clean_episodes = 0
        self.episode_start = None


class LearnPolicy(NamedTuple):
    """How a throttle's learned delay is used: `mode` (`"apply"`, or `"shadow"` to log it
    only), bounded by `max_seconds`; until an estimate exists, start at `first_delay` and
    double."""

    mode: LearnMode
    max_seconds: int
    first_delay: float | None = None


class WindowLearner:
    """At most `MAX_ESTIMATES` estimates, least recently used dropped first; thread-safe."""

    def __init__(self, *, max_estimates: int = MAX_ESTIMATES) -> None:
        self._digest = PreparedHmac(secrets.token_bytes(32))
        self._lock = new_lock(self)
        self._estimates: OrderedDict[bytes, _Estimate] = OrderedDict()
        self._max_estimates = max(1, max_estimates)

    def __repr__(self) -> str:
        return f"<WindowLearner estimates={len(self._estimates)}>"

    def _id(self, namespace: str, credential: str, scope: bytes) -> bytes:
        return self._digest(credential_message(credential_prefix(namespace), credential) + scope)

    def _estimate(self, entry: bytes, now: float) -> _Estimate:
        """The estimate for `entry`, fresh if it expired; evicts the least recently used."""
        estimate = self._estimates.get(entry)
        if estimate is None or now - estimate.used > UNUSED_EXPIRY_SECONDS:
            estimate = self._estimates[entry] = _Estimate()
        self._estimates.move_to_end(entry)
        estimate.used = now
        while len(self._estimates) > self._max_estimates:
            self._estimates.popitem(last=False)
        return estimate

    def throttled(
        self,
        namespace: str,
        credential: str,
        scope: bytes,
        *,
        fallback: float,
        now: float,
        policy: LearnPolicy,
    ) -> float:
        """The fallback delay to record for an advice-less throttle (`fallback` in shadow)."""
        mode, max_seconds, first_delay = policy
        entry = self._id(namespace, credential, scope)
        with self._lock:
            learned = self._estimate(entry, now).throttled(now, fallback, first_delay)
        delay = min(float(max_seconds), max(1.0, learned))
        if mode == "shadow":
            logger.info(
                "learned window %s: would cool %.1f s instead of %.1f s",
                entry.hex()[:8],
                delay,
                fallback,
            )
            return fallback
        return delay

    def succeeded(self, namespace: str, credential: str, scope: bytes, *, now: float) -> None:
        entry = self._id(namespace, credential, scope)
        with self._lock:
            estimate = self._estimates.get(entry)
            if estimate is not None:
                self._estimate(entry, now).succeeded(now)

    def advised(self, namespace: str, credential: str, scope: bytes, *, now: float) -> None:
        """The provider said how long: its word wins and this episode teaches nothing."""
        entry = self._id(namespace, credential, scope)
        with self._lock:
            estimate = self._estimates.get(entry)
            if estimate is not None:
                estimate.episode_start = None

    def export(self, namespace: str, credential: str, scope: bytes) -> LearnedWindow | None:
        """The estimate for sharing with other processes; `None` when nothing is known."""
        with self._lock:
            estimate = self._estimates.get(self._id(namespace, credential, scope))
            if estimate is None:
                return None
            return LearnedWindow(
                estimate.lower,
                estimate.upper,
                estimate.episode_start,
                estimate.throttles_in_episode,
                estimate.clean_episodes,
            )

    def adopt(
        self, namespace: str, credential: str, scope: bytes, window: LearnedWindow, *, now: float
    ) -> None:
        """Take the fleet's estimate (shared state) in place of this process's own."""
        entry = self._id(namespace, credential, scope)
        with self._lock:
            estimate = self._estimate(entry, now)
            estimate.lower, estimate.upper, estimate.episode_start = window[:3]
            estimate.throttles_in_episode, estimate.clean_episodes = window[3:]

    def bounds(
        self, namespace: str, credential: str, scope: bytes
    ) -> tuple[float, float | None] | None:
        """(lower, upper) for tests and the benchmark; `None` when nothing is known."""
        with self._lock:
            estimate = self._estimates.get(self._id(namespace, credential, scope))
            return None if estimate is None else (estimate.lower, estimate.upper)

    def __len__(self) -> int:
        return len(self._estimates)

    def reset(self) -> None:
        with self._lock:
            self._estimates.clear()


window_learner = WindowLearner()
"""The one process-wide learner both pool kinds consult."""

"""What both pool kinds share: the scoped-path decision and the recording arguments."""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from ..arguments import resolve_now, usable_advice
from ..config import (
    ENABLED_ENV,
    CooldownSettings,
    bounded_int,
    enabled_unset,
    environment_value,
    settings,
    warn_once,
)
from ..digests import frame, scope_message
from ..evidence.learn import LearnPolicy, WindowLearner
from ..evidence.outcome import UpstreamOutcome, classify_status
from ..evidence.quota import QUOTA_SPENT
from ..shared import share_when_configured
from ..store import CallScope, ModelCooldown

__all__ = [
    "CheckedEvidence",
    "by_affinity",
    "check_affinity",
    "check_evidence",
    "configured_positions",
    "key_value",
    "numbered_suffix",
    "scoped_max_seconds",
    "scoped_settings",
    "shared_state_configured",
    "status_code",
    "store_evidence",
    "unique_stripped",
    "without_placeholders",
]


def unique_stripped(values: Iterable[object]) -> list[str]:
    """Strip, skip empties and non-strings, and keep the first of any duplicate."""
    if isinstance(values, (str, bytes)):
        raise TypeError("keys must be a sequence of strings, not a single string")
    seen: dict[str, None] = {}
    for value in values:
        if isinstance(value, str) and value.strip():
            seen.setdefault(value.strip(), None)
    return list(seen)


_PLACEHOLDER = re.compile(r"your[-_].*|<.*>|changeme|replace[-_]?me", re.IGNORECASE | re.DOTALL)


def key_value(environ: Mapping[str, object], name: str) -> str:
    """The key configured in `name`, or `""` when unset or a placeholder copied from a template."""
    kept = without_placeholders([(environment_value(environ, name) or "").strip()], name)
    return kept[0] if kept else ""


def configured_positions(values: Iterable[object]) -> dict[str, int]:
    """Each kept key's 1-based place in the list as configured: a blank entry is no place,
    while a placeholder or a duplicate keeps its place (so the keys after it never shift
    into another account); a duplicate key keeps its first place."""
    positions: dict[str, int] = {}
    place = 0
    for value in values:
        text = value.strip() if isinstance(value, str) else ""
        if text:
            place += 1
            if not _PLACEHOLDER.fullmatch(text):
                positions.setdefault(text, place)
    return positions


def without_placeholders(values: list[str], name: str) -> list[str]:
    """The values of the list variable `name` that are keys, not template placeholders."""
    kept = [value for value in values if not _PLACEHOLDER.fullmatch(value.strip())]
    if len(kept) != len(values):
        warn_once(name, "%s holds a placeholder, not a key; it is skipped")
    return kept


def numbered_suffix(name: str, prefix: str) -> int | None:
    """`n` when `name` is `prefix` and ASCII digits up to `sys.maxsize`, else `None`."""
    if not name.startswith(prefix):
        return None
    suffix = name[len(prefix) :]
    return bounded_int(suffix, 0, sys.maxsize) if suffix == suffix.strip() else None


def check_evidence(outcome: object, credential_wide_auth: object) -> None:
    """Reject wrong evidence types on every path, even where the legacy path ignores them."""
    if outcome is not None and not isinstance(outcome, UpstreamOutcome):
        raise TypeError("outcome must be an UpstreamOutcome or None")
    if credential_wide_auth is not None and not isinstance(credential_wide_auth, bool):
        raise TypeError("credential_wide_auth must be a bool or None")


def status_code(status: object) -> int:
    if isinstance(status, bool) or not isinstance(status, int):
        raise TypeError("status must be an int")
    return status


UNSCOPED_WARNING = (
    "provider %s: called with model cooldown on but no model or quota_bucket; the call takes "
    "the legacy provider-wide path (pass model= to cool one model)"
)


UNSET_AT_POOL_CALL = (
    "a pool call took the legacy provider-wide path because %s is unset: throttled keys are "
    "not cooled per model; set it to true to turn cooldowns on"
)


def scoped_settings(
    store: ModelCooldown, model: object, quota_bucket: object, provider: str | None = None
) -> CooldownSettings | None:
    """The settings when this call takes the scoped path, else `None`.

    The scoped path needs the feature enabled and a non-empty model or bucket; anything
    else keeps the legacy provider-wide behaviour. A pool call naming its `provider` that
    has the feature on but no model or bucket says so, once per provider.
    """
    if quota_bucket is not None or type(model) is not str:  # the common call checks nothing
        for value, name in ((model, "model"), (quota_bucket, "quota_bucket")):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be a str or None")
    if not (model or quota_bucket):
        if provider is not None and settings().enabled:
            warn_once(provider, UNSCOPED_WARNING)
        return None
    current = settings()
    if not current.enabled:
        if enabled_unset():
            warn_once(ENABLED_ENV, UNSET_AT_POOL_CALL)
        return None
    share_when_configured(store, current)
    return current


def shared_state_configured() -> bool:
    """Would a scoped call reach Redis? (The feature is on and the settings name one.)"""
    current = settings()
    return current.enabled and current.redis_url is not None


def scoped_max_seconds(
    store: ModelCooldown, model: object, quota_bucket: object, provider: str | None = None
) -> int | None:
    """The configured maximum when this call takes the scoped path, else `None`."""
    current = scoped_settings(store, model, quota_bucket, provider)
    return None if current is None else current.max_seconds


class Observation(NamedTuple):
    """One answer to record on the scoped path, its arguments checked: the key it came
    from, what it proved, the provider's advice, when its request started (`None`: now),
    and whether the key is one the pool does not hold (a caller's own list)."""

    key: str
    evidence: CheckedEvidence
    retry_after_seconds: float | None = None
    sent_at: float | None = None
    foreign: bool = False


def store_evidence(
    store: ModelCooldown,
    learner: WindowLearner,
    scope: CallScope,
    seen: Observation,
    fallback_seconds: float,
    current: CooldownSettings,
) -> float | None:
    """Record one scoped observation in the store; hold no pool lock (it may reach Redis).

    When the provider gave no usable advice, the fallback is the learned window (with
    `MODEL_COOLDOWN_LEARN=apply`) instead of the pool's fixed one; a `foreign` key (not the
    pool's own) learns nothing, so a flood of them cannot crowd out what its keys learned.
    """
    key, evidence, advice, sent_at, foreign = seen
    if sent_at is not None:  # refused before the learner hears of the answer
        resolve_now(sent_at, "sent_at")
    if not foreign:
        fallback_seconds = evidence.learned_fallback(
            learner, scope, key, advice, current, fallback_seconds
        )
    return store.record(
        scope.provider,
        key,
        evidence.outcome,
        model=scope.model,
        quota_bucket=scope.quota_bucket,
        credential_wide_auth=evidence.credential_wide_auth,
        retry_after_seconds=advice,
        fallback_seconds=fallback_seconds,
        max_seconds=current.max_seconds,
        now=scope.now,
        sent_at=sent_at,
        foreign=foreign,
    )


def by_affinity(keys: list[str], affinity: str | None) -> list[str]:
    """Rendezvous order: the same affinity prefers the same key in every process.

    Each key's weight is the SHA-256 of the framed `(affinity, key)`, computed on the fly
    and never stored. When a key leaves the free list, only the affinities it ranked first
    move (to their second choice) and they return when it comes back.
    """
    if affinity is None or len(keys) < 2:
        return keys
    prefix = frame(affinity)
    return sorted(keys, key=lambda key: hashlib.sha256(prefix + frame(key)).digest(), reverse=True)


def check_affinity(affinity: object) -> str | None:
    if affinity is not None and not isinstance(affinity, str):
        raise TypeError("affinity must be a str or None")
    return affinity or None


class CheckedEvidence(NamedTuple):
    """The evidence one scoped `record` call passes to the store."""

    outcome: UpstreamOutcome
    credential_wide_auth: bool

    @classmethod
    def from_call(
        cls, status: int, outcome: UpstreamOutcome | None, credential_wide_auth: bool | None
    ) -> CheckedEvidence:
        """A supplied outcome overrides the status; a 401 is wide auth unless told otherwise,
        and a spent quota always is (it holds the key for every model).

        The pools have already passed both through `check_evidence`.
        """
        checked = classify_status(status) if outcome is None else outcome
        if checked.reason == QUOTA_SPENT.reason:
            return cls(checked, True)
        return cls(checked, status == 401 if credential_wide_auth is None else credential_wide_auth)

    @property
    def rejected_wide(self) -> bool:
        return self.outcome.credential_health == "rejected" and self.credential_wide_auth

    @property
    def quota_spent(self) -> bool:
        return self.outcome.reason == QUOTA_SPENT.reason

    def learned_fallback(
        self,
        learner: WindowLearner,
        scope: CallScope,
        key: str,
        advice: float | None,
        current: CooldownSettings,
        fallback: float,
    ) -> float:
        """The cooldown to record when the answer advises none: the learned window where
        learning applies (the learner hears of every answer while it is on), else
        `fallback`."""
        message = scope_message(scope.model, scope.quota_bucket)
        if current.learn == "off" or message is None:
            return fallback
        health, now = self.outcome.credential_health, resolve_now(scope.now)
        if health == "throttled" and usable_advice(advice):
            learner.advised(scope.provider, key, message, now=now)
        elif health == "throttled":
            return learner.throttled(
                scope.provider,
                key,
                message,
                fallback=fallback,
                now=now,
                policy=LearnPolicy(
                    current.learn,
                    current.max_seconds,
                    min(current.first_delay, current.max_seconds),
                ),
            )
        elif health == "accepted":
            learner.succeeded(scope.provider, key, message, now=now)
        return fallback

    def fallback(self, current: CooldownSettings, *, rejected: float, otherwise: float) -> float:
        """The cooldown when the answer advised none: a spent quota's setting, an auth
        rejection's rest, or a throttle's."""
        if self.quota_spent:
            return current.quota_seconds
        return rejected if self.outcome.credential_health == "rejected" else otherwise

"""Per-key status for operators: positions, states and reasons, never keys, digests or names."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, TypedDict

from ..arguments import retry_after
from ..config import LARGEST_MAX_SECONDS, CooldownSettings, settings
from ..shared import share_when_configured
from ..store import model_cooldown

__all__ = ["KeyStatus", "PoolStatus", "keys_status", "pool_status"]

Reason = Literal["credential", "scope", "legacy", "probe", "budget", "capacity"]


class KeyStatus(TypedDict):
    index: int  # 1-based position in the configured order
    state: Literal["ready", "cooling"]  # for the scope asked about (none: unscoped selection)
    reason: Reason | None
    retry_after: int | None
    scoped_cooldowns: int  # models or buckets this key cools for right now, whatever was asked


class PoolStatus(TypedDict):
    provider: str
    keys: list[KeyStatus]
    ready: int
    cooling: int
    cooling_some_models: int  # ready keys with scoped_cooldowns > 0: per-model trouble


def pool_status(
    provider: str,
    explained: Sequence[tuple[str | None, float]],
    scoped: Sequence[int],
    now: float,
    max_seconds: int,
) -> PoolStatus:
    """JSON-ready status from `ModelCooldown.explain`-style `(reason, release)` pairs and
    `ModelCooldown.scoped_counts`."""
    keys: list[KeyStatus] = []
    for position, ((reason, release), count) in enumerate(
        zip(explained, scoped, strict=True), start=1
    ):
        keys.append(
            {
                "index": position,
                "state": "ready" if reason is None else "cooling",
                "reason": reason,  # type: ignore[typeddict-item]
                "retry_after": None if reason is None else retry_after(release, now, max_seconds),
                "scoped_cooldowns": count,
            }
        )
    cooling = sum(1 for key in keys if key["state"] == "cooling")
    return {
        "provider": provider,
        "keys": keys,
        "ready": len(keys) - cooling,
        "cooling": cooling,
        "cooling_some_models": sum(
            1 for key in keys if key["state"] == "ready" and key["scoped_cooldowns"]
        ),
    }


def keys_status(
    provider: str,
    keys: Sequence[str],
    rests: Mapping[str, float],
    current: CooldownSettings | None,
    *,
    model: str | None,
    quota_bucket: str | None,
    now: float,
) -> PoolStatus:
    """A pool's keys as its selection sees them: legacy rests only, or the store's view; and
    on both paths, how many models each key cools for."""
    configured = current or settings()
    if configured.enabled:  # status reads the shared state too, scoped or not
        share_when_configured(model_cooldown, configured)
    scoped = model_cooldown.scoped_counts(provider, keys, now=now)
    if current is None:  # the legacy path: only the pool's own rests decide
        legacy: list[tuple[str | None, float]] = [
            ("legacy", rests[key]) if key in rests else (None, 0.0) for key in keys
        ]
        return pool_status(provider, legacy, scoped, now, LARGEST_MAX_SECONDS)
    explained = model_cooldown.explain(
        provider,
        keys,
        model=model,
        quota_bucket=quota_bucket,
        max_seconds=current.max_seconds,
        now=now,
        legacy_rest_until=rests,
    )
    return pool_status(provider, explained, scoped, now, current.max_seconds)

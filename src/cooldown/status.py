"""Per-key status for operators: positions, states and reasons, never keys, digests or names."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, TypedDict

from .arguments import retry_after
from .config import LARGEST_MAX_SECONDS, CooldownSettings
from .store import model_cooldown

__all__ = ["KeyStatus", "PoolStatus", "keys_status", "pool_status"]

Reason = Literal["credential", "scope", "legacy", "capacity"]


class KeyStatus(TypedDict):
    index: int  # 1-based position in the configured order
    state: Literal["ready", "cooling"]
    reason: Reason | None
    retry_after: int | None


class PoolStatus(TypedDict):
    provider: str
    keys: list[KeyStatus]
    ready: int
    cooling: int


def pool_status(
    provider: str, explained: Sequence[tuple[str | None, float]], now: float, max_seconds: int
) -> PoolStatus:
    """JSON-ready status from `ModelCooldown.explain`-style `(reason, release)` pairs."""
    keys: list[KeyStatus] = []
    for position, (reason, release) in enumerate(explained, start=1):
        if reason is None:
            keys.append({"index": position, "state": "ready", "reason": None, "retry_after": None})
        else:
            keys.append(
                {
                    "index": position,
                    "state": "cooling",
                    "reason": reason,  # type: ignore[typeddict-item]
                    "retry_after": retry_after(release, now, max_seconds),
                }
            )
    cooling = sum(1 for key in keys if key["state"] == "cooling")
    return {"provider": provider, "keys": keys, "ready": len(keys) - cooling, "cooling": cooling}


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
    """A pool's keys as its selection sees them: legacy rests only, or the store's view."""
    if current is None:  # the legacy path: only the pool's own rests decide
        legacy: list[tuple[str | None, float]] = [
            ("legacy", rests[key]) if key in rests else (None, 0.0) for key in keys
        ]
        return pool_status(provider, legacy, now, LARGEST_MAX_SECONDS)
    explained = model_cooldown.explain(
        provider,
        keys,
        model=model,
        quota_bucket=quota_bucket,
        max_seconds=current.max_seconds,
        now=now,
        legacy_rest_until=rests,
    )
    return pool_status(provider, explained, now, current.max_seconds)

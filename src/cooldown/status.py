"""Per-key status for operators: positions, states and reasons, never keys, digests or names."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypedDict

from .store import retry_after

__all__ = ["KeyStatus", "PoolStatus", "pool_status"]

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

"""Spent quotas in the shared state: which credential-wide cooldowns are quotas, so every
worker's status names them as such."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from .operators import moments

__all__ = ["QUOTA_KEY", "SharedQuotaMarks"]

QUOTA_KEY = "quota"
"""`{prefix}:quota`: a sorted set of credential ids whose quota is spent, by deadline."""

_MOST_MARKS = 10000  # as many as the deadline table holds entries


class QuotaCalls(Protocol):
    """What the quota marks need of the Redis calls they ride on (`RedisObservations`)."""

    def _call_with(
        self, now: float, command: Callable[[], Any], read: Callable[[Any], Any]
    ) -> Any: ...

    def _connected(self) -> Any: ...

    def _act(self, action: tuple[str, str], act: Callable[[float], Any], now: float) -> Any: ...

    def _to_wall_ms(self, monotonic: float) -> int: ...

    def _to_monotonic(self, wall_ms: Any) -> float: ...


class SharedQuotaMarks:
    """Part of `RedisObservations`: mark a spent quota, read the live ones, forget one."""

    def __init__(self, calls: QuotaCalls, prefix: str) -> None:
        self._calls = calls
        self._quota_key = f"{{{prefix}}}:{QUOTA_KEY}"

    def mark_quota(self, credential: str, deadline: float, now: float) -> None:
        """Note the credential's cooldown until `deadline` as a spent quota (the expired
        marks go, and the oldest beyond the cap); lost when Redis is down."""

        def write() -> Any:
            pipeline = self._calls._connected().pipeline(transaction=False)
            pipeline.zadd(self._quota_key, {credential: self._calls._to_wall_ms(deadline)})
            pipeline.zremrangebyscore(self._quota_key, "-inf", self._calls._to_wall_ms(now))
            pipeline.zremrangebyrank(self._quota_key, 0, -_MOST_MARKS - 1)
            return pipeline.execute()

        self._calls._call_with(now, write, bool)

    def quota_marks(self, now: float) -> dict[str, float] | None:
        """Each live mark's credential id and deadline (monotonic); `None` when Redis does
        not answer. Junk members or scores (Redis is shared with other programs) are skipped."""

        def fetch() -> Any:
            return self._calls._connected().zrangebyscore(
                self._quota_key, f"({self._calls._to_wall_ms(now)}", "+inf", withscores=True
            )

        marks: dict[str, float] | None = self._calls._call_with(
            now, fetch, lambda answer: moments(answer, self._calls._to_monotonic)
        )
        return marks

    def forget_quota(self, credential: str, now: float) -> None:
        """An operator cleared the credential: its quota is no longer spent (tried again
        until Redis takes it)."""

        def act(at: float) -> bool | None:
            forgot: bool | None = self._calls._call_with(
                at, lambda: self._calls._connected().zrem(self._quota_key, credential), bool
            )
            return forgot

        self._calls._act(("quota", credential), act, now)

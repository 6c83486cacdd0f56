"""Observations shared between processes through Redis, degrading to local state on failure.

Redis holds hex HMAC ids (keyed by the shared secret, so every process derives the same
ones) and wall-clock millisecond deadlines: no key, model or bucket name, and not the
secret. Every write and every lookup is one Lua script, one round trip.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from .config import REDIS_URL_ENV, CooldownSettings, warn_malformed
from .forksafe import new_lock
from .store import ModelCooldown

if TYPE_CHECKING:
    from redis import Redis

__all__ = ["SOCKET_TIMEOUT_SECONDS", "RedisObservations", "share_when_configured"]

logger = logging.getLogger("cooldown")
_T = TypeVar("_T")

SOCKET_TIMEOUT_SECONDS = 0.1
FIRST_BACKOFF_SECONDS = 1.0
LONGEST_BACKOFF_SECONDS = 30.0

# KEYS: deadlines zset, overflow key. ARGV: now_ms, entry, deadline_ms, cap.
# Prunes, keeps the later deadline, never evicts: at the cap it raises the overflow instead.
_RECORD = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local deadline = tonumber(ARGV[3])
local current = redis.call('ZSCORE', KEYS[1], ARGV[2])
if current then
  if deadline > tonumber(current) then redis.call('ZADD', KEYS[1], deadline, ARGV[2]) end
  return 1
end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then
  local overflow = tonumber(redis.call('GET', KEYS[2]) or '0')
  if deadline > overflow then redis.call('SET', KEYS[2], ARGV[3]) end
  return 0
end
redis.call('ZADD', KEYS[1], deadline, ARGV[2])
return 1
"""

# KEYS: deadlines zset. ARGV: now_ms, entry. Success clears only its own entry.
_CLEAR = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
return redis.call('ZREM', KEYS[1], ARGV[2])
"""

# KEYS: deadlines zset, overflow key. ARGV: now_ms, entries...
# Returns the deadline of each entry (or false) and the live overflow deadline (or false).
_LOOKUP = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local result = {}
for index = 2, #ARGV do
  result[index - 1] = redis.call('ZSCORE', KEYS[1], ARGV[index]) or false
end
local overflow = redis.call('GET', KEYS[2])
if overflow and tonumber(overflow) > tonumber(ARGV[1]) then
  result[#ARGV] = overflow
else
  result[#ARGV] = false
end
return result
"""


class RedisObservations:
    """The shared half of a store; every method answers `None` instead of raising.

    `None` means "Redis did not answer": the caller keeps its local answer. After a failure
    Redis is left alone for a backoff (1 s, doubling to 30 s) measured on the caller's clock.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "model-cooldown",
        max_entries: int = 10000,
        socket_timeout: float = SOCKET_TIMEOUT_SECONDS,
    ) -> None:
        from redis import Redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self._client: Redis = Redis.from_url(
            url,
            socket_timeout=socket_timeout,
            socket_connect_timeout=socket_timeout,
            retry=Retry(NoBackoff(), 0),
            retry_on_timeout=False,
            health_check_interval=0,
        )
        self._keys = [f"{prefix}:deadlines", f"{prefix}:overflow"]
        self._max_entries = max_entries
        self._record = self._client.register_script(_RECORD)
        self._clear = self._client.register_script(_CLEAR)
        self._lookup = self._client.register_script(_LOOKUP)
        # Wall clock = monotonic + offset, fixed per process, so `now=` works in tests too.
        self._offset = time.time() - time.monotonic()
        self._lock = new_lock(self)
        self._errors_total = 0
        self._degraded = False
        self._retry_at = 0.0
        self._backoff = FIRST_BACKOFF_SECONDS

    def __repr__(self) -> str:
        return f"<RedisObservations degraded={self._degraded}>"

    def close(self) -> None:
        self._client.close()

    # -- clock --------------------------------------------------------------------------------

    def _to_wall_ms(self, monotonic: float) -> int:
        return int((monotonic + self._offset) * 1000)

    def _to_monotonic(self, wall_ms: Any) -> float:
        return float(wall_ms) / 1000 - self._offset

    # -- failure handling ---------------------------------------------------------------------

    def _call(
        self,
        now: float,
        script: Any,
        keys: list[str],
        args: list[Any],
        read: Callable[[Any], _T] = lambda answer: answer,
    ) -> _T | None:
        """Run one script and `read` its answer; `None` for any failure, including garbage."""
        with self._lock:
            if self._degraded and now < self._retry_at:
                return None
        try:
            answer = read(script(keys=keys, args=args))
        except Exception as error:  # any client or data failure degrades; none reaches a route
            self._failed(now, error)
            return None
        self._succeeded()
        return answer

    def _failed(self, now: float, error: Exception) -> None:
        with self._lock:
            self._errors_total += 1
            if not self._degraded:
                logger.warning(
                    "Shared cooldown state is unavailable (%s); using process-local state",
                    type(error).__name__,
                )
                self._degraded = True
                self._backoff = FIRST_BACKOFF_SECONDS
            else:
                self._backoff = min(LONGEST_BACKOFF_SECONDS, self._backoff * 2)
            self._retry_at = now + self._backoff

    def _succeeded(self) -> None:
        with self._lock:
            if self._degraded:
                logger.warning("Shared cooldown state is reachable again")
                self._degraded = False

    # -- observations -------------------------------------------------------------------------

    def record(self, entry: str, deadline: float, now: float) -> None:
        args = [self._to_wall_ms(now), entry, self._to_wall_ms(deadline), self._max_entries]
        self._call(now, self._record, self._keys, args)

    def clear(self, entry: str, now: float) -> None:
        self._call(now, self._clear, self._keys[:1], [self._to_wall_ms(now), entry])

    def lookup(self, entries: Sequence[str], now: float) -> tuple[list[float | None], float] | None:
        """Each entry's deadline and the live overflow deadline (0.0 if none), monotonic."""

        def read(answer: list[Any]) -> tuple[list[float | None], float]:
            *deadlines, overflow = answer
            return (
                [None if value is None else self._to_monotonic(value) for value in deadlines],
                0.0 if overflow is None else self._to_monotonic(overflow),
            )

        args = [self._to_wall_ms(now), *entries]
        return self._call(now, self._lookup, self._keys, args, read)

    def stats(self) -> dict[str, int | bool]:
        with self._lock:
            return {
                "shared": True,
                "shared_errors_total": self._errors_total,
                "shared_degraded": self._degraded,
            }


_attached: tuple[str, str, str] | None = None
_last_seen: CooldownSettings | None = None  # settings are cached, so identity is cheap
_attach_lock = new_lock(sys.modules[__name__], "_attach_lock")


def share_when_configured(store: ModelCooldown, current: CooldownSettings) -> None:
    """Attach `store` to the Redis the settings name, or detach it when they name none.

    Called by the pools on every scoped call; a no-op unless the settings changed.
    """
    global _last_seen
    if current is _last_seen:
        return
    wanted = None
    if current.redis_url and current.redis_secret:
        wanted = (current.redis_url, current.redis_secret, current.redis_prefix)
    with _attach_lock:
        if wanted != _attached:
            _attach(store, wanted)
        _last_seen = current


def _attach(store: ModelCooldown, wanted: tuple[str, str, str] | None) -> None:
    global _attached
    previous = store.detach_shared()
    if isinstance(previous, RedisObservations):
        previous.close()
    _attached = wanted
    if wanted is None:
        return
    url, secret, prefix = wanted
    try:
        backend = RedisObservations(url, prefix=prefix)
    except ValueError:  # a URL redis-py cannot use: stay process-local
        warn_malformed(REDIS_URL_ENV)
        return
    store.attach_shared(backend, secret=secret.encode())

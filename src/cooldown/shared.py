"""Observations shared between processes through Redis, degrading to local state on failure.

Redis holds hex HMAC ids (keyed by the shared secret, so every process derives the same
ones) and wall-clock millisecond deadlines: no key, model or bucket name, and not the
secret. Every write and every lookup is one Lua script, one round trip.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .config import REDIS_URL_ENV, CooldownSettings, warn_sharing_off
from .forksafe import new_lock
from .redisurl import RedisEndpoint, parse_redis_url
from .store import ModelCooldown

__all__ = ["SOCKET_TIMEOUT_SECONDS", "RedisObservations", "share_when_configured"]

logger = logging.getLogger("cooldown")
_T = TypeVar("_T")

SOCKET_TIMEOUT_SECONDS = 0.1
FIRST_BACKOFF_SECONDS = 1.0
LONGEST_BACKOFF_SECONDS = 30.0
CLOCK_SKEW_SECONDS = 10.0
"""How far another host's clock may run ahead before its deadlines count as too late."""

# Every script prunes what expired and distrusts what is too late: a deadline beyond
# now + max_seconds + skew (a tampered score, a host with a wrong clock, +inf) is cut to
# now + max_seconds in place, the first time any process sees it.
# ARGV[1..3]: now_ms, limit_ms (now + max + skew), truncate_ms (now + max).

# KEYS: deadlines, overflow. ARGV[4..6]: entry, deadline_ms, cap.
# Keeps the later deadline, never evicts: at the cap it raises the overflow instead. First it
# cuts up to 64 members scored beyond the trusted limit (+inf, a wrong clock): they expire
# with the maximum, so they cannot hold the capacity guard up for ever.
_RECORD = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local limit, truncate = tonumber(ARGV[2]), tonumber(ARGV[3])
local late = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[2], '+inf', 'LIMIT', 0, 64)
for _, member in ipairs(late) do redis.call('ZADD', KEYS[1], truncate, member) end
local deadline = tonumber(ARGV[5])
local current = redis.call('ZSCORE', KEYS[1], ARGV[4])
if current then
  current = tonumber(current)
  if current > limit then
    current = truncate
    redis.call('ZADD', KEYS[1], truncate, ARGV[4])
  end
  if deadline > current then redis.call('ZADD', KEYS[1], deadline, ARGV[4]) end
  return 1
end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[6]) then
  local overflow = tonumber(redis.call('GET', KEYS[2]) or '0')
  if overflow == nil or overflow ~= overflow or overflow > limit then overflow = 0 end
  if deadline > overflow then redis.call('SET', KEYS[2], ARGV[5]) end
  return 0
end
redis.call('ZADD', KEYS[1], deadline, ARGV[4])
return 1
"""

# KEYS: deadlines. ARGV: now_ms, entry. Success clears only its own entry.
_CLEAR = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
return redis.call('ZREM', KEYS[1], ARGV[2])
"""

# KEYS: deadlines, overflow. ARGV[4..]: entries.
# Returns each entry's deadline (or false), then the live overflow deadline (or false); an
# overflow that is not a number is returned as it is, for the client to refuse.
_LOOKUP = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local now, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local result = {}
for index = 4, #ARGV do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[index])
  if score and tonumber(score) > limit then
    redis.call('ZADD', KEYS[1], ARGV[3], ARGV[index])
    score = ARGV[3]
  end
  result[index - 3] = score or false
end
local overflow = redis.call('GET', KEYS[2])
local value = overflow and tonumber(overflow)
if overflow and (value == nil or value ~= value) then
  result[#ARGV - 2] = overflow
elseif value and value > limit then
  redis.call('SET', KEYS[2], ARGV[3])
  result[#ARGV - 2] = ARGV[3]
elseif value and value > now then
  result[#ARGV - 2] = overflow
else
  result[#ARGV - 2] = false
end
return result
"""


def _connect(endpoint: RedisEndpoint, timeout: float) -> Any:
    """A client for the endpoint; the URL's own timeouts may only tighten ours."""
    from redis import Redis
    from redis.backoff import NoBackoff
    from redis.cluster import ClusterNode, RedisCluster
    from redis.retry import Retry
    from redis.sentinel import Sentinel

    timeouts = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    for name, seconds in endpoint.timeouts:
        timeouts[name] = min(timeouts[name], seconds)
    common: dict[str, Any] = {
        **timeouts,
        **dict(endpoint.options),
        "username": endpoint.username,
        "password": endpoint.password,
    }
    if endpoint.tls:
        common["ssl"] = True
    once: dict[str, Any] = {"retry": Retry(NoBackoff(), 0)}  # one attempt, one timeout
    if endpoint.mode == "cluster":
        nodes = [ClusterNode(host, port) for host, port in endpoint.hosts]  # type: ignore[no-untyped-call]
        return RedisCluster(startup_nodes=nodes, **once, **common)
    single = {**common, **once, "db": endpoint.db, "health_check_interval": 0}
    if endpoint.mode == "sentinel":
        # The Sentinel's own connections get the same single attempt and timeouts as the rest.
        sentinel_options = {**timeouts, **once, "health_check_interval": 0}
        sentinel = Sentinel(list(endpoint.hosts), sentinel_kwargs=sentinel_options, **timeouts)  # type: ignore[no-untyped-call]
        return sentinel.master_for(endpoint.service_name or "", **single)  # type: ignore[no-untyped-call]
    if endpoint.unix_path is not None:
        return Redis(unix_socket_path=endpoint.unix_path, **single)
    host, port = endpoint.hosts[0]
    client = Redis(host=host, port=port, **single)
    if client.info("cluster").get("cluster_enabled"):  # a plain URL naming a cluster node
        client.close()
        return RedisCluster(host=host, port=port, **once, **common)
    return client


def _finite(value: Any) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError("a shared deadline is not a finite number")
    return number


class RedisObservations:
    """The shared half of a store; every method answers `None` instead of raising.

    `None` means "Redis did not answer": the caller keeps its local answer. After a failure
    Redis is left alone for a backoff (1 s, doubling to 30 s) measured on the caller's clock.
    The client connects on first use, outside every lock.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "model-cooldown",
        max_entries: int = 10000,
        socket_timeout: float = SOCKET_TIMEOUT_SECONDS,
    ) -> None:
        self._endpoint = parse_redis_url(url)  # ValueError for a URL it cannot honour
        self._timeout = socket_timeout
        self._client: Any = None
        self._scripts: dict[str, Any] = {}
        self._keys = [f"{{{prefix}}}:deadlines", f"{{{prefix}}}:overflow"]
        self._max_entries = max_entries
        # Wall clock = monotonic + offset, fixed per process, so `now=` works in tests too.
        self._offset = time.time() - time.monotonic()
        self._lock = new_lock(self)
        self._errors_total = 0
        self._degraded = False
        self._retry_at = 0.0
        self._backoff = FIRST_BACKOFF_SECONDS
        self._outage = 0  # grows at each outage and each failed retry
        self._high_water = -math.inf  # the latest `now` a call passed

    def __repr__(self) -> str:
        return f"<RedisObservations mode={self._endpoint.mode} degraded={self._degraded}>"

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def _connected(self) -> Any:
        if self._client is None:
            client = _connect(self._endpoint, self._timeout)
            self._scripts = {
                "record": client.register_script(_RECORD),
                "clear": client.register_script(_CLEAR),
                "lookup": client.register_script(_LOOKUP),
            }
            self._client = client
        return self._client

    def _script(self, name: str) -> Any:
        self._connected()
        return self._scripts[name]

    # -- clock --------------------------------------------------------------------------------

    def _to_wall_ms(self, monotonic: float) -> int:
        return int((monotonic + self._offset) * 1000)

    def _to_monotonic(self, wall_ms: Any) -> float:
        return _finite(wall_ms) / 1000 - self._offset

    def _window(self, now: float, max_seconds: int) -> list[int]:
        """now, the latest deadline trusted, and where a later one is cut to (wall ms).

        Trust is measured from the latest `now` this process has passed, so one caller's
        stale or zero `now` cannot cut the cooldowns every other process wrote.
        """
        with self._lock:
            self._high_water = reference = max(self._high_water, now)
        return [
            self._to_wall_ms(now),
            self._to_wall_ms(reference + max_seconds + CLOCK_SKEW_SECONDS),
            self._to_wall_ms(reference + max_seconds),
        ]

    # -- failure handling ---------------------------------------------------------------------

    def _call(
        self,
        now: float,
        script: str,
        keys: list[str],
        args: list[Any],
        read: Callable[[Any], _T] = lambda answer: answer,
    ) -> _T | None:
        """Run one script and `read` its answer; `None` for any failure, including garbage."""
        return self._call_with(now, lambda: self._script(script)(keys=keys, args=args), read)

    def _call_with(
        self, now: float, command: Callable[[], Any], read: Callable[[Any], _T]
    ) -> _T | None:
        with self._lock:
            if self._degraded and now < self._retry_at:
                return None
            attempt = self._outage  # which outage (or calm) this call started in
        started = time.monotonic()
        try:  # no lock held: a slow Redis delays only the calls that need its answer
            answer = read(command())
        except Exception as error:  # any client or data failure degrades; none reaches a route
            self._failed(now + (time.monotonic() - started), attempt, error)
            return None
        self._succeeded()
        return answer

    def _failed(self, failed_at: float, attempt: int, error: Exception) -> None:
        """Back off from when the call failed, not when it started; calls that were already
        in flight when an outage began count as errors but do not lengthen the backoff."""
        with self._lock:
            self._errors_total += 1
            if not self._degraded:
                logger.warning(
                    "Shared cooldown state is unavailable (%s); using process-local state",
                    type(error).__name__,
                )
                self._degraded = True
                self._outage += 1
                self._backoff = FIRST_BACKOFF_SECONDS
            elif attempt == self._outage:  # a retry after the backoff failed: wait longer
                self._backoff = min(LONGEST_BACKOFF_SECONDS, self._backoff * 2)
                self._outage += 1
            else:
                return
            self._retry_at = failed_at + self._backoff

    def _succeeded(self) -> None:
        with self._lock:
            if self._degraded:
                logger.warning("Shared cooldown state is reachable again")
                self._degraded = False

    # -- observations -------------------------------------------------------------------------

    def record(self, entry: str, deadline: float, now: float, max_seconds: int) -> None:
        args = [*self._window(now, max_seconds), entry, self._to_wall_ms(deadline)]
        self._call(now, "record", self._keys, [*args, self._max_entries])

    def clear(self, entry: str, now: float) -> None:
        self._call(now, "clear", self._keys[:1], [self._to_wall_ms(now), entry])

    def lookup(
        self, entries: Sequence[str], now: float, max_seconds: int
    ) -> tuple[list[float | None], float] | None:
        """Each entry's deadline and the live overflow deadline (0.0 if none), monotonic."""

        def read(answer: list[Any]) -> tuple[list[float | None], float]:
            *deadlines, overflow = answer
            return (
                [None if value is None else self._to_monotonic(value) for value in deadlines],
                0.0 if overflow is None else self._to_monotonic(overflow),
            )

        args = [*self._window(now, max_seconds), *entries]
        return self._call(now, "lookup", self._keys, args, read)

    def live_entries(self, now: float) -> list[str] | None:
        """Every live shared id (for operators' counts), or `None` when Redis does not answer."""

        def read(answer: list[Any]) -> list[str]:
            return [
                member.decode() if isinstance(member, bytes) else str(member) for member in answer
            ]

        def fetch() -> Any:
            return self._connected().zrangebyscore(
                self._keys[0], f"({self._to_wall_ms(now)}", "+inf"
            )

        return self._call_with(now, fetch, read)

    def stats(self) -> dict[str, int | bool]:
        with self._lock:
            return {
                "shared": True,
                "shared_errors_total": self._errors_total,
                "shared_degraded": self._degraded,
            }


_Wanted = tuple[str, str, str, int]  # url, secret, prefix, timeout in milliseconds
_attached: _Wanted | None = None
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
        wanted = (
            current.redis_url,
            current.redis_secret,
            current.redis_prefix,
            current.redis_timeout_ms,
        )
    with _attach_lock:
        if wanted != _attached:
            _attach(store, wanted)
        _last_seen = current


def _attach(store: ModelCooldown, wanted: _Wanted | None) -> None:
    global _attached
    previous = store.detach_shared()
    if isinstance(previous, RedisObservations):
        previous.close()
    _attached = wanted
    if wanted is None:
        return
    url, secret, prefix, timeout_ms = wanted
    try:
        backend = RedisObservations(url, prefix=prefix, socket_timeout=timeout_ms / 1000)
    except ValueError:  # settings validated it; this only guards a direct caller's URL
        warn_sharing_off(REDIS_URL_ENV)
        return
    store.attach_shared(backend, secret=secret.encode())

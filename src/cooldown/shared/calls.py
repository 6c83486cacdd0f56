"""Lua scripts on Redis, one round trip each, that answer `None` instead of raising.

After a failure Redis is left alone for a backoff measured on the caller's clock; deadlines
travel as wall-clock milliseconds through one offset fixed per process.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any, TypeVar

from ..forksafe import new_lock
from ..redisurl import parse_redis_url
from . import scripts as shared_scripts
from .client import connect

__all__ = [
    "CLOCK_SKEW_SECONDS",
    "FIRST_BACKOFF_SECONDS",
    "LONGEST_BACKOFF_SECONDS",
    "SOCKET_TIMEOUT_SECONDS",
    "ScriptCalls",
    "finite",
]

logger = logging.getLogger("cooldown")
_T = TypeVar("_T")

SOCKET_TIMEOUT_SECONDS = 0.1
FIRST_BACKOFF_SECONDS = 1.0
LONGEST_BACKOFF_SECONDS = 30.0
CLOCK_SKEW_SECONDS = 10.0
"""How far another host's clock may run ahead before its deadlines count as too late."""


def finite(value: Any) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError("a shared deadline is not a finite number")
    return number


class ScriptCalls:
    """Lua scripts run on Redis, one round trip each, answering `None` instead of raising.

    After a failure Redis is left alone for a backoff (1 s, doubling to 30 s) measured on the
    caller's clock. The client connects on first use, outside every lock. Deadlines travel as
    wall-clock milliseconds, converted with one offset fixed per process.
    """

    def __init__(self, url: str, *, socket_timeout: float = SOCKET_TIMEOUT_SECONDS) -> None:
        self._endpoint = parse_redis_url(url)  # ValueError for a URL it cannot honour
        self._timeout = socket_timeout
        self._client: Any = None
        self._scripts: dict[str, Any] = {}
        # Wall clock = monotonic + offset, fixed per process, so `now=` works in tests too.
        self._offset = time.time() - time.monotonic()
        self._lock = new_lock(self)
        self._errors_total = 0
        self._split = False  # this process's secret differs from the fleet's
        self._degraded = False
        self._retry_at = 0.0
        self._backoff = FIRST_BACKOFF_SECONDS
        self._outage = 0  # grows at each outage and each failed retry
        self._high_water = -math.inf  # the latest `now` a call passed

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def _connected(self) -> Any:
        if self._client is None:
            client = connect(self._endpoint, self._timeout)
            self._scripts = {
                name: client.register_script(getattr(shared_scripts, name.upper()))
                for name in (
                    "record",
                    "record_foreign",
                    "clear",
                    "lookup",
                    "start",
                    "end",
                    "release",
                    "secret_check",
                    "forget_credential",
                )
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
        return finite(wall_ms) / 1000 - self._offset

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

    def stats(self) -> dict[str, int | bool]:
        with self._lock:
            return {
                "shared": True,
                "shared_errors_total": self._errors_total,
                "shared_degraded": self._degraded,
                "shared_split": self._split,
            }

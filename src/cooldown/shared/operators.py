"""Operators' actions in the shared state: drains that outlive every worker, and clears; the
fleet's learned refill readings are read with them, in the same round trip."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..forksafe import new_lock
from ..store.backend import OperatorMarks
from .scripts import KEY_NAMES

__all__ = [
    "CLEARS_KEPT_SECONDS",
    "DRAINED_KEY",
    "DRAINS_READ_SECONDS",
    "REFILLS_KEY",
    "SharedKeyActions",
    "moments",
]

DRAINED_KEY = "drained"
"""`{prefix}:drained`: a set of the shared ids of drained credentials (no TTL)."""

DRAINS_READ_SECONDS = 0.25
"""How long one read of the fleet's drains and clears is reused: each holds everywhere
within it."""

REFILLS_KEY = "refill-readings"
"""`{prefix}:refill-readings`: a hash of refill ids (a provider's, or a provider's and one
scope's) -> how its limits refill, as learned ("window" or "continuous")."""
REFILL_READINGS = frozenset({"window", "continuous"})
MOST_REFILL_READINGS = 10000

CLEARS_KEPT_SECONDS = 86400
"""How long a clear stays in `{prefix}:cleared` for the processes' own state to follow."""


class SharedKeyActions:
    """Mixed into `RedisObservations`: drain, undrain, the drained set, and a clear."""

    _keys: list[str]
    _call: Callable[..., Any]
    _call_with: Callable[..., Any]
    _connected: Callable[[], Any]
    _to_wall_ms: Callable[[float], int]
    _to_monotonic: Callable[[Any], float]

    def _start_key_actions(self, prefix: str) -> None:
        self._drained_key = f"{{{prefix}}}:{DRAINED_KEY}"
        self._cleared_key = self._keys[KEY_NAMES.index("cleared")]
        self._refills_key = f"{{{prefix}}}:{REFILLS_KEY}"
        self._drains_read: tuple[float, OperatorMarks | None] = (-math.inf, None)
        self._drains_lock = new_lock(self, "_drains_lock")

    def drain(self, credential: str, now: float, *, drained: bool) -> bool | None:
        """Add the id to the fleet's drains (or remove it); `None` when Redis did not answer."""
        client_call = "sadd" if drained else "srem"
        done: bool | None = self._call_with(
            now,
            lambda: getattr(self._connected(), client_call)(self._drained_key, credential),
            lambda answer: True,
        )
        with self._drains_lock:
            self._drains_read = (-math.inf, None)  # the next read sees this at once
        return done

    def operator_marks(self, now: float) -> OperatorMarks | None:
        """The fleet's drained ids and its recent clears (id -> when, monotonic), read at
        most every `DRAINS_READ_SECONDS` (the same object is answered meanwhile)."""
        with self._drains_lock:
            read_at, known = self._drains_read
        if 0 <= now - read_at < DRAINS_READ_SECONDS:
            return known

        def fetch() -> Any:
            pipeline = self._connected().pipeline(transaction=False)  # one round trip
            pipeline.smembers(self._drained_key)
            pipeline.hgetall(self._cleared_key)
            pipeline.hgetall(self._refills_key)
            return pipeline.execute()

        def read(answer: Any) -> OperatorMarks:
            drained, cleared, refills = answer
            readings = {_text(field): _text(value) for field, value in refills.items()}
            return OperatorMarks(
                frozenset(map(_text, drained)),
                moments(cleared.items(), self._to_monotonic),
                {id_: reading for id_, reading in readings.items() if reading in REFILL_READINGS},
            )

        fresh: OperatorMarks | None = self._call_with(now, fetch, read)
        with self._drains_lock:
            self._drains_read = (now, fresh)
        return fresh

    def note_refill(self, readings: Mapping[str, str], now: float) -> None:
        """Keep learned readings for the fleet: "window" replaces anything, "continuous" only
        fills a gap; nothing more is added past `MOST_REFILL_READINGS`."""

        def write() -> Any:
            client = self._connected()
            if int(client.hlen(self._refills_key)) >= MOST_REFILL_READINGS:
                return False
            for refill_id, reading in readings.items():
                if reading == "window":
                    client.hset(self._refills_key, refill_id, reading)
                else:
                    client.hsetnx(self._refills_key, refill_id, reading)
            return True

        self._call_with(now, write, bool)
        with self._drains_lock:
            self._drains_read = (-math.inf, None)  # the next read sees it at once

    def forget_credential(self, credential: str, scope: str | None, now: float) -> None:
        """Remove the credential's shared entries (one scope's, or all of them), and note
        the clear for every process's own state."""
        args = [credential, scope or "", self._to_wall_ms(now)]
        oldest = self._to_wall_ms(now - CLEARS_KEPT_SECONDS)
        self._call(now, "forget_credential", self._keys, [*args, oldest])
        with self._drains_lock:
            self._drains_read = (-math.inf, None)


def moments(
    pairs: Iterable[tuple[Any, Any]], to_monotonic: Callable[[Any], float]
) -> dict[str, float]:
    """Members and their wall-clock milliseconds as read from Redis, by member, in monotonic
    seconds; Redis is shared with other programs, so a junk score is skipped."""
    read = {}
    for member, wall_ms in pairs:
        try:
            read[_text(member)] = to_monotonic(wall_ms)
        except (TypeError, ValueError):
            continue
    return read


def _text(member: object) -> str:
    return member.decode("ascii", "replace") if isinstance(member, bytes) else str(member)

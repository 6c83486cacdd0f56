"""Operators' actions in the shared state: drains that outlive every worker, and clears."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ..forksafe import new_lock
from ..store.backend import OperatorMarks
from .scripts import KEY_NAMES

__all__ = ["CLEARS_KEPT_SECONDS", "DRAINED_KEY", "DRAINS_READ_SECONDS", "SharedKeyActions"]

DRAINED_KEY = "drained"
"""`{prefix}:drained`: a set of the shared ids of drained credentials (no TTL)."""

DRAINS_READ_SECONDS = 0.25
"""How long one read of the fleet's drains and clears is reused: each holds everywhere
within it."""

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
            client = self._connected()
            return client.smembers(self._drained_key), client.hgetall(self._cleared_key)

        def read(answer: Any) -> OperatorMarks:
            drained, cleared = answer
            clears = {}
            for field, wall_ms in cleared.items():
                try:
                    clears[_text(field)] = self._to_monotonic(wall_ms)
                except (TypeError, ValueError):
                    continue  # Redis is shared with other programs: junk is skipped
            return OperatorMarks(frozenset(map(_text, drained)), clears)

        fresh: OperatorMarks | None = self._call_with(now, fetch, read)
        with self._drains_lock:
            self._drains_read = (now, fresh)
        return fresh

    def forget_credential(self, credential: str, scope: str | None, now: float) -> None:
        """Remove the credential's shared entries (one scope's, or all of them), and note
        the clear for every process's own state."""
        args = [credential, scope or "", self._to_wall_ms(now)]
        oldest = self._to_wall_ms(now - CLEARS_KEPT_SECONDS)
        self._call(now, "forget_credential", self._keys, [*args, oldest])
        with self._drains_lock:
            self._drains_read = (-math.inf, None)


def _text(member: object) -> str:
    return member.decode("ascii", "replace") if isinstance(member, bytes) else str(member)

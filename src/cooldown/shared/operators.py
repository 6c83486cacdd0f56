"""Operators' actions in the shared state: drains that outlive every worker, and clears."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

from ..forksafe import new_lock

__all__ = ["DRAINED_KEY", "DRAINS_READ_SECONDS", "SharedKeyActions"]

DRAINED_KEY = "drained"
"""`{prefix}:drained`: a set of the shared ids of drained credentials (no TTL)."""

DRAINS_READ_SECONDS = 0.25
"""How long one read of the fleet's drains is reused: a drain holds everywhere within it."""

_T = TypeVar("_T")


class SharedKeyActions:
    """Mixed into `RedisObservations`: drain, undrain, the drained set, and a clear."""

    _keys: list[str]
    _call: Callable[..., Any]
    _call_with: Callable[..., Any]
    _connected: Callable[[], Any]

    def _start_key_actions(self, prefix: str) -> None:
        self._drained_key = f"{{{prefix}}}:{DRAINED_KEY}"
        self._drains_read: tuple[float, frozenset[str] | None] = (-math.inf, None)
        self._drains_lock = new_lock(self, "_drains_lock")

    def drain(self, credential: str, now: float, *, drained: bool) -> bool | None:
        """Add the id to the fleet's drains (or remove it); `None` when Redis did not answer."""
        client_call = "sadd" if drained else "srem"
        done = self._call_with(
            now,
            lambda: getattr(self._connected(), client_call)(self._drained_key, credential),
            lambda answer: True,
        )
        with self._drains_lock:
            self._drains_read = (-math.inf, None)  # the next read sees this at once
        return None if done is None else True

    def drained_credentials(self, now: float) -> frozenset[str] | None:
        """The fleet's drained ids, read at most every `DRAINS_READ_SECONDS`."""
        with self._drains_lock:
            read_at, known = self._drains_read
        if 0 <= now - read_at < DRAINS_READ_SECONDS:
            return known

        def read(answer: Any) -> frozenset[str]:
            return frozenset(
                member.decode("ascii", "replace") if isinstance(member, bytes) else str(member)
                for member in answer
            )

        fresh: frozenset[str] | None = self._call_with(
            now, lambda: self._connected().smembers(self._drained_key), read
        )
        with self._drains_lock:
            self._drains_read = (now, fresh)
        return fresh

    def forget_credential(self, credential: str, scope: str | None, now: float) -> None:
        """Remove the credential's shared entries (one scope's, or all of them)."""
        self._call(now, "forget_credential", self._keys, [credential, scope or ""])

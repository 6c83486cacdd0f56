"""Keys handed over in code: a list, or a callable a gateway reads its secret manager with.

A callable is called on first use and again once its last result is more than a second old,
never more often, and never under a lock (it may do I/O). Its result is checked like the
environment's: placeholders skipped, duplicates dropped in order, anything but strings a
`TypeError` that names the provider and never the value. When it raises, returns `None` or
overruns `CALL_SECONDS` (abandoned, still running in its thread), the last good list
stands, with one warning per provider that does not quote the exception, and the next
refresh calls it again.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TypeAlias

from ..config import warn_once
from ..forksafe import new_lock
from ._common import configured_positions, unique_stripped, without_placeholders

__all__ = ["REFRESH_SECONDS", "CodeKeys", "KeySource"]

REFRESH_SECONDS = 1.0
CALL_SECONDS = 5.0
"""How long one call to a key source may take before it is abandoned (the last good keys
stand); also how long a caller waits for another thread's first call, at most."""
MAX_ABANDONED_CALLS = 4
"""Overrunning calls left running at once; beyond them a due refresh is skipped (a source
that never returns must not grow threads without end)."""
OVERRAN = "provider %s: its keys= callable did not return within 5 s; the last good keys are used"
RAISED = "provider %s: its keys= callable raised; the last good keys are used"
GAVE_NONE = "provider %s: its keys= callable returned None; the last good keys are used"

KeySource: TypeAlias = Sequence[str] | Callable[[], Sequence[str]]


def _checked(provider: str, values: object) -> tuple[list[str], dict[str, int]]:
    """The keys to pool, and each one's place in the list as given."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"keys for provider {provider!r} must be a sequence of strings")
    listed = list(values)
    if not all(isinstance(value, str) for value in listed):
        raise TypeError(f"keys for provider {provider!r} must all be strings")
    keys = unique_stripped(without_placeholders(listed, f"keys for provider {provider!r}"))
    return keys, configured_positions(listed)


class CodeKeys:
    """One provider's keys from code; `current()` is what the pool selects among now."""

    def __init__(self, provider: str, source: KeySource) -> None:
        self._provider = provider
        self._call: Callable[[], Sequence[str]] | None = None
        self._keys: list[str] = []
        self._positions: dict[str, int] = {}
        self._read_at: float | None = None
        self._first = threading.Event()
        self._refreshing = False
        self._abandoned = 0
        self._lock = new_lock(self)
        if callable(source):
            self._call = source
        else:
            self._keys, self._positions = _checked(provider, source)
            self._first.set()

    def current(self) -> list[str]:
        if self._call is None:
            return list(self._keys)
        now = time.monotonic()
        with self._lock:
            due = self._read_at is None or now - self._read_at >= REFRESH_SECONDS
            mine = due and not self._refreshing
            if mine:
                self._refreshing, self._read_at = True, now
        if not mine:
            self._first.wait(CALL_SECONDS)  # set at once after the first call
            return list(self._keys)
        try:
            fresh = self._fresh(self._call)
        finally:
            with self._lock:
                self._refreshing = False
            self._first.set()
        if fresh is not None:
            self._keys, self._positions = fresh
        return list(self._keys)

    def positions(self) -> dict[str, int]:
        """Each current key's place in the list the source gave (read with `current()`)."""
        return dict(self._positions)

    def due(self) -> bool:
        """Would `current()` call the source now? (So an async caller can call it off the
        event loop.)"""
        read_at = self._read_at
        return self._call is not None and (
            read_at is None or time.monotonic() - read_at >= REFRESH_SECONDS
        )

    def _fresh(self, call: Callable[[], Sequence[str]]) -> tuple[list[str], dict[str, int]] | None:
        """The source's keys now; `None` (the last good list stands) when it raises, gives
        `None` or overruns."""
        with self._lock:
            if self._abandoned >= MAX_ABANDONED_CALLS:
                return None
        outcome: list[tuple[bool, object]] = []
        done = threading.Event()
        context = contextvars.copy_context()  # the caller's context (an app's, say) goes along

        def run() -> None:
            try:
                outcome.append((True, context.run(call)))
            except Exception:  # its text may quote a secret: never logged
                outcome.append((False, None))
            finally:
                done.set()
                with self._lock:
                    if abandoned:
                        self._abandoned -= 1

        abandoned = False
        threading.Thread(target=run, name="cooldown-key-source", daemon=True).start()
        if not done.wait(CALL_SECONDS):
            with self._lock:
                abandoned = not done.is_set()
                self._abandoned += abandoned
            if abandoned:
                warn_once(self._provider, OVERRAN)
                return None
        returned, result = outcome[0]
        if not returned or result is None:
            warn_once(self._provider, RAISED if not returned else GAVE_NONE)
            return None
        return _checked(self._provider, result)

    def __repr__(self) -> str:
        return f"CodeKeys({self._provider!r}, {len(self._keys)} keys)"

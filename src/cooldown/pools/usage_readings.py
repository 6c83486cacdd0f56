"""Usage readers, run off the request path: one background thread per pool object reads
each key of each provider registered with `usage=` at most every
`MODEL_COOLDOWN_USAGE_SECONDS`, each call bounded at 5 s.

A spent reading cools the key and its account for every model (reason `"quota"`); a later
reading with credit left lifts that cooldown, so a topped-up key comes back by itself. A
reader that raises, hangs or returns anything but a `Usage` or `None` changes nothing and
is logged once per provider, never with the key. With sharing, one worker of the fleet
reads each key per period (a lease in Redis), and what it reads holds for every worker.
"""

from __future__ import annotations

import math
import os
import threading
import time
from typing import Protocol, TypedDict

from ..config import CooldownSettings, settings, warn_once
from ..evidence.quota import QUOTA_SPENT
from ..evidence.usage import Usage, UsageReader
from ..forksafe import new_lock
from ..shared import share_when_configured
from ..store import CallScope, ModelCooldown
from ..store.backend import Reading
from ._common import CheckedEvidence, Observation
from .legacy import LegacyRests

__all__ = ["READ_TIMEOUT_SECONDS", "UsageReadings", "UsageStatus"]

READ_TIMEOUT_SECONDS = 5.0
"""How long one reader call may take; a call still running then is abandoned."""
TICK_SECONDS = 1.0
"""How often the background thread looks for a key whose reading is due."""
MOST_READINGS = 10000

_FAILED = "provider %s: its usage reader raised, hung or returned junk; nothing changed"


class UsageStatus(TypedDict):
    """A key's last reading, as status shows it."""

    remaining: float | None
    limit: float | None
    resets_in: int | None  # seconds, counted down since the reading
    read_ago: int  # seconds since the reading


class _Pool(Protocol):
    """What the readings need of the pool they belong to."""

    store: ModelCooldown
    _legacy: LegacyRests

    def keys(self, provider: str) -> list[str]: ...

    def siblings(self, provider: str, key: str) -> list[str]: ...

    def _record_scoped(
        self, scope: CallScope, seen: Observation, current: CooldownSettings
    ) -> None: ...


class UsageReadings:
    """The readers of one pool object, their last readings (by key label) and the thread."""

    def __init__(self) -> None:
        self._lock = new_lock(self)
        self._readers: dict[str, UsageReader] = {}
        self._readings: dict[tuple[str, str], Reading] = {}  # (provider, key label)
        self._due: dict[tuple[str, str], float] = {}  # the next reading, monotonic
        self._out: set[tuple[str, str]] = set()  # calls still running (a hung reader's)
        self._thread: threading.Thread | None = None
        self._thread_pid = 0
        self._stop = threading.Event()

    def reader(self, provider: str, reader: UsageReader | None) -> None:
        """`register`: the provider's reader (`None`: none), replacing any."""
        with self._lock:
            if reader is None:
                self._readers.pop(provider, None)
            else:
                self._readers[provider] = reader
            for known in [known for known in self._due if known[0] == provider]:
                del self._due[known]

    def has_reader(self, provider: str) -> bool:
        return provider in self._readers

    def start(self, pool: _Pool) -> None:
        """Start the thread on first use (again in a forked child, which has none)."""
        if not self._readers:
            return
        with self._lock:
            thread = self._thread
            if thread is not None and thread.is_alive() and self._thread_pid == os.getpid():
                return
            self._stop = threading.Event()
            thread = threading.Thread(
                target=self._run, args=(pool, self._stop), name="cooldown-usage", daemon=True
            )
            self._thread, self._thread_pid = thread, os.getpid()
        thread.start()

    def stop(self) -> None:
        """`reset()`: stop the thread and forget every reading (readers stay registered)."""
        with self._lock:
            self._stop.set()
            thread, self._thread = self._thread, None
            self._readings.clear()
            self._due.clear()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=TICK_SECONDS + READ_TIMEOUT_SECONDS)

    def _run(self, pool: _Pool, stop: threading.Event) -> None:
        while not stop.is_set():
            self.read_due(pool)
            stop.wait(TICK_SECONDS)

    def read_due(self, pool: _Pool, *, now: float | None = None) -> int:
        """One pass: read each key whose reading is due (`now`: a monotonic clock of the
        caller's); how many readers were called. Nothing happens with the feature off."""
        current = settings()
        if not current.enabled:
            return 0
        share_when_configured(pool.store, current)  # the fleet's lease, and its reading
        current_time = time.monotonic() if now is None else now
        called = 0
        for provider, reader in list(self._readers.items()):
            for key in pool.keys(provider):
                label = pool.store.operators.label(provider, key)
                if not self._take(provider, label, current_time, current.usage_seconds):
                    continue
                if not pool.store.operators.take_usage_lease(
                    provider, key, current.usage_seconds, now=now
                ):
                    continue  # another worker reads this key this period
                called += 1
                usage = self._call(provider, label, reader, key)
                if usage is not None:
                    reading = self._keep(provider, label, usage, current_time)
                    pool.store.operators.share_reading(provider, key, reading)
                    _apply(pool, provider, key, usage, current, current_time)
        return called

    def _take(self, provider: str, label: str, now: float, period: int) -> bool:
        """Is this key's reading due (and no call of it still out)? Then it is taken."""
        known = (provider, label)
        with self._lock:
            if known in self._out or self._due.get(known, -math.inf) > now:
                return False
            if len(self._due) >= MOST_READINGS:
                self._due.clear()
            self._due[known] = now + period
            return True

    def _call(self, provider: str, label: str, reader: UsageReader, key: str) -> Usage | None:
        """The reader's answer within 5 s; `None` after a raise, a hang or junk (said once)."""
        known = (provider, label)
        answer: list[object] = []

        def call() -> None:
            try:
                answer.append(reader(key))
            except Exception:  # a reader's failure changes nothing; its text may quote the key
                answer.append(_FAILED)
            finally:
                with self._lock:
                    self._out.discard(known)

        with self._lock:
            self._out.add(known)
        worker = threading.Thread(target=call, name="cooldown-usage-read", daemon=True)
        worker.start()
        worker.join(READ_TIMEOUT_SECONDS)
        result = answer[0] if answer else _FAILED
        if result is None or isinstance(result, Usage):
            return result
        warn_once(provider, _FAILED)
        return None

    def _keep(self, provider: str, label: str, usage: Usage, now: float) -> Reading:
        resets_at = None if usage.resets_in is None else now + usage.resets_in
        reading = Reading(usage.remaining, usage.limit, resets_at, now)
        with self._lock:
            if len(self._readings) >= MOST_READINGS:
                self._readings.clear()
            self._readings[(provider, label)] = reading
        return reading

    def status(
        self, provider: str, label: str, now: float, shared: Reading | None
    ) -> UsageStatus | None:
        """The key's last reading (this worker's, or the fleet's `shared` one when later),
        or `None` before one."""
        reading = self._readings.get((provider, label))
        if reading is None or (shared is not None and shared.read_at > reading.read_at):
            reading = shared
        if reading is None:
            return None
        resets_in = None
        if reading.resets_at is not None:
            resets_in = math.ceil(max(0.0, reading.resets_at - now))
        return {
            "remaining": reading.remaining,
            "limit": reading.limit,
            "resets_in": resets_in,
            "read_ago": int(max(0.0, now - reading.read_at)),
        }


def _apply(
    pool: _Pool, provider: str, key: str, usage: Usage, current: CooldownSettings, now: float
) -> None:
    """A spent reading cools the key and its account for every model; one with credit left
    lifts a spent quota's cooldown of them."""
    if usage.out:  # as an answer saying so: the key and its account, for every model
        scope = CallScope(provider, now=now, max_seconds=current.max_seconds)
        spent = CheckedEvidence(QUOTA_SPENT, True)
        pool._record_scoped(scope, Observation(key, spent, usage.resets_in), current)
    elif usage.remaining is not None and usage.remaining > 0:
        for each in [key, *pool.siblings(provider, key)]:
            if pool.store.operators.lift_quota(provider, each, now=now):
                pool._legacy.clear(provider, each)

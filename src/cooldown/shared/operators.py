"""Operators' actions in the shared state: drains that outlive every worker, and clears; the
fleet's learned refill readings are read with them, in the same round trip."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..forksafe import new_lock
from ..store.backend import OperatorMarks, Reading
from .scripts import KEY_NAMES

__all__ = [
    "ACTION_RETRY_SECONDS",
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
MOST_READINGS = 10000
"""Usage readings kept in `{prefix}:usage-readings`; beyond it the hash starts over."""

CLEARS_KEPT_SECONDS = 86400
"""How long a clear stays in `{prefix}:cleared` for the processes' own state to follow."""

ACTION_RETRY_SECONDS = 5.0
"""An operator's action Redis has not taken is tried again at each read of the fleet's
marks, and at least this often."""

_Act = Callable[[float], Any]
"""One operator's action against Redis at a moment: `None` when Redis did not take it."""


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
        self._lease_prefix = f"{{{prefix}}}:lease:"
        self._readings_key = f"{{{prefix}}}:usage-readings"
        self._drains_read: tuple[float, OperatorMarks | None] = (-math.inf, None)
        self._drains_lock = new_lock(self, "_drains_lock")
        self._pending: dict[tuple[str, str], _Act] = {}  # (kind, credential id) -> the last
        self._retrying: threading.Thread | None = None

    def keep_reading(self, credential: str, reading: Reading, now: float) -> None:
        """`{prefix}:usage-readings`, credential id -> the reading as JSON, wall ms; at most
        as many as the drains (beyond it, the whole hash starts over)."""
        wall = self._to_wall_ms
        resets_at = None if reading.resets_at is None else wall(reading.resets_at)
        text = json.dumps([reading.remaining, reading.limit, resets_at, wall(reading.read_at)])

        def write() -> Any:
            client = self._connected()
            if client.hlen(self._readings_key) >= MOST_READINGS:
                client.delete(self._readings_key)
            return client.hset(self._readings_key, credential, text)

        self._call_with(now, write, lambda answer: answer)

    def readings(self, credentials: Sequence[str], now: float) -> dict[str, Reading] | None:
        """The fleet's last reading of each credential that has one, in one round trip;
        junk (Redis is shared with other programs) reads as none."""

        def read(answer: list[Any]) -> dict[str, Reading]:
            found = {}
            for credential, text in zip(credentials, answer, strict=True):
                reading = self._reading(text)
                if reading is not None:
                    found[credential] = reading
            return found

        if not credentials:
            return {}
        found: dict[str, Reading] | None = self._call_with(
            now,
            lambda: self._connected().hmget(self._readings_key, list(credentials)),
            read,
        )
        return found

    def _reading(self, text: Any) -> Reading | None:
        try:
            remaining, limit, resets_at, read_at = json.loads(text)
            for number in (remaining, limit):
                if number is not None and not (
                    isinstance(number, (int, float)) and 0 <= number < math.inf
                ):
                    return None
            resets = None if resets_at is None else self._to_monotonic(resets_at)
            return Reading(remaining, limit, resets, self._to_monotonic(read_at))
        except (TypeError, ValueError):  # none, or junk
            return None

    def take_lease(self, name: str, seconds: float, now: float) -> bool | None:
        """`{prefix}:lease:<name>` for `seconds`, unless another process holds it (one worker
        of the fleet reads a key's usage per period)."""
        milliseconds = max(1, int(seconds * 1000))
        taken: bool | None = self._call_with(
            now,
            lambda: self._connected().set(
                f"{self._lease_prefix}{name}", "1", nx=True, px=milliseconds
            ),
            lambda answer: bool(answer),
        )
        return taken

    def drain(self, credential: str, now: float, *, drained: bool) -> bool | None:
        """Add the id to the fleet's drains (or remove it); `None` when Redis did not take it
        (then it is tried again until Redis does, the last drain or undrain of the key)."""
        client_call = "sadd" if drained else "srem"

        def act(at: float) -> bool | None:
            done: bool | None = self._call_with(
                at,
                lambda: getattr(self._connected(), client_call)(self._drained_key, credential),
                lambda answer: True,
            )
            return done

        done: bool | None = self._act(("drain", credential), act, now)
        return done

    def pending_actions(self) -> frozenset[str]:
        """The credential ids with an operator's action Redis has not taken yet."""
        with self._drains_lock:
            return frozenset(credential for _, credential in self._pending)

    def _act(self, action: tuple[str, str], act: _Act, now: float) -> Any:
        """Run an operator's action; when Redis does not take it, keep it (it replaces an
        earlier one of its kind for the key) and try it again until Redis does."""
        done = act(now)
        retrying = None
        with self._drains_lock:
            if done is None:
                self._pending[action] = act
            else:
                self._pending.pop(action, None)
            self._drains_read = (-math.inf, None)  # the next read sees this at once
            if done is None and (self._retrying is None or not self._retrying.is_alive()):
                retrying = self._retrying = threading.Thread(
                    target=self._retry_pending, name="cooldown-actions", daemon=True
                )
        if retrying is not None:
            retrying.start()
        return done

    def _flush_pending(self, now: float) -> bool:
        """Try the actions Redis has not taken, oldest first; whether none is left."""
        with self._drains_lock:
            waiting = list(self._pending.items())
        for action, act in waiting:
            if act(now) is None:
                return False
            with self._drains_lock:
                if self._pending.get(action) is act:  # not replaced meanwhile
                    del self._pending[action]
        return True

    def _retry_pending(self) -> None:
        """At least every `ACTION_RETRY_SECONDS`, until Redis has taken every action."""
        while not self._flush_pending(time.monotonic()):
            time.sleep(ACTION_RETRY_SECONDS)

    def operator_marks(self, now: float) -> OperatorMarks | None:
        """The fleet's drained ids and its recent clears (id -> when, monotonic), read at
        most every `DRAINS_READ_SECONDS` (the same object is answered meanwhile)."""
        with self._drains_lock:
            read_at, known = self._drains_read
            pending = bool(self._pending)
        if 0 <= now - read_at < DRAINS_READ_SECONDS:
            return known
        if pending and not self._flush_pending(now):  # the fleet's marks lack them yet
            return None

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

        def act(at: float) -> Any:
            args = [credential, scope or "", self._to_wall_ms(at)]
            oldest = self._to_wall_ms(at - CLEARS_KEPT_SECONDS)
            return self._call(at, "forget_credential", self._keys, [*args, oldest])

        self._act((f"clear:{scope or ''}", credential), act, now)


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

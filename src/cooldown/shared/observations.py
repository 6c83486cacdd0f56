"""Observations shared between processes through Redis, degrading to local state on failure.

Redis holds hex HMAC ids (keyed by the shared secret, so every process derives the same
ones) and wall-clock millisecond deadlines: no key, model or bucket name, and not the
secret. Every write and every lookup is one Lua script, one round trip.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import logging
import math
import os
import secrets
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, TypeVar

from ..config import (
    REDIS_SECRET_ENV,
    warn_once,
)
from ..evidence.learn import LearnedWindow
from ..store.backend import (
    FLEET_COUNTERS,
    AdmissionTerms,
    Announced,
    Refilled,
    SharedAttempt,
    SharedStart,
)
from ..store.foreign import FOREIGN_PER_PROVIDER
from . import scripts as shared_scripts
from .calls import SOCKET_TIMEOUT_SECONDS, ScriptCalls, finite
from .declared_scripts import windows_argument
from .operators import SharedKeyActions
from .quota_marks import SharedQuotaMarks

__all__ = ["SOCKET_TIMEOUT_SECONDS", "RedisObservations"]

logger = logging.getLogger("cooldown")
_T = TypeVar("_T")

SECRET_CHECK_LABEL = b"model-cooldown shared secret check"
SECRET_MISMATCH_WARNING = (
    "%s differs from the secret another process already shares this Redis prefix with: "
    "sharing is split (each secret derives other ids). Give every process the same secret; "
    "after rotating it everywhere, delete the prefix's secret-check key"
)
LIVE_ENTRIES_REUSE_SECONDS = 1.0
"""How long one read of every live shared id serves operators' counts."""
UNRELEASED = 1024
"""Attempts whose end did not reach Redis, kept to release when it answers again."""


class RedisObservations(ScriptCalls, SharedKeyActions):
    """The shared half of a store; every method answers `None` instead of raising.

    `None` means "Redis did not answer": the caller keeps its local answer.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "model-cooldown",
        max_entries: int = 10000,
        socket_timeout: float = SOCKET_TIMEOUT_SECONDS,
    ) -> None:
        super().__init__(url, socket_timeout=socket_timeout)
        self._keys = [f"{{{prefix}}}:{name}" for name in shared_scripts.KEY_NAMES]
        self._pending_secret: bytes | None = None  # a secret check Redis has not answered
        self._foreign_prefix = f"{{{prefix}}}:foreign:"  # then the provider's hex id
        self._declared_keys = [f"{{{prefix}}}:declared", f"{{{prefix}}}:declared-ends"]
        self._leases = itertools.count(1)
        self._unreleased: deque[str] = deque(maxlen=UNRELEASED)
        self._nonce = secrets.token_hex(4)  # with the pid: leases never collide
        self._max_entries = max_entries

        self._secret_check_key = f"{{{prefix}}}:{shared_scripts.SECRET_CHECK_KEY}"
        self._live_read: tuple[float, list[str] | None] = (-math.inf, None)
        self._fleet_key = f"{{{prefix}}}:fleet"
        self._start_key_actions(prefix)
        self._quota_marks = SharedQuotaMarks(self, prefix)

    def __repr__(self) -> str:
        return f"<RedisObservations mode={self._endpoint.mode} degraded={self._degraded}>"

    def mark_quota(self, credential: str, deadline: float, now: float) -> None:
        self._quota_marks.mark_quota(credential, deadline, now)

    def quota_marks(self, now: float) -> dict[str, float] | None:
        return self._quota_marks.quota_marks(now)

    def forget_quota(self, credential: str, now: float) -> None:
        self._quota_marks.forget_quota(credential, now)

    def check_secret(self, secret: bytes) -> bool | None:
        """Whether this process shares the secret of the first process that wrote under the
        prefix (`None`: Redis did not answer). A mismatch splits the fleet silently, since
        each secret derives other ids: it is logged once. Run when a store attaches; a
        failure starts the backoff like any call (a frozen Redis costs one timeout, not one
        here and another in the first request), and the check runs again once Redis answers."""
        mine = hmac.new(secret, SECRET_CHECK_LABEL, hashlib.sha256).hexdigest()
        theirs = self._call(time.monotonic(), "secret_check", [self._secret_check_key], [mine])
        if theirs is None:
            self._pending_secret = secret
            return None
        same = hmac.compare_digest(theirs if isinstance(theirs, bytes) else b"", mine.encode())
        self._split = not same  # `shared_split` in stats, /status and /metrics
        if not same:
            warn_once(REDIS_SECRET_ENV, SECRET_MISMATCH_WARNING)
        return same

    def _succeeded(self) -> None:
        super()._succeeded()
        secret, self._pending_secret = self._pending_secret, None
        if secret is not None:  # Redis answers again: the check it missed
            self.check_secret(secret)

    def record(
        self, entry: str, deadline: float, now: float, max_seconds: int, foreign: str | None = None
    ) -> bool:
        args = [*self._window(now, max_seconds), entry, self._to_wall_ms(deadline)]
        if foreign is None:
            self._call(now, "record", self._keys, [*args, self._max_entries])
            return False
        keys = [*self._keys, f"{self._foreign_prefix}{foreign}"]
        args += [self._max_entries, FOREIGN_PER_PROVIDER]
        answer = self._call(now, "record_foreign", keys, args, lambda answer: bool(answer[1]))
        return bool(answer)

    def clear(self, entry: str, now: float, sent_at: float) -> None:
        args = [*self._window(now, 0), entry, self._to_wall_ms(sent_at)]
        self._call(now, "clear", self._keys, args)

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

    def start(
        self,
        candidates: Sequence[tuple[str, str, str]],
        now: float,
        max_seconds: int,
        lease_until: float,
        terms: AdmissionTerms,
    ) -> SharedStart | None:
        """Admit one of `candidates` ((credential id, entry id, owner id: the entry's or its
        account's), in order) for every process at once: in-flight counts and costs, the probe
        after a release and budgets are all in Redis."""
        lease = f"{os.getpid():x}.{self._nonce}.{next(self._leases)}"

        def read(answer: list[Any]) -> SharedStart:
            position, probe, overflow, *holds = answer
            if position:
                if not 0 < position <= len(candidates):
                    raise ValueError("the shared admission chose no candidate")
                learned = self._learned(holds[0]) if holds else None
                refilled = REFILLED.get(holds[1]) if len(holds) > 1 else None
                return SharedStart(position - 1, probe == 1, 0.0, [], lease, learned, refilled)
            return SharedStart(
                None,
                False,
                0.0 if overflow is None else self._to_monotonic(overflow),
                [self._to_monotonic(hold) if hold else 0.0 for hold in holds],
                lease,
                limited=int(probe),
            )

        args = [
            *self._window(now, max_seconds),
            self._to_wall_ms(lease_until),
            lease,
            "1" if terms.spread else "0",
            "" if terms.cost is None else terms.cost,
            windows_argument(terms.windows, self._to_wall_ms),
            *itertools.chain.from_iterable(candidates),
        ]
        if self._unreleased:
            self._release_missed_ends(now, max_seconds)
        keys = [*self._keys, *self._declared_keys] if terms.windows else self._keys
        return self._call(now, "start", keys, args, read)

    def declared_slots(
        self, fields: Sequence[str], now: float
    ) -> dict[str, list[tuple[float, float]]] | None:
        """The fleet's live slots of these declared windows, read in one round trip; a junk
        slot (Redis is shared with other programs) is skipped."""
        if not fields:
            return {}

        def read(answer: list[Any]) -> dict[str, list[tuple[float, float]]]:
            found: dict[str, list[tuple[float, float]]] = {}
            for field, text in zip(fields, answer, strict=True):
                live = found[field] = []
                for part in (text.decode() if isinstance(text, bytes) else str(text or "")).split(
                    ","
                ):
                    ends, _, amount = part.partition(":")
                    try:
                        slot = (self._to_monotonic(ends), finite(amount))
                    except (TypeError, ValueError):
                        continue
                    if slot[0] > now:
                        live.append(slot)
            return found

        slots: dict[str, list[tuple[float, float]]] | None = self._call_with(
            now, lambda: self._connected().hmget(self._declared_keys[0], list(fields)), read
        )
        return slots

    def _release_missed_ends(self, now: float, max_seconds: int) -> None:
        """Release the attempts whose end did not reach Redis, once it answers again: a probe
        claimed before an outage must not hold its key until its lease runs out."""
        with self._lock:
            missed, self._unreleased = list(self._unreleased), deque(maxlen=UNRELEASED)
        window = self._window(now, max_seconds)
        if self._call(now, "release", self._keys, [*window, *missed]) is None:
            with self._lock:  # still unreachable: keep them for the next try (bounded)
                self._unreleased.extendleft(reversed(missed))

    def end(self, attempt: SharedAttempt, *, served: bool) -> None:
        """Write the attempt's answer, its siblings' cooldowns and its budgets, then release
        it: one round trip."""
        now = attempt.now
        write: list[Any] = ["", "", ""]
        if attempt.write is not None:
            kind, entry, moment = attempt.write
            write = [kind, entry, self._to_wall_ms(moment)]
        learned = "" if attempt.learned is None else self._learned_text(attempt.learned)
        siblings = [(id_, self._to_wall_ms(deadline)) for id_, deadline in attempt.siblings]
        args = [
            *self._window(now, attempt.max_seconds),
            self._max_entries,
            attempt.member,
            attempt.entry,
            attempt.entry[: len(attempt.entry) // 2],
            "1" if served else "0",
            *write,
            *self._announced(attempt.budget),
            learned,
            attempt.owner,
            *self._announced(attempt.tokens),
            "" if attempt.stamp is None else self._to_wall_ms(attempt.stamp),
            *itertools.chain.from_iterable(siblings),
        ]
        if self._call(now, "end", self._keys, args) is None:  # released before the next start
            with self._lock:
                self._unreleased.append(attempt.member)

    def _announced(self, budget: Announced | None) -> list[Any]:
        if budget is None:
            return ["", "", ""]
        remaining, reset, limit = budget
        return [remaining, self._to_wall_ms(reset), "" if limit is None else limit]

    def _learned_text(self, window: LearnedWindow) -> str:
        lower, upper, episode_start, throttles, clean = window
        episode = "" if episode_start is None else str(self._to_wall_ms(episode_start))
        return f"{lower!r},{'' if upper is None else repr(upper)},{episode},{throttles},{clean}"

    def _learned(self, text: object) -> LearnedWindow | None:
        """A shared estimate; `None` when it is missing or not five sane numbers (Redis is
        shared with other programs: a bad estimate is ignored, the call still succeeds)."""
        if not isinstance(text, bytes):
            return None
        try:
            lower, upper, episode, throttles, clean = text.decode("ascii").split(",")
            window = LearnedWindow(
                finite(lower),
                None if upper == "" else finite(upper),
                None if episode == "" else self._to_monotonic(episode),
                int(throttles),
                int(clean),
            )
        except (UnicodeDecodeError, ValueError):
            return None
        numbers = (window.lower, window.upper or 0.0, window[3], window[4])
        return window if min(numbers) >= 0 else None

    def add_to_fleet(self, counter: str, now: float) -> None:
        """Add one to the fleet's `counter` (`{prefix}:fleet`); lost when Redis is down."""
        self._call_with(now, lambda: self._counted(counter), bool)

    def _counted(self, counter: str) -> int:
        """`HINCRBY`; a hash holding junk, a count at its limit or a key of another type is a
        counter problem (said once, the count skipped), never an outage that would stop the
        fleet sharing its cooldowns."""
        from redis.exceptions import ResponseError

        try:
            return int(self._connected().hincrby(self._fleet_key, counter, 1))
        except ResponseError:
            warn_once(counter, "the fleet counter %s cannot be written (a value that is no count)")
            return 0

    def fleet_counts(self, now: float) -> dict[str, int] | None:
        """The fleet's counters; a value that is not a sane count reads as 0 (distrust)."""

        def read(answer: dict[Any, Any]) -> dict[str, int]:
            counts = {}
            for name in FLEET_COUNTERS:
                raw = answer.get(name.encode(), b"0")
                text = raw.decode() if isinstance(raw, bytes) else str(raw)
                counts[name] = (
                    int(text) if text.isascii() and text.isdigit() and len(text) < 16 else 0
                )
            return counts

        return self._call_with(now, lambda: self._connected().hgetall(self._fleet_key), read)

    def live_entries(self, now: float) -> list[str] | None:
        """Every live shared id (for operators' counts), or `None` when Redis does not answer.

        A full table is 10000 ids: one read serves every provider's status for a second
        (`/status` and `/metrics` ask once per provider), so an operator's page costs one read.
        """
        with self._lock:
            read_at, entries = self._live_read
        if entries is not None and read_at <= now < read_at + LIVE_ENTRIES_REUSE_SECONDS:
            return entries

        def read(answer: list[Any]) -> list[str]:
            return [
                member.decode() if isinstance(member, bytes) else str(member) for member in answer
            ]

        def fetch() -> Any:
            return self._connected().zrangebyscore(
                self._keys[0], f"({self._to_wall_ms(now)}", "+inf"
            )

        fresh = self._call_with(now, fetch, read)
        if fresh is not None:
            with self._lock:
                self._live_read = (now, fresh)
        return fresh


REFILLED: dict[object, Refilled] = {1: "requests", 2: "tokens"}
"""What START's last answer says was admitted only by a budget's refill."""

"""The policy over the deadline table: what a record stores; selection, attempts and
inspection are mixed in from their own rooms."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from typing import NoReturn, TypeVar

from ..arguments import (
    bounded_max_seconds,
    delay,
    finite_number,
    require_str,
    resolve_now,
)
from ..config import warn_once
from ..digests import PreparedHmac, credential_message, credential_prefix, scope_message
from ..errors import ModelCooldownExhausted
from ..evidence.outcome import SPENT_WINDOW, UpstreamOutcome
from ..evidence.quota import QUOTA_SPENT
from ..forksafe import new_lock
from .admission import ORDERS, Admission, Attempt, Order
from .attempts import Attempts
from .backend import SharedObservations, Sharing
from .budget import DIGEST_SIZE, SCOPES_PER_CREDENTIAL, ScopeBudget
from .ending import ending_attempt
from .foreign import FOREIGN_DROPPED_WARNING, ForeignEntries
from .inspection import Inspection
from .operators import KeyActions
from .quota_marks import QuotaMarks
from .refills import RefillReadings
from .schedule import DeadlineSchedule
from .selection import Selection
from .waiting import SHARED_RECHECK_SECONDS, KeyWaiters

_T = TypeVar("_T")

__all__ = [
    "MAX_ENTRIES",
    "ORDERS",
    "SCOPES_PER_CREDENTIAL",
    "Attempt",
    "ModelCooldown",
    "Order",
    "model_cooldown",
]

MAX_ENTRIES = 10000


def _entry_parts(
    provider: str,
    credential: str,
    outcome: UpstreamOutcome,
    model: str | None,
    quota_bucket: str | None,
    credential_wide_auth: bool,
) -> tuple[bytes, ...]:
    """The messages whose digests make the entry an outcome writes; `()` for none.

    A wide auth rejection cools the credential; a throttle or a success concerns its scope.
    """
    prefix = credential_prefix(provider)
    require_str(credential, "credential")
    if not isinstance(outcome, UpstreamOutcome):
        raise TypeError("outcome must be an UpstreamOutcome")
    if not isinstance(credential_wide_auth, bool):
        raise TypeError("credential_wide_auth must be a bool")
    scope = scope_message(model, quota_bucket)
    health = outcome.credential_health
    if health == "rejected" and credential_wide_auth:
        return (credential_message(prefix, credential),)
    if health in ("throttled", "accepted") and scope is not None:
        return (credential_message(prefix, credential), scope)
    return ()


class ModelCooldown(Selection, Inspection, Attempts, KeyActions, RefillReadings):
    """Cooldown deadlines per (credential, model or bucket), bounded and safe to share.

    Keys, models and bucket names are reduced to HMAC digests under a salt that never
    leaves the process, so the table can be inspected, logged or dumped safely. Pass
    `secret` (32 bytes or more) only where two stores must agree on ids, as in tests.
    `scopes_per_credential` (1 to 64) exists for tests of the scope budget.
    """

    def __init__(
        self,
        *,
        max_entries: int = MAX_ENTRIES,
        secret: bytes | None = None,
        scopes_per_credential: int = SCOPES_PER_CREDENTIAL,
    ) -> None:
        for value, name in ((max_entries, "max_entries"), (scopes_per_credential, "scopes")):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int")
        if secret is not None and not isinstance(secret, bytes):
            raise TypeError("secret must be bytes")
        if secret is not None and len(secret) < 32:
            raise ValueError("secret must be at least 32 bytes")
        # A random salt by default: ids are stable within this store and nowhere else.
        self._digest = PreparedHmac(secrets.token_bytes(32) if secret is None else secret)
        self._lock = new_lock(self)
        self._budget = ScopeBudget(min(SCOPES_PER_CREDENTIAL, max(1, scopes_per_credential)))
        self._admission = Admission()  # guarded by self._lock too
        self._foreign: ForeignEntries[bytes, bytes] = ForeignEntries()  # keys not held
        self._schedule = DeadlineSchedule(
            min(MAX_ENTRIES, max(1, max_entries)),
            forget=self._forgotten,
            expired=self._admission.released,
        )
        self._deadlines = self._schedule.deadlines  # read directly on the hot path
        self._escalated_total = 0
        self._exhausted_total = 0
        self._capacity_rejections_total = 0
        self._probes_total = 0
        self._shared: Sharing | None = None
        self._drained: set[bytes] = set()  # credential digests an operator drained
        self._waiters = KeyWaiters()
        self._quota = QuotaMarks(MAX_ENTRIES)
        self._refills = {}
        self._periods = {}
        self._marks_followed: dict[str, object] = {}
        self._clears_followed: dict[str, float] = {}

    def __repr__(self) -> str:
        return f"<ModelCooldown entries={len(self._deadlines)} capacity={self.capacity}>"

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        raise TypeError("ModelCooldown holds a process-local secret and cannot be pickled")

    def __copy__(self) -> NoReturn:
        raise TypeError("ModelCooldown cannot be copied; share the one instance instead")

    def __deepcopy__(self, memo: object) -> NoReturn:
        raise TypeError("ModelCooldown cannot be copied; share the one instance instead")

    def credential_id(self, provider: str, credential: str) -> str:
        """The stable, non-reversible id this store uses for a credential, as 64 hex chars."""
        message = credential_message(
            credential_prefix(provider), require_str(credential, "credential")
        )
        return self._digest(message).hex()

    # -- recording ----------------------------------------------------------------------------

    def record(
        self,
        provider: str,
        credential: str,
        outcome: UpstreamOutcome,
        *,
        model: str | None = None,
        quota_bucket: str | None = None,
        credential_wide_auth: bool = False,
        retry_after_seconds: float | None = None,
        fallback_seconds: float = 60,
        max_seconds: int = 3600,
        now: float | None = None,
        sent_at: float | None = None,
        foreign: bool = False,
    ) -> float | None:
        """Store what one attempt proved about a credential; return the entry's deadline.

        A success clears a scope's cooldown only when its attempt started (`sent_at`,
        default: now) after that cooldown was recorded: a stale 200 never reopens a key.
        A spent quota (`QUOTA_SPENT`, credential-wide) is marked as such for operators.
        A `foreign` credential (one the pool does not hold: a caller's own list) is recorded
        and honoured too, but bounded apart: it never arms the capacity guard nor takes the
        place of a held key's entry, and past 1,024 per provider its oldest entry is dropped.
        """
        parts = _entry_parts(
            provider, credential, outcome, model, quota_bucket, credential_wide_auth
        )
        fallback = finite_number(fallback_seconds, "fallback_seconds")
        ceiling = bounded_max_seconds(max_seconds)
        given_now = None if now is None else resolve_now(now)  # a bad clock fails first
        started = None if sent_at is None else resolve_now(sent_at, "sent_at")
        health = outcome.credential_health
        quota = outcome.reason == QUOTA_SPENT.reason and credential_wide_auth
        cooling = delay(
            retry_after_seconds, fallback, ceiling, exact=outcome.reason == SPENT_WINDOW
        )
        escalated = False
        owner = self._digest(credential_prefix(provider)) if foreign else None
        with self._lock:  # read the clock under the lock: no one prunes past our `now`
            current_time = time.monotonic() if given_now is None else given_now
            self._schedule.advance(current_time, ceiling)
            if not parts:
                return None
            if health == "accepted":
                deadline = None
                if self._deadlines:  # an empty table has nothing to clear: skip the digests
                    entry = b"".join(map(self._digest, parts))
                    if started is not None and self._admission.stale(entry, started):
                        return None  # sent before the throttle: it proves nothing now
                    self._schedule.discard(entry)
            else:
                entry, deadline = self._store(
                    b"".join(map(self._digest, parts)), current_time + cooling, owner, provider
                )
                if len(entry) > DIGEST_SIZE:
                    self._admission.throttled(entry, current_time)
                elif quota:
                    self._quota.marked(entry, deadline, current_time)
                else:
                    escalated = len(parts) > 1
                    parts = parts[:1]  # escalated: shared as the credential-wide entry too
        self._waiters.notify()  # a success may have reopened a key
        sharing = self._shared
        if sharing is not None:
            shared_entry = b"".join(map(sharing.digest, parts)).hex()
            sent = current_time if started is None else started
            ending = ending_attempt()
            if ending is not None:  # written with the attempt's release, in one round trip
                ending.now = max(ending.now, current_time)
                if deadline is None:
                    ending.write = ("clear", shared_entry, sent)
                elif ending.write is None:
                    ending.write = ("record", shared_entry, current_time + cooling)
                else:  # the attempt's answer is written: this is a sibling's cooldown
                    ending.siblings.append((shared_entry, current_time + cooling))
            elif deadline is None:
                sharing.backend.clear(shared_entry, current_time, sent)
            else:
                foreign_of = None  # a foreign entry is kept apart under its provider's id
                if owner is not None:
                    foreign_of = sharing.digest(credential_prefix(provider)).hex()
                dropped = sharing.backend.record(
                    shared_entry, current_time + cooling, current_time, ceiling, foreign_of
                )
                if dropped:
                    warn_once(provider, FOREIGN_DROPPED_WARNING)
            if escalated:
                sharing.backend.add_to_fleet("escalated_total", current_time)
            if quota:  # rare: its own round trip, so every worker names it
                sharing.backend.mark_quota(shared_entry, current_time + cooling, current_time)
        return deadline

    def _store(
        self, entry: bytes, deadline: float, owner: bytes | None, provider: str
    ) -> tuple[bytes, float]:
        """Write one entry (lock held); return the entry actually written and its deadline.

        A new scope entry beyond its credential's budget is stored as a credential-wide
        entry instead (a key throttled on that many models is throttled account-wide).
        `owner` is the provider's digest for a foreign credential's entry, else `None`.
        """
        schedule, foreign = self._schedule, self._foreign
        new = entry not in self._deadlines
        if new and len(entry) > DIGEST_SIZE and not self._budget.admits(entry, self._deadlines):
            self._escalated_total += 1
            return self._store(entry[:DIGEST_SIZE], deadline, owner, provider)
        if new and schedule.full():
            if owner is not None:  # a foreign entry never arms the guard: it is not kept
                return entry, deadline
            oldest = foreign.oldest()  # a held key's entry: a foreign one gives way
            if oldest is not None:
                schedule.discard(oldest)
        if new and len(entry) > DIGEST_SIZE and not schedule.full():
            self._budget.added(entry)
        stored = schedule.put(entry, deadline)
        if owner is None:
            if foreign:
                foreign.forget(entry)  # its key is held now
        elif entry in self._deadlines:
            pushed_out = foreign.added(owner, entry)
            if pushed_out is not None:
                schedule.discard(pushed_out)
                warn_once(provider, FOREIGN_DROPPED_WARNING)
        return entry, stored

    def _forgotten(self, entry: bytes) -> None:
        """An entry left the table (expired, cleared or dropped)."""
        self._budget.removed(entry)
        if self._foreign:
            self._foreign.forget(entry)

    # -- waiting ------------------------------------------------------------------------------

    def wait_for_key(
        self,
        provider: str,
        model: str | None,
        quota_bucket: str | None,
        refusal: ModelCooldownExhausted,
        admit: Callable[[], _T],
        *,
        seconds: float,
        max_waiters: int,
        gone: threading.Event | None = None,
    ) -> _T:
        """`admit()` again once a key may be free, for at most `seconds`, first come first
        served among this store's waiters for the provider and scope; else the 429, with
        its then-remaining `Retry-After`. No lock is held while waiting. Once `gone` is set
        (its caller left) the waiter leaves the queue and admits nothing more."""
        recheck = None if self._shared is None else SHARED_RECHECK_SECONDS
        queue = scope_message(model, quota_bucket)
        return self._waiters.wait(
            provider,
            queue,
            refusal,
            admit,
            seconds=seconds,
            max_waiters=max_waiters,
            recheck=recheck,
            gone=gone,
        )

    def leave_wait(self, gone: threading.Event) -> None:
        """The waiter whose caller set `gone` leaves its queue now (its caller is gone)."""
        self._waiters.leave(gone)

    def wait_histogram(self) -> tuple[list[tuple[str, int]], float]:
        """Seconds waited for a key: cumulative (upper bound, count) pairs and their sum."""
        return self._waiters.histogram()

    # -- sharing ------------------------------------------------------------------------------

    def attach_shared(self, shared: SharedObservations, *, secret: bytes) -> None:
        """Also record into, and select with, observations shared with other processes.

        Shared ids are HMACs under `secret`, so every process derives the same ones; local
        ids keep this store's own salt, so attaching never loses a local observation.
        """
        if not isinstance(secret, bytes):
            raise TypeError("secret must be bytes")
        if len(secret) < 32:
            raise ValueError("secret must be at least 32 bytes")
        self._shared = Sharing(shared, PreparedHmac(secret))

    @property
    def shared(self) -> SharedObservations | None:
        """The backend shared with other processes, or `None` for process-local state."""
        sharing = self._shared
        return None if sharing is None else sharing.backend

    def detach_shared(self) -> SharedObservations | None:
        """Back to process-local state; returns the detached backend for closing."""
        sharing, self._shared = self._shared, None
        return None if sharing is None else sharing.backend

    def reset(self) -> None:
        """Forget every observation and counter; the salt, and so every id, is kept."""
        with self._lock:
            self._schedule.clear()
            self._budget.clear()
            self._admission.clear()
            self._foreign.clear()
            self._drained.clear()
            self._quota.clear()
            self._refills.clear()
            self._periods.clear()
            self._clears_followed.clear()
            self._marks_followed.clear()
            self._escalated_total = 0
            self._exhausted_total = 0
            self._capacity_rejections_total = 0
            self._probes_total = 0
        self._waiters.reset_counts()


model_cooldown = ModelCooldown()
"""The one process-wide store every pool records into and selects from."""

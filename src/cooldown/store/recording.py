"""What one answer proved about a credential, written into the deadline table (and, with
sharing, into the fleet's): a cooldown, or the clearing of one."""

from __future__ import annotations

import time
from typing import NamedTuple

from ..arguments import bounded_max_seconds, delay, finite_number, require_str, resolve_now
from ..config import warn_once
from ..digests import credential_message, credential_prefix, scope_message
from ..evidence.outcome import SPENT_WINDOW, UpstreamOutcome
from ..evidence.quota import QUOTA_SPENT
from .budget import DIGEST_SIZE
from .ending import ending_attempt
from .events import Event
from .foreign import FOREIGN_DROPPED_WARNING
from .parts import StoreState
from .scope import CallScope

__all__ = ["Cooling", "Recording"]


class Cooling(NamedTuple):
    """How long an answer cools its credential, and whose answer it was."""

    credential_wide_auth: bool = False  # a rejection that cools the key for every model
    retry_after_seconds: float | None = None  # the provider's advice
    fallback_seconds: float = 60  # without advice
    sent_at: float | None = None  # the attempt's start (default: now)
    foreign: bool = False  # a key the pool does not hold (a caller's own list)


def _entry_parts(
    scope: CallScope, credential: str, outcome: UpstreamOutcome, credential_wide_auth: bool
) -> tuple[bytes, ...]:
    """The messages whose digests make the entry an outcome writes; `()` for none.

    A wide auth rejection cools the credential; a throttle or a success concerns its scope.
    """
    prefix = credential_prefix(scope.provider)
    require_str(credential, "credential")
    if not isinstance(outcome, UpstreamOutcome):
        raise TypeError("outcome must be an UpstreamOutcome")
    if not isinstance(credential_wide_auth, bool):
        raise TypeError("credential_wide_auth must be a bool")
    scope_part = scope_message(scope.model, scope.quota_bucket)
    health = outcome.credential_health
    if health == "rejected" and credential_wide_auth:
        return (credential_message(prefix, credential),)
    if health in ("throttled", "accepted") and scope_part is not None:
        return (credential_message(prefix, credential), scope_part)
    return ()


class Recording:
    """Writes one answer's proof into the store's table, under its lock; the shared write
    after it, outside the lock (or with the ending attempt's release)."""

    def __init__(self, state: StoreState) -> None:
        self._state = state

    def record(
        self, scope: CallScope, credential: str, outcome: UpstreamOutcome, cooling: Cooling
    ) -> float | None:
        """The entry's deadline (see `ModelCooldown.record`)."""
        provider, now, sent_at = scope.provider, scope.now, cooling.sent_at
        parts = _entry_parts(scope, credential, outcome, cooling.credential_wide_auth)
        fallback = finite_number(cooling.fallback_seconds, "fallback_seconds")
        ceiling = bounded_max_seconds(scope.max_seconds)
        given_now = None if now is None else resolve_now(now)  # a bad clock fails first
        started = None if sent_at is None else resolve_now(sent_at, "sent_at")
        health = outcome.credential_health
        quota = outcome.reason == QUOTA_SPENT.reason and cooling.credential_wide_auth
        rest = delay(
            cooling.retry_after_seconds, fallback, ceiling, exact=outcome.reason == SPENT_WINDOW
        )
        escalated = False
        owner = self._state.digest(credential_prefix(provider)) if cooling.foreign else None
        with self._state.lock:  # read the clock under the lock: no one prunes past our `now`
            current_time = time.monotonic() if given_now is None else given_now
            self._state.schedule.advance(current_time, ceiling)
            if not parts:
                return None
            if health == "accepted":
                deadline = None
                if self._state.deadlines:  # an empty table has nothing to clear: skip the digests
                    entry = b"".join(map(self._state.digest, parts))
                    if started is not None and self._state.admission.stale(entry, started):
                        return None  # sent before the throttle: it proves nothing now
                    self._state.schedule.discard(entry)
            else:
                entry, deadline = self._write(
                    b"".join(map(self._state.digest, parts)), current_time + rest, owner, provider
                )
                if len(entry) > DIGEST_SIZE:
                    self._state.admission.throttled(entry, current_time)
                elif quota:
                    self._state.quota.marked(entry, deadline, current_time)
                else:
                    escalated = len(parts) > 1
                    parts = parts[:1]  # escalated: shared as the credential-wide entry too
        self._state.changed(Event("recorded", provider))  # a success may have reopened a key
        sharing = self._state.shared
        if sharing is not None:
            shared_entry = b"".join(map(sharing.digest, parts)).hex()
            sent = current_time if started is None else started
            ending = ending_attempt()
            if ending is not None:  # written with the attempt's release, in one round trip
                ending.now = max(ending.now, current_time)
                if deadline is None:
                    ending.write = ("clear", shared_entry, sent)
                elif ending.write is None:
                    ending.write = ("record", shared_entry, current_time + rest)
                else:  # the attempt's answer is written: this is a sibling's cooldown
                    ending.siblings.append((shared_entry, current_time + rest))
            elif deadline is None:
                sharing.backend.clear(shared_entry, current_time, sent)
            else:
                foreign_of = None  # a foreign entry is kept apart under its provider's id
                if owner is not None:
                    foreign_of = sharing.digest(credential_prefix(provider)).hex()
                dropped = sharing.backend.record(
                    shared_entry, current_time + rest, current_time, ceiling, foreign_of
                )
                if dropped:
                    warn_once(provider, FOREIGN_DROPPED_WARNING)
            if escalated:
                sharing.backend.add_to_fleet("escalated_total", current_time)
            if quota:  # rare: its own round trip, so every worker names it
                sharing.backend.mark_quota(shared_entry, current_time + rest, current_time)
        return deadline

    def _write(
        self, entry: bytes, deadline: float, owner: bytes | None, provider: str
    ) -> tuple[bytes, float]:
        """Write one entry (lock held); return the entry actually written and its deadline.

        A new scope entry beyond its credential's budget is stored as a credential-wide
        entry instead (a key throttled on that many models is throttled account-wide).
        `owner` is the provider's digest for a foreign credential's entry, else `None`.
        """
        schedule, foreign = self._state.schedule, self._state.foreign
        new = entry not in self._state.deadlines
        if (
            new
            and len(entry) > DIGEST_SIZE
            and not self._state.budget.admits(entry, self._state.deadlines)
        ):
            self._state.escalated_total += 1
            return self._write(entry[:DIGEST_SIZE], deadline, owner, provider)
        if new and schedule.full():
            if owner is not None:  # a foreign entry never arms the guard: it is not kept
                return entry, deadline
            oldest = foreign.oldest()  # a held key's entry: a foreign one gives way
            if oldest is not None:
                schedule.discard(oldest)
        if new and len(entry) > DIGEST_SIZE and not schedule.full():
            self._state.budget.added(entry)
        stored = schedule.put(entry, deadline)
        if owner is None:
            if foreign:
                foreign.forget(entry)  # its key is held now
        elif entry in self._state.deadlines:
            pushed_out = foreign.added(owner, entry)
            if pushed_out is not None:
                schedule.discard(pushed_out)
                warn_once(provider, FOREIGN_DROPPED_WARNING)
        return entry, stored

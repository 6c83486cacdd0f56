"""The store's state, held once and handed to each of the store's rooms."""

from __future__ import annotations

import secrets

from ..digests import PreparedHmac
from ..forksafe import new_lock
from .admission import Admission
from .backend import Sharing
from .budget import SCOPES_PER_CREDENTIAL, ScopeBudget
from .events import Event
from .foreign import ForeignEntries
from .quota_marks import QuotaMarks
from .schedule import DeadlineSchedule
from .waiting import KeyWaiters

__all__ = ["MAX_ENTRIES", "StoreState"]

MAX_ENTRIES = 10000


class StoreState:
    """The deadline table and what guards and counts it: one per `ModelCooldown`, shared by
    its selection, inspection, attempts, recording and operator actions (composed, not
    mixed in). `lock` guards the table, the admission and the counters."""

    def __init__(self, max_entries: int, secret: bytes | None, scopes_per_credential: int) -> None:
        # A random salt by default: ids are stable within this store and nowhere else.
        self.digest = PreparedHmac(secrets.token_bytes(32) if secret is None else secret)
        self.lock = new_lock(self, "lock")  # a forked child gets it back unlocked
        self.budget = ScopeBudget(min(SCOPES_PER_CREDENTIAL, max(1, scopes_per_credential)))
        self.admission = Admission()
        self.foreign: ForeignEntries[bytes, bytes] = ForeignEntries()  # keys not held
        self.schedule = DeadlineSchedule(
            min(MAX_ENTRIES, max(1, max_entries)),
            forget=self._forgotten,
            expired=self.admission.released,
        )
        self.deadlines = self.schedule.deadlines  # read directly on the hot path
        self.shared: Sharing | None = None
        self.drained: set[bytes] = set()  # credential digests an operator drained (here)
        self.waiters = KeyWaiters()
        self.quota = QuotaMarks(MAX_ENTRIES)  # which credential-wide cooldowns are spent quotas
        self.escalated_total = 0
        self.exhausted_total = 0
        self.capacity_rejections_total = 0
        self.probes_total = 0

    def changed(self, event: Event) -> None:
        """The one path of every change that may free a key: the waiters of its provider
        (of every provider, without one) re-check at once. Called without the lock held."""
        self.waiters.notify(event.provider)

    def _forgotten(self, entry: bytes) -> None:
        """An entry left the table (expired, cleared or dropped)."""
        self.budget.removed(entry)
        if self.foreign:
            self.foreign.forget(entry)

    def clear(self) -> None:
        """Forget every observation and counter (the salt is kept); lock held by the caller."""
        self.schedule.clear()
        self.budget.clear()
        self.admission.clear()
        self.foreign.clear()
        self.drained.clear()
        self.quota.clear()
        self.escalated_total = 0
        self.exhausted_total = 0
        self.capacity_rejections_total = 0
        self.probes_total = 0

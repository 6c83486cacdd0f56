"""What the store's mixins read of the one `ModelCooldown` they are mixed into."""

from __future__ import annotations

import threading

from ..digests import PreparedHmac
from .admission import Admission
from .backend import Sharing
from .quota_marks import QuotaMarks
from .schedule import DeadlineSchedule
from .waiting import KeyWaiters

__all__ = ["StoreParts"]


class StoreParts:
    """The store's state, declared once; `ModelCooldown.__init__` sets every part."""

    _lock: threading.Lock  # the table, the admission and the counters below
    _digest: PreparedHmac  # this store's own salt
    _deadlines: dict[bytes, float]
    _schedule: DeadlineSchedule
    _admission: Admission
    _shared: Sharing | None
    _waiters: KeyWaiters
    _quota: QuotaMarks  # which credential-wide cooldowns are spent quotas
    _drained: set[bytes]  # credential digests an operator drained (this process's)
    _escalated_total: int
    _exhausted_total: int
    _capacity_rejections_total: int
    _probes_total: int

"""One dispatch's request: what `dispatch` and `adispatch` were asked, as one frozen value
built where the call enters and read by every step after it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from ..evidence.advice import QuotaBuckets
from ..store import Order
from .waiting import NO_WAIT, Wait

__all__ = ["Request"]


class Request(NamedTuple):
    """Whose keys, for which model or bucket, and how the loop may go: `rotate_on`, `advice`
    and `cost` as the caller gave them (`steps_for` checks them before anything is sent),
    and how long it may wait for a key."""

    provider: str
    model: str | None = None
    quota_bucket: str | None = None
    affinity: str | None = None
    quota_buckets: QuotaBuckets | None = None
    now: float | None = None
    order: Order = "spread"
    rotate_on: Iterable[int] = ()
    advice: Callable[[Any], object] | None = None
    cost: object = None
    wait: Wait = NO_WAIT

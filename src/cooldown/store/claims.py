"""What `admit` asks the selection to take under the store's lock: one claim per admission."""

from __future__ import annotations

from collections.abc import Sequence

from .admission import Admission, Admitted, Attempt
from .declared import DeclaredLimits
from .refusals import Holds

__all__ = ["Claim"]


class Claim:
    """What `admit` asks `_choose` to take under its lock: the first free key not excluded.

    `deferred` (shared state attached): take nothing, keep the free keys not excluded as
    candidates for the shared admission, with what a 429 would need.
    """

    __slots__ = (
        "candidates",
        "ceiling",
        "cost",
        "deferred",
        "earliest",
        "exclude",
        "excluded_free",
        "holds",
        "lease",
        "limits",
        "now",
        "taken",
    )

    def __init__(
        self,
        exclude: frozenset[str],
        lease: float,
        *,
        deferred: bool = False,
        cost: int | None = None,
        limits: DeclaredLimits | None = None,
    ) -> None:
        self.exclude = exclude
        self.lease = lease
        self.cost = cost
        self.limits = limits
        self.deferred = deferred
        self.taken: tuple[str, Attempt] | None = None
        self.candidates: list[Admitted] = []
        self.holds: Holds | None = None  # why the keys the selection left out are held
        self.excluded_free = False
        self.now = self.earliest = 0.0
        self.ceiling = 0

    def first_free_outside(self) -> frozenset[str] | None:
        """What ends a configured-order scan early: any free key not excluded (the shared
        admission needs every candidate, so a deferred claim ends nothing)."""
        return None if self.deferred else self.exclude

    def take(
        self,
        admitted: Sequence[Admitted],
        admission: Admission,
        now: float,
        earliest: float,
        ceiling: int,
    ) -> None:
        if self.deferred:
            self.candidates = [item for item in admitted if item[0] not in self.exclude]
            self.excluded_free = len(self.candidates) < len(admitted)
            self.now, self.earliest, self.ceiling = now, earliest, ceiling
            return
        for item in admitted:
            if item[0] not in self.exclude:
                attempt = admission.start(item, now, self.lease, cost=self.cost)
                if self.limits is not None:
                    self.counted(admission, attempt, self.limits)
                self.taken = (item[0], attempt)
                return

    def counted(self, admission: Admission, attempt: Attempt, limits: DeclaredLimits) -> None:
        """The attempt counts in every window declared for its key (or account) and scope."""
        owner = attempt.entry if attempt.account is None else attempt.account
        admission.declared.count(owner, limits, attempt.started, self.cost)

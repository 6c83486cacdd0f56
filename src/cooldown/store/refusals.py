"""The 429 a selection raises when no key is free, and what it tells the gateway: until when,
and what holds most of the keys (a spent quota, a declared limit, or a cooldown)."""

from __future__ import annotations

from collections.abc import Mapping

from ..arguments import retry_after
from ..errors import ExhaustedReason, ModelCooldownExhausted
from .quota_marks import QuotaMarks, held_by_quota

__all__ = ["Holds", "exhausted"]


class Holds:
    """Why the keys a selection found no room in are held: how many by a declared limit,
    and the credential-wide holds (a spent quota, once its mark is read) by digest."""

    __slots__ = ("limited", "other", "wide")

    def __init__(self) -> None:
        self.limited = 0
        self.other = 0
        self.wide: list[tuple[bytes, float]] = []  # (credential digest, release)

    def held(
        self, credential: bytes, release: float, deadlines: Mapping[bytes, float], *, limited: bool
    ) -> None:
        """One key is held until `release`: by a declared limit, by its credential-wide
        entry, or by anything else."""
        if limited:
            self.limited += 1
        elif deadlines.get(credential, 0.0) >= release:
            self.wide.append((credential, release))
        else:
            self.other += 1

    def reason(self, quota: QuotaMarks) -> tuple[ExhaustedReason, bool]:
        """The most common reason (quota, then limit, then cooling on a tie), and whether
        every key is out of quota or at its declared limit."""
        spent = sum(
            1 for digest, release in self.wide if held_by_quota(quota.until(digest), release)
        )
        cooling = self.other + len(self.wide) - spent
        counted: list[tuple[int, ExhaustedReason]] = [
            (spent, "quota"),
            (self.limited, "limit"),
            (cooling, "cooling"),
        ]
        most = max(count for count, _ in counted)
        reason = next(name for count, name in counted if count == most)
        return reason, cooling == 0 and spent + self.limited > 0


def exhausted(
    earliest: float,
    now: float,
    ceiling: int,
    *,
    awaits_attempts: bool = False,
    reason: ExhaustedReason = "cooling",
    every_key_spent: bool = False,
) -> ModelCooldownExhausted:
    """The 429, with the exact seconds until the earliest key frees beside its whole ones."""
    refusal = ModelCooldownExhausted(
        retry_after(earliest, now, ceiling), reason=reason, every_key_spent=every_key_spent
    )
    refusal.free_in_seconds = min(float(ceiling), max(0.0, earliest - now))
    refusal.awaits_attempts = awaits_attempts
    return refusal
